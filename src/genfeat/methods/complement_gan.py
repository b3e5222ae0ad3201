"""Complement ("bad") GAN runner (thesis §3.1; Dai, Yang et al. 2017): semi-supervised image
classification by a (K+1)-class discriminator and a generator of complement samples, trained in turn
(one discriminator step, then one generator step, each with its own optimizer), and the pretraining of
the PixelCNN++ density model that the low-density term uses.

Recipes: ``method: complement_gan`` + the fields of :class:`ComplementGANRecipe` (Table 3.2's rows are
the term switches), ``method: pixelcnn`` + those of :class:`PixelCNNRecipe`.

The figure of a run is ``test_errors``, the number of misclassified test images (out of 10,000 for
MNIST) of the discriminator at the end of training (no model selection: MNIST-100 has no validation
set). Every evaluation's count is also in ``metrics.jsonl`` (``test_errors``), so the number is traceable.
OUT/last is the resumable checkpoint, OUT/final the trained D and G (architecture ``complement_gan``,
``genfeat.from_pretrained``; its D gives ``test_errors`` again) beside OUT/results.json.

Devices: the data stay on the CPU; the Trainer moves the networks to ``train.device`` and the run puts the
frozen density model there too. The helpers that feed a network (:func:`count_errors`, :func:`log_probs`,
:func:`plot_case_study`) send each batch to the device of its parameters and bring the results back to the
CPU, where the figures (numpy, PNGs) are made.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from ..config import Config
from ..errors import CheckpointError, ConfigError
from ..framework import OptimConfig, TrainConfig, Trainer
from ..framework.checkpoint import resume_dir, save_checkpoint
from ..framework.distributed import refuse_several_processes
from ..framework.schedule import OptimSpec, Term, alternating
from ..framework.stream import TensorStream, derived_seed
from ..framework.trainer import resolve_device
from ..hub import checkpoint_config, from_pretrained
from ..io import atomic_path, write_results
from ..models.complement_gan import ComplementGAN, ComplementGANConfig, data_init
from ..models.pixelcnn import PixelCNN, PixelCNNConfig
from ..objectives.complement_gan import DensityObjective, DiscriminatorObjective, GeneratorObjective, density_input
from ..runner import recipe_record, register_method


def _train_defaults(**kw: Any) -> TrainConfig:
    return TrainConfig(**{"device": "cpu", "threads": 1, "log_every": 100, **kw})


@dataclass
class ComplementGANRecipe(Config):
    """Complement GAN on a balanced labelled subset; defaults: the released MNIST trainer (batch 100,
    Adam D lr 3e-3 betas (0.5, 0.9999), G lr 1e-3 betas (0, 0.9999), FM on the last hidden layer, w_u = w_g = 1/2)."""

    dataset: Literal["mnist", "svhn", "cifar10", "synthetic_2d"] = "mnist"
    """Image dataset, or the 2-D case study of §3.1.4 (two half-moons in the unit square)."""
    labelled: int = 100
    """Labelled training examples, balanced over the classes and chosen by the seed (MNIST 100, SVHN
    1,000, CIFAR-10 4,000)."""
    model: ComplementGANConfig = field(default_factory=ComplementGANConfig)
    """The networks (image_shape and num_classes must match the dataset)."""
    labelled_batch: int = 100
    """Labelled examples per discriminator step (capped at ``labelled``)."""
    unlabelled_batch: int = 100
    """Unlabelled examples per step, and generated examples per step."""
    steps: int = 24000
    """Optimizer steps in all (discriminator and generator steps alternate, so steps / 2 of each)."""
    d_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=3e-3, betas=(0.5, 0.9999)))
    """Discriminator optimizer."""
    g_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3, betas=(0.0, 0.9999)))
    """Generator (and encoder) optimizer."""
    supervised_only: bool = False
    """Train the discriminator on the labelled examples alone (the baseline: no unlabelled or generated data)."""
    unlabelled_weight: float = 0.5
    """w_u of Eq. (3.6)."""
    generated_weight: float = 0.5
    """w_g of Eq. (3.6)."""
    entropy_weight: float = 0.0
    """w_e, the conditional-entropy term of Eq. (3.6) (Table 3.2's +Ent; 0: off)."""
    feature_matching: bool = True
    """The FM term of Eq. (3.5)."""
    pt_weight: float = 0.0
    """Pull-away entropy term (FM+PT; 0: off)."""
    vi_weight: float = 0.0
    """Variational entropy term (FM+VI; 0: off; turns model.encoder on)."""
    ld_weight: float = 0.0
    """Low-density term (FM+LD; 0: off; needs density_checkpoint)."""
    density_checkpoint: str = ""
    """Directory of the pretrained PixelCNN++ (a ``pixelcnn`` recipe's OUT/final)."""
    ld_centile: float = 10.0
    """q: ε is the q-th centile of log p over ld_reference unlabelled training images (Table 3.2 varies it)."""
    ld_reference: int = 2000
    """Unlabelled training images whose log p set ε (drawn by the seed)."""
    ld_batch: int = 30
    """Generated images scored by the density model at an LD step."""
    ld_every: int = 10
    """An LD step every this many generator steps."""
    ld_start: int = 0
    """Generator steps before the first LD step."""
    init_batch: int = 500
    """Unlabelled images of the weight-norm data-dependent initialisation."""
    samples_png: str = ""
    """Image datasets: a 10 x 10 grid of generated samples (Fig. 3.6) is always written to OUT/samples.png; when
    set, copied to this PNG too ("{seed}" in it is replaced by the seed, so that several seeds do not overwrite
    one another)."""
    figures_dir: str = ""
    """synthetic_2d: the case study's figures (Figs. 3.2-3.5 analogue) are always written into OUT/figures; when
    set, copied into this directory too ("{seed}" replaced by the seed)."""
    train: TrainConfig = field(default_factory=lambda: _train_defaults(eval_every=1200, save_every=1200))
    """The loop (eval_every: steps between test-error evaluations, logged to metrics.jsonl)."""

    def __post_init__(self):
        for name in ("labelled", "labelled_batch", "unlabelled_batch", "init_batch", "ld_batch", "ld_every",
                     "ld_reference"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0 or self.ld_start < 0:
            raise ValueError(f"steps and ld_start must be >= 0, got {self.steps}, {self.ld_start}")
        if not 0 < self.ld_centile <= 100:
            raise ValueError(f"ld_centile must be in (0, 100], got {self.ld_centile}")
        if self.ld_weight and not self.density_checkpoint:
            raise ValueError("ld_weight needs density_checkpoint (train one with recipes/complement_gan/pixelcnn_mnist.yaml)")
        if self.vi_weight and not self.model.encoder:
            self.model = replace(self.model, encoder=True)
        if not self.supervised_only and not (self.feature_matching or self.pt_weight or self.vi_weight):
            raise ValueError("the generator needs feature_matching, pt_weight or vi_weight")
        if self.dataset == "synthetic_2d" and self.samples_png:
            raise ValueError("samples_png is a grid of generated images; synthetic_2d draws figures (figures_dir)")
        if self.dataset != "synthetic_2d" and self.figures_dir:
            raise ValueError(f"figures_dir holds the 2-D case study's figures; {self.dataset} writes a sample grid "
                             "(samples_png)")


@dataclass
class ImageSplits:
    """Float images in the model's pixel range: labelled (with labels), unlabelled (with the labels that only
    the 2-D figures use), test (with labels)."""

    x_lab: torch.Tensor
    y_lab: torch.Tensor
    x_unl: torch.Tensor
    y_unl: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def two_moons(n: int, seed: int, noise: float = 0.06) -> tuple[np.ndarray, np.ndarray]:
    """n points of two interleaved half-moons scaled into [0.1, 0.9]², labels 0/1; (n, 2) float32, (n,) int64."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 2, n)
    t = rng.uniform(0, np.pi, n)
    x = np.where(y[:, None] == 0, np.c_[np.cos(t), np.sin(t)], np.c_[1 - np.cos(t), 0.5 - np.sin(t)])
    x = x + noise * rng.randn(n, 2)
    return ((x - [-1.2, -0.7]) / [3.4, 2.4] * 0.8 + 0.1).astype(np.float32), y.astype(np.int64)


def load_splits(cfg: ComplementGANRecipe, seed: int) -> ImageSplits:
    """The labelled subset (balanced, by ``seed``), the unlabelled set (all training images) and the test set."""
    from ..data.images import balanced_subset, load_images

    if cfg.dataset == "synthetic_2d":
        x, y = two_moons(1000, seed=1000 + seed)
        xt, yt = two_moons(1000, seed=5000 + seed)
        x, xt = x.reshape(-1, 1, 1, 2), xt.reshape(-1, 1, 1, 2)
        k, scale = 2, (lambda a: torch.from_numpy(a))
    else:
        train, test = load_images(cfg.dataset, "train"), load_images(cfg.dataset, "test")
        x, y, xt, yt, k = train.images, train.labels, test.images, test.labels, train.num_classes
        lo, hi = cfg.model.pixel_range
        scale = lambda a: torch.tensor(a, dtype=torch.float32) / 255.0 * (hi - lo) + lo  # noqa: E731
    if tuple(x.shape[1:]) != tuple(cfg.model.image_shape) or k != cfg.model.num_classes:
        raise ConfigError(f"model.image_shape {tuple(cfg.model.image_shape)} / num_classes {cfg.model.num_classes} "
                          f"do not fit {cfg.dataset} ({tuple(x.shape[1:])}, {k} classes)",
                          f"set model.image_shape {list(x.shape[1:])} and model.num_classes {k}")
    idx = balanced_subset(y, cfg.labelled, k, seed)
    x_all = scale(x)
    return ImageSplits(x_all[idx], torch.from_numpy(y[idx]), x_all, torch.from_numpy(y), scale(xt), torch.from_numpy(yt))


class PairedStream:
    """Labelled and unlabelled minibatches together, ``{"x_lab", "y_lab", "x_unl"}`` (the discriminator step's
    batch), each from its own resumable :class:`TensorStream`."""

    def __init__(self, labelled: TensorStream, unlabelled: TensorStream):
        self.labelled, self.unlabelled = labelled, unlabelled

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return {**next(self.labelled), **next(self.unlabelled)}

    def state_dict(self) -> dict[str, Any]:
        return {"labelled": self.labelled.state_dict(), "unlabelled": self.unlabelled.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.labelled.load_state_dict(state["labelled"])
        self.unlabelled.load_state_dict(state["unlabelled"])

    def shard(self, rank: int, world: int) -> None:
        self.labelled.shard(rank, world)
        self.unlabelled.shard(rank, world)


@torch.no_grad()
def count_errors(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> int:
    """Misclassified examples of the discriminator's K-way argmax (in evaluation mode: no noise, no dropout).
    x (n, c, h, w) and y (n,) on the CPU; each batch of x goes to the model's device, its argmax comes back."""
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    wrong = sum(int((model(x[i:i + batch].to(device)).logits.argmax(-1).cpu() != y[i:i + batch]).sum())
                for i in range(0, len(x), batch))
    model.train(was)
    return wrong


def load_density(path: str | Path, image_shape: tuple[int, ...]) -> PixelCNN:
    """The frozen PixelCNN++ of checkpoint ``path`` (``hub.from_pretrained``), in evaluation mode.

    Raises:
        CheckpointError: not a PixelCNN checkpoint, or trained on images of another shape than ``image_shape``.
    """
    model = from_pretrained(path, "pixelcnn")
    if tuple(model.config.image_shape) != tuple(image_shape):
        raise CheckpointError(f"density model '{path}' was trained on images of shape {tuple(model.config.image_shape)}, "
                              f"this run's are {tuple(image_shape)}",
                              "train a PixelCNN++ on this dataset (a pixelcnn recipe) and point density_checkpoint at it")
    return model.requires_grad_(False)


@torch.no_grad()
def log_probs(density: PixelCNN, x: torch.Tensor, pixel_range: tuple[float, float], batch: int = 200) -> torch.Tensor:
    """log p(x) in nats per image under the density model, x rounded to 8-bit values; x (n, c, h, w) in
    ``pixel_range``, on any device (each batch goes to the density model's) -> (n,) on the CPU."""
    device = next(density.parameters()).device
    return torch.cat([density.log_prob(density_input(x[i:i + batch].to(device), pixel_range)).cpu()
                      for i in range(0, len(x), batch)])


def save_grid(images: torch.Tensor, path: str | Path, pixel_range: tuple[float, float], nrow: int = 10) -> None:
    """A nrow-wide grid of images (n, c, h, w), on any device, as a PNG (Pillow), written atomically."""
    from PIL import Image

    lo, hi = pixel_range
    x = ((images.clamp(lo, hi) - lo) / (hi - lo) * 255).round().byte().permute(0, 2, 3, 1).cpu().numpy()
    n, h, w, c = x.shape
    rows = -(-n // nrow)
    grid = np.zeros((rows * (h + 2) + 2, nrow * (w + 2) + 2, c), np.uint8)
    for i in range(n):
        r, q = divmod(i, nrow)
        grid[2 + r * (h + 2):2 + r * (h + 2) + h, 2 + q * (w + 2):2 + q * (w + 2) + w] = x[i]
    image = Image.fromarray(grid[..., 0] if c == 1 else grid).resize((grid.shape[1] * 3, grid.shape[0] * 3),
                                                                      Image.NEAREST)
    with atomic_path(Path(path)) as tmp:
        image.save(tmp, format="PNG")


def plot_case_study(model: ComplementGAN, data: ImageSplits, out: Path, seed: int) -> list[Path]:
    """The 2-D case study of §3.1.4 (Figs. 3.2-3.5 analogue), three PNGs in ``out``: the labelled,
    unlabelled and generated points; the classification boundary (argmax over the K real classes) and
    the true-fake boundary (P(K+1 | x) = 1/2) over the unit square; the feature space h(x) of real
    (by class) and generated points on the real features' first two principal axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..objectives.complement_gan import log_prob_fake

    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        torch.manual_seed(seed)
        _, fake = model.generate(500)
        axis = torch.linspace(0, 1, 201)
        grid = torch.stack(torch.meshgrid(axis, axis, indexing="xy"), -1).reshape(-1, 1, 1, 2)
        logits = model(grid.to(device)).logits
        p_fake = log_prob_fake(logits).exp().reshape(201, 201).cpu()
        cls = logits.argmax(-1).reshape(201, 201).float().cpu()
        h_real, h_fake = model(data.x_unl.to(device)).features, model(fake).features
        # the first two principal axes of the real features
        centre = h_real.mean(0)
        axes = torch.linalg.svd(h_real - centre, full_matrices=False).Vh[:2].t()
        h_real, h_fake = ((h_real - centre) @ axes).cpu(), ((h_fake - centre) @ axes).cpu()
    x_unl, x_lab, fake2 = data.x_unl.reshape(-1, 2), data.x_lab.reshape(-1, 2), fake.reshape(-1, 2).cpu()
    figures = []

    def save(fig, name):
        path = out / f"complement_gan_2d_{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        figures.append(path)

    def points(ax):
        ax.scatter(x_unl[:, 0], x_unl[:, 1], s=3, c="0.6", label="unlabelled")
        ax.scatter(fake2[:, 0], fake2[:, 1], s=4, c="k", marker="x", lw=0.6, label="generated")
        ax.scatter(x_lab[:, 0], x_lab[:, 1], s=90, c=data.y_lab, cmap="coolwarm", vmin=0, vmax=1, edgecolors="k",
                   label="labelled")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")

    fig, ax = plt.subplots(figsize=(5, 5))
    points(ax)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("labelled, unlabelled and generated points")
    save(fig, "points")
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.contourf(axis, axis, cls, levels=[-0.5, 0.5, 1.5], colors=["#c9d7f5", "#f5cfc9"])
    ax.contour(axis, axis, cls, levels=[0.5], colors="k", linewidths=1.5)
    ax.contour(axis, axis, p_fake, levels=[0.5], colors="tab:green", linewidths=1.5, linestyles="--")
    points(ax)
    ax.set_title("classification boundary (black), true-fake boundary (green)")
    save(fig, "boundaries")
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(h_real[:, 0], h_real[:, 1], s=3, c=data.y_unl, cmap="coolwarm", vmin=0, vmax=1, label="real (by class)")
    ax.scatter(h_fake[:, 0], h_fake[:, 1], s=4, c="k", marker="x", lw=0.6, label="generated")
    ax.legend(loc="best", fontsize=8)
    ax.set_title("feature space h(x), first two principal axes")
    save(fig, "features")
    return figures


def build(cfg: ComplementGANRecipe, seed: int, data: ImageSplits, density: PixelCNN | None = None,
          epsilon: float | None = None):
    """The networks (weight norm initialised from data) and the alternating D/G schedule.

    Returns:
        (model, phases).
    """
    torch.manual_seed(seed)
    model = ComplementGAN(cfg.model)
    g = torch.Generator().manual_seed(seed)
    data_init(model.discriminator, data.x_unl[torch.randperm(len(data.x_unl), generator=g)[:cfg.init_batch]])
    labelled = TensorStream({"x_lab": data.x_lab, "y_lab": data.y_lab}, min(cfg.labelled_batch, len(data.y_lab)),
                            seed=seed)
    d_spec = OptimSpec(cfg.d_optim, lambda m: m.discriminator.parameters())
    if cfg.supervised_only:
        d_term = Term(DiscriminatorObjective(0.0, 0.0, 0.0), labelled)
        return model, alternating([(d_term, 1, d_spec)], cfg.steps)
    d_stream = PairedStream(labelled, TensorStream({"x_unl": data.x_unl}, cfg.unlabelled_batch,
                                                        seed=derived_seed(seed, 1), field="unlabelled_batch"))
    d_term = Term(DiscriminatorObjective(cfg.unlabelled_weight, cfg.generated_weight, cfg.entropy_weight), d_stream)
    g_obj = GeneratorObjective(cfg.feature_matching, cfg.pt_weight, cfg.vi_weight, cfg.ld_weight, density, epsilon,
                               cfg.ld_batch, cfg.ld_every, cfg.ld_start)
    g_term = Term(g_obj, TensorStream({"x_unl": data.x_unl}, cfg.unlabelled_batch, seed=derived_seed(seed, 2),
                                      field="unlabelled_batch"))
    g_spec = OptimSpec(cfg.g_optim, ComplementGAN.generator_parameters)
    return model, alternating([(d_term, 1, d_spec), (g_term, 1, g_spec)], cfg.steps)


def max_logp_of_samples(gan: str | Path, density: str | Path, seed: int = 0, n: int = 100) -> float:
    """Table 3.2's "max log-p": the largest log p (nats, under the density model of ``density``) of n
    samples of the generator of checkpoint ``gan``, drawn after ``torch.manual_seed(seed)`` as a run's
    own sample grid is."""
    model = from_pretrained(gan, "complement_gan")
    with torch.no_grad():
        torch.manual_seed(seed)
        _, samples = model.generate(n)
    dens = load_density(density, model.config.image_shape)
    return float(log_probs(dens, samples, model.config.pixel_range).max())


def reference_log_probs(cfg: ComplementGANRecipe, data: ImageSplits, density: PixelCNN, seed: int) -> np.ndarray:
    """log p (nats) under ``density`` of the ``ld_reference`` unlabelled training images drawn by ``seed``, whose
    ``ld_centile``-th centile is the LD term's ε (a run computes it so; Table 3.2's bottom row varies the centile).
    Shape: (ld_reference,)."""
    g = torch.Generator().manual_seed(seed)
    reference = data.x_unl[torch.randperm(len(data.x_unl), generator=g)[:cfg.ld_reference]]
    return log_probs(density, reference, cfg.model.pixel_range).numpy()


@register_method("complement_gan", ComplementGANRecipe, resume_free=("samples_png", "figures_dir"),
                 inputs=("density_checkpoint",))
def run(cfg: ComplementGANRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    refuse_several_processes("the complement GAN", "its objectives draw G's samples outside the model's forward, "
                             "where DistributedDataParallel would not average G's gradients")
    data = load_splits(cfg, seed)
    density = epsilon = None
    if cfg.density_checkpoint:
        # on the device the Trainer puts the networks on: the LD term scores G(z) there, and ε's images are
        # scored there too
        density = load_density(cfg.density_checkpoint, cfg.model.image_shape).to(resolve_device(cfg.train.device))
        epsilon = float(np.percentile(reference_log_probs(cfg, data, density, seed), cfg.ld_centile))
    model, phases = build(cfg, seed, data, density, epsilon)
    evaluate = lambda m: {"test_errors": count_errors(m, data.x_test, data.y_test)}  # noqa: E731
    tcfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    ckpt = checkpoint_config(model, **recipe_record(cfg))
    trainer = Trainer(model, phases, tcfg, evaluate, out_dir, checkpoint_config=ckpt, resume_from=resume_from,
                      diverged_fix="lower d_optim.lr or g_optim.lr, or set train.clip_norm, then run again with "
                                   "--overwrite")
    result = trainer.fit()
    seconds = result.seconds     # over every invocation of a resumed run
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": seconds, "interrupted": 1.0}
    errors = count_errors(model, data.x_test, data.y_test)
    figures: dict[str, float] = {"test_errors": errors, "test_error_rate": errors / len(data.y_test),
                                 "test_examples": len(data.y_test), "steps": result.steps, "train_seconds": seconds}
    if epsilon is not None:
        figures["ld_epsilon"] = epsilon
    model.eval()
    with torch.no_grad():
        torch.manual_seed(seed)
        _, samples = model.generate(100)
    if density is not None:
        figures["max_logp_generated"] = float(log_probs(density, samples, cfg.model.pixel_range).max())
    # drawn once into OUT (or, without one, the first copy's place), then copied
    copy = (cfg.figures_dir if cfg.dataset == "synthetic_2d" else cfg.samples_png).replace("{seed}", str(seed))
    places = ([Path(out_dir) / ("figures" if cfg.dataset == "synthetic_2d" else "samples.png")]
              if out_dir is not None else []) + ([Path(copy)] if copy else [])
    if places and cfg.dataset == "synthetic_2d":
        made = plot_case_study(model, data, places[0], seed)
    elif places:
        save_grid(samples, places[0], cfg.model.pixel_range)
        made = [places[0]]
    for place in places[1:]:
        for path in made:
            target = place / path.name if cfg.dataset == "synthetic_2d" else place
            with atomic_path(target) as tmp:
                shutil.copyfile(path, tmp)
    if out_dir is not None:
        save_checkpoint(Path(out_dir) / "final", model, None, ckpt)  # the trained D and G (from_pretrained)
        write_results(out_dir, figures)
    return figures


@dataclass
class PixelCNNRecipe(Config):
    """PixelCNN++ density model trained on the unlabelled training images (the LD term's p(x)); the
    checkpoint OUT/final is what ``density_checkpoint`` names."""

    dataset: Literal["mnist", "svhn", "cifar10"] = "mnist"
    """Image dataset (all its training images, labels unused)."""
    model: PixelCNNConfig = field(default_factory=PixelCNNConfig)
    """The network (image_shape must match the dataset)."""
    batch_size: int = 32
    """Images per step."""
    steps: int = 3000
    """Optimizer steps."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3, betas=(0.95, 0.9995)))
    """Optimizer (the PixelCNN++ paper's Adam betas)."""
    eval_images: int = 1000
    """Test images whose mean log p is reported (bits per dimension)."""
    train: TrainConfig = field(default_factory=lambda: _train_defaults(save_every=500))
    """The loop."""

    def __post_init__(self):
        if min(self.batch_size, self.eval_images) < 1 or self.steps < 0:
            raise ValueError("batch_size and eval_images must be >= 1 and steps >= 0")


def _bits_per_dim(model: PixelCNN, x: torch.Tensor) -> float:
    return float(-log_probs(model, x, (-1.0, 1.0)).mean()) / (x[0].numel() * np.log(2))


@register_method("pixelcnn", PixelCNNRecipe)
def run_pixelcnn(cfg: PixelCNNRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
                 resume: bool = False) -> dict[str, float]:
    from ..data.images import load_images
    from ..framework.schedule import one_phase

    refuse_several_processes("PixelCNN++ training", "its objective scores the images with the model's log_prob, "
                             "outside the forward that DistributedDataParallel wraps")
    train, test = load_images(cfg.dataset, "train"), load_images(cfg.dataset, "test")
    if tuple(train.images.shape[1:]) != tuple(cfg.model.image_shape):
        raise ConfigError(f"model.image_shape {tuple(cfg.model.image_shape)} does not fit {cfg.dataset} "
                          f"({tuple(train.images.shape[1:])})", f"set model.image_shape {list(train.images.shape[1:])}")
    scale = lambda a: torch.tensor(a, dtype=torch.float32) / 127.5 - 1  # noqa: E731
    x_test = scale(test.images[: cfg.eval_images])
    torch.manual_seed(seed)
    model = PixelCNN(cfg.model)
    stream = TensorStream({"x": scale(train.images)}, cfg.batch_size, seed=seed)
    tcfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    ckpt = checkpoint_config(model, **recipe_record(cfg))
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    trainer = Trainer(model, one_phase(DensityObjective(), stream, cfg.steps, cfg.optim), tcfg,
                      lambda m: {"test_bpd": _bits_per_dim(m, x_test)}, out_dir, ckpt, resume_from=resume_from)
    result = trainer.fit()
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": result.seconds, "interrupted": 1.0}
    model.eval()
    figures = {"test_bpd": _bits_per_dim(model, x_test), "steps": result.steps, "train_seconds": result.seconds,
               "params": sum(p.numel() for p in model.parameters())}
    if out_dir is not None:
        save_checkpoint(Path(out_dir) / "final", model, None, ckpt)
        write_results(out_dir, figures)
    return figures
