"""Planetoid method runner (thesis §3.3, Algorithm 3): alternate T1 label steps and T2 context steps.

Recipe: ``method: planetoid`` + the fields of :class:`PlanetoidRecipe`. Model selection (keep_best)
uses validation accuracy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..framework.optim import OptimConfig
from ..framework.schedule import OptimSpec, Phase, Stage, Term
from ..framework.stream import TensorStream
from ..framework.trainer import TrainConfig, Trainer
from ..runner import register_method


@dataclass
class PlanetoidRecipe:
    dataset: str = "cora"
    """cora, citeseer or pubmed (public split)."""
    mode: str = "t"
    """t (transductive), i (inductive) or g (graph only)."""
    embedding_size: int = 50
    hidden_size: int = 0
    dropout: float = 0.0
    row_normalise: bool = False
    """Divide each feature row by its sum (an improvement beyond the paper)."""
    label_batch: int = 200
    """N1 (capped at the number of labelled nodes)."""
    context_batch: int = 200
    """N2 random walks per context step."""
    pairs_per_walk: int = 10
    r1: float = 5 / 6
    r2: float = 5 / 6
    walk_length: int = 10
    window: int = 3
    pretrain_steps: int = 400
    """Context-only steps before the alternation (the embeddings start from the graph)."""
    steps: int = 2000
    t1: int = 1
    t2: int = 1
    label_optim: dict = field(default_factory=lambda: {"name": "sgd", "lr": 0.1})
    context_optim: dict = field(default_factory=lambda: {"name": "sgd", "lr": 100.0})
    """The context loss is a mean over N2·pairs_per_walk pairs: lr 100 is 0.05 per pair, as a summed loss would have."""
    eval_every: int = 20
    threads: int = 1
    tsne_png: str = ""
    """When set, write a t-SNE plot of the learned embeddings e_i of the test nodes (Fig. 3.11) to this PNG."""


def _accuracy(model, nodes: torch.Tensor, labels: torch.Tensor) -> float:
    was = model.training
    model.eval()
    with torch.no_grad():
        pred = model(nodes).logits.argmax(-1)
    model.train(was)
    return float((pred == labels).float().mean())


def plot_tsne(model, nodes: torch.Tensor, labels: torch.Tensor, path: str, title: str, seed: int = 0) -> None:
    """2-D t-SNE (scikit-learn) of the embeddings e_i of ``nodes``, coloured by class (thesis Fig. 3.11)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    from ..io import atomic_path

    with torch.no_grad():
        emb = model.embed(nodes).numpy()
    xy = TSNE(2, random_state=seed, init="pca").fit_transform(emb)
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(xy[:, 0], xy[:, 1], c=labels.numpy(), cmap="tab10", s=4)
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def build(cfg: PlanetoidRecipe, seed: int):
    from ..data.graph import load_planetoid
    from ..models.planetoid import PlanetoidModel
    from ..objectives.classification import ClassificationObjective
    from ..objectives.graph_context import ContextSampler, GraphContextObjective

    if cfg.mode not in ("t", "i", "g"):
        raise ConfigError(f"mode '{cfg.mode}' is not a Planetoid variant", "use t, i or g")
    g = load_planetoid(cfg.dataset)
    x = torch.tensor(g.features.toarray())
    if cfg.row_normalise:
        x = x / x.sum(1, keepdim=True).clamp_min(1.0)
    torch.manual_seed(seed)
    model = PlanetoidModel(x, g.num_classes, cfg.mode, cfg.embedding_size, cfg.hidden_size, cfg.dropout)
    labels = torch.tensor(g.labels)
    train = torch.tensor(g.train_idx)
    # Planetoid-I trains inductively: context pairs touch only nodes seen in training, not test nodes
    sampler = ContextSampler(g.edges, g.num_nodes, g.labels, g.train_idx, cfg.context_batch, cfg.r1, cfg.r2,
                             cfg.walk_length, cfg.window, seed=seed, pairs_per_walk=cfg.pairs_per_walk)
    label_stream = TensorStream({"nodes": train, "labels": labels[train]}, min(cfg.label_batch, len(train)),
                                seed=seed)
    if cfg.mode == "i":
        ctx_params = lambda m: [m.context.weight, *m.embed_x.parameters()]  # noqa: E731
    else:
        ctx_params = lambda m: [m.context.weight, m.embedding.weight]  # noqa: E731
    ctx_term = Term(GraphContextObjective(), sampler)
    label_term = Term(ClassificationObjective(), label_stream)
    ctx_spec = OptimSpec(OptimConfig(**cfg.context_optim), ctx_params)
    label_spec = OptimSpec(OptimConfig(**cfg.label_optim))
    phases = []
    if cfg.pretrain_steps > 0:
        phases.append(Phase("context_init", cfg.pretrain_steps, [Stage([ctx_term], "ctx")], {"ctx": ctx_spec}))
    phases.append(Phase("train", cfg.steps, [Stage([label_term], "label", cfg.t1), Stage([ctx_term], "ctx", cfg.t2)],
                        {"label": label_spec, "ctx": ctx_spec}))
    return g, model, labels, phases


@register_method("planetoid", PlanetoidRecipe)
def run(cfg: PlanetoidRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    g, model, labels, phases = build(cfg, seed)
    val, test = torch.tensor(g.val_idx), torch.tensor(g.test_idx)
    tcfg = TrainConfig(seed=seed, device="cpu", eval_every=cfg.eval_every, early_stop_metric="val_accuracy",
                       early_stop_mode="max", keep_best=True, progress=progress, threads=cfg.threads,
                       log_every=max(cfg.steps, 1))
    evaluate = lambda m: {"val_accuracy": _accuracy(m, val, labels[val])}  # noqa: E731
    Trainer(model, phases, tcfg, evaluate, None).fit()
    if cfg.tsne_png:
        plot_tsne(model, test, labels[test], cfg.tsne_png, f"Planetoid-{cfg.mode.upper()} on {cfg.dataset}", seed)
    return {"test_accuracy": _accuracy(model, test, labels[test]), "val_accuracy": _accuracy(model, val, labels[val])}
