"""Conversions between Hugging Face model directories and genfeat models."""

from __future__ import annotations

from torch import Tensor, nn

from ..errors import CheckpointError


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
