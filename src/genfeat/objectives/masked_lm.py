"""Masked language modelling, the denoising objective of BERT (Devlin et al. 2019; thesis §2.2.1, Eq. 2.2).

L_g = -sum_{t in M} log p(x_t | x_hat): a random set M of the tokens is corrupted into x_hat and
the model predicts the original tokens of M from x_hat. As in BERT's released pipeline:

- per sequence, round(mask_rate x candidates) tokens are chosen (at least one; at most
  ``max_predictions`` when set), where candidates are the attended tokens that are not special
  tokens ([CLS], [SEP], [PAD], ...), which are never masked;
- with ``whole_word``, the pieces of a word are chosen together: words are drawn in random order
  and taken while their pieces fit in the count (the first word always, so a sequence whose first
  drawn word is longer than the count still gets one);
- a chosen token becomes the mask token with probability ``replace_mask`` (0.8), a token drawn
  uniformly from the vocabulary with probability ``replace_random`` (0.1), and stays itself
  otherwise;
- with ``nsp``, the next-sentence-prediction loss of the batch's ``next_sentence_label`` is added.

The output head is evaluated only at the chosen positions. The objective works with any backbone
that follows :class:`MaskedLMModel` (BERT here; the Transformer-XL/XLNet backbone for
"DAE + Transformer-XL", thesis Table 2.19, which also carries the memory of the previous segment
with ``recurrence``): one objective, several backbones.

Randomness comes from torch's global generator unless one is passed, so a resumed run (whose
trainer restores the generators) masks exactly as the uninterrupted one. A batch that carries
``seed`` [b] (genfeat.data.documents) is masked row by row from generators seeded with it instead,
so the masks of an example do not depend on which rank or batch slice it lands in (torchrun runs
then equal one process with the same global batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import Config
from ..framework.distributed import all_reduce_sum
from ..framework.objective import LossOutput, RecurrentObjective


MODEL_INPUTS = ("token_type_ids", "attention_mask")
"""The batch entries besides ``input_ids`` that are passed on to the model."""


class MaskedLMModel(Protocol):
    """What :class:`MaskedLMObjective` needs of a backbone.

    ``model(input_ids=x_hat, masked_positions=M, **inputs)`` where ``x_hat`` [b, t] are the
    corrupted ids, ``M`` [b, t] bool the chosen positions, and ``inputs`` the batch's other model
    inputs (those of :data:`MODEL_INPUTS` it holds). It returns an object with

    - ``logits``: [n, V], n = M.sum(), the output head at the chosen positions in row-major order
      (the rows ``full_logits[M]`` of a head evaluated everywhere), computed from bidirectional
      hidden states (every position sees every other);
    - ``nsp_logits``: [b, 2], only needed with ``nsp`` (index 0: the second segment follows the first).
    """

    def __call__(self, *, input_ids: Tensor, masked_positions: Tensor, **inputs: Any) -> Any: ...


@dataclass
class MaskedLMConfig(Config):
    """How tokens are chosen and corrupted (defaults: BERT's)."""

    mask_rate: float = 0.15
    """Fraction of each sequence's candidate tokens that is predicted."""
    replace_mask: float = 0.8
    """Probability that a chosen token is replaced by the mask token."""
    replace_random: float = 0.1
    """Probability that a chosen token is replaced by a uniformly drawn token (the rest stays unchanged)."""
    whole_word: bool = False
    """Choose all pieces of a word together (whole-word masking)."""
    max_predictions: int = 0
    """At most this many chosen tokens per sequence (0: no cap; BERT's max_predictions_per_seq)."""
    nsp: bool = False
    """Add the next-sentence-prediction loss (the batch then holds ``next_sentence_label`` [b])."""

    def __post_init__(self):
        if not 0.0 < self.mask_rate <= 1.0:
            raise ValueError(f"mask_rate must be in (0, 1], got {self.mask_rate}")
        if min(self.replace_mask, self.replace_random) < 0 or self.replace_mask + self.replace_random > 1.0:
            raise ValueError(f"replace_mask ({self.replace_mask}) and replace_random ({self.replace_random}) must be "
                             ">= 0 and sum to at most 1")
        if self.max_predictions < 0:
            raise ValueError(f"max_predictions must be >= 0 (0: no cap), got {self.max_predictions}")


@dataclass
class MaskedBatch:
    """The corruption of a batch."""

    input_ids: Tensor
    """[b, t] corrupted ids x_hat."""
    positions: Tensor
    """[b, t] bool, the chosen positions M."""
    labels: Tensor
    """[n] the original ids at M, row-major."""


def _uniform(shape: tuple[int, int], device, generator: torch.Generator | None,
             rows: list[torch.Generator] | None) -> Tensor:
    """Uniform [0, 1) numbers [b, t]: from ``generator``, or row i from ``rows[i]``."""
    if rows is None:
        return torch.rand(shape, generator=generator, device=device)
    return torch.stack([torch.rand(shape[1], generator=g) for g in rows]).to(device)


def row_generators(seeds: Tensor) -> list[torch.Generator]:
    """One CPU generator per example, seeded with ``seeds`` [b]."""
    return [torch.Generator().manual_seed(int(s)) for s in seeds.tolist()]


def choose_positions(candidates: Tensor, rate: float, word_start: Tensor | None = None, max_predictions: int = 0,
                     generator: torch.Generator | None = None, rows: list[torch.Generator] | None = None) -> Tensor:
    """Draw the positions to predict: per row round(rate x candidates), at least 1 (module doc).

    Args:
        candidates: [b, t] bool, tokens that may be chosen.
        rate: fraction of each row's candidates to choose.
        word_start: [b, t] bool, True where a token begins a word (whole-word masking); None: every
            token is its own word. A candidate after a non-candidate always begins a word.
        max_predictions: cap per row (0: none).
        generator: random source (default: torch's global one).
        rows: one generator per row instead (the row's draws then depend on it alone).
    Returns:
        [b, t] bool, a subset of ``candidates``.
    """
    b, t = candidates.shape
    pos = torch.arange(t, device=candidates.device).expand(b, t)
    if word_start is None:
        starts = candidates
    else:
        after_other = ~F.pad(candidates[:, :-1], (1, 0), value=False)
        starts = candidates & (word_start | after_other)
    start = torch.where(starts, pos, 0).cummax(1).values                   # [b, t] start of each token's word
    score = _uniform((b, t), candidates.device, generator, rows).gather(1, start)
    score = score.masked_fill(~candidates, 2.0)                            # non-candidates sort last
    length = torch.zeros(b, t, device=candidates.device).scatter_add_(1, start, candidates.float()).gather(1, start)
    order = torch.sort(score, dim=1, stable=True).indices                  # words in random order, pieces in order
    count = torch.empty_like(pos).scatter_(1, order, candidates.gather(1, order).long().cumsum(1))
    first = count - (pos - start)                                          # running count at the word's first piece
    last = first + length.long() - 1                                       # ... and at its last piece
    target = torch.round(candidates.sum(1) * rate).long()  # the first drawn word is taken even when this is 0
    if max_predictions:
        target = target.clamp(max=max_predictions)
    return candidates & ((last <= target[:, None]) | (first == 1))


def corrupt(input_ids: Tensor, positions: Tensor, mask_id: int, n_token: int, replace_mask: float = 0.8,
            replace_random: float = 0.1, generator: torch.Generator | None = None,
            rows: list[torch.Generator] | None = None) -> MaskedBatch:
    """Replace the chosen tokens: the mask id, a uniform random id, or unchanged (80/10/10 by default).

    Shapes: input_ids [b, t], positions [b, t] bool -> MaskedBatch (labels [n]). ``rows``: one
    generator per row instead of ``generator``.
    """
    r = _uniform(tuple(input_ids.shape), input_ids.device, generator, rows)
    random_ids = (_uniform(tuple(input_ids.shape), input_ids.device, generator, rows) * n_token).long()
    out = torch.where(positions & (r < replace_mask), mask_id, input_ids)
    out = torch.where(positions & (r >= replace_mask) & (r < replace_mask + replace_random), random_ids, out)
    return MaskedBatch(out, positions, input_ids[positions])


class MaskedLMObjective(RecurrentObjective):
    """Summed cross-entropy of the original tokens at the chosen positions (+ NSP), over a :class:`MaskedLMModel`.

    Args:
        cfg: :class:`MaskedLMConfig`.
        mask_id: id of the mask token ([MASK], <mask>).
        n_token: vocabulary size V (random replacements are drawn from [0, V)).
        special_ids: ids that are never chosen (e.g. [CLS], [SEP], [PAD], [MASK]).
        word_start: [V] bool, True for ids that begin a word (WordPiece: not ``##...``;
            sentencepiece: ``▁...``); needed by ``whole_word``.
        generator: random source (default: torch's global one, which the trainer saves and restores).
        recurrence: carry Transformer-XL's memory from batch to batch ("DAE + Transformer-XL", thesis
            Table 2.19 row 2, on an XLNet backbone with ``mem_len`` > 0): the model also takes ``mems=`` and
            returns ``mems``, the states of the previous, corrupted segment; the batch then also holds
            ``new_epoch`` (the memory is dropped when it is true). BERT has no memory: False.

    The batch is a mapping with ``input_ids`` [b, t] and optionally ``attention_mask`` [b, t]
    (0: padding, never chosen), ``token_type_ids`` and, with ``nsp``, ``next_sentence_label`` [b];
    every key but the label (and ``new_epoch``) is passed to the model.

    Returns LossOutput(sum over chosen tokens of -log p, number of chosen tokens, logs) with logs
    ``correct`` (chosen tokens predicted right). With ``nsp`` the NSP loss enters the sum scaled
    by N / B (N chosen tokens, B sequences, both summed over the ranks under torchrun:
    :func:`next_sentence_term`), so the mean is BERT's mean MLM loss + mean NSP loss and a torchrun
    run steps as one process with the same global batch; the logs ``nsp_loss`` and ``nsp_correct``
    are scaled alike (reported per sequence). With ``grad_accum`` > 1 the step's NSP loss is the
    micro-batches' mean NSP losses weighted by their chosen tokens.
    """

    name = "mlm"

    def __init__(self, cfg: MaskedLMConfig, mask_id: int, n_token: int, special_ids: list[int] | tuple[int, ...] = (),
                 word_start: Tensor | None = None, generator: torch.Generator | None = None, recurrence: bool = False):
        super().__init__(recurrence)
        if not 0 <= mask_id < n_token:
            raise ValueError(f"mask_id {mask_id} is outside the vocabulary [0, {n_token})")
        if cfg.whole_word and (word_start is None or word_start.shape != (n_token,)):
            raise ValueError(f"whole-word masking needs word_start, a bool tensor of shape ({n_token},)")
        self.cfg, self.mask_id, self.n_token, self.generator = cfg, mask_id, n_token, generator
        self.special_ids = torch.tensor(sorted(set(special_ids) | {mask_id}), dtype=torch.long)
        self.word_start = word_start.bool() if cfg.whole_word else None

    def mask(self, batch: Mapping[str, Tensor]) -> MaskedBatch:
        """Choose and corrupt the positions of ``batch['input_ids']``."""
        ids = batch["input_ids"]
        candidates = ~torch.isin(ids, self.special_ids.to(ids.device))
        if "attention_mask" in batch:
            candidates &= batch["attention_mask"].bool()
        word_start = None if self.word_start is None else self.word_start.to(ids.device)[ids]
        rows = row_generators(batch["seed"]) if "seed" in batch else None
        positions = choose_positions(candidates, self.cfg.mask_rate, word_start, self.cfg.max_predictions,
                                     self.generator, rows)
        return corrupt(ids, positions, self.mask_id, self.n_token, self.cfg.replace_mask, self.cfg.replace_random,
                       self.generator, rows)

    def __call__(self, model: MaskedLMModel, batch: Mapping[str, Tensor]) -> LossOutput:
        masked = self.mask(batch)
        inputs = {k: batch[k] for k in MODEL_INPUTS if k in batch}
        if self.recurrence:
            inputs["mems"] = self.memory(batch["new_epoch"])
        out = model(input_ids=masked.input_ids, masked_positions=masked.positions, **inputs)
        if self.recurrence:
            self.keep(out.mems)
        logits = out.logits.float()
        n = masked.labels.numel()
        loss = F.cross_entropy(logits, masked.labels, reduction="sum")
        logs = {"correct": float((logits.argmax(-1) == masked.labels).sum())}
        if self.cfg.nsp:
            loss = loss + next_sentence_term(out.nsp_logits, batch["next_sentence_label"], n, logs)
        return LossOutput(loss, n, logs)


def next_sentence_term(nsp_logits: Tensor, labels: Tensor, n: int, logs: dict[str, float]) -> Tensor:
    """The NSP cross-entropy summed over the b sequences and scaled by N / B, where N and B are the
    LM items (``n`` here) and sequences summed over the ranks of an initialised process group (one
    process: n / b), so that divided by the N LM items of all ranks it is the mean NSP loss of the
    global batch; adds ``nsp_loss`` and ``nsp_correct`` (scaled alike) to ``logs``. Every rank of a
    torchrun run must call it together (an all-reduce).

    Shapes: nsp_logits [b, 2], labels [b] (0: B follows A) -> scalar.
    """
    nsp = nsp_logits.float()
    # one scale on every rank: a rank's own n / b weighs its sequences differently from the other ranks'
    # whenever the LM items per sequence differ (whole-word masking), so the step would not be one process's
    items, sequences = all_reduce_sum([float(n), float(nsp.shape[0])])
    scale = items / sequences
    nsp_sum = F.cross_entropy(nsp, labels, reduction="sum")
    logs.update(nsp_loss=float(nsp_sum.detach()) * scale, nsp_correct=float((nsp.argmax(-1) == labels).sum()) * scale)
    return scale * nsp_sum
