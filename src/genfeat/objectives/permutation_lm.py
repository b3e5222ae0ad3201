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

Special tokens (``<sep>``, ``<cls>`` of XLNet's ``A <sep> B <sep> <cls>`` input) are never
predicted: they are context, visible to every position (XLNet's pipeline places them inside the
order instead; here they simply belong to the context, a documented simplification). With
``nsp`` the next-sentence loss is added as in the masked LM
(:func:`~genfeat.objectives.masked_lm.next_sentence_term`).

Randomness comes from torch's global generator unless one is passed, so a resumed run (whose
trainer restores the generators) samples exactly as the uninterrupted one. A batch that carries
``seed`` [b] (genfeat.data.documents) draws each row's predicted tokens and order from a
generator seeded with its entry instead, so they do not depend on the rank the row lands on.

Axes: b batch, t sequence length, n predicted tokens per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config
from ..framework.objective import LossOutput, RecurrentObjective
from .masked_lm import next_sentence_term, row_generators


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
    nsp: bool = False
    """Add the next-sentence-prediction loss (the batch holds ``next_sentence_label``, the model an NSP head)."""

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


def sample_predicted(t: int, n: int, cfg: PermutationLMConfig, generator: torch.Generator | None = None,
                     allowed: Tensor | None = None) -> Tensor:
    """Bool [t]: exactly n predicted positions (spans, then single random ones to fill up, or
    n single random ones), all of them ``allowed`` ([t] bool, default all; at least n True):
    span positions that are not allowed are dropped and filled up like the rest."""
    predicted = torch.zeros(t, dtype=torch.bool)
    allowed = torch.ones(t, dtype=torch.bool) if allowed is None else allowed
    if cfg.span:
        for begin, end in sample_spans(t, cfg.k, cfg.max_span, n, generator):
            predicted[begin:end] = True
        predicted &= allowed
    missing = n - int(predicted.sum())
    if missing:
        free = (~predicted & allowed).nonzero().squeeze(1)
        predicted[free[torch.randperm(free.numel(), generator=generator)[:missing]]] = True
    return predicted


def permutation_inputs(predicted: Tensor, order: Literal["random", "identity"] = "random",
                       generator: torch.Generator | None = None, rows: list[torch.Generator] | None = None
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """``perm_mask``, ``target_mapping`` and the predicted positions for a factorization order in
    which the unpredicted tokens come first and the predicted ones last, in random (or left-to-right)
    order among themselves.

    Args:
        predicted: bool [b, t], the same number n of True per row.
        rows: one generator per row, used instead of ``generator`` when given.
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
        ranks = torch.stack([torch.randperm(n, generator=g) for g in (rows or [generator] * b)])
    rank = torch.full((b, t), -1, dtype=torch.long).scatter_(1, positions, ranks)  # context: -1
    perm_mask = predicted[:, None, :] & (rank[:, None, :] >= rank[:, :, None])
    target_mapping = F.one_hot(positions, t).float()
    return perm_mask, target_mapping, positions


class PermutationLMObjective(RecurrentObjective):
    """Negative log-likelihood of the predicted tokens under sampled factorization orders (Eq. 2.3).

    The model is called as ``model(input_ids, perm_mask=..., target_mapping=..., token_type_ids=...,
    mems=...)`` (genfeat.models.xlnet.XLNetLMHeadModel, HF's named inputs) and returns ``logits``
    [b, n, V], ``mems`` (and ``nsp_logits`` with ``nsp``). The batch is either an
    :class:`~genfeat.data.lm.LMBatch` (``input`` [b, t] and ``new_epoch``; its ``target``, the causal
    LM's next tokens, is not used) or a mapping (genfeat.data.documents.XLNetPairStream) with
    ``input_ids``, ``new_epoch`` and optionally ``token_type_ids``, ``seed`` and ``next_sentence_label``.
    The targets are the inputs at the predicted positions.

    Args:
        cfg: :class:`PermutationLMConfig`.
        generator: random source (default: torch's global one).
        special_ids: ids that are never predicted (``<sep>``, ``<cls>``, ...).
    """

    name = "plm"

    def __init__(self, cfg: PermutationLMConfig | None = None, generator: torch.Generator | None = None,
                 special_ids: list[int] | tuple[int, ...] = ()):
        self.cfg = cfg or PermutationLMConfig()
        super().__init__(self.cfg.recurrence)
        self.generator = generator
        self.special_ids = torch.tensor(sorted(special_ids), dtype=torch.long)

    def sample(self, x: Tensor, seeds: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """(perm_mask, target_mapping, positions) for the token ids x [b, t], on x's device; row i
        drawn from a generator seeded with ``seeds[i]`` when given."""
        b, t = x.shape
        cfg = self.cfg
        allowed = ~torch.isin(x.cpu(), self.special_ids)                                  # [b, t]
        n = min(int(allowed.sum(1).min()),
                cfg.num_predict if cfg.num_predict is not None else max(1, round(t / cfg.k)))
        if n < 1:
            raise ValueError("a sequence holds only special tokens: nothing to predict")
        rows = row_generators(seeds) if seeds is not None else None
        gens = rows or [self.generator] * b
        predicted = torch.stack([sample_predicted(t, n, cfg, g, allowed[i]) for i, g in enumerate(gens)])
        return tuple(v.to(x.device) for v in permutation_inputs(predicted, cfg.order, self.generator, rows))

    def __call__(self, model: nn.Module, batch) -> LossOutput:
        fields = batch if isinstance(batch, Mapping) else {"input_ids": batch.input, "new_epoch": batch.new_epoch}
        mems = self.memory(fields["new_epoch"])
        x = fields["input_ids"]
        perm_mask, target_mapping, positions = self.sample(x, fields.get("seed"))
        out = model(x, perm_mask=perm_mask, target_mapping=target_mapping, token_type_ids=fields.get("token_type_ids"),
                    mems=mems)
        self.keep(out.mems)
        labels = x.gather(1, positions)
        nll = F.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")
        logs: dict[str, float] = {}
        if self.cfg.nsp:
            nll = nll + next_sentence_term(out.nsp_logits, fields["next_sentence_label"], labels.numel(), logs)
        return LossOutput(nll, labels.numel(), logs)
