"""XLNet pretraining (thesis §2.2): one phase of permutation LM with segment-level memory.

Recipe: ``method: xlnet`` plus the fields of :class:`XLNetRecipe`. The model section takes the
fields of :class:`genfeat.models.xlnet.XLNetConfig`; ``n_token`` comes from the corpus vocabulary.

Data: a registered word-level corpus (PTB, WikiText-2, ...) with its standard vocabulary, cut into
``batch_size`` contiguous streams and those into consecutive segments of ``seq_len`` tokens, so
the memory of one segment is the context of the next (``data.lm``). With ``model.bi_data`` (the
bidirectional pipeline) half of the streams read the text forwards and half read it backwards.
Not yet here: the original pipeline's ``A <sep> B <sep> <cls>`` two-segment input, next-sentence
prediction and a SentencePiece tokenizer.

Result: ``valid_loss`` is the permutation-LM cross-entropy (nats per predicted token) of the
held-out split, read as consecutive segments with memory, under factorization orders and
predicted tokens drawn from a fixed seed, so it compares across steps, runs and recipes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..config import Config, from_dict, to_dict
from ..data.lm import LMBatch, LMOrderedStream, iter_lm_segments
from ..errors import ConfigError
from ..framework import OptimConfig, TrainConfig, Trainer, one_phase, seed_everything
from ..framework.checkpoint import resume_dir
from ..hub import VOCAB_FILE, checkpoint_config, save_pretrained
from ..io import write_json_atomic
from ..objectives.permutation_lm import PermutationLMConfig, PermutationLMObjective
from ..runner import register_method

EVAL_SEED = 1234
"""Seed of the orders and predicted tokens of the held-out text (the same at every evaluation)."""


@dataclass
class XLNetDataConfig(Config):
    """The pretraining corpus and how it is batched."""

    corpus: str = "wikitext2"
    """A registered word-level corpus with train and valid splits (ptb, wikitext2, wikitext103)."""
    vocab: dict[str, Any] = field(default_factory=dict)
    """Vocabulary settings (genfeat.data.vocab.VocabConfig fields); empty: the corpus's standard vocabulary."""
    seq_len: int = 128
    """Tokens per segment."""
    batch_size: int = 8
    """Contiguous streams the training split is cut into (the global batch)."""
    valid_tokens: int = 0
    """Evaluate on the first this many held-out tokens during training (0: all); the final figures use all."""

    def __post_init__(self):
        if self.seq_len < 1 or self.batch_size < 1 or self.valid_tokens < 0:
            raise ValueError(f"data.seq_len ({self.seq_len}) and data.batch_size ({self.batch_size}) must be >= 1 "
                             f"and data.valid_tokens ({self.valid_tokens}) >= 0")


@dataclass
class XLNetRecipe(Config):
    """Permutation-LM pretraining of an XLNet backbone."""

    data: XLNetDataConfig = field(default_factory=XLNetDataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    """Fields of genfeat.models.xlnet.XLNetConfig (without n_token)."""
    objective: PermutationLMConfig = field(default_factory=PermutationLMConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    steps: int = 1000
    """Optimizer steps."""

    def __post_init__(self):
        if "n_token" in self.model:
            raise ConfigError("model.n_token is set in the recipe", "drop model.n_token: it comes from the vocabulary")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def _join(forward: LMBatch, backward: LMBatch) -> LMBatch:
    return LMBatch(torch.cat([forward.input, backward.input]), torch.cat([forward.target, backward.target]),
                   forward.new_epoch or backward.new_epoch)


class BidirectionalStream:
    """The bidirectional pipeline: the first half of each batch from ``batch_size / 2`` streams of the
    text, the second half from as many streams of the text reversed (the Stream protocol)."""

    def __init__(self, tokens: Tensor, batch_size: int, seq_len: int):
        if batch_size % 2:
            raise ConfigError(f"data.batch_size {batch_size} is odd but model.bi_data splits it into forward "
                              "and reversed halves", "use an even data.batch_size")
        self.parts = [LMOrderedStream(x, batch_size // 2, seq_len) for x in (tokens, tokens.flip(0))]

    def __iter__(self) -> BidirectionalStream:
        return self

    def __next__(self) -> LMBatch:
        return _join(*(next(part) for part in self.parts))

    def state_dict(self) -> dict[str, Any]:
        return {"forward": self.parts[0].state_dict(), "backward": self.parts[1].state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.parts[0].load_state_dict(state["forward"])
        self.parts[1].load_state_dict(state["backward"])

    def shard(self, rank: int, world: int) -> None:
        for part in self.parts:
            part.shard(rank, world)


@torch.no_grad()
def permutation_lm_loss(model: nn.Module, tokens: Tensor, cfg: PermutationLMConfig, *, seq_len: int,
                        batch_size: int, seed: int = EVAL_SEED) -> dict[str, float]:
    """Permutation-LM loss (nats per predicted token) of ``tokens`` read as ``batch_size`` contiguous
    streams of consecutive segments with memory, orders and predicted tokens drawn from ``seed``.
    With ``model.config.bi_data`` half of the streams read the text reversed, so the text is scored
    in both directions (twice the predicted tokens)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    scorer = PermutationLMObjective(cfg, torch.Generator().manual_seed(seed))
    if model.config.bi_data:
        batches = map(_join, *(iter_lm_segments(x, batch_size // 2, seq_len) for x in (tokens, tokens.flip(0))))
    else:
        batches = iter_lm_segments(tokens, batch_size, seq_len)
    loss = count = 0.0
    for batch in batches:
        out = scorer(model, replace(batch, input=batch.input.to(device)))
        loss += float(out.loss_sum)
        count += float(out.count)
    model.train(was_training)
    return {"valid_loss": loss / max(count, 1.0), "valid_predicted": int(count)}


@register_method("xlnet", XLNetRecipe)
def run(cfg: XLNetRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.corpora import load_corpus
    from ..data.vocab import VocabConfig
    from ..models.xlnet import XLNetConfig, XLNetLMHeadModel

    data = cfg.data
    vocab_cfg = from_dict(VocabConfig, data.vocab, "data.vocab") if data.vocab else None
    corpus = load_corpus(data.corpus, vocab_cfg=vocab_cfg)
    for split in ("train", "valid"):
        if split not in corpus.splits:
            raise ConfigError(f"corpus '{data.corpus}' has no split '{split}' (it has {sorted(corpus.splits)})",
                              "use a registered corpus with train and valid splits (ptb, wikitext2, wikitext103)")
    vocab = corpus.vocab
    model_cfg = from_dict(XLNetConfig, {**cfg.model, "n_token": len(vocab)}, "model")
    seed_everything(seed)
    model = XLNetLMHeadModel(model_cfg)
    train = corpus.splits["train"]
    stream = (BidirectionalStream(train, data.batch_size, data.seq_len) if model_cfg.bi_data
              else LMOrderedStream(train, data.batch_size, data.seq_len))
    objective = PermutationLMObjective(replace(cfg.objective, recurrence=cfg.objective.recurrence
                                               and model_cfg.mem_len > 0))
    valid = corpus.splits["valid"]

    def evaluate(m, tokens=valid[: data.valid_tokens] if data.valid_tokens else valid):
        return permutation_lm_loss(m, tokens, cfg.objective, seq_len=data.seq_len, batch_size=data.batch_size)

    train_cfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    trainer = Trainer(model, one_phase(objective, stream, cfg.steps, cfg.optim), train_cfg, evaluate=evaluate,
                      out_dir=out_dir, checkpoint_config=checkpoint_config(model, recipe=to_dict(cfg)),
                      save_extra=lambda d: vocab.save(d / VOCAB_FILE), resume_from=resume_from)
    t0 = time.time()
    result = trainer.fit()
    train_seconds = time.time() - t0
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": train_seconds, "interrupted": 1.0}
    model.eval()
    figures: dict[str, float] = {"steps": result.steps, "train_seconds": train_seconds,
                                 "params": sum(p.numel() for p in model.parameters()), **evaluate(model, valid)}
    if out_dir is not None and trainer.dist.is_main:
        save_pretrained(model, Path(out_dir) / "final", vocab)
        write_json_atomic(Path(out_dir) / "results.json", figures)
    return figures
