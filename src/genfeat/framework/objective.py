"""The one contract every loss in genfeat follows.

Thesis §1.4: every method optimises a generative loss L_g on unlabeled data and/or a target loss
L_t on labeled data. Both are :class:`Objective` s; an objective takes the model (or a container
of models) and a batch and returns a :class:`LossOutput` holding the *sum* of per-item losses and
the number of items, so that means, perplexity, bits per character and accuracy aggregate exactly
across batches, accumulation steps and ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from torch import Tensor, nn


@dataclass
class LossOutput:
    """What an objective returns.

    Attributes:
        loss_sum: scalar tensor, the sum of the per-item losses (differentiable when training).
        count: number of items the sum runs over (tokens, examples, pairs); a positive number.
        logs: extra figures as sums over the same items (e.g. ``{"correct": 7.0}``); the
            trainer sums them across steps and ranks and reports each divided by the count.
        parts: the named losses a combined loss is made of, each a sum over its own items (GPT-1's
            L3 = L2 + λ·L1: ``task`` over examples, ``lm`` over tokens); when given, the trainer logs
            each part (its loss per item and its logs) under the part's name in place of this output's
            loss and logs, and steps on this output's ``loss_sum / count`` as always.
    """

    loss_sum: Tensor
    count: int | float | Tensor
    logs: dict[str, float] = field(default_factory=dict)
    parts: dict[str, LossOutput] = field(default_factory=dict)

    @property
    def mean(self) -> Tensor:
        """Mean loss per item of this output alone, ``loss_sum / count``. The Trainer steps on the mean over a
        whole step instead: the summed loss of all its micro-batches and ranks over their total count."""
        return self.loss_sum / max(float(self.count), 1.0)


class Objective:
    """Base class of generative and target objectives.

    Subclasses implement :meth:`__call__`. An objective that carries state across batches
    (Transformer-XL's memory) keeps it in ``self`` and exposes it through :meth:`state_dict`
    / :meth:`load_state_dict` so a resumed run continues exactly.

    Attributes:
        name: short name used in logs (``lm``, ``cls``, ``context``...).
    """

    name: str = "objective"

    def __call__(self, model: nn.Module, batch: Any) -> LossOutput:
        raise NotImplementedError

    def reset_state(self) -> None:
        """Forget carried state (called at the start of a phase and of each evaluation)."""

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        if state:
            raise ValueError(f"objective '{self.name}' carries no state but the checkpoint has {sorted(state)}")


class RecurrentObjective(Objective):
    """An objective that carries Transformer-XL's memory (thesis §2.1.3, segment-level recurrence) from one
    batch to the next: the L tensors ``mems`` the model returned for the previous segment, fed back as its
    ``mems=`` input. The memory is dropped at a new epoch (the rows start again), by :meth:`reset_state`,
    and always without ``recurrence``; it is saved as ``mem.0`` ... ``mem.{L-1}``.

    Subclasses call ``mems = self.memory(new_epoch)`` before the forward pass and ``self.keep(out.mems)``
    after it.
    """

    def __init__(self, recurrence: bool):
        self.recurrence = recurrence
        self.mems: list[Tensor] | None = None

    def memory(self, new_epoch: bool) -> list[Tensor] | None:
        """The memory this batch reads: None at a new epoch or without recurrence."""
        if new_epoch or not self.recurrence:
            self.mems = None
        return self.mems

    def keep(self, mems: list[Tensor]) -> None:
        """Carry ``mems`` (the model's new memory) to the next batch."""
        if self.recurrence:
            self.mems = mems

    def reset_state(self) -> None:
        self.mems = None

    def state_dict(self) -> dict[str, Tensor]:
        return {f"mem.{i}": m for i, m in enumerate(self.mems or [])}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.mems = [state[f"mem.{i}"] for i in range(len(state))] or None

