"""Tiny models, objectives and data shared by the framework tests (and the DDP worker script)."""

from __future__ import annotations

import torch
from torch import nn

from genfeat.framework.objective import LossOutput, Objective
from genfeat.framework.stream import TensorStream


class TwoHead(nn.Module):
    """A shared trunk with two heads, so schedules can update disjoint parameter sets."""

    def __init__(self, d_in: int = 6, d_hidden: int = 8, dropout: float = 0.0):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, d_hidden), nn.Tanh(), nn.Dropout(dropout))
        self.head_a = nn.Linear(d_hidden, 1)
        self.head_b = nn.Linear(d_hidden, 1)

    def forward(self, x: torch.Tensor, head: str = "a") -> torch.Tensor:
        h = self.trunk(x)
        return (self.head_a if head == "a" else self.head_b)(h).squeeze(-1)


class SquaredError(Objective):
    """Sum of squared errors of one head; optionally carries a running state like a memory.

    With ``threshold``, only the items whose first feature exceeds it are scored, so batches of one
    size have unequal counts, like the masked positions of a masked LM or the tokens of padded batches.
    """

    def __init__(self, head: str = "a", name: str | None = None, stateful: bool = False,
                 threshold: float | None = None):
        self.head = head
        self.name = name or f"mse_{head}"
        self.stateful = stateful
        self.threshold = threshold
        self.carry: torch.Tensor | None = None
        self.calls = 0
        self.fail_at: int | None = None

    def __call__(self, model, batch) -> LossOutput:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise KeyboardInterrupt("simulated kill")
        pred = model(batch["x"], head=self.head)
        if self.stateful:
            if self.carry is not None:
                pred = pred + 0.1 * self.carry.mean()
            self.carry = pred.detach()
        err = (pred - batch[f"y_{self.head}"]) ** 2
        if self.threshold is not None:
            err = err[batch["x"][:, 0] > self.threshold]
        return LossOutput(err.sum(), err.numel(), {"sq": float(err.detach().sum())})

    def reset_state(self) -> None:
        self.carry = None

    def state_dict(self):
        return {} if self.carry is None else {"carry": self.carry}

    def load_state_dict(self, state) -> None:
        self.carry = state.get("carry")


def make_data(n: int = 64, d_in: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    w = torch.randn(d_in, generator=g)
    return {"x": x, "y_a": x @ w, "y_b": torch.sin(x @ w)}


def make_stream(batch_size: int = 8, seed: int = 0) -> TensorStream:
    return TensorStream(make_data(), batch_size=batch_size, seed=seed)
