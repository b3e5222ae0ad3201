"""Planetoid method runner (thesis §3.3, Algorithm 3): alternate T1 label steps and T2 context steps.

Recipe: ``method: planetoid`` + the fields of :class:`PlanetoidRecipe`. Model selection (keep_best)
uses validation accuracy only.

Output directory (``--out OUT``): the context initialisation writes ``OUT/init/metrics.jsonl`` and its
checkpoint ``OUT/init/last``; the alternating phase writes ``OUT/metrics.jsonl``, ``OUT/last`` and,
at the end, ``OUT/results.json``. ``--resume`` continues from ``OUT/last`` when the alternating phase
has begun, else from ``OUT/init/last``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from ..config import Config
from ..errors import CheckpointError, ConfigError
from ..framework.checkpoint import load_trainer_state, resume_dir
from ..framework.distributed import refuse_several_processes
from ..framework.optim import OptimConfig
from ..framework.schedule import OptimSpec, Phase, Stage, Term
from ..framework.stream import TensorStream
from ..framework.trainer import TrainConfig, Trainer
from ..hub import checkpoint_config
from ..io import backup_path, write_results
from ..runner import recipe_record, register_method

DIVERGED_FIX = "lower label_optim.lr or context_optim.lr, then run again with --overwrite"
"""The fix of a Planetoid run whose loss became NaN (the trainer's, in this recipe's fields)."""


@dataclass
class PlanetoidRecipe(Config):
    """Planetoid-T/-I/-G on the public split. Defaults: the paper (r1 = 5/6, r2 = 5/6, q = 10, d = 3,
    N1 = N2 = 200) and the authors' released transductive model (embedding size 50, softmax context
    loss, 2,000 label-context and 70 graph-context initialisation steps, SGD lr 0.1 / 0.01)."""

    dataset: Literal["cora", "citeseer", "pubmed"] = "cora"
    """Public split of this Planetoid dataset."""
    mode: Literal["t", "i", "g"] = "t"
    """t (transductive, Eq. 3.13), i (inductive, Eq. 3.14) or g (graph only, no features)."""
    embedding_size: int = 50
    """Size e of the embeddings e_i."""
    dropout: float = 0.0
    """Dropout on the classifier inputs (an improvement beyond the paper; 0: off)."""
    row_normalise: bool = False
    """Divide each feature row by its sum (an improvement beyond the paper)."""
    context_loss: Literal["softmax", "negative_sampling"] = "softmax"
    """softmax over all nodes (the released code's default) or negative sampling (Eq. 3.12, with r1)."""
    label_batch: int = 200
    """N1 labelled nodes per label step (capped at the number of labelled nodes)."""
    context_batch: int = 200
    """N2 random walks per graph-context step."""
    pairs_per_walk: int = 65
    """Context pairs drawn from each walk (65: as many as a walk of 11 nodes has within d = 3, counting the
    released code's self-pairs); ignored with all_pairs."""
    all_pairs: bool = False
    """Graph context from every pair of each walk within the window (2·Σ_{k=1..d}(q − k) per walk: 54 for
    q = 11, d = 3), the released code's enumeration less its self-pairs, instead of pairs_per_walk
    pairs drawn at random positions."""
    self_pairs: bool = False
    """With all_pairs, also pair each walk position with itself (q more pairs per walk: 65 for q = 11,
    d = 3), exactly the released code's enumeration."""
    walk_starts: Literal["uniform", "permutation"] = "uniform"
    """uniform: each walk starts at a node drawn uniformly with replacement; permutation: the walks
    start at the nodes of one random permutation after another, each node once per pass, as the
    released gen_graph does."""
    walk_neighbours: Literal["unique", "listed"] = "unique"
    """Neighbour a random walk steps to: uniform over the distinct neighbours of the symmetrised graph
    (unique), or uniform over the entries of the file's adjacency list, duplicates and self loops
    included (listed), as the released code's random.choice(graph[k])."""
    label_context_batch: int = 100
    """Label-context pairs per step of the label-context initialisation."""
    r1: float = 5 / 6
    """Share of positive pairs (negative sampling only; the softmax loss uses positive pairs alone)."""
    r2: float = 5 / 6
    """Share of graph-context pairs among the context pairs of the alternating phase."""
    walk_length: int = 10
    """q, nodes per random walk."""
    window: int = 3
    """d, the largest distance on a walk between a node and its context."""
    walk_through_test: bool = False
    """Planetoid-I only: let random walks pass through test nodes (their edges only, never their
    features or labels) while no pair contains one, as the released inductive code does; false
    removes the test nodes' edges, so the graph seen in training holds no trace of them."""
    init_label_steps: int = 2000
    """Label-context steps on the embeddings before anything else (Algorithm 3's initialisation)."""
    init_graph_steps: int = 70
    """Graph-context steps after the label-context ones, before the alternation."""
    steps: int = 2000
    """Steps of the alternating phase (T1 label steps, then T2 context steps, in turn)."""
    t1: int = 1
    """T1, label (classification) steps per cycle."""
    t2: int = 0
    """T2, context steps per cycle (0: label steps only after the initialisation, as the released
    transductive model does)."""
    aux_weight: float = 1.0
    """Weight of the cross-entropy on each classifier branch (the released code's layer_loss)."""
    label_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="sgd", lr=0.1))
    """Optimizer of the label steps (all parameters; lr on the batch-mean loss)."""
    context_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="sgd", lr=0.01))
    """Optimizer of the context steps (embeddings and context layer). Its lr applies to the loss
    summed over a batch's pairs, as in the released code: the trainer minimises the mean, so the
    runner multiplies lr by the pairs per batch of each context phase."""
    eval_every: int = 10
    """Steps between validation evaluations (model selection keeps the best validation accuracy)."""
    patience: int = 0
    """Stop the alternating phase after this many evaluations without a better validation accuracy
    (early stopping, an improvement beyond the paper; 0: run all steps)."""
    threads: int = 1
    """torch intra-op threads."""
    tsne_png: str = ""
    """When set, write a t-SNE plot of the learned embeddings e_i of the test nodes (Fig. 3.11) to this PNG ("{seed}"
    in it is replaced by the seed, so that several seeds do not overwrite one file)."""
    save_every: int = 0
    """Write the ``last`` checkpoint of the running phase every this many steps (0: at the end of each
    phase only); needs an output directory."""
    stop_after_steps: int = 0
    """End this invocation after this many steps (initialisation and alternating phase together),
    writing the ``last`` checkpoint, so a run can be done in chunks with ``--resume`` (0: run to the end)."""

    def __post_init__(self):
        for name in ("embedding_size", "label_batch", "context_batch", "pairs_per_walk", "label_context_batch",
                     "t1", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("init_label_steps", "init_graph_steps", "steps", "t2", "eval_every", "patience", "save_every",
                     "stop_after_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not (0.0 < self.r1 <= 1.0 and 0.0 <= self.r2 <= 1.0):
            raise ValueError(f"r1 must be in (0, 1] and r2 in [0, 1], got r1={self.r1}, r2={self.r2}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.self_pairs and not self.all_pairs:
            raise ValueError("self_pairs needs all_pairs (self-pairs belong to the released enumeration)")
        if self.walk_length < 2 or self.window < 1:
            raise ValueError(f"walk_length must be >= 2 and window >= 1, got {self.walk_length}, {self.window}")


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


def _context_spec(cfg: PlanetoidRecipe, pairs: int, params) -> OptimSpec:
    return OptimSpec(replace(cfg.context_optim, lr=cfg.context_optim.lr * pairs), params)


def build(cfg: PlanetoidRecipe, seed: int):
    """Model and schedule (Algorithm 3): label-context initialisation, graph-context initialisation,
    then T1 label steps and T2 context steps in turn.

    Returns:
        (graph, model, labels, init_phases, train_phase): the context-only initialisation phases and
        the alternating phase, whose validation accuracy selects the model.
    """
    from ..data.graph import load_planetoid
    from ..models.planetoid import PlanetoidConfig, PlanetoidModel, node_features
    from ..objectives.classification import ClassificationObjective
    from ..objectives.graph_context import ContextSampler, GraphContextObjective, window_pairs

    g = load_planetoid(cfg.dataset)
    x = node_features(g, cfg.row_normalise)
    config = PlanetoidConfig(dataset=cfg.dataset, mode=cfg.mode, embedding_size=cfg.embedding_size,
                             num_nodes=g.num_nodes, num_features=x.shape[1], num_classes=g.num_classes,
                             dropout=cfg.dropout, row_normalise=cfg.row_normalise)
    torch.manual_seed(seed)
    model = PlanetoidModel(config, x)
    labels = torch.tensor(g.labels)
    train = torch.tensor(g.train_idx)
    edges, exclude = (g.listed_edges if cfg.walk_neighbours == "listed" else g.edges), None
    if cfg.mode == "i":
        # inductive: test nodes never enter a context pair
        exclude = g.test_idx
        if not cfg.walk_through_test:
            test = np.zeros(g.num_nodes, bool)
            test[g.test_idx] = True
            edges = edges[~test[edges[:, 0]] & ~test[edges[:, 1]]]
    r1 = cfg.r1 if cfg.context_loss == "negative_sampling" else 1.0

    def sampler(walks: int, pairs_per_walk: int, r2: float, offset: int) -> ContextSampler:
        # pairs_per_walk 1: label context, one pair per "walk"
        return ContextSampler(edges, g.num_nodes, g.labels, g.train_idx, walks, r1, r2, cfg.walk_length,
                              cfg.window, seed=seed * 3 + offset, pairs_per_walk=pairs_per_walk, exclude=exclude,
                              all_pairs=cfg.all_pairs and pairs_per_walk > 1,
                              self_pairs=cfg.self_pairs and pairs_per_walk > 1, walk_starts=cfg.walk_starts)

    ctx_params = PlanetoidModel.context_parameters
    ctx_obj = GraphContextObjective(cfg.context_loss)
    per_walk = len(window_pairs(cfg.walk_length, cfg.window, cfg.self_pairs)[0]) if cfg.all_pairs else cfg.pairs_per_walk
    graph_pairs = cfg.context_batch * per_walk
    init = []
    if cfg.init_label_steps > 0:
        term = Term(ctx_obj, sampler(cfg.label_context_batch, 1, 0.0, 1))
        init.append(Phase("label_context_init", cfg.init_label_steps, [Stage([term], "ctx")],
                            {"ctx": _context_spec(cfg, cfg.label_context_batch, ctx_params)}))
    if cfg.init_graph_steps > 0:
        term = Term(ctx_obj, sampler(cfg.context_batch, cfg.pairs_per_walk, 1.0, 2))
        init.append(Phase("graph_context_init", cfg.init_graph_steps, [Stage([term], "ctx")],
                            {"ctx": _context_spec(cfg, graph_pairs, ctx_params)}))
    label_stream = TensorStream({"nodes": train, "labels": labels[train]}, min(cfg.label_batch, len(train)),
                                seed=seed)
    stages = [Stage([Term(ClassificationObjective(aux_weight=cfg.aux_weight), label_stream)], "label", cfg.t1)]
    optimizers = {"label": OptimSpec(cfg.label_optim)}
    if cfg.t2 > 0:
        stages.append(Stage([Term(ctx_obj, sampler(cfg.context_batch, cfg.pairs_per_walk, cfg.r2, 0))], "ctx", cfg.t2))
        optimizers["ctx"] = _context_spec(cfg, graph_pairs, ctx_params)
    return g, model, labels, init, Phase("train", cfg.steps, stages, optimizers)


def _resume_points(out_dir: Path, has_init: bool) -> tuple[Path | None, Path | None]:
    """(initialisation checkpoint, alternating-phase checkpoint) a resumed run continues from: OUT/last
    once the alternating phase has written one, else OUT/init/last.

    Raises:
        CheckpointError: neither exists (the message names OUT/last, or OUT/init/last with an
            initialisation).
    """
    try:
        return None, resume_dir(out_dir / "last")
    except CheckpointError:
        if not has_init:
            raise
    return resume_dir(out_dir / "init" / "last"), None


@register_method("planetoid", PlanetoidRecipe,
                 resume_free=("threads", "tsne_png", "save_every", "stop_after_steps"))
def run(cfg: PlanetoidRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    refuse_several_processes("Planetoid", "its graph-context objective calls the model's context scorers outside "
                             "the forward that DistributedDataParallel wraps, and a graph this size fits one process")
    if resume and out_dir is None:
        raise ConfigError("--resume needs the output directory of the run to continue", "pass --out DIR")
    g, model, labels, init, train = build(cfg, seed)
    val, test = torch.tensor(g.val_idx), torch.tensor(g.test_idx)
    out = Path(out_dir) if out_dir is not None else None
    init_from = train_from = None
    if resume:
        init_from, train_from = _resume_points(out, bool(init))
    elif out is not None:
        # a fresh run starts over: an earlier run's alternating-phase checkpoint left here would make
        # a later --resume skip this run's initialisation
        for stale in (out / "last", backup_path(out / "last")):
            if stale.is_dir():
                shutil.rmtree(stale)
    ckpt_cfg = checkpoint_config(model, **recipe_record(cfg))
    budget = cfg.stop_after_steps
    init_steps = 0
    # the initialisation trains embeddings only: a validation-selected checkpoint of it would pick a
    # random classifier's luckiest state, so it runs without evaluation and model selection, in a
    # Trainer of its own; the alternating phase's Trainer reseeds every RNG at its start (a run's random
    # numbers are those it drew before checkpoints existed)
    if init and train_from is None:
        before = load_trainer_state(init_from)["global_step"] if init_from is not None else 0
        icfg = TrainConfig(seed=seed, device="cpu", progress=progress, threads=cfg.threads,
                           log_every=max(p.steps for p in init), save_every=cfg.save_every, stop_after_steps=budget)
        result = Trainer(model, init, icfg, None, out / "init" if out is not None else None,
                         checkpoint_config=ckpt_cfg, resume_from=init_from, diverged_fix=DIVERGED_FIX).fit()
        init_steps = result.steps
        if budget:
            budget -= result.steps - before
        if result.interrupted or (cfg.stop_after_steps and budget <= 0):
            return {"steps": init_steps, "interrupted": 1.0}
    elif init:
        init_steps = sum(p.steps for p in init)
    tcfg = TrainConfig(seed=seed, device="cpu", eval_every=cfg.eval_every, early_stop_metric="val_accuracy",
                       early_stop_mode="max", patience=cfg.patience, keep_best=True, progress=progress, threads=cfg.threads,
                       log_every=max(cfg.steps, 1), save_every=cfg.save_every, stop_after_steps=budget)
    evaluate = lambda m: {"val_accuracy": _accuracy(m, val, labels[val])}  # noqa: E731
    result = Trainer(model, [train], tcfg, evaluate, out, checkpoint_config=ckpt_cfg, resume_from=train_from,
                     diverged_fix=DIVERGED_FIX).fit()
    if result.interrupted:
        return {"steps": init_steps + result.steps, "interrupted": 1.0}
    if cfg.tsne_png:
        plot_tsne(model, test, labels[test], cfg.tsne_png.replace("{seed}", str(seed)),
                  f"Planetoid-{cfg.mode.upper()} on {cfg.dataset}", seed)
    figures = {"test_accuracy": _accuracy(model, test, labels[test]), "val_accuracy": _accuracy(model, val, labels[val])}
    if out is not None:
        write_results(out, figures)
    return figures
