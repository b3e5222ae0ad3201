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
from typing import Literal

import torch
from torch import Tensor, nn

from ..config import Config, check_least
from ..errors import ConfigError


@dataclass
class PlanetoidConfig(Config):
    """Variant and sizes of a Planetoid model (Cora's sizes by default). The node features are not weights:
    a model built without them (a loaded checkpoint) reads them from ``dataset``."""

    dataset: Literal["", "cora", "citeseer", "pubmed"] = "cora"
    """Planetoid graph whose node features the model reads when built without features ("": none, they
    must be passed)."""
    mode: Literal["t", "i", "g"] = "t"
    """t (transductive, Eq. 3.13), i (inductive, Eq. 3.14) or g (graph only)."""
    embedding_size: int = 50
    """e, the size of the embeddings e_i."""
    num_nodes: int = 2708
    """n, the nodes of the graph (the context model's outputs)."""
    num_features: int = 1433
    """f, the features per node (0: none, mode ``g``)."""
    num_classes: int = 7
    """k, the classes."""
    dropout: float = 0.0
    """Dropout on the classifier inputs x_i and e_i (0: off, as in the paper)."""
    row_normalise: bool = False
    """The features are the dataset's divided by their row sums (:func:`node_features`)."""

    def __post_init__(self):
        check_least(self, embedding_size=1, num_nodes=1, num_features=0, num_classes=1)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def node_features(graph, row_normalise: bool = False) -> Tensor:
    """The (n, f) float node features of a :class:`~genfeat.data.graph.PlanetoidGraph`; with ``row_normalise``
    each row divided by its sum (a row summing to less than 1 by 1)."""
    x = torch.tensor(graph.features.toarray())
    return x / x.sum(1, keepdim=True).clamp_min(1.0) if row_normalise else x


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
        config: variant and sizes.
        features: (num_nodes, num_features) dense float tensor of node features (kept as a buffer, not
            saved with the weights; mode ``g`` uses only n, so f may be 0). Default None: those of
            ``config.dataset`` (:func:`node_features`).
    Raises:
        ConfigError: no features and no dataset, or features of another shape than the config's.
    """

    def __init__(self, config: PlanetoidConfig, features: Tensor | None = None):
        super().__init__()
        if features is None:
            if not config.dataset:
                raise ConfigError("a Planetoid model with dataset '' has no node features to read",
                                  "pass the features, or set the config's dataset")
            from ..data.graph import load_planetoid

            features = node_features(load_planetoid(config.dataset), config.row_normalise)
        n, f = config.num_nodes, config.num_features
        if tuple(features.shape) != (n, f):
            raise ConfigError(f"the node features have shape {tuple(features.shape)}, the Planetoid config says "
                              f"num_nodes {n}, num_features {f}",
                              f"build the model with its graph's features (dataset '{config.dataset}')")
        self.config = config
        self.register_buffer("features", features, persistent=False)
        e, k = config.embedding_size, config.num_classes
        self.context = _glorot(nn.Linear(e, n))
        if self.config.mode == "i":
            self.embed_x = _glorot(nn.Linear(f, e))
        else:
            self.embedding = nn.Embedding(n, e)
            nn.init.normal_(self.embedding.weight, std=0.01)
        self.out_e = _glorot(nn.Linear(e, k))
        if self.config.mode != "g":
            self.out_x = _glorot(nn.Linear(f, k))
            self.out = _glorot(nn.Linear(2 * k, k))
        self.drop = nn.Dropout(config.dropout)

    def embed(self, nodes: Tensor) -> Tensor:
        """e_i for node ids (b,) -> (b, e)."""
        if self.config.mode == "i":
            return torch.relu(self.embed_x(self.features[nodes]))
        return self.embedding(nodes)

    def context_parameters(self) -> list[nn.Parameter]:
        """The parameters a context step trains (Algorithm 3, T2 / the context initialisation): the
        context layer (w_c, b_c) and what produces e_i, the free embeddings (``t``, ``g``) or the map
        h(x_i) of Eq. 3.14 (``i``). The classifier layers are left to the label steps."""
        embed = self.embed_x.parameters() if self.config.mode == "i" else [self.embedding.weight]
        return [*self.context.parameters(), *embed]

    def context_score(self, i: Tensor, c: Tensor) -> Tensor:
        """w_c^T e_i, Eq. 3.12; i, c: (b,) node ids -> (b,)."""
        return (self.embed(i) * self.context.weight[c]).sum(-1)

    def context_logits(self, i: Tensor) -> Tensor:
        """w_c^T e_i + b_c for every node c: (b,) node ids -> (b, n), the softmax context model."""
        return self.context(self.embed(i))

    def forward(self, nodes: Tensor) -> PlanetoidOutput:
        """p(y | x, e) of the nodes (module doc), e_i as Eq. 3.13 (mode ``t``) or 3.14 (mode ``i``) gives it.

        Shapes: nodes (b,) node ids -> :class:`PlanetoidOutput`: logits (b, k), embedding (b, e), aux_logits two
        (b, k) (none in mode ``g``).
        """
        e = self.embed(nodes)
        le = self.out_e(self.drop(e))
        if self.config.mode == "g":
            return PlanetoidOutput(le, e)
        lx = self.out_x(self.drop(self.features[nodes]))
        logits = self.out(torch.cat([lx.softmax(-1), le.softmax(-1)], -1))
        return PlanetoidOutput(logits, e, (lx, le))
