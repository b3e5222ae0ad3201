"""Planetoid (Yang, Cohen & Salakhutdinov 2016; thesis §3.3): classify nodes from features and graph embeddings.

Axis legend: n nodes, f features, b batch, e embedding size, k classes.

Variants (``mode``):
    ``t`` transductive, Eq. 3.13: e_i is a free embedding of node i.
    ``i`` inductive, Eq. 3.14: e_i = ReLU(W_e x_i + b_e) is a function of the features.
    ``g`` graph only: no features, p(y|e) = softmax(W e_i + b).

Classifier of ``t`` and ``i`` (the authors' released models): one softmax layer on the features and
one on the embedding, p_x = softmax(W_x x_i + b_x) and p_e = softmax(W_e' e_i + b_e'); their
probabilities are concatenated and fed to a final softmax layer, p(y|x,e) = softmax(W [p_x; p_e] + b).
The two branch logits are returned as ``aux_logits`` so the target objective can add a loss on each.

Context model: one output layer over the n nodes, logits_c = w_c^T e_i + b_c. Its weight rows w_c are
the context embeddings of Eq. 3.12 (negative sampling); the full layer gives the softmax context loss
of the released code, −log p(c | i) with p(c | i) = softmax over all nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class PlanetoidOutput:
    """logits: (b, k); embedding: (b, e) the e_i used by the classifier; aux_logits: the branch logits
    (p_x, p_e before softmax, each (b, k)), empty in mode ``g``."""

    logits: Tensor
    embedding: Tensor
    aux_logits: tuple[Tensor, ...] = ()


def _glorot(layer: nn.Linear) -> nn.Linear:
    # Glorot-uniform weights and zero bias, the initialisation of the released Lasagne layers
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class PlanetoidModel(nn.Module):
    """Planetoid-T/-I/-G classifier and context model over a fixed node set.

    Args:
        features: (n, f) dense float tensor of node features (kept as a buffer; mode ``g`` uses only n,
            so f may be 0).
        num_classes: k; 0 builds the context model alone, without classifier layers (GraphEmb's
            skip-gram stage).
        mode: ``t``, ``i`` or ``g`` (default ``t``).
        embedding_size: e (default 50).
        dropout: dropout on the classifier inputs x_i and e_i (default 0.0: off, as in the paper).
    """

    def __init__(self, features: Tensor, num_classes: int, mode: str = "t", embedding_size: int = 50,
                 dropout: float = 0.0):
        super().__init__()
        if mode not in ("t", "i", "g"):
            raise ValueError(f"mode must be t, i or g, got {mode!r}")
        self.mode = mode
        self.register_buffer("features", features, persistent=False)
        n, f = features.shape
        self.context = _glorot(nn.Linear(embedding_size, n))
        if mode == "i":
            self.embed_x = _glorot(nn.Linear(f, embedding_size))
        else:
            self.embedding = nn.Embedding(n, embedding_size)
            nn.init.normal_(self.embedding.weight, std=0.01)
        if num_classes:
            self.out_e = _glorot(nn.Linear(embedding_size, num_classes))
            if mode != "g":
                self.out_x = _glorot(nn.Linear(f, num_classes))
                self.out = _glorot(nn.Linear(2 * num_classes, num_classes))
        self.drop = nn.Dropout(dropout)

    def embed(self, nodes: Tensor) -> Tensor:
        """e_i for node ids (b,) -> (b, e)."""
        if self.mode == "i":
            return torch.relu(self.embed_x(self.features[nodes]))
        return self.embedding(nodes)

    def context_parameters(self) -> list[nn.Parameter]:
        """The parameters a context step trains (Algorithm 3, T2 / the context initialisation): the
        context layer (w_c, b_c) and what produces e_i, the free embeddings (``t``, ``g``) or the map
        h(x_i) of Eq. 3.14 (``i``). The classifier layers are left to the label steps."""
        embed = self.embed_x.parameters() if self.mode == "i" else [self.embedding.weight]
        return [*self.context.parameters(), *embed]

    def context_score(self, i: Tensor, c: Tensor) -> Tensor:
        """w_c^T e_i, Eq. 3.12; i, c: (b,) node ids -> (b,)."""
        return (self.embed(i) * self.context.weight[c]).sum(-1)

    def context_logits(self, i: Tensor) -> Tensor:
        """w_c^T e_i + b_c for every node c: (b,) node ids -> (b, n), the softmax context model."""
        return self.context(self.embed(i))

    def forward(self, nodes: Tensor) -> PlanetoidOutput:
        e = self.embed(nodes)
        le = self.out_e(self.drop(e))
        if self.mode == "g":
            return PlanetoidOutput(le, e)
        lx = self.out_x(self.drop(self.features[nodes]))
        logits = self.out(torch.cat([lx.softmax(-1), le.softmax(-1)], -1))
        return PlanetoidOutput(logits, e, (lx, le))
