"""Permutation language modelling, the pretraining objective of XLNet (thesis §2.2.2, Eq. 2.3-2.5).

max E_{z ~ Z_T} sum_{t > c} log p(x_{z_t} | x_{z_<t}): the likelihood of the sequence factorised in
a sampled order z. The sequence itself is never permuted: tokens keep their positions, and the
order only decides who may attend to whom (``perm_mask``), as in the original pipeline:

- *partial prediction* (Eq. 2.5): only the last tokens of the order are predicted, about 1/K of
  them; the others (the context, c = the first T - n of the order) see each other freely and
  none of the predicted ones;
- a predicted token z_t sees the whole context and the predicted tokens before it in the order,
  never itself (through the query stream; the content stream also sees itself, which the model
  adds);
- the *span-based* choice: spans of L ~ p(L) ∝ 1/L, L in [1, ``max_span``] consecutive tokens,
  each placed uniformly inside a context window of K·L tokens, windows one after another; the
  *number* of predicted tokens per sequence is fixed (``num_predict``): the last span is cut to fit
  and single random tokens fill up when the spans end early, so every sequence yields the same
  number of targets and the query stream has a fixed shape [b, n, d];
- the memory of the previous segment (Transformer-XL recurrence) is carried between batches and
  visible to every token.

With the identity order and K = 1 every token is predicted from exactly its left context: the
causal LM (the identity test in tests/test_permutation_lm.py).

Randomness comes from torch's global generator unless one is passed, so a resumed run (whose
trainer restores the generators) samples exactly as the uninterrupted one.

Axes: b batch, t sequence length, n predicted tokens per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config
from ..framework.objective import LossOutput, Objective


@dataclass
class PermutationLMConfig(Config):
    """How the factorization order and the predicted tokens are sampled (defaults: XLNet's)."""

    k: float = 6.0
    """Partial-prediction constant K: about 1/K of the tokens are predicted (the last of the order)."""
    num_predict: int | None = None
    """Predicted tokens per sequence (None: round(t / K), at least 1)."""
    span: bool = True
    """Choose the predicted tokens as spans (False: single tokens uniformly at random)."""
    max_span: int = 5
    """Longest span L; span lengths follow p(L) ∝ 1/L on [1, max_span]."""
    order: Literal["random", "identity"] = "random"
    """Factorization order of the predicted tokens: random, or left to right (with K = 1: causal LM)."""
    recurrence: bool = True
    """Carry the memory to the next batch (it is dropped when the data stream starts a new epoch)."""

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(f"k (the partial-prediction constant K) must be >= 1, got {self.k}")
        if self.num_predict is not None and self.num_predict < 1:
            raise ValueError(f"num_predict must be None or >= 1, got {self.num_predict}")
        if self.max_span < 1:
            raise ValueError(f"max_span must be >= 1, got {self.max_span}")


def sample_spans(t: int, k: float, max_span: int, goal: int, generator: torch.Generator | None = None
                 ) -> list[tuple[int, int]]:
    """Spans [begin, end) of the span-based choice: L ~ p(L) ∝ 1/L, cut so the total stays <= goal,
    each uniformly inside its window of round(K·L) tokens; windows follow one another from position 0
    until the goal is met or the next span would not fit in the sequence."""
    lengths = torch.arange(1, max_span + 1, dtype=torch.float)
    probs = 1.0 / lengths
    spans, count, cur = [], 0, 0
    while count < goal:
        span = min(int(torch.multinomial(probs, 1, generator=generator)) + 1, goal - count)
        window = max(span, round(k * span))
        begin = cur + int(torch.randint(window - span + 1, (), generator=generator))
        if begin + span > t:
            break
        spans.append((begin, begin + span))
        count += span
        cur += window
    return spans


def sample_predicted(t: int, n: int, cfg: PermutationLMConfig, generator: torch.Generator | None = None) -> Tensor:
    """Bool [t]: exactly n predicted positions (spans, then single random ones to fill up, or
    n single random ones)."""
    predicted = torch.zeros(t, dtype=torch.bool)
    if cfg.span:
        for begin, end in sample_spans(t, cfg.k, cfg.max_span, n, generator):
            predicted[begin:end] = True
    missing = n - int(predicted.sum())
    if missing:
        free = (~predicted).nonzero().squeeze(1)
        predicted[free[torch.randperm(free.numel(), generator=generator)[:missing]]] = True
    return predicted


def permutation_inputs(predicted: Tensor, order: Literal["random", "identity"] = "random",
                       generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``perm_mask``, ``target_mapping`` and the predicted positions for a factorization order in
    which the unpredicted tokens come first and the predicted ones last, in random (or left-to-right)
    order among themselves.

    Args:
        predicted: bool [b, t], the same number n of True per row.
    Returns:
        perm_mask: bool [b, t, t], True where i may not see j: j is predicted and not before i
            in the order (so a predicted token does not see itself; context tokens see only context).
        target_mapping: [b, n, t] float, row p one-hot at the p-th predicted position.
        positions: long [b, n], the predicted positions in increasing order.
    """
    b, t = predicted.shape
    counts = predicted.sum(1)
    n = int(counts[0])
    if (counts != n).any():
        raise ValueError(f"every sequence needs the same number of predicted tokens, got {counts.tolist()}")
    positions = predicted.nonzero()[:, 1].view(b, n)
    if order == "identity":
        ranks = torch.arange(n).expand(b, n)
    else:
        ranks = torch.stack([torch.randperm(n, generator=generator) for _ in range(b)])
    rank = torch.full((b, t), -1, dtype=torch.long).scatter_(1, positions, ranks)  # context: -1
    perm_mask = predicted[:, None, :] & (rank[:, None, :] >= rank[:, :, None])
    target_mapping = F.one_hot(positions, t).float()
    return perm_mask, target_mapping, positions


class PermutationLMObjective(Objective):
    """Negative log-likelihood of the predicted tokens under sampled factorization orders (Eq. 2.3).

    The model is called as ``model(input_ids, perm_mask=..., target_mapping=..., mems=...)``
    (genfeat.models.xlnet.XLNetLMHeadModel, HF's named inputs) and returns ``logits`` [b, n, V]
    and ``mems``. The batch needs ``input`` [b, t] token ids and ``new_epoch``; its ``target`` (the
    causal LM's next tokens) is not used: the targets are the inputs at the predicted positions.
    """

    name = "plm"

    def __init__(self, cfg: PermutationLMConfig | None = None, generator: torch.Generator | None = None):
        self.cfg = cfg or PermutationLMConfig()
        self.generator = generator
        self.mems: list[Tensor] | None = None

    def sample(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(perm_mask, target_mapping, positions) for the token ids x [b, t], on x's device."""
        b, t = x.shape
        cfg = self.cfg
        n = min(t, cfg.num_predict if cfg.num_predict is not None else max(1, round(t / cfg.k)))
        predicted = torch.stack([sample_predicted(t, n, cfg, self.generator) for _ in range(b)])
        return tuple(v.to(x.device) for v in permutation_inputs(predicted, cfg.order, self.generator))

    def __call__(self, model: nn.Module, batch) -> LossOutput:
        if batch.new_epoch or not self.cfg.recurrence:
            self.mems = None
        x = batch.input
        perm_mask, target_mapping, positions = self.sample(x)
        out = model(x, perm_mask=perm_mask, target_mapping=target_mapping, mems=self.mems)
        if self.cfg.recurrence:
            self.mems = out.mems
        labels = x.gather(1, positions)
        nll = F.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")
        return LossOutput(nll, labels.numel())

    def reset_state(self) -> None:
        self.mems = None

    def state_dict(self) -> dict[str, Tensor]:
        return {f"mem.{i}": m for i, m in enumerate(self.mems or [])}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.mems = [state[f"mem.{i}"] for i in range(len(state))] or None
