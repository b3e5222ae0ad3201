"""Checkpoints: weights in safetensors, training state beside them, written atomically.

A checkpoint is a directory::

    model.safetensors     weights (shared/tied tensors stored once)
    config.json           {"architecture": ..., "model": {...}, ...} written by the method
    vocab.json            the vocabulary, when the method has one
    trainer_state.pt      optimizer states, step, phase, data positions, RNG states, objective
                          states; only tensors and plain containers, read back with
                          ``torch.load(weights_only=True)`` (no arbitrary unpickling)

The directory is assembled under a temporary name and renamed into place (genfeat.io.atomic_dir),
so a kill mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from ..errors import CheckpointError
from ..io import atomic_dir

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
STATE_FILE = "trainer_state.pt"


def rng_state() -> dict[str, Any]:
    """Every RNG a step may draw from, in a form ``torch.load(weights_only=True)`` accepts."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, model: nn.Module, trainer_state: dict[str, Any] | None = None,
                    config: dict[str, Any] | None = None,
                    extra: Callable[[Path], None] | None = None) -> Path:
    """Write a checkpoint directory atomically.

    Args:
        path: destination directory (replaced as a whole).
        model: its ``state_dict`` goes to model.safetensors.
        trainer_state: optional training state (see module docstring).
        config: optional JSON-serialisable description of the model (architecture + config).
        extra: optional callback writing more files (vocabulary, recipe) into the temp directory.
    """
    path = Path(path)
    with atomic_dir(path) as tmp:
        save_model(model, str(tmp / MODEL_FILE))
        if config is not None:
            (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if trainer_state is not None:
            torch.save(trainer_state, tmp / STATE_FILE)
        if extra is not None:
            extra(tmp)
    return path


def load_weights(path: str | Path, model: nn.Module) -> None:
    """Load model.safetensors of checkpoint ``path`` into ``model`` (strict)."""
    file = Path(path) / MODEL_FILE
    if not file.is_file():
        raise CheckpointError(f"checkpoint '{path}' has no {MODEL_FILE}",
                              "pass a directory written by genfeat (or a Hugging Face model directory)")
    try:
        missing, unexpected = load_model(model, str(file), strict=False)
    except Exception as e:  # safetensors raises several types for corrupt headers or shape mismatches
        raise CheckpointError(f"cannot load weights from '{file}': {str(e).splitlines()[0]}",
                              "the checkpoint was written for another architecture or size; use a matching "
                              "config or retrain") from None
    if missing or unexpected:
        raise CheckpointError(f"checkpoint '{file}' does not match the model (missing {sorted(missing)[:5]}, "
                              f"unexpected {sorted(unexpected)[:5]})",
                              "load it with the architecture and config it was trained with")


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    file = Path(path) / STATE_FILE
    if not file.is_file():
        raise CheckpointError(f"checkpoint '{path}' has no {STATE_FILE}, so training cannot resume from it",
                              "resume from a checkpoint written during training (e.g. OUT/last)")
    try:
        return torch.load(file, weights_only=True, map_location="cpu")
    except Exception as e:
        raise CheckpointError(f"cannot read training state '{file}': {str(e).splitlines()[0]}",
                              "the file is corrupt or not a genfeat training state; resume from another checkpoint") from None


def read_config(path: str | Path) -> dict[str, Any]:
    file = Path(path) / CONFIG_FILE
    if not file.is_file():
        raise CheckpointError(f"'{path}' is not a genfeat checkpoint (no {CONFIG_FILE})",
                              "pass a checkpoint directory written by genfeat or a Hugging Face model directory")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"'{file}' is not valid JSON ({e.msg})", "the checkpoint is corrupt; use another one") from None
