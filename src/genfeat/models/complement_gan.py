"""Complement ("bad") GAN networks (Dai, Yang et al. 2017; thesis §3.1).

Axis legend: b batch, c channels, h height, w width, d feature size (h(x)), k classes, z noise size.

The discriminator is a (K+1)-class classifier whose fake-class logit is fixed at zero (w_{K+1} = 0,
thesis §3.1.2): it outputs the K real-class logits l_1..l_K, and P(K+1 | x) = 1 / (1 + Σ_k exp l_k).
Its features h(x) (the last hidden layer) are what the generator's feature matching compares.

Architectures of the paper:
    MNIST (``mlp``): h(x) = 5 weight-normalised ReLU layers 1000-500-250-250-250 with Gaussian noise
        (instance noise σ = 0.3 on the input, 0.5 before every other layer); the generator
        z (100, uniform) -> 500 -> 500 (BatchNorm, softplus) -> 784 (weight-normalised, sigmoid).
    SVHN / CIFAR-10 (``conv``): the weight-normalised conv net of Salimans et al. (2016) with spatial
        dropout (Dropout2d) and leaky ReLU, widths (64, 128) for SVHN and (96, 192) for CIFAR-10; the
        generator z -> 4x4x512 -> 8x8x256 -> 16x16x128 -> 32x32x3 (transposed convs, BatchNorm, tanh).
The VI entropy term uses an encoder q(z | x): a diagonal Gaussian whose log standard deviation is
bounded in [log_sigma_min, log_sigma_max] (a sigmoid of the raw output), so the bound cannot be won by
collapsing σ.

Weight normalisation (Salimans & Kingma 2016): w = g · v / ||v|| per output unit, with the
data-dependent initialisation of :func:`data_init` (g, b set so each unit's pre-activation has zero
mean and unit variance on a batch of real images).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config


@dataclass
class ComplementGANConfig(Config):
    """Networks of the complement GAN (the paper's MNIST MLP by default)."""

    image_shape: tuple[int, int, int] = (1, 28, 28)
    """(c, h, w) of the images."""
    num_classes: int = 10
    """K, the real classes (the fake class K+1 has its logit fixed at 0)."""
    architecture: Literal["mlp", "conv"] = "mlp"
    """mlp: the paper's MNIST networks, images in [0, 1]; conv: its SVHN / CIFAR-10 conv nets (32 x 32),
    images in [-1, 1]."""
    noise_size: int = 100
    """z, the size of the generator's uniform noise."""
    d_hidden: list[int] = field(default_factory=lambda: [1000, 500, 250, 250, 250])
    """mlp: widths of the discriminator's hidden layers (the last is d, the size of h(x))."""
    conv_widths: tuple[int, int] = (96, 192)
    """conv: channels of the discriminator's two blocks (SVHN 64, 128; CIFAR-10 96, 192)."""
    input_noise: float = 0.3
    """σ of the Gaussian instance noise added to the discriminator's input while training."""
    hidden_noise: float = 0.5
    """mlp: σ of the Gaussian noise before every hidden layer after the first, and the output layer."""
    dropout: tuple[float, float] = (0.2, 0.5)
    """conv: spatial dropout on the input and after each block."""
    g_hidden: list[int] = field(default_factory=lambda: [500, 500])
    """mlp: widths of the generator's hidden layers."""
    encoder: bool = False
    """Build the encoder q(z | x) of the VI entropy term."""
    encoder_hidden: list[int] = field(default_factory=lambda: [500, 500])
    """Widths of the encoder's hidden layers (an MLP on the flattened image)."""
    log_sigma_min: float = -5.0
    """Lower bound of the encoder's log σ."""
    log_sigma_max: float = 1.0
    """Upper bound of the encoder's log σ."""

    def __post_init__(self):
        if len(self.image_shape) != 3 or min(self.image_shape) < 1:
            raise ValueError(f"image_shape must be (c, h, w) of positive sizes, got {self.image_shape}")
        if self.num_classes < 2 or self.noise_size < 1:
            raise ValueError(f"num_classes must be >= 2 and noise_size >= 1, got {self.num_classes}, {self.noise_size}")
        if self.architecture == "mlp" and not self.d_hidden:
            raise ValueError("d_hidden needs at least one layer")
        if self.architecture == "conv" and tuple(self.image_shape[1:]) != (32, 32):
            raise ValueError(f"the conv architecture is for 32 x 32 images, got {self.image_shape}")
        if min(self.input_noise, self.hidden_noise) < 0 or not all(0 <= p < 1 for p in self.dropout):
            raise ValueError("noise σ must be >= 0 and dropout in [0, 1)")
        if not self.log_sigma_min < self.log_sigma_max:
            raise ValueError(f"log_sigma_min {self.log_sigma_min} must be below log_sigma_max {self.log_sigma_max}")

    @property
    def pixel_range(self) -> tuple[float, float]:
        """The range of the images the networks read and the generator writes."""
        return (0.0, 1.0) if self.architecture == "mlp" else (-1.0, 1.0)


@dataclass
class DiscriminatorOutput:
    """logits: (b, k) real-class logits l_k (the fake logit is 0); features: (b, d) h(x)."""

    logits: Tensor
    features: Tensor


@dataclass
class EncoderOutput:
    """mean, log_sigma: (b, z) of the diagonal Gaussian q(z | x)."""

    mean: Tensor
    log_sigma: Tensor


class GaussianNoise(nn.Module):
    """x + σ ε, ε ~ N(0, I), while training; the identity in evaluation."""

    def __init__(self, sigma: float):
        super().__init__()
        self.sigma = sigma

    def forward(self, x: Tensor) -> Tensor:
        return x + self.sigma * torch.randn_like(x) if self.training and self.sigma else x


class _WeightNorm(nn.Module):
    """Shared part of the weight-normalised layers: w = g · v / ||v||, norms over all but dim 0.

    With ``train_scale`` false, g is set by the data-dependent initialisation and then fixed (a
    buffer), as in the released code's hidden layers: the discriminator cannot then grow its
    features' scale, which feature matching compares.
    """

    def __init__(self, shape: tuple[int, ...], train_scale: bool = True):
        super().__init__()
        self.v = nn.Parameter(torch.randn(shape) * 0.05)
        if train_scale:
            self.g = nn.Parameter(torch.ones(shape[0]))
        else:
            self.register_buffer("g", torch.ones(shape[0]))
        self.b = nn.Parameter(torch.zeros(shape[0]))
        self.init_mode = False

    def weight(self) -> Tensor:
        norm = self.v.flatten(1).norm(dim=1).clamp_min(1e-8)
        return self.v * (self.g / norm).view(-1, *[1] * (self.v.dim() - 1))

    def _bias(self, y: Tensor) -> Tensor:
        """Add b to the pre-activation y (b, out, ...); in init mode first set g and b from y's statistics."""
        if self.init_mode:
            dims = [d for d in range(y.dim()) if d != 1]
            mean, std = y.mean(dims), (y.var(dims, unbiased=False) + 1e-6).sqrt()
            with torch.no_grad():
                self.g.div_(std)
                self.b.copy_(-mean / std)
            y = y / std.view(1, -1, *[1] * (y.dim() - 2))
        return y + self.b.view(1, -1, *[1] * (y.dim() - 2))


class WNLinear(_WeightNorm):
    """Weight-normalised linear layer; (b, in) -> (b, out)."""

    def __init__(self, in_features: int, out_features: int, train_scale: bool = True):
        super().__init__((out_features, in_features), train_scale)

    def forward(self, x: Tensor) -> Tensor:
        return self._bias(F.linear(x, self.weight()))


class WNConv2d(_WeightNorm):
    """Weight-normalised 2-D convolution; (b, in, h, w) -> (b, out, h', w')."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1, padding: int = 0,
                 train_scale: bool = True):
        super().__init__((out_channels, in_channels, kernel, kernel), train_scale)
        self.stride, self.padding = stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return self._bias(F.conv2d(x, self.weight(), stride=self.stride, padding=self.padding))


@torch.no_grad()
def data_init(module: nn.Module, *inputs: Tensor) -> None:
    """Data-dependent initialisation of every weight-normalised layer of ``module`` (Salimans & Kingma 2016):
    one forward pass over ``inputs`` (a batch of real data, a few hundred examples) sets each layer's g
    and b so that its pre-activations have zero mean and unit variance, layer after layer."""
    layers = [m for m in module.modules() if isinstance(m, _WeightNorm)]
    for layer in layers:
        layer.init_mode = True
    try:
        module(*inputs)
    finally:
        for layer in layers:
            layer.init_mode = False


class MLPDiscriminator(nn.Module):
    """The paper's MNIST discriminator: flattened image (b, c, h, w) -> logits (b, k), h(x) (b, d).
    The hidden layers' scales g are fixed after the data-dependent initialisation; the output layer's train."""

    def __init__(self, cfg: ComplementGANConfig):
        super().__init__()
        sizes = [cfg.image_shape[0] * cfg.image_shape[1] * cfg.image_shape[2], *cfg.d_hidden]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers += [GaussianNoise(cfg.input_noise if i == 0 else cfg.hidden_noise),
                       WNLinear(a, b, train_scale=False), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.out = nn.Sequential(GaussianNoise(cfg.hidden_noise), WNLinear(sizes[-1], cfg.num_classes))

    def forward(self, x: Tensor) -> DiscriminatorOutput:
        """Shapes: x (b, c, h, w) -> :class:`DiscriminatorOutput`: logits (b, k), features h(x) (b, d)."""
        h = self.features(x.flatten(1))
        return DiscriminatorOutput(self.out(h), h)


class ConvDiscriminator(nn.Module):
    """The paper's SVHN / CIFAR-10 discriminator on (b, c, 32, 32) images: two blocks of three
    weight-normalised 3x3 convs (the last of stride 2), a valid 3x3 and two 1x1 convs, global mean
    pooling to h(x) (b, d = conv_widths[1]), a weight-normalised output layer; leaky ReLU 0.2, Gaussian
    instance noise and spatial dropout on the input, spatial dropout after each block."""

    def __init__(self, cfg: ComplementGANConfig):
        super().__init__()
        (c1, c2), (p_in, p_mid) = cfg.conv_widths, cfg.dropout
        act = lambda: nn.LeakyReLU(0.2)  # noqa: E731
        layers: list[nn.Module] = [GaussianNoise(cfg.input_noise), nn.Dropout2d(p_in)]
        cin = cfg.image_shape[0]
        for width in (c1, c2):
            layers += [WNConv2d(cin, width, 3, padding=1), act(), WNConv2d(width, width, 3, padding=1), act(),
                       WNConv2d(width, width, 3, stride=2, padding=1), act(), nn.Dropout2d(p_mid)]
            cin = width
        layers += [WNConv2d(c2, c2, 3), act(), WNConv2d(c2, c2, 1), act(), WNConv2d(c2, c2, 1), act()]
        self.trunk = nn.Sequential(*layers)
        self.out = WNLinear(c2, cfg.num_classes)

    def forward(self, x: Tensor) -> DiscriminatorOutput:
        """Shapes: x (b, c, 32, 32) -> :class:`DiscriminatorOutput`: logits (b, k), features h(x) (b, d)."""
        h = self.trunk(x).mean((2, 3))
        return DiscriminatorOutput(self.out(h), h)


class MLPGenerator(nn.Module):
    """The paper's MNIST generator: z (b, z) -> images (b, c, h, w) in [0, 1]."""

    def __init__(self, cfg: ComplementGANConfig):
        super().__init__()
        self.image_shape = tuple(cfg.image_shape)
        sizes = [cfg.noise_size, *cfg.g_hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b, bias=False), nn.BatchNorm1d(b), nn.Softplus()]
        out = self.image_shape[0] * self.image_shape[1] * self.image_shape[2]
        self.net = nn.Sequential(*layers, WNLinear(sizes[-1], out), nn.Sigmoid())

    def forward(self, z: Tensor) -> Tensor:
        """Shapes: z (b, z) -> images (b, c, h, w) in [0, 1]."""
        return self.net(z).view(len(z), *self.image_shape)


class ConvGenerator(nn.Module):
    """The SVHN / CIFAR-10 generator: z (b, z) -> 4x4x512 -> ... -> images (b, c, 32, 32) in [-1, 1]."""

    def __init__(self, cfg: ComplementGANConfig):
        super().__init__()
        self.project = nn.Sequential(nn.Linear(cfg.noise_size, 4 * 4 * 512, bias=False), nn.BatchNorm1d(4 * 4 * 512),
                                     nn.ReLU())
        up = lambda a, b: [nn.ConvTranspose2d(a, b, 5, 2, 2, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU()]  # noqa: E731
        self.net = nn.Sequential(*up(512, 256), *up(256, 128),
                                 nn.ConvTranspose2d(128, cfg.image_shape[0], 5, 2, 2, 1), nn.Tanh())

    def forward(self, z: Tensor) -> Tensor:
        """Shapes: z (b, z) -> images (b, c, 32, 32) in [-1, 1]."""
        return self.net(self.project(z).view(len(z), 512, 4, 4))


class Encoder(nn.Module):
    """q(z | x) = N(mean(x), diag σ(x)²) for the VI entropy term: an MLP on the flattened image
    (BatchNorm, softplus) to (mean, log σ), log σ bounded in [log_sigma_min, log_sigma_max].
    Shapes: x (b, c, h, w) -> mean, log_sigma (b, z)."""

    def __init__(self, cfg: ComplementGANConfig):
        super().__init__()
        sizes = [cfg.image_shape[0] * cfg.image_shape[1] * cfg.image_shape[2], *cfg.encoder_hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b, bias=False), nn.BatchNorm1d(b), nn.Softplus()]
        self.net = nn.Sequential(*layers, WNLinear(sizes[-1], 2 * cfg.noise_size))
        self.bounds = (cfg.log_sigma_min, cfg.log_sigma_max)

    def forward(self, x: Tensor) -> EncoderOutput:
        """q(z | x). Shapes: x (b, c, h, w) -> :class:`EncoderOutput`: mean, log_sigma (b, z)."""
        mean, raw = self.net(x.flatten(1)).chunk(2, dim=1)
        lo, hi = self.bounds
        return EncoderOutput(mean, lo + (hi - lo) * torch.sigmoid(raw))


class ComplementGAN(nn.Module):
    """The discriminator D, generator G and (with ``config.encoder``) the encoder q(z | x), trained by the
    objectives of :mod:`genfeat.objectives.complement_gan` with one optimizer each.

    ``forward(x)`` is the classifier: D's output on images x (b, c, h, w).
    """

    def __init__(self, cfg: ComplementGANConfig):
        super().__init__()
        self.config = cfg
        mlp = cfg.architecture == "mlp"
        self.discriminator = MLPDiscriminator(cfg) if mlp else ConvDiscriminator(cfg)
        self.generator = MLPGenerator(cfg) if mlp else ConvGenerator(cfg)
        self.encoder = Encoder(cfg) if cfg.encoder else None

    def forward(self, x: Tensor) -> DiscriminatorOutput:
        """D's classification of images: the K real-class logits (the fake class's is fixed at 0, §3.1.2) and the
        features h(x) that feature matching compares.

        Shapes: x (b, c, h, w) -> :class:`DiscriminatorOutput`: logits (b, k), features (b, d).
        """
        return self.discriminator(x)

    def sample_noise(self, n: int) -> Tensor:
        """z ~ U[0, 1]^{noise_size} (the released code's noise), (n, z), on the model's device."""
        return torch.rand(n, self.config.noise_size, device=next(self.parameters()).device)

    def generate(self, n: int) -> tuple[Tensor, Tensor]:
        """(z, G(z)): (n, z) noise and (n, c, h, w) images."""
        z = self.sample_noise(n)
        return z, self.generator(z)

    def generator_parameters(self) -> list[nn.Parameter]:
        """What the generator step trains: G and the encoder (the VI bound is maximised over both)."""
        return [*self.generator.parameters(), *(self.encoder.parameters() if self.encoder is not None else [])]
