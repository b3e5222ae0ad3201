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


NameMap = dict[str, "str | tuple[str, ...]"]
"""genfeat parameter name -> Hugging Face weight name, or a tuple of names whose tensors genfeat keeps
fused along dim 0 (a layer's query, key and value projections)."""


def gather_converted(names: NameMap, weights: dict[str, Tensor]) -> tuple[dict[str, Tensor], set[str]]:
    """genfeat tensors from Hugging Face ``weights`` by ``names`` (fused groups concatenated), and the HF
    names used; a missing HF weight is a CheckpointError."""
    state, used = {}, set()
    for ours, theirs in names.items():
        group = theirs if isinstance(theirs, tuple) else (theirs,)
        absent = [name for name in group if name not in weights]
        if absent:
            raise CheckpointError(f"Hugging Face weights lack '{absent[0]}'", "the config.json and the weights disagree")
        state[ours] = torch.cat([weights[name] for name in group]) if len(group) > 1 else weights[group[0]]
        used.update(group)
    return state, used


def split_converted(names: NameMap, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Hugging Face tensors (contiguous copies) from genfeat's ``state`` by ``names`` (fused tensors split
    into equal parts)."""
    tensors = {}
    for ours, theirs in names.items():
        tensor = state[ours].detach()
        if isinstance(theirs, tuple):
            tensors.update(zip(theirs, (t.contiguous().clone() for t in tensor.chunk(len(theirs)))))
        else:
            tensors[theirs] = tensor.contiguous().clone()
    return tensors
