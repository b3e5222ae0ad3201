"""Full-graph node classifiers of the Table 3.6 baselines (genfeat.methods.graph_baselines).

Axis legend: n nodes, f input features, h hidden units, k classes, b selected nodes, e directed edges.

Each classifier holds its inputs, the (n, f) node features (a dense tensor, or a sparse COO one for
bag-of-words) and GCN's (2, e) edges, as non-persistent buffers: a step computes every node at once
(full batch), and the parameters alone make its state (what keep_best copies). ``forward(nodes)``
returns the rows ``nodes`` of that full pass (all n when None), so a target loss on the labelled
nodes and a graph loss over the edges can share one pass, one set of dropout masks.

- :class:`SoftmaxRegression`: p(y | x_i) = softmax(W x_i + b) (Feat, ManiReg, GraphEmb).
- :class:`HiddenLayerClassifier`: softmax(W_2 dropout(h_i) + b_2), h_i = ReLU(W_1 x_i + b_1), whose
  hidden layer h_i is SemiEmb's embedding (Weston et al. 2008).
- :class:`GCN`: two GCNConv layers (Kipf & Welling 2017, torch_geometric).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class NodeOutput:
    """logits: (b, k); hidden: (b, h) the hidden layer (HiddenLayerClassifier only, else None)."""

    logits: Tensor
    hidden: Tensor | None = None

    def rows(self, nodes: Tensor) -> NodeOutput:
        """The output of the nodes ``nodes`` (b',) among these rows."""
        return NodeOutput(self.logits[nodes], None if self.hidden is None else self.hidden[nodes])


def sparse_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout on a dense or sparse (n, f) tensor. Sparse: each stored entry is zeroed with probability
    p and the others scaled by 1/(1 − p), the distribution of dropout on the dense matrix, whose
    zeros stay zero (and the draws cost the stored entries only)."""
    if not x.is_sparse:
        return F.dropout(x, p, training)
    if not training or p == 0.0:
        return x
    return torch.sparse_coo_tensor(x.indices(), F.dropout(x.values(), p), x.shape, is_coalesced=True,
                                   check_invariants=False)


class _FullGraph(nn.Module):
    """Holds the (n, f) features ``x`` (dense or sparse) and selects the output rows."""

    def __init__(self, x: Tensor, dropout: float):
        super().__init__()
        self.register_buffer("x", x, persistent=False)
        self.p = dropout

    def full(self) -> NodeOutput:
        raise NotImplementedError

    def forward(self, nodes: Tensor | None = None) -> NodeOutput:
        """The rows ``nodes`` of the full-graph pass (module doc).

        Shapes: nodes (b,) node ids, or None: all n -> :class:`NodeOutput`: logits (b, k), hidden (b, h) or None.
        """
        out = self.full()
        return out if nodes is None else out.rows(nodes)


class SoftmaxRegression(_FullGraph):
    """logits = W dropout(x_i) + b.

    Args:
        x: (n, f) features; k: classes; dropout: on the inputs.
    """

    def __init__(self, x: Tensor, k: int, dropout: float):
        super().__init__(x, dropout)
        self.out = nn.Linear(x.shape[1], k)

    def full(self) -> NodeOutput:
        return NodeOutput(self.out(sparse_dropout(self.x, self.p, self.training)))


class HiddenLayerClassifier(_FullGraph):
    """h_i = ReLU(W_1 x_i + b_1) (no dropout on the inputs), logits = W_2 dropout(h_i) + b_2.

    Args:
        x: (n, f) features; hidden: h; k: classes; dropout: on the hidden layer (not on ``hidden``
        as returned, the embedding SemiEmb's graph loss reads).
    """

    def __init__(self, x: Tensor, hidden: int, k: int, dropout: float):
        super().__init__(x, dropout)
        self.hidden = nn.Linear(x.shape[1], hidden)
        self.head = nn.Linear(hidden, k)

    def full(self) -> NodeOutput:
        h = torch.relu(self.hidden(self.x))
        return NodeOutput(self.head(F.dropout(h, self.p, self.training)), h)


class GCN(_FullGraph):
    """Two GCNConv layers: logits = Â dropout(ReLU(Â dropout(x) W_1)) W_2 (Â the symmetrically
    normalised adjacency with self loops, computed once: one fixed graph).

    Args:
        x: (n, f) features; edge_index: (2, e) int64; hidden: h; k: classes; dropout: on the inputs
        and on the hidden layer.
    """

    def __init__(self, x: Tensor, edge_index: Tensor, hidden: int, k: int, dropout: float):
        super().__init__(x, dropout)
        from torch_geometric.nn import GCNConv

        self.register_buffer("edge_index", edge_index, persistent=False)
        self.c1, self.c2 = GCNConv(x.shape[1], hidden, cached=True), GCNConv(hidden, k, cached=True)

    def full(self) -> NodeOutput:
        h = F.dropout(F.relu(self.c1(sparse_dropout(self.x, self.p, self.training), self.edge_index)), self.p,
                      self.training)
        return NodeOutput(self.c2(h, self.edge_index))
