"""Baselines of thesis Table 3.6 on the public Planetoid split, plus GCN (PyTorch Geometric) side by side.

``baseline``:
    feat      softmax regression on the features alone.
    lp        label propagation (Zhu et al. 2003): iterate F <- D^-1 A F with labelled rows clamped.
    manireg   manifold regularisation (Belkin et al. 2006): softmax regression + λ · the mean over the edges of
              ||p_i − p_j||² (genfeat.objectives.graph_regularisation).
    semiemb   semi-supervised embedding (Weston et al. 2008, 2012): MLP whose hidden layer also fits a
              neighbour/non-neighbour margin loss on the edges (genfeat.objectives.graph_regularisation).
    graphemb  DeepWalk (Perozzi et al. 2014): uniform random walks used as sentences for word2vec's skip-gram
              with negative sampling (genfeat.objectives.word2vec, the one skip-gram of the library; the
              graph-context loss of Eq. 3.12 without label context), then softmax regression on the vectors.
    gcn       two-layer GCN (Kipf & Welling 2017) with torch_geometric's GCNConv.
TSVM is left out: no maintained Python implementation scales to these graphs, and the thesis reports it
below the other baselines on Cora/CiteSeer-size data.
The classifiers (genfeat.models.node_classifier) train full batch in one phase of the framework's
Trainer (Adam), with validation after every step; the parameters with the best validation accuracy are
kept (keep_best; validation only). A run takes seconds and keeps no checkpoint, so ``--resume`` is
refused; ``--out OUT`` gets ``results.json``.
The bag-of-words features are a sparse (n, f) tensor: dropout draws only for the stored entries (a zero
stays zero under dropout anyway) and the linear maps touch only those, which is what keeps a step of
Feat / ManiReg / GCN on CiteSeer's 3,327 × 3,703 features at milliseconds rather than ~0.2 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch

from ..config import Config
from ..errors import ConfigError
from ..framework import OptimConfig, TrainConfig, Trainer, one_phase
from ..framework.distributed import refuse_several_processes
from ..framework.stream import TensorStream
from ..io import write_results
from ..models.node_classifier import GCN, HiddenLayerClassifier, SoftmaxRegression
from ..objectives.classification import ClassificationObjective
from ..objectives.graph_regularisation import EmbeddingMarginObjective, FullGraphStream, ManifoldRegularisationObjective
from ..runner import register_method


@dataclass
class GraphBaselineRecipe(Config):
    """One baseline of Table 3.6 (or GCN) on a Planetoid public split; recipe ``method: graph_baseline``."""

    dataset: Literal["cora", "citeseer", "pubmed"] = "cora"
    """Public split of this Planetoid dataset."""
    baseline: Literal["feat", "lp", "manireg", "semiemb", "graphemb", "gcn"] = "feat"
    """Which baseline to run (see the module docstring)."""
    steps: int = 200
    """Full-batch Adam steps of the classifier (every baseline but lp)."""
    lr: float = 0.01
    """Adam learning rate."""
    weight_decay: float = 5e-4
    """Adam weight decay (L2 on all classifier parameters)."""
    hidden_size: int = 16
    """Hidden units of semiemb's MLP and gcn's first layer."""
    dropout: float = 0.5
    """Dropout on the classifier inputs (and on semiemb's / gcn's hidden layer)."""
    reg_weight: float = 1.0
    """λ of ManiReg's Laplacian term / SemiEmb's embedding loss."""
    row_normalise: bool = True
    """Divide each feature row by its sum (not graphemb, whose inputs are the learned embeddings)."""
    lp_iterations: int = 100
    """Label propagation iterations."""
    embed_steps: int = 2000
    """GraphEmb: skip-gram steps of ``embed_batch`` center nodes each."""
    embed_batch: int = 2048
    """GraphEmb: center nodes per skip-gram step."""
    embed_lr: float = 0.025
    """GraphEmb: word2vec's α, the SGD step on each (node, context) pair's loss, decaying linearly to 1e-4 of it."""
    embed_size: int = 50
    """GraphEmb: size of the node vectors."""
    walks_per_node: int = 10
    """GraphEmb: random walks started at every node with a neighbour (the walks are the skip-gram's sentences)."""
    walk_length: int = 10
    """GraphEmb: nodes per random walk."""
    window: int = 3
    """GraphEmb: skip-gram window (largest distance on a walk between a node and its context)."""
    negatives: int = 5
    """GraphEmb: noise nodes per center node, drawn from the visit counts^0.75."""
    threads: int = 1
    """torch intra-op threads (0: leave torch's default)."""

    def __post_init__(self):
        for name in ("steps", "hidden_size", "lp_iterations", "embed_steps", "embed_batch", "embed_size",
                     "walks_per_node", "window", "negatives"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.embed_lr <= 0 or self.walk_length < 2:
            raise ValueError(f"embed_lr must be > 0 and walk_length >= 2, got {self.embed_lr}, {self.walk_length}")
        if self.lr <= 0 or self.weight_decay < 0 or self.reg_weight < 0 or self.threads < 0:
            raise ValueError(f"lr must be > 0 and weight_decay, reg_weight, threads >= 0, got lr={self.lr}, "
                             f"weight_decay={self.weight_decay}, reg_weight={self.reg_weight}, threads={self.threads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def _sparse_features(features: sp.csr_matrix, row_normalise: bool) -> torch.Tensor:
    """(n, f) coalesced sparse COO float tensor of ``features``, each row divided by its sum (at least 1)
    when ``row_normalise``."""
    x = features.tocoo()
    values = x.data.astype(np.float32)
    if row_normalise:
        sums = np.asarray(features.sum(1), np.float32).ravel()
        values = values / np.maximum(sums, 1.0)[x.row]
    idx = torch.from_numpy(np.vstack([x.row, x.col]).astype(np.int64))
    return torch.sparse_coo_tensor(idx, torch.from_numpy(values), x.shape, check_invariants=True).coalesce()


def _label_propagation(g, iterations: int) -> np.ndarray:
    a = g.adjacency()
    deg = np.asarray(a.sum(1)).ravel()
    p = a.multiply(1.0 / np.maximum(deg, 1)[:, None]).tocsr()
    y0 = np.zeros((g.num_nodes, g.num_classes))
    y0[g.train_idx, g.labels[g.train_idx]] = 1.0
    f = y0.copy()
    for _ in range(iterations):
        f = p @ f
        f[g.train_idx] = y0[g.train_idx]
    return f


def _graphemb_features(g, cfg: GraphBaselineRecipe, seed: int) -> torch.Tensor:
    """DeepWalk vectors (n, embed_size): ``walks_per_node`` walks from every node with a neighbour, in a
    random order, then word2vec skip-gram (no subsampling) over them; a node no walk visits keeps its
    random initial vector."""
    from ..objectives.graph_context import ContextSampler
    from .word2vec import Word2VecRecipe, fit_word2vec

    walker = ContextSampler(g.edges, g.num_nodes, None, None, walk_length=cfg.walk_length, seed=seed)
    rng = np.random.default_rng([seed, 1])
    walks = walker.random_walks(rng.permutation(np.repeat(walker.starts, cfg.walks_per_node)), rng)  # (w, q)
    ids = walks.ravel()
    sentence = np.repeat(np.arange(len(walks)), cfg.walk_length)
    w2v = Word2VecRecipe(dim=cfg.embed_size, window=cfg.window, negatives=cfg.negatives, min_count=1, sample=0.0,
                         batch_size=cfg.embed_batch, lr=cfg.embed_lr, min_lr=cfg.embed_lr * 1e-4,
                         threads=max(cfg.threads, 1))
    model, _, _ = fit_word2vec(ids, sentence, np.bincount(ids, minlength=g.num_nodes), w2v, seed,
                               steps=cfg.embed_steps)
    return model.vectors


@register_method("graph_baseline", GraphBaselineRecipe, resume_free=("threads",))
def run(cfg: GraphBaselineRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.graph import load_planetoid

    refuse_several_processes(f"the graph baseline '{cfg.baseline}'", "it trains on the whole graph in every step, "
                             "which one process holds (DistributedDataParallel cannot broadcast its sparse adjacency)")
    if resume:
        raise ConfigError(f"the graph baseline '{cfg.baseline}' keeps no checkpoint (a run takes seconds), so there "
                          "is nothing to --resume", "run it again with --overwrite instead of --resume")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(seed)
    g = load_planetoid(cfg.dataset)
    labels = torch.tensor(g.labels)
    tr, va, te = (torch.tensor(i) for i in (g.train_idx, g.val_idx, g.test_idx))

    def acc(pred, idx):
        return float((pred[idx] == labels[idx]).float().mean())

    def figures(pred) -> dict[str, float]:
        out = {"test_accuracy": acc(pred, te), "val_accuracy": acc(pred, va)}
        if out_dir is not None:
            write_results(out_dir, out)
        return out

    if cfg.baseline == "lp":
        return figures(torch.tensor(_label_propagation(g, cfg.lp_iterations).argmax(1)))

    if cfg.baseline == "graphemb":
        x = _graphemb_features(g, cfg, seed)
    else:
        x = _sparse_features(g.features, cfg.row_normalise)
    edges = torch.tensor(g.edges.T)
    k = g.num_classes
    if cfg.baseline == "gcn":
        model = GCN(x, edges, cfg.hidden_size, k, cfg.dropout)
    elif cfg.baseline == "semiemb":
        model = HiddenLayerClassifier(x, cfg.hidden_size, k, cfg.dropout)
    else:
        model = SoftmaxRegression(x, k, cfg.dropout)
    if cfg.baseline == "manireg":
        objective = ManifoldRegularisationObjective(cfg.reg_weight)
        stream = FullGraphStream(tr, labels[tr], edges, g.num_nodes)
    elif cfg.baseline == "semiemb":
        objective = EmbeddingMarginObjective(cfg.reg_weight)
        stream = FullGraphStream(tr, labels[tr], edges, g.num_nodes, negatives=True, seed=seed)
    else:
        # all labelled nodes, in the same order, every step
        objective = ClassificationObjective()
        stream = TensorStream({"nodes": tr, "labels": labels[tr]}, len(tr), shuffle=False)
    # validation after every step; the parameters of the best one are kept
    tcfg = TrainConfig(seed=seed, device="cpu", eval_every=1, early_stop_metric="val_accuracy", early_stop_mode="max",
                       keep_best=True, progress=progress, threads=cfg.threads, log_every=cfg.steps)
    optim = OptimConfig(name="adam", lr=cfg.lr, weight_decay=cfg.weight_decay)
    Trainer(model, one_phase(objective, stream, cfg.steps, optim), tcfg,
            evaluate=lambda m: {"val_accuracy": acc(m().logits.argmax(-1), va)}).fit()
    model.eval()
    with torch.no_grad():
        return figures(model().logits.argmax(-1))
