"""Planetoid (Yang, Cohen & Salakhutdinov 2016; thesis §3.3): classify nodes from features and graph embeddings.

Axis legend: n nodes, f features, b batch, e embedding size, h hidden size, k classes.

Variants (``mode``):
    ``t`` transductive, Eq. 3.13: e_i is a free embedding of node i; p(y|x,e) = softmax([h(x); h(e)] W).
    ``i`` inductive, Eq. 3.14: e_i = ReLU(W_e x_i) is a function of the features (parametric embedding).
    ``g`` graph only: no features, p(y|e) = softmax(h(e) W).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class PlanetoidOutput:
    """logits: (b, k); embedding: (b, e) the e_i used by the classifier."""

    logits: Tensor
    embedding: Tensor


class PlanetoidModel(nn.Module):
    """Planetoid-T/-I/-G classifier and context model over a fixed node set.

    Args:
        features: (n, f) dense float tensor of node features (kept as a buffer; ignored in mode ``g``).
        num_classes: k.
        mode: ``t``, ``i`` or ``g`` (default ``t``).
        embedding_size: e (default 50).
        hidden_size: size of h(x) (default 0: the features feed the softmax directly, as in the paper's
            released models).
        dropout: dropout on the classifier inputs (default 0.0: off, as in the paper).
    """

    def __init__(self, features: Tensor, num_classes: int, mode: str = "t", embedding_size: int = 50,
                 hidden_size: int = 0, dropout: float = 0.0):
        super().__init__()
        self.mode = mode
        self.register_buffer("features", features, persistent=False)
        n, f = features.shape
        self.context = nn.Embedding(n, embedding_size)
        nn.init.normal_(self.context.weight, std=0.1)
        if mode in ("t", "g"):
            self.embedding = nn.Embedding(n, embedding_size)
            nn.init.normal_(self.embedding.weight, std=0.1)
        else:
            self.embed_x = nn.Linear(f, embedding_size)
        self.hidden_e = nn.Linear(embedding_size, embedding_size)
        width = embedding_size
        if mode != "g":
            self.hidden_x = nn.Linear(f, hidden_size) if hidden_size > 0 else nn.Identity()
            width += hidden_size if hidden_size > 0 else f
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(width, num_classes)

    def embed(self, nodes: Tensor) -> Tensor:
        """e_i for node ids (b,) -> (b, e)."""
        if self.mode in ("t", "g"):
            return self.embedding(nodes)
        return torch.relu(self.embed_x(self.features[nodes]))

    def context_score(self, i: Tensor, c: Tensor) -> Tensor:
        """w_c^T e_i, Eq. 3.12; i, c: (b,) node ids -> (b,)."""
        return (self.embed(i) * self.context(c)).sum(-1)

    def forward(self, nodes: Tensor) -> PlanetoidOutput:
        e = self.embed(nodes)
        parts = [torch.relu(self.hidden_e(e))]
        if self.mode != "g":
            hx = self.hidden_x(self.features[nodes])
            parts.insert(0, torch.relu(hx) if isinstance(self.hidden_x, nn.Linear) else hx)
        return PlanetoidOutput(self.out(self.drop(torch.cat(parts, -1))), e)
