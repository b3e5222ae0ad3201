"""Planetoid context sampling (Algorithm 2) and the negative-sampling context loss (Eq. 3.12).

A context pair (i, c, γ) says whether node c is in the context of instance i (γ = +1) or is a
corrupted sample (γ = −1). Graph context: c within distance d of i on a random walk of length q.
Label context: c a labelled node with the same label as labelled i. Everything is sampled for a
whole batch at once with numpy, so sampling costs far less than the gradient step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DataError
from ..framework.objective import LossOutput, Objective
from .word2vec import negative_sampling_loss


def window_pairs(walk_length: int, window: int, self_pairs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (l, m) of walk positions with |l − m| <= d, in a fixed order: the released
    code's enumeration of a walk's context pairs, with or without its self-pairs l = m.

    Args:
        walk_length: q.
        window: d.
        self_pairs: keep the q pairs (l, l) (default False).
    Returns:
        (positions, context positions), each (2·Σ_{k=1..d} (q − k) [+ q],) int64.
    """
    pos, other = np.nonzero(np.abs(np.subtract.outer(np.arange(walk_length), np.arange(walk_length))) <= window)
    keep = np.ones(len(pos), bool) if self_pairs else pos != other
    return pos[keep].astype(np.int64), other[keep].astype(np.int64)


class ContextSampler:
    """Endless, resumable stream of context batches (thesis Algorithm 2), vectorised.

    Args:
        edges: (e, 2) int64 directed edges over nodes 0..n-1 (both directions for an undirected graph).
        num_nodes: n.
        labels: (n,) int64 labels, used only at ``labelled`` nodes (may be None: graph context only).
        labelled: node ids whose labels may be used for label context.
        batch_size: random walks per batch N2 (default 200); every walk yields ``pairs_per_walk`` pairs,
            as the original code draws all window pairs of its walks, so a batch holds N2·pairs_per_walk pairs.
        pairs_per_walk: context pairs drawn from each walk (default 10; ignored when ``all_pairs``).
        all_pairs: take every pair of :func:`window_pairs` from each walk, as the released code does,
            instead of drawing pairs_per_walk at random positions (default False).
        self_pairs: with ``all_pairs``, also the pairs (l, l) of a node with itself, as the released
            code enumerates them (default False).
        walk_starts: ``uniform``: each walk starts at a node drawn uniformly (with replacement) from
            the nodes with a neighbour; ``permutation``: the walks of successive batches start at the
            nodes of one random permutation of them after another, so every such node starts one walk
            per pass, as the released ``gen_graph`` does (default ``uniform``).
        r1: probability that a pair is positive, γ = +1 (default 5/6); negatives corrupt c uniformly.
        r2: probability that a pair comes from graph context rather than label context (default 5/6).
        walk_length: q (default 10).
        window: d (default 3).
        seed: RNG seed (default 0).
        exclude: node ids that never start a walk or appear in a pair, though walks may pass through
            them (the released inductive code's treatment of test nodes); batches then hold fewer pairs
            (default None: no node excluded).
    Yields:
        dict ``i`` (b,) int64, ``c`` (b,) int64, ``gamma`` (b,) float32 in {+1, −1}, ``graph`` (b,) bool.
    """

    def __init__(self, edges: np.ndarray, num_nodes: int, labels: np.ndarray | None = None,
                 labelled: np.ndarray | None = None, batch_size: int = 200, r1: float = 5 / 6, r2: float = 5 / 6,
                 walk_length: int = 10, window: int = 3, seed: int = 0, pairs_per_walk: int = 10,
                 exclude: np.ndarray | None = None, all_pairs: bool = False, self_pairs: bool = False,
                 walk_starts: str = "uniform"):
        if len(edges) == 0:
            raise DataError("the graph has no edges, so there is no graph context to sample",
                            "use a graph with edges (or r2 = 0 to sample label context only)")
        if walk_length < 2 or window < 1:
            raise DataError(f"walk_length {walk_length} / window {window} too small", "use q >= 2 and d >= 1")
        if walk_starts not in ("uniform", "permutation"):
            raise ValueError(f"walk_starts must be uniform or permutation, got {walk_starts!r}")
        if self_pairs and not all_pairs:
            raise ValueError("self_pairs needs all_pairs (self-pairs belong to the released enumeration)")
        order = np.argsort(edges[:, 0], kind="stable")
        self.nbr = edges[order, 1].astype(np.int64)
        self.deg = np.bincount(edges[:, 0], minlength=num_nodes).astype(np.int64)
        self.ptr = np.concatenate([[0], np.cumsum(self.deg)])
        self.starts = np.flatnonzero(self.deg > 0)
        self.n = num_nodes
        self.batch_size, self.r1, self.r2, self.q, self.d = batch_size, r1, r2, walk_length, window
        self.seed = seed
        self.pairs_per_walk = pairs_per_walk
        self.walk_starts = walk_starts
        self.window_pairs = window_pairs(self.q, self.d, self_pairs) if all_pairs else None
        if all_pairs:
            self.pairs_per_walk = len(self.window_pairs[0])
        self.calls = 0
        self.walks_started = 0  # permutation starts: walks drawn so far, the position in the permutations
        self.excluded = None
        if exclude is not None and len(exclude) > 0:
            self.excluded = np.zeros(num_nodes, bool)
            self.excluded[np.asarray(exclude, np.int64)] = True
            self.starts = self.starts[~self.excluded[self.starts]]
        self.labelled = None
        if labels is not None and labelled is not None and len(labelled) > 0 and r2 < 1:
            self.labelled = np.asarray(labelled, np.int64)
            lab = labels[self.labelled]
            self.lab_of = lab
            self.groups = [self.labelled[lab == k] for k in range(int(lab.max()) + 1)]

    def __iter__(self):
        return self

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "walks_started": self.walks_started}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])
        self.walks_started = int(state.get("walks_started", 0))

    def shard(self, rank: int, world: int) -> None:
        self.seed = self.seed * max(world, 1) + rank

    def random_walks(self, starts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Uniform random walks (len(starts), q) from ``starts``; a node without neighbours stays put."""
        walks = np.empty((len(starts), self.q), np.int64)
        cur = starts
        walks[:, 0] = cur
        for t in range(1, self.q):
            deg = self.deg[cur]
            pick = (rng.random(len(cur)) * np.maximum(deg, 1)).astype(np.int64)
            nxt = self.nbr[np.minimum(self.ptr[cur] + pick, len(self.nbr) - 1)]
            cur = np.where(deg > 0, nxt, cur)
            walks[:, t] = cur
        return walks

    def _walk_starts(self, n_walks: int, rng: np.random.Generator) -> np.ndarray:
        if self.walk_starts == "uniform":
            return self.starts[rng.integers(0, len(self.starts), n_walks)]
        # the walks take the next positions of an endless sequence of seeded permutations, so every
        # node starts one walk per pass even when label context takes part of a batch; the position
        # is sampler state, saved and restored with it
        n = len(self.starts)
        pos = self.walks_started + np.arange(n_walks)
        self.walks_started += n_walks
        out = np.empty(n_walks, np.int64)
        for rnd in np.unique(pos // n):
            perm = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(int(rnd),))).permutation(n)
            sel = pos // n == rnd
            out[sel] = self.starts[perm[pos[sel] % n]]
        return out

    def _graph_pairs(self, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        n_walks = -(-m // self.pairs_per_walk)
        walks = self.random_walks(self._walk_starts(n_walks, rng), rng)
        rows = np.repeat(np.arange(n_walks), self.pairs_per_walk)[:m]
        if self.window_pairs is not None:
            pos, other = (np.tile(a, n_walks)[:m] for a in self.window_pairs)
        else:
            pos = rng.integers(0, self.q, m)
            off = rng.integers(1, self.d + 1, m)
            other = np.where(pos + off < self.q, pos + off, pos - off)
        return walks[rows, pos], walks[rows, other]

    def _label_pairs(self, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        k = rng.integers(0, len(self.labelled), m)
        i, lab = self.labelled[k], self.lab_of[k]
        c = np.empty(m, np.int64)
        for y, group in enumerate(self.groups):
            sel = lab == y
            if sel.any():
                c[sel] = group[rng.integers(0, len(group), int(sel.sum()))]
        return i, c

    def __next__(self) -> dict[str, torch.Tensor]:
        call = self.calls
        rng = np.random.default_rng([self.seed, call])
        self.calls += 1
        b = self.batch_size * self.pairs_per_walk
        use_graph = rng.random(b) < self.r2 if self.labelled is not None else np.ones(b, bool)
        i = np.empty(b, np.int64)
        c = np.empty(b, np.int64)
        ng = int(use_graph.sum())
        i[use_graph], c[use_graph] = self._graph_pairs(ng, rng)
        if ng < b:
            i[~use_graph], c[~use_graph] = self._label_pairs(b - ng, rng)
        positive = rng.random(b) < self.r1
        # Eq. 3.12 negatives: the context is replaced by a node drawn uniformly
        neg = ~positive
        c[neg] = rng.integers(0, self.n, int(neg.sum()))
        gamma = np.where(positive, 1.0, -1.0).astype(np.float32)
        if self.excluded is not None:
            keep = ~(self.excluded[i] | self.excluded[c])
            i, c, gamma, use_graph = i[keep], c[keep], gamma[keep], use_graph[keep]
        return {"i": torch.from_numpy(i), "c": torch.from_numpy(c), "gamma": torch.from_numpy(gamma),
                "graph": torch.from_numpy(use_graph)}


class GraphContextObjective(Objective):
    """Context loss over sampled pairs (i, c, γ).

    ``negative_sampling`` (Eq. 3.12): −Σ log σ(γ · w_c^T e_i) over all pairs, word2vec's negative-sampling
    terms (genfeat.objectives.word2vec.negative_sampling_loss); the model supplies ``context_score(i, c) -> (b,)``.
    ``softmax`` (the released code's default, ``neg_samp = 0``): −Σ log p(c | i) over the positive
    pairs, p(c | i) = softmax_c(w_c^T e_i + b_c) over all n nodes, so no negatives are needed; the
    model supplies ``context_logits(i) -> (b, n)``.

    Planetoid-T/-G: e_i a free embedding; Planetoid-I: e_i = h(x_i).

    Args:
        loss: ``negative_sampling`` (default) or ``softmax``.
    """

    name = "context"

    def __init__(self, loss: str = "negative_sampling"):
        if loss not in ("negative_sampling", "softmax"):
            raise ValueError(f"context loss must be negative_sampling or softmax, got {loss!r}")
        self.loss = loss

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput:
        if self.loss == "softmax":
            pos = batch["gamma"] > 0
            # a walk yields many pairs per node: normalise each distinct i once, then gather its contexts
            nodes, row = torch.unique(batch["i"][pos], return_inverse=True)
            logp = model.context_logits(nodes).log_softmax(-1)
            return LossOutput(-logp[row, batch["c"][pos]].sum(), int(pos.sum()))
        score = model.context_score(batch["i"], batch["c"])
        loss_sum = negative_sampling_loss(score, batch["gamma"]).sum()
        return LossOutput(loss_sum, int(batch["i"].numel()))
