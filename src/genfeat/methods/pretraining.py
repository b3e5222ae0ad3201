"""The one-phase pretraining run every generative method shares (Transformer-XL, XLNet and DAE + TXL,
BERT, GPT-1 and its LSTM, ELMo): train the objective on the stream, evaluate the final model, save.

Each method builds its model, text, objective and evaluation; :func:`train_and_save` does the rest the
same way for all of them, so a change to what a pretraining run writes is made once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..framework import Trainer, one_phase
from ..framework.distributed import on_rank_0
from ..framework.objective import Objective
from ..hub import VOCAB_FILE, checkpoint_config, save_pretrained
from ..io import write_results
from ..runner import recipe_record


def train_and_save(cfg: Any, model: nn.Module, objective: Objective, stream: Any, vocab: Any, *, seed: int,
                   out_dir: Path | None, progress: bool, resume_from: Path | None,
                   evaluate: Callable[..., dict[str, float]], final: Callable[[nn.Module], dict[str, float]],
                   on_saved: Callable[[Path], None] | None = None, **sizes: float) -> dict[str, float]:
    """Train ``cfg.steps`` steps of ``objective`` on ``stream`` (one phase, ``cfg.optim``, ``cfg.train``),
    then score the final model and write OUT/final (weights + vocab.json) and OUT/results.json.

    Args:
        cfg: the method's recipe (fields ``train``, ``steps``, ``optim``; saved in every checkpoint).
        evaluate: the Trainer's periodic evaluation, ``evaluate(model)``.
        final: the figures of the trained model (run in eval mode without gradients).
        on_saved: called with OUT after the main process wrote OUT/final (e.g. a generated sample).
        sizes: figures describing the data (``train_tokens=...``), reported beside the losses.

    Returns:
        ``steps``, ``train_seconds``, ``params``, ``sizes`` and ``final``'s figures; after an interrupt
        (Ctrl-C, ``stop_after_steps``) only ``steps``, ``train_seconds`` and ``interrupted`` = 1.
    """
    train_cfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    record = recipe_record(cfg)
    trainer = Trainer(model, one_phase(objective, stream, cfg.steps, cfg.optim), train_cfg, evaluate=evaluate,
                      out_dir=out_dir, checkpoint_config=checkpoint_config(model, **record),
                      save_extra=lambda d: vocab.save(d / VOCAB_FILE), resume_from=resume_from)
    result = trainer.fit()
    train_seconds = result.seconds     # over every invocation of a resumed run
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": train_seconds, "interrupted": 1.0}
    model.eval()
    with torch.no_grad():
        scored = final(model)
    figures: dict[str, float] = {"steps": result.steps, "train_seconds": train_seconds,
                                 "params": sum(p.numel() for p in model.parameters()), **sizes, **scored}

    def save() -> None:
        save_pretrained(model, Path(out_dir) / "final", vocab, record=record)
        write_results(out_dir, figures)
        if on_saved is not None:
            on_saved(Path(out_dir))

    if out_dir is not None:   # under torchrun rank 0 writes, and every rank returns once it has
        on_rank_0(save, f"failed to write the final model and figures into '{out_dir}'", trainer.dist)
    return figures
