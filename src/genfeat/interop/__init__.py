"""Conversions between Hugging Face model directories and genfeat models."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from ..config import from_dict
from ..errors import CheckpointError, GenfeatError

T = TypeVar("T")


def load_converted(model: nn.Module, state: dict[str, Tensor], unused: list[str], what: str) -> None:
    """Load converted Hugging Face weights into ``model``, refusing HF weights nothing was made of
    (``unused``) and weights whose shape is not the model's (CheckpointError, naming ``what``)."""
    if unused:
        raise CheckpointError(f"Hugging Face weights hold {sorted(unused)[:4]}, which genfeat's {what} has no place "
                              f"for", f"the config.json and the weights disagree, or the directory is another "
                              f"{what} variant")
    expected = model.state_dict()
    for k, v in state.items():
        if expected[k].shape != v.shape:
            raise CheckpointError(f"Hugging Face weight for '{k}' has shape {tuple(v.shape)}, expected "
                                  f"{tuple(expected[k].shape)}", "the config.json and the weights disagree")
    model.load_state_dict(state)


def hf_config(cls: type[T], fields: dict[str, Any], what: str) -> T:
    """The genfeat config ``cls`` built from fields read out of a Hugging Face config.json, or a
    CheckpointError saying the config does not describe a valid ``what``."""
    try:
        return from_dict(cls, fields, "config")
    except (GenfeatError, ValueError, TypeError) as e:
        cause = e.cause if isinstance(e, GenfeatError) else str(e)
        raise CheckpointError(f"Hugging Face config does not describe a valid {what}: {cause}",
                              "check config.json") from None


def read_hf_weights(path: Path) -> dict[str, Tensor]:
    """The tensors of a Hugging Face directory's model.safetensors (or a plain-tensor pytorch_model.bin,
    loaded with weights_only: never unpickled), or a CheckpointError naming the file and the fix."""
    if (path / "model.safetensors").is_file():
        try:
            return load_file(str(path / "model.safetensors"))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"'{path / 'model.safetensors'}' is corrupt or truncated ({e})",
                                  "restore the file or export the model again") from None
    if (path / "pytorch_model.bin").is_file():
        try:
            return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception:  # torch raises UnpicklingError, RuntimeError or EOFError here, with advice we must not repeat
            raise CheckpointError(f"'{path / 'pytorch_model.bin'}' is not a plain tensor file (it is corrupt, or it "
                                  "holds Python objects, which genfeat never unpickles)",
                                  "convert it to model.safetensors with the program that wrote it") from None
    raise CheckpointError(f"'{path}' has neither model.safetensors nor pytorch_model.bin",
                          "pass a Hugging Face model directory with its weights")
