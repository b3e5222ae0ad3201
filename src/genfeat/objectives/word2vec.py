"""word2vec's negative-sampling objective and the window sampler that feeds it (Mikolov et al. 2013b).

**Loss** (Mikolov et al. 2013b, Eq. 4; the lecture's skip-gram with negative sampling): for a pair of a
context vector h and a target word w_O, with K words w_1..w_K drawn from the noise distribution P_n,

    −log σ(u_{w_O}^T h) − Σ_{k=1..K} log σ(−u_{w_k}^T h).

Its gradient with respect to a score s = u^T h is σ(s) − 1 for the positive and σ(s) for a negative,
the updates word2vec.c applies. :func:`negative_sampling_loss` is this sum for any pairs, so the
graph-context loss of Planetoid / GraphEmb (Eq. 3.12, γ = ±1 per pair) is the same function.

**Noise distribution**: P_n(w) ∝ count(w)^{3/4} (:func:`noise_distribution`).

**Frequent-word subsampling**: each occurrence of w is kept with probability
p_keep(w) = (sqrt(f(w) / (s·T)) + 1) · s·T / f(w) (capped at 1), f(w) the count of w, T the number of
corpus words, s the ``sample`` threshold: the formula of word2vec.c and gensim, which for frequent words
(f(w) ≫ s·T) approaches the paper's 1 − P_discard = sqrt(s·T / f(w)) and keeps every word with
f(w) ≤ (3 + √5)/2 · s·T ≈ 2.62 s·T (:func:`keep_probability`).

**Windows** (:class:`WindowSampler`): every epoch draws which occurrences are kept, then each kept
word is a center word whose window is the kept words within b positions of it in the same sentence,
b ~ U{1..m} drawn per center word (the dynamic window: nearer words count more often). The K
negatives of a center word are shared by all the pairs of its window (Ji et al. 2016, "Parallelizing
Word2Vec in Shared and Distributed Memory"). In skip-gram every pair (w_t, w_{t+j}) of a window has
the same h = v_{w_t}, so the pairs' negative terms are equal and the window's loss is

    Σ_j −log σ(u_{w_{t+j}}^T v_{w_t}) − |window| · Σ_k log σ(−u_{w_k}^T v_{w_t}),

2m + K scores per center word instead of 2m·(K + 1). word2vec.c draws K negatives for every pair, so
the negatives of a window here are correlated across its pairs, but each pair's loss has the same
expectation. ``shared_negatives=False`` draws K for every pair instead, as word2vec.c (skip-gram only;
CBOW has one pair per window): on PTB + WikiText-2 that scored 3.76% on the analogies against 2.04% shared,
at about 3 times the time (docs/BENCHMARKS.md). A negative equal to the center word is drawn again, as
word2vec.c skips it.

**Batched SGD** (:class:`WindowSampler` ``row_cap``): word2vec.c updates a vector after every pair, so the
hundreds of updates a frequent word gets within a stretch of text each see its new value. A batch
applies them all at once, at the old value; summed, they overshoot and training diverges (a 4,096-word
batch of PTB does with α = 0.025). So within one batch the gradient reaching a row is scaled by
min(1, C / n_w), n_w the number of pair terms the row takes part in (as a target, counted with its
weight; as an input, the weights of its rows' targets), C = ``row_cap``: a rare word's update is
word2vec.c's sum, a frequent word's at most C pairs' worth per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, DataError
from ..framework.objective import LossOutput, Objective


def negative_sampling_loss(scores: Tensor, sign: Tensor) -> Tensor:
    """Per-pair −log σ(γ · s): the terms of Mikolov et al. 2013b Eq. 4 (and Planetoid's Eq. 3.12).

    Args:
        scores: (...) scores s = u^T h.
        sign: γ broadcastable to ``scores``, +1 for a true target and −1 for a noise word.
    Returns:
        (...) the per-score losses.
    """
    return -F.logsigmoid(sign * scores)


def noise_distribution(counts: np.ndarray, exponent: float = 0.75) -> np.ndarray:
    """P_n(w) = count(w)^exponent / Σ_v count(v)^exponent (Mikolov et al. 2013b: exponent 3/4).

    Args:
        counts: (V,) word counts, > 0.
        exponent: the power (default 0.75; 0 uniform, 1 unigram).
    Returns:
        (V,) float64 probabilities summing to 1.
    """
    p = np.asarray(counts, np.float64) ** exponent
    return p / p.sum()


def keep_probability(counts: np.ndarray, sample: float) -> np.ndarray:
    """Probability of keeping each occurrence of a word (module docstring), capped at 1.

    Args:
        counts: (V,) word counts f(w) > 0.
        sample: the threshold s (0: keep every word).
    Returns:
        (V,) float64 in (0, 1].
    """
    counts = np.asarray(counts, np.float64)
    if sample <= 0:
        return np.ones_like(counts)
    threshold = sample * counts.sum()
    return np.minimum((np.sqrt(counts / threshold) + 1.0) * threshold / counts, 1.0)


class WindowSampler:
    """Endless, resumable batches of center words with their windows and negatives, vectorised with numpy.

    A batch holds exactly ``batch_size`` center words, read in corpus order (as word2vec.c and gensim
    read the corpus); an epoch's last words are followed by the next epoch's first.

    Args:
        ids: (N,) int64 word ids of the corpus, sentences one after another.
        sentence: (N,) int64 index of each word's sentence (non-decreasing); windows never cross sentences.
        counts: (V,) counts of the words in ``ids`` (for the noise distribution and the subsampling).
        window: m, the largest distance between a center word and a context word (>= 1).
        negatives: K noise words per center word (>= 1).
        batch_size: center words per batch (default 4096).
        sample: subsampling threshold s (default 1e-3; 0: none).
        ns_exponent: exponent of the noise distribution (default 0.75).
        seed: seed of the subsampling, windows and negatives (default 0).
        architecture: ``skipgram`` or ``cbow``: what the rows hold (default ``skipgram``).
        row_cap: C of the per-batch row cap (module docstring; default 0: no cap, the plain sum).
        shared_negatives: skip-gram: K negatives per center word shared by its window's pairs (default
            True), or K per pair (False, word2vec.c's; about 3 times the work).
    Yields:
        dict ``inputs`` (b, n) int64 and ``input_mask`` (b, n) bool, the words that make h (skip-gram:
        n = 1, the center word; CBOW: n = 2m, the window); ``targets`` (b, T) int64 scored against h
        (skip-gram: the 2m window slots then the K negatives, or 2m·K with K per pair, slot by slot; CBOW:
        the center word then the negatives);
        ``sign`` (b, T) float32, +1 for a true target and −1 for a noise word; ``weight`` (b, T) float32,
        how many pairs each score's loss counts for (0 for an empty slot; skip-gram negatives: the
        window's size); with ``row_cap``, ``input_grad_scale`` (b, n) and ``target_grad_scale`` (b, T) float32.
    """

    def __init__(self, ids: np.ndarray, sentence: np.ndarray, counts: np.ndarray, window: int, negatives: int,
                 batch_size: int = 4096, sample: float = 1e-3, ns_exponent: float = 0.75, seed: int = 0,
                 architecture: str = "skipgram", row_cap: float = 0.0, shared_negatives: bool = True):
        if len(ids) == 0:
            raise DataError("the corpus holds no word of the vocabulary", "train on a corpus with text in it")
        if window < 1:
            raise ConfigError(f"window is {window}, so no word has a context", "set window >= 1")
        if negatives < 1 or batch_size < 1:
            raise ConfigError(f"negatives {negatives} / batch_size {batch_size} must be >= 1", "set both >= 1")
        self.ids, self.sentence = np.asarray(ids, np.int64), np.asarray(sentence, np.int64)
        self.keep = keep_probability(counts, sample)
        self.cdf = np.cumsum(noise_distribution(counts, ns_exponent))
        self.cdf /= self.cdf[-1]
        self.offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
        if architecture not in ("skipgram", "cbow"):
            raise ValueError(f"architecture must be skipgram or cbow, got {architecture!r}")
        self.window, self.negatives, self.batch_size, self.seed = window, negatives, batch_size, seed
        self.cbow = architecture == "cbow"
        self.row_cap = row_cap
        self.per_pair = not shared_negatives and not self.cbow
        self.vocab_size = len(counts)
        self.epoch, self.offset = 0, 0
        self._cached: tuple[int, np.ndarray, np.ndarray] | None = None

    def expected_centers(self) -> float:
        """Expected kept words per epoch, Σ_w count(w) · p_keep(w)."""
        return float(self.keep[self.ids].sum())

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(kept ids, their sentences) of ``epoch``'s subsampling."""
        if self._cached is None or self._cached[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch, 0])
            kept = rng.random(len(self.ids)) < self.keep[self.ids]
            self._cached = (epoch, self.ids[kept], self.sentence[kept])
        return self._cached[1], self._cached[2]

    def _part(self, epoch: int, start: int, n: int) -> tuple[np.ndarray, ...]:
        """(inputs, input_mask, targets, sign, weight) of the kept words start..start+n of ``epoch``."""
        ids, sent = self._epoch(epoch)
        rng = np.random.default_rng([self.seed, epoch, 1, start])
        pos = np.arange(start, start + n)
        span = self.window - rng.integers(0, self.window, n)  # b ~ U{1..m}
        ctx = pos[:, None] + self.offsets
        inside = (ctx >= 0) & (ctx < len(ids))
        ctx = np.clip(ctx, 0, len(ids) - 1)
        mask = inside & (np.abs(self.offsets) <= span[:, None]) & (sent[ctx] == sent[pos][:, None])
        window = np.where(mask, ids[ctx], 0)  # (n, 2m)
        centers = ids[pos]
        draws = self.negatives * (len(self.offsets) if self.per_pair else 1)
        neg = np.searchsorted(self.cdf, rng.random((n, draws)), side="right")
        clash = neg == centers[:, None]
        while clash.any():
            neg[clash] = np.searchsorted(self.cdf, rng.random(int(clash.sum())), side="right")
            clash = neg == centers[:, None]
        size = mask.sum(1, keepdims=True).astype(np.float32)  # (n, 1) pairs of the window
        neg_sign = np.full(neg.shape, -1.0, np.float32)
        if self.cbow:
            sign = np.concatenate([np.ones((n, 1), np.float32), neg_sign], 1)
            weight = np.broadcast_to(np.minimum(size, 1.0), sign.shape)
            return window, mask, np.concatenate([centers[:, None], neg], 1), sign, weight
        sign = np.concatenate([np.ones(mask.shape, np.float32), neg_sign], 1)
        neg_weight = np.repeat(mask, self.negatives, 1) if self.per_pair else np.broadcast_to(size, neg.shape)
        weight = np.concatenate([mask, neg_weight], 1).astype(np.float32)
        return centers[:, None], np.ones((n, 1), bool), np.concatenate([window, neg], 1), sign, weight

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, Tensor]:
        parts, need = [], self.batch_size
        while need:
            length = len(self._epoch(self.epoch)[0])
            take = min(need, length - self.offset)
            if take > 0:
                parts.append(self._part(self.epoch, self.offset, take))
                need -= take
                self.offset += take
            if self.offset >= length:
                self.epoch, self.offset = self.epoch + 1, 0
        names = ("inputs", "input_mask", "targets", "sign", "weight")
        batch = {k: np.concatenate(a) for k, a in zip(names, zip(*parts))}
        if self.row_cap > 0:
            batch.update(self._grad_scales(batch))
        return {k: torch.from_numpy(v) for k, v in batch.items()}

    def _grad_scales(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """min(1, C / n_w) for every looked-up row (module docstring, batched SGD)."""
        targets, weight, inputs = batch["targets"], batch["weight"], batch["inputs"]
        out_load = np.bincount(targets.ravel(), weight.ravel(), self.vocab_size)
        row_load = np.broadcast_to(weight.sum(1, keepdims=True), inputs.shape) * batch["input_mask"]
        in_load = np.bincount(inputs.ravel(), row_load.ravel(), self.vocab_size)
        scale = lambda load, ids: np.minimum(1.0, self.row_cap / np.maximum(load[ids], 1e-9)).astype(np.float32)
        return {"input_grad_scale": scale(in_load, inputs), "target_grad_scale": scale(out_load, targets)}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])

    def shard(self, rank: int, world: int) -> None:
        if world > 1:
            raise ConfigError("word2vec's window sampler runs in one process", "run word2vec without torchrun")


class NegativeSamplingObjective(Objective):
    """Skip-gram / CBOW negative-sampling loss (module docstring) over a batch of :class:`WindowSampler`:
    Σ weight · (−log σ(sign · u_w^T h)).

    The items are the center words: ``loss_sum`` is the loss summed over every pair of every window,
    ``count`` the number of center words b, so SGD with learning rate α·b on the trainer's mean loss
    makes each pair's update α times its gradient, as word2vec.c's α. ``logs["pairs"]``: the pairs
    (skip-gram) or non-empty windows (CBOW), summed (the trainer reports it per center word).
    """

    name = "sgns"

    def __call__(self, model: nn.Module, batch: dict[str, Tensor]) -> LossOutput:
        scores = model(batch["inputs"], batch["input_mask"], batch["targets"], batch.get("input_grad_scale"),
                       batch.get("target_grad_scale")).scores  # (b, T)
        weight = batch["weight"]
        loss_sum = (negative_sampling_loss(scores, batch["sign"]) * weight).sum()
        pairs = float(weight[batch["sign"] > 0].sum())
        return LossOutput(loss_sum, int(scores.shape[0]), {"pairs": pairs})
