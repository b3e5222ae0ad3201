"""Graph-regularised target losses of the Table 3.6 baselines ManiReg and SemiEmb, on full-graph node
classifiers (genfeat.models.node_classifier), and the stream of their full batch.

Both are the graph-based semi-supervised loss that the Planetoid paper (Yang et al. 2016, §2.1) starts
from: a supervised loss on the m labelled nodes L plus λ times an unsupervised loss on the pairs of the
graph, here its e directed edges E (both directions of every undirected edge). One forward pass of
the classifier over all n nodes serves both losses, so they share its dropout masks.

ManiReg, manifold regularisation (Belkin, Niyogi & Sindhwani 2006): the graph Laplacian
(intrinsic-smoothness) penalty f^T L f = ½ Σ_ij W_ij ||f_i − f_j||² on the classifier's output
f_i = p_i = softmax(logits_i), W the adjacency, as a mean over the directed edges:

    L = (1/m) Σ_{i∈L} −log p_i[y_i]  +  λ (1/e) Σ_{(i,j)∈E} ||p_i − p_j||²

(the ambient norm γ_A ||f||² of Belkin et al. is the optimizer's L2 weight decay).

SemiEmb, semi-supervised embedding (Weston, Ratle & Collobert 2008, §3; Weston et al. 2012): the same
supervised loss plus the margin-based embedding loss of Hadsell et al. 2006 on the hidden layer h_i,
pulling neighbours together and pushing a random non-neighbour n(i, j), drawn uniformly over the
nodes for each edge, beyond the margin μ (= 1) in squared distance:

    L = (1/m) Σ_{i∈L} −log p_i[y_i]  +  λ (1/e) Σ_{(i,j)∈E} ( ||h_i − h_j||² + max(0, μ − ||h_i − h_n(i,j)||²) )

Each objective returns the LossOutput of the supervised loss's m items whose mean is L exactly: the
graph sum enters scaled by m / e, and ``parts`` ``cls`` (cross-entropy, ``correct``) and the graph
loss (per edge) are logged apart, as GPT-1's L3 in genfeat.objectives.task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..framework.objective import LossOutput, Objective
from .classification import ClassificationObjective


class FullGraphStream:
    """The full batch of a graph-regularised objective, the same every step but for SemiEmb's negatives.

    Args:
        nodes: (m,) int64 labelled nodes; labels: (m,) int64 their labels.
        edges: (2, e) int64 directed edges.
        num_nodes: n.
        negatives: also yield ``negatives`` (e,), one node drawn uniformly from the n for each edge,
            from a generator seeded by (``seed``, step), so the step count alone restores the stream
            (default False).
        seed: seed of the negatives (default 0).
    Yields:
        dict ``nodes`` (m,), ``labels`` (m,), ``edges`` (2, e) [, ``negatives`` (e,)].
    """

    def __init__(self, nodes: Tensor, labels: Tensor, edges: Tensor, num_nodes: int, negatives: bool = False,
                 seed: int = 0):
        self.batch = {"nodes": nodes, "labels": labels, "edges": edges}
        self.num_nodes, self.negatives, self.seed = num_nodes, negatives, seed
        self.calls = 0

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, Tensor]:
        batch = dict(self.batch)
        if self.negatives:
            rng = np.random.default_rng([self.seed, self.calls])
            batch["negatives"] = torch.from_numpy(rng.integers(0, self.num_nodes, batch["edges"].shape[1]))
        self.calls += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])

    def shard(self, rank: int, world: int) -> None:
        raise ConfigError("a full-graph baseline trains on the whole graph in every step, which one process holds",
                          "run it without torchrun")


def _with_graph_loss(task: LossOutput, graph: LossOutput, weight: float, name: str) -> LossOutput:
    """The LossOutput over ``task``'s items whose mean is task's mean + ``weight`` · graph's mean."""
    scale = weight * float(task.count) / max(float(graph.count), 1.0)
    return LossOutput(task.loss_sum + scale * graph.loss_sum, task.count, parts={"cls": task, name: graph})


class ManifoldRegularisationObjective(Objective):
    """ManiReg's loss (module docstring): cross-entropy on the labelled nodes + λ · the mean over the
    edges of ||p_i − p_j||².

    Args:
        reg_weight: λ.
    Shapes:
        model(): NodeOutput with logits (n, k); batch ``nodes``, ``labels`` (m,), ``edges`` (2, e).
    Returns:
        LossOutput over the m labelled nodes, mean = L; parts ``cls`` and ``manireg`` (per edge).
    """

    name = "manireg"

    def __init__(self, reg_weight: float):
        self.reg_weight = reg_weight
        self._classify = ClassificationObjective()

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        out = model()
        task = self._classify.score(out.rows(batch["nodes"]), batch["labels"])
        src, dst = batch["edges"]
        p = out.logits.softmax(-1)
        graph = LossOutput(((p[src] - p[dst]) ** 2).sum(), src.numel())
        return _with_graph_loss(task, graph, self.reg_weight, self.name)


class EmbeddingMarginObjective(Objective):
    """SemiEmb's loss (module docstring): cross-entropy on the labelled nodes + λ · the mean over the
    edges of ||h_i − h_j||² + max(0, μ − ||h_i − h_n||²).

    Args:
        reg_weight: λ.
        margin: μ, in squared distance (default 1.0).
    Shapes:
        model(): NodeOutput with logits (n, k) and hidden (n, h); batch ``nodes``, ``labels`` (m,),
        ``edges`` (2, e), ``negatives`` (e,).
    Returns:
        LossOutput over the m labelled nodes, mean = L; parts ``cls`` and ``semiemb`` (per edge).
    """

    name = "semiemb"

    def __init__(self, reg_weight: float, margin: float = 1.0):
        self.reg_weight, self.margin = reg_weight, margin
        self._classify = ClassificationObjective()

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        out = model()
        task = self._classify.score(out.rows(batch["nodes"]), batch["labels"])
        (src, dst), neg, h = batch["edges"], batch["negatives"], out.hidden
        near = ((h[src] - h[dst]) ** 2).sum(-1)
        far = ((h[src] - h[neg]) ** 2).sum(-1)
        graph = LossOutput(near.sum() + torch.relu(self.margin - far).sum(), src.numel())
        return _with_graph_loss(task, graph, self.reg_weight, self.name)
