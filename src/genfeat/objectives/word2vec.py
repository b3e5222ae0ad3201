"""word2vec's output layers (negative sampling, hierarchical softmax) and the window sampler that feeds them
(Mikolov et al. 2013b).

**Negative sampling** (Mikolov et al. 2013b, Eq. 4; the lecture's skip-gram with negative sampling): for a
pair of a context vector h and a target word w_O, with K words w_1..w_K drawn from the noise distribution P_n,

    −log σ(u_{w_O}^T h) − Σ_{k=1..K} log σ(−u_{w_k}^T h).

Its gradient with respect to a score s = u^T h is σ(s) − 1 for the positive and σ(s) for a negative,
the updates word2vec.c applies. :func:`negative_sampling_loss` is this sum for any pairs, so the
graph-context loss of Planetoid / GraphEmb (Eq. 3.12, γ = ±1 per pair) is the same function.

**Hierarchical softmax** (Mikolov et al. 2013b, Eq. 3; Morin & Bengio 2005): the words are the leaves of
a Huffman tree built from their counts (:func:`huffman_tree`), so frequent words have short paths. With
n(w, 1..L(w)) the inner nodes from the root to w, u_n an inner node's output vector and c_l ∈ {0, 1} the
branch taken at the l-th of them (w's Huffman code),

    P(w | h) = Π_l σ((1 − 2 c_l) · u_{n(w,l)}^T h),    −log P(w | h) = Σ_l −log σ((1 − 2 c_l) · u_{n(w,l)}^T h),

the same per-score loss as negative sampling with the path's nodes as targets and sign 1 − 2c_l
(word2vec.c's label 1 − code). σ(s) + σ(−s) = 1 at every inner node, so the P(w | h) sum to 1 over the
vocabulary for any h. Paths are padded to the longest code with weight 0, so a batch is one tensor.

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
Word2Vec in Shared and Distributed Memory"). A skip-gram pair (w_t, w_{t+j}) can be scored in two orders:

- ``predicts='center'`` (the default; word2vec.c's and gensim's order): each context word's vector
  h_j = v_{w_{t+j}} scores the center word and the K negatives,

      Σ_j [−log σ(u_{w_t}^T v_{w_{t+j}}) − Σ_k log σ(−u_{w_k}^T v_{w_{t+j}})],

  2m·(K + 1) scores per center word;
- ``predicts='context'`` (the lecture's P(w_{t+j} | w_t)): every pair has the same h = v_{w_t}, so the
  pairs' negative terms are equal and the window's loss is

      Σ_j −log σ(u_{w_{t+j}}^T v_{w_t}) − |window| · Σ_k log σ(−u_{w_k}^T v_{w_t}),

  2m + K scores per center word.

word2vec.c draws K negatives for every pair, so the negatives of a window here are correlated across its
pairs, but each pair's loss has the same expectation. With ``context`` the correlation lands on one pair
of vectors: v_{w_t} and each negative's u get K draws' gradient |window| times over. On PTB + WikiText-2
(docs/BENCHMARKS.md, seeds 0 and 1) ``context`` scored 1.9% on the analogies against 3.6-3.7% for
``center`` and 3.7-4.2% for gensim, at about 0.75 of ``center``'s step time; drawing 2K shared negatives
at weight |window|/2 instead raised ``context`` to 2.7% (seed 0), which points at the variance of the shared
negatives. ``shared_negatives=False`` draws K for every pair instead, as word2vec.c (skip-gram only, in the
``context`` rows; CBOW has one pair per window): 3.76% there at about 3 times ``context``'s time. A negative
equal to the center word is drawn again, as word2vec.c skips it. With the hierarchical softmax a skip-gram row scores the center word's path
against each context word's input vector (word2vec.c's and gensim's order: one path a center word, 2m
vectors h), a CBOW row against the window's mean.

**Batched SGD** (:class:`WindowSampler` ``row_cap``): word2vec.c updates a vector after every pair, so the
hundreds of updates a frequent word gets within a stretch of text each see its new value. A batch
applies them all at once, at the old value; summed, they overshoot and training diverges (a 4,096-word
batch of PTB does with α = 0.025). So within one batch the gradient reaching a row is scaled by
min(1, C / n_w), n_w the number of pair terms the row takes part in (as a target, counted with its
weight; as an input, the weights of its slot's scores), C = ``row_cap``: a rare word's update is
word2vec.c's sum, a frequent word's at most C pairs' worth per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
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


class AliasSampler:
    """Draws from a discrete distribution in O(1) a draw: Walker's alias method (Vose's construction).

    Each of the V columns holds probability mass 1/V, split between its own word (``prob``) and one other
    (``alias``): a draw picks a column uniformly, then its own word with probability ``prob``, else the
    alias. Exact, and for 1,024 × 5 negatives from the noise distribution of a 13,701-word vocabulary about
    4 times faster than a binary search of the cumulative distribution (0.59 against 2.4 ms, best of 7, on the
    loaded 2-core VM); word2vec.c uses a 10^8-entry table instead.

    Args:
        p: (V,) probabilities summing to 1.
    """

    def __init__(self, p: np.ndarray):
        v = len(p)
        prob = np.asarray(p, np.float64) * v
        self.alias = np.arange(v)
        small = [i for i in range(v) if prob[i] < 1.0]
        large = [i for i in range(v) if prob[i] >= 1.0]
        while small and large:
            s, l = small.pop(), large.pop()
            self.alias[s] = l
            prob[l] -= 1.0 - prob[s]
            (small if prob[l] < 1.0 else large).append(l)
        for i in small + large:  # what rounding leaves over is (numerically) a full column
            prob[i] = 1.0
        self.prob = prob

    def __call__(self, rng: np.random.Generator, shape) -> np.ndarray:
        """int64 draws of the given shape."""
        col = rng.integers(0, len(self.prob), shape)
        return np.where(rng.random(shape) < self.prob[col], col, self.alias[col])


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


@dataclass
class HuffmanTree:
    """The Huffman tree of a vocabulary, as each word's path from the root (word2vec.c's ``point`` / ``code``).

    Attributes:
        points: (V, L) int64 ids of the inner nodes on each word's path, root first (0..V−2; the root is V−2),
            padded with 0 to L, the longest code.
        codes: (V, L) int8 the branch taken below each of them (the Huffman code), padded with 0.
        lengths: (V,) int64 code lengths.
    """

    points: np.ndarray
    codes: np.ndarray
    lengths: np.ndarray

    @property
    def signs(self) -> np.ndarray:
        """(V, L) float32 1 − 2c on the path (+1 for branch 0, −1 for branch 1), 0 in the padding."""
        inside = np.arange(self.points.shape[1]) < self.lengths[:, None]
        return np.where(inside, 1.0 - 2.0 * self.codes, 0.0).astype(np.float32)


def huffman_tree(counts: np.ndarray) -> HuffmanTree:
    """The Huffman tree of word counts (Huffman 1952), built as word2vec.c's CreateBinaryTree.

    Leaves in increasing count and the inner nodes in the order they are made are two sorted queues, so
    each merge of the two least frequent nodes takes O(1): O(V log V) for the sort. Of the two merged
    nodes the second gets branch 1. Node ids: leaves 0..V−1 in the order of ``counts``, inner nodes
    V..2V−2 in creation order (inner id = node − V, the root last).

    Args:
        counts: (V,) word counts, > 0.
    Returns:
        :class:`HuffmanTree` (a single word gets an empty path).
    """
    counts = np.asarray(counts, np.int64)
    v = len(counts)
    weight = np.concatenate([counts, np.zeros(max(v - 1, 0), np.int64)])
    parent = np.zeros(max(2 * v - 1, 1), np.int64)
    branch = np.zeros(max(2 * v - 1, 1), np.int8)
    leaves = np.argsort(counts, kind="stable").tolist()
    li, ni = 0, v  # next leaf (index into ``leaves``), next inner node not yet merged
    for new in range(v, 2 * v - 1):
        pair = []
        for _ in range(2):
            if li < v and (ni >= new or weight[leaves[li]] <= weight[ni]):
                pair.append(leaves[li])
                li += 1
            else:
                pair.append(ni)
                ni += 1
        weight[new] = weight[pair[0]] + weight[pair[1]]
        parent[pair] = new
        branch[pair[1]] = 1
    # walk every leaf up to the root at once; step s fills the node s levels above the leaf
    root = 2 * v - 2
    up_nodes, up_codes = [], []
    node = np.arange(v)
    lengths = np.zeros(v, np.int64)
    while (node != root).any():
        moving = node != root
        up_codes.append(np.where(moving, branch[node], 0))
        node = np.where(moving, parent[node], root)
        up_nodes.append(np.where(moving, node - v, 0))
        lengths += moving
    depth = len(up_nodes)
    points = np.zeros((v, depth), np.int64)
    codes = np.zeros((v, depth), np.int8)
    for s in range(depth):  # step s is position lengths − 1 − s from the root
        pos = lengths - 1 - s
        ok = pos >= 0
        points[ok, pos[ok]] = up_nodes[s][ok]
        codes[ok, pos[ok]] = up_codes[s][ok]
    return HuffmanTree(points, codes, lengths)


class WindowSampler:
    """Endless, resumable batches of center words with their windows and targets, vectorised with numpy.

    A batch holds exactly ``batch_size`` center words, read in corpus order (as word2vec.c and gensim
    read the corpus); an epoch's last words are followed by the next epoch's first.

    Args:
        ids: (N,) int64 word ids of the corpus, sentences one after another.
        sentence: (N,) int64 index of each word's sentence (non-decreasing); windows never cross sentences.
        counts: (V,) counts of the words in ``ids`` (for the noise distribution, the subsampling and the tree).
        window: m, the largest distance between a center word and a context word (>= 1).
        negatives: K noise words per center word (>= 1; unused with the hierarchical softmax).
        batch_size: center words per batch (default 4096).
        sample: subsampling threshold s (default 1e-3; 0: none).
        ns_exponent: exponent of the noise distribution (default 0.75).
        seed: seed of the subsampling, windows and negatives (default 0).
        architecture: ``skipgram`` or ``cbow``: what the rows hold (default ``skipgram``).
        row_cap: C of the per-batch row cap (module docstring; default 0: no cap, the plain sum).
        shared_negatives: skip-gram: K negatives per center word shared by its window's pairs (default
            True), or K per pair (False, word2vec.c's; about 3 times the work).
        output: ``negative`` (negative sampling) or ``hierarchical`` (the Huffman tree's paths).
        predicts: skip-gram with shared negatives (module docstring): ``center`` (default; word2vec.c's and
            gensim's order, as the hierarchical softmax always does: h = each context word's vector scores the
            center word and the K negatives, which the window's pairs share) or ``context`` (h = the center
            word's vector scores its window and the negatives). With K negatives per pair the rows are the
            ``context`` ones whatever this says.
        stream: which random stream of ``seed`` to draw from (default 0): Hogwild workers training on shards of
            one corpus (genfeat.methods.word2vec, ``workers``) draw from streams 0, 1, ...
    Yields:
        dict ``inputs`` (b, n) int64 and ``input_mask`` (b, n) bool, the words that make h (n = 1, the center
        word, for skip-gram with negative sampling predicting the context; else n = 2m, the window);
        ``targets`` (b, T) int64 scored against h (skip-gram, negative, predicting the center, and CBOW,
        negative: the center word then the K negatives; skip-gram, negative, predicting the context: the 2m
        window slots then the K negatives, or 2m·K with K per pair, slot by slot; hierarchical: the inner
        nodes of the center word's path);
        ``sign`` (b, T) float32, +1 for a true target or branch 0 and −1 for a noise word or branch 1;
        ``weight`` (b, k, T) float32, how many pairs the loss of score (h_j, target t) counts for (0 for an
        empty slot or padding; skip-gram negatives predicting the context: the window's size); k = 2m for
        skip-gram predicting the center or with the hierarchical softmax (each context word its own h), else
        1; ``pairs`` () float64, the batch's
        (center, context) pairs (skip-gram) or non-empty windows (CBOW); with ``row_cap``,
        ``input_grad_scale`` (b, n) and ``target_grad_scale`` (b, T) float32.
    """

    def __init__(self, ids: np.ndarray, sentence: np.ndarray, counts: np.ndarray, window: int, negatives: int,
                 batch_size: int = 4096, sample: float = 1e-3, ns_exponent: float = 0.75, seed: int = 0,
                 architecture: str = "skipgram", row_cap: float = 0.0, shared_negatives: bool = True,
                 output: str = "negative", predicts: str = "center", stream: int = 0):
        if len(ids) == 0:
            raise DataError("the corpus holds no word of the vocabulary", "train on a corpus with text in it")
        if window < 1:
            raise ConfigError(f"window is {window}, so no word has a context", "set window >= 1")
        if negatives < 1 or batch_size < 1:
            raise ConfigError(f"negatives {negatives} / batch_size {batch_size} must be >= 1", "set both >= 1")
        if architecture not in ("skipgram", "cbow") or output not in ("negative", "hierarchical"):
            raise ValueError(f"architecture must be skipgram or cbow and output negative or hierarchical, "
                             f"got {architecture!r} / {output!r}")
        self.ids, self.sentence = np.asarray(ids, np.int64), np.asarray(sentence, np.int64)
        self.keep = keep_probability(counts, sample)
        self.noise = AliasSampler(noise_distribution(counts, ns_exponent))
        self.offsets = np.concatenate([np.arange(-window, 0), np.arange(1, window + 1)])
        self.window, self.negatives, self.batch_size, self.seed = window, negatives, batch_size, seed
        self.cbow = architecture == "cbow"
        self.row_cap = row_cap
        self.per_pair = not shared_negatives and not self.cbow
        if predicts not in ("context", "center"):
            raise ConfigError(f"predicts is {predicts!r}", "use predicts center or context")
        self.predict_center = predicts == "center" and not self.cbow and not self.per_pair
        self.vocab_size = len(counts)
        self.tree = huffman_tree(counts) if output == "hierarchical" else None
        self.signs = self.tree.signs if self.tree is not None else None
        self.stream = stream
        self.epoch, self.offset = 0, 0
        self._cached: tuple[int, np.ndarray, np.ndarray] | None = None

    def _rng(self, *key: int) -> np.random.Generator:
        """The generator of ``key`` (epoch, purpose, position) in this sampler's stream (stream 0 is
        ``default_rng([seed, *key])``; the others are independent of it and of each other)."""
        spawn = (self.stream,) if self.stream else ()
        return np.random.default_rng(np.random.SeedSequence([self.seed, *key], spawn_key=spawn))

    def expected_centers(self) -> float:
        """Expected kept words per epoch, Σ_w count(w) · p_keep(w)."""
        return float(self.keep[self.ids].sum())

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(kept ids, their sentences) of ``epoch``'s subsampling."""
        if self._cached is None or self._cached[0] != epoch:
            rng = self._rng(epoch, 0)
            kept = rng.random(len(self.ids)) < self.keep[self.ids]
            self._cached = (epoch, self.ids[kept], self.sentence[kept])
        return self._cached[1], self._cached[2]

    def _part(self, epoch: int, start: int, n: int) -> tuple[np.ndarray, ...]:
        """(inputs, input_mask, targets, sign, weight, pairs) of the kept words start..start+n of ``epoch``."""
        ids, sent = self._epoch(epoch)
        rng = self._rng(epoch, 1, start)
        pos = np.arange(start, start + n)
        span = self.window - rng.integers(0, self.window, n)  # b ~ U{1..m}
        ctx = pos[:, None] + self.offsets
        inside = (ctx >= 0) & (ctx < len(ids))
        ctx = np.clip(ctx, 0, len(ids) - 1)
        mask = inside & (np.abs(self.offsets) <= span[:, None]) & (sent[ctx] == sent[pos][:, None])
        window = np.where(mask, ids[ctx], 0)  # (n, 2m)
        centers = ids[pos]
        size = mask.sum(1, keepdims=True).astype(np.float32)  # (n, 1) pairs of the window
        nonempty = np.minimum(size, 1.0)
        if self.tree is not None:
            sign = self.signs[centers]  # (n, L), 0 in the padding
            pairs = float(size.sum() if not self.cbow else nonempty.sum())
            weight = (mask if not self.cbow else nonempty)[:, :, None] * (sign != 0)[:, None, :]
            return window, mask, self.tree.points[centers], sign, weight.astype(np.float32), pairs
        draws = self.negatives * (len(self.offsets) if self.per_pair else 1)
        neg = self.noise(rng, (n, draws))
        clash = neg == centers[:, None]
        while clash.any():
            neg[clash] = self.noise(rng, int(clash.sum()))
            clash = neg == centers[:, None]
        neg_sign = np.full(neg.shape, -1.0, np.float32)
        if self.cbow or self.predict_center:
            sign = np.concatenate([np.ones((n, 1), np.float32), neg_sign], 1)
            if self.cbow:
                weight = np.repeat(nonempty, sign.shape[1], 1)[:, None]
            else:  # (n, 2m, 1 + K): every context slot's h against the center word and the negatives
                weight = np.repeat(mask[:, :, None], sign.shape[1], 2).astype(np.float32)
            pairs = float(nonempty.sum() if self.cbow else size.sum())
            return window, mask, np.concatenate([centers[:, None], neg], 1), sign, weight, pairs
        sign = np.concatenate([np.ones(mask.shape, np.float32), neg_sign], 1)
        neg_weight = np.repeat(mask, self.negatives, 1) if self.per_pair else np.broadcast_to(size, neg.shape)
        weight = np.concatenate([mask, neg_weight], 1).astype(np.float32)[:, None]
        return (centers[:, None], np.ones((n, 1), bool), np.concatenate([window, neg], 1), sign, weight,
                float(size.sum()))

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
        batch = {k: np.concatenate(a) if len(a) > 1 else a[0] for k, a in zip(names, zip(*parts))}
        batch["pairs"] = np.array(sum(p[-1] for p in parts))
        if self.row_cap > 0:
            batch.update(self._grad_scales(batch))
        return {k: torch.from_numpy(v) for k, v in batch.items()}

    def _grad_scales(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """min(1, C / n_w) for every looked-up row (module docstring, batched SGD)."""
        targets, weight, inputs = batch["targets"], batch["weight"], batch["inputs"]
        out_load = np.bincount(targets.ravel(), weight.sum(1).ravel(), self.vocab_size)
        slot_load = np.broadcast_to(weight.sum(2), inputs.shape) * batch["input_mask"]  # (b, k) -> (b, n)
        in_load = np.bincount(inputs.ravel(), slot_load.ravel(), self.vocab_size)
        scale = lambda load, ids: np.minimum(1.0, self.row_cap / np.maximum(load[ids], 1e-9)).astype(np.float32)
        return {"input_grad_scale": scale(in_load, inputs), "target_grad_scale": scale(out_load, targets)}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])

    def shard(self, rank: int, world: int) -> None:
        if world > 1:
            raise ConfigError("word2vec's window sampler runs in one process", "run word2vec without torchrun")


class Word2VecObjective(Objective):
    """Skip-gram / CBOW loss with negative sampling or the hierarchical softmax (module docstring) over a
    batch of :class:`WindowSampler`: Σ weight · (−log σ(sign · u_t^T h_j)).

    The items are the center words: ``loss_sum`` is the loss summed over every pair of every window,
    ``count`` the number of center words b, so SGD with learning rate α·b on the trainer's mean loss
    makes each pair's update α times its gradient, as word2vec.c's α. ``logs["pairs"]``: the pairs
    (skip-gram) or non-empty windows (CBOW), summed (the trainer reports it per center word).

    Args:
        name: the loss's name in the logs (default ``sgns``).
    """

    def __init__(self, name: str = "sgns"):
        self.name = name

    def __call__(self, model: nn.Module, batch: dict[str, Tensor]) -> LossOutput:
        scores = model(batch["inputs"], batch["input_mask"], batch["targets"], batch.get("input_grad_scale"),
                       batch.get("target_grad_scale")).scores  # (b, k, T)
        loss_sum = (negative_sampling_loss(scores, batch["sign"].unsqueeze(1)) * batch["weight"]).sum()
        return LossOutput(loss_sum, int(scores.shape[0]), {"pairs": float(batch["pairs"])})
