"""A CPU-sized PixelCNN++ (Salimans et al. 2017): the density model p(x) of the complement GAN's
low-density term (thesis §3.1.3).

Axis legend: b batch, c image channels, h height, w width, f filters, m mixture components.

What is kept from PixelCNN++: the two causal streams (u, the rows above, by down-shifted 2x3
convolutions; ul, the rows above and the pixels to the left, by down-right-shifted 2x2 ones, fed u),
gated ResNet blocks with concatenated ELUs, and the discretised logistic mixture likelihood of the 256
pixel values (with the linear dependence of later channels on earlier ones for RGB). What is cut for
a CPU: the two down/up-sampling resolutions (one resolution, ``blocks`` gated blocks per stream) and
the width (``filters`` 32 instead of 160); the size of the default is in the README of the recipe
(recipes/complement_gan/pixelcnn_mnist.yaml).

Images are read in [−1, 1] (pixel value v ↦ 2v/255 − 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config


@dataclass
class PixelCNNConfig(Config):
    """A single-resolution PixelCNN++."""

    image_shape: tuple[int, int, int] = (1, 28, 28)
    """(c, h, w); c is 1 or 3."""
    filters: int = 32
    """f, channels of both streams."""
    blocks: int = 4
    """Gated ResNet blocks per stream."""
    mixtures: int = 5
    """m, logistic mixture components per pixel."""
    dropout: float = 0.0
    """Dropout inside the gated blocks."""

    def __post_init__(self):
        if len(self.image_shape) != 3 or self.image_shape[0] not in (1, 3):
            raise ValueError(f"image_shape must be (c, h, w) with c 1 or 3, got {self.image_shape}")
        if min(self.filters, self.blocks, self.mixtures) < 1:
            raise ValueError("filters, blocks and mixtures must be >= 1")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def _concat_elu(x: Tensor) -> Tensor:
    return F.elu(torch.cat([x, -x], 1))


class _ShiftedConv(nn.Module):
    """A conv that sees only causal context: ``down`` (kh, kw) pads kh−1 rows above and (kw−1)/2 columns
    each side; ``down_right`` pads kh−1 rows above and kw−1 columns to the left. (b, i, h, w) -> (b, o, h, w)."""

    def __init__(self, cin: int, cout: int, kernel: tuple[int, int], right: bool = False):
        super().__init__()
        kh, kw = kernel
        self.pad = (kw - 1, 0, kh - 1, 0) if right else ((kw - 1) // 2, (kw - 1) // 2, kh - 1, 0)
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv2d(cin, cout, kernel))

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x, self.pad))


def _down_shift(x: Tensor) -> Tensor:
    return F.pad(x, (0, 0, 1, 0))[:, :, :-1]


def _right_shift(x: Tensor) -> Tensor:
    return F.pad(x, (1, 0, 0, 0))[:, :, :, :-1]


class _GatedResnet(nn.Module):
    """x + a ⊙ σ(b), (a, b) = conv(dropout(concat_elu(conv(concat_elu(x)) [+ nin(concat_elu(skip))])))."""

    def __init__(self, f: int, kernel: tuple[int, int], right: bool, skip: bool, dropout: float):
        super().__init__()
        self.conv_in = _ShiftedConv(2 * f, f, kernel, right)
        self.skip = nn.utils.parametrizations.weight_norm(nn.Conv2d(2 * f, f, 1)) if skip else None
        self.drop = nn.Dropout(dropout)
        self.conv_out = _ShiftedConv(2 * f, 2 * f, kernel, right)

    def forward(self, x: Tensor, skip: Tensor | None = None) -> Tensor:
        c = self.conv_in(_concat_elu(x))
        if self.skip is not None:
            c = c + self.skip(_concat_elu(skip))
        a, b = self.conv_out(self.drop(_concat_elu(c))).chunk(2, 1)
        return x + a * torch.sigmoid(b)


def mixture_params(c: int, m: int) -> int:
    """Output channels of the mixture: m logits, and per channel m means and m log scales, plus the
    c(c−1)/2 · m coefficients of the later channels on the earlier ones."""
    return m * (1 + 2 * c + c * (c - 1) // 2)


def discretized_logistic_mixture_log_prob(x: Tensor, params: Tensor, m: int) -> Tensor:
    """log p(x) of a discretised mixture of logistics over 256 values per sub-pixel (PixelCNN++ Eq. 2),
    summed over the pixels of each image.

    Args:
        x: (b, c, h, w) in [−1, 1], on the grid 2v/255 − 1.
        params: (b, mixture_params(c, m), h, w): logits, means, log scales, coefficients (in that order).
        m: mixture components.
    Returns:
        (b,) log p(x) in nats.
    """
    b, c, h, w = x.shape
    logits = params[:, :m]
    rest = params[:, m:]
    means = rest[:, :c * m].reshape(b, c, m, h, w)
    log_scales = rest[:, c * m:2 * c * m].reshape(b, c, m, h, w).clamp_min(-7.0)
    coeffs = torch.tanh(rest[:, 2 * c * m:]).reshape(b, c * (c - 1) // 2, m, h, w)
    xs = x.unsqueeze(2)  # (b, c, 1, h, w)
    if c == 3:
        # the mean of G depends linearly on R, that of B on R and G
        means = torch.stack([means[:, 0], means[:, 1] + coeffs[:, 0] * xs[:, 0],
                             means[:, 2] + coeffs[:, 1] * xs[:, 0] + coeffs[:, 2] * xs[:, 1]], 1)
    centred = xs - means
    inv_s = torch.exp(-log_scales)
    plus_in = inv_s * (centred + 1 / 255)
    min_in = inv_s * (centred - 1 / 255)
    log_cdf_plus = plus_in - F.softplus(plus_in)  # the lowest value takes the whole left tail
    log_one_minus_cdf_min = -F.softplus(min_in)  # the highest the right tail
    cdf_delta = torch.sigmoid(plus_in) - torch.sigmoid(min_in)
    mid_in = inv_s * centred
    log_pdf_mid = mid_in - log_scales - 2 * F.softplus(mid_in)  # for bins too narrow for the difference of cdfs
    log_bin = torch.where(cdf_delta > 1e-5, torch.log(cdf_delta.clamp_min(1e-12)), log_pdf_mid - math.log(127.5))
    log_p = torch.where(xs < -0.999, log_cdf_plus, torch.where(xs > 0.999, log_one_minus_cdf_min, log_bin))
    per_pixel = torch.logsumexp(log_p.sum(1) + logits.log_softmax(1), 1)  # (b, h, w)
    return per_pixel.flatten(1).sum(1)


PIXEL_SLACK = 1 / 255
"""How far outside [−1, 1] an input pixel may lie (half the step between two 8-bit values): the straight-through
rounding of generated images (genfeat.objectives.complement_gan.density_input) may leave a float error there."""


def check_image_input(x: Tensor, what: str, channels: int) -> None:
    """Raise TypeError for ``x`` that is not a float tensor, ValueError for one that is not [b, ``channels``, h, w]
    or holds values outside [−1, 1] (beyond :data:`PIXEL_SLACK`): a list, integer pixels or another shape otherwise
    fail inside the convolutions in torch's words, and 8-bit values (0..255) would be scored as if in [−1, 1]."""
    dims = f"[b, {channels}, h, w]"
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} must be a float tensor of images {dims}, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{what} must hold float pixel values in [-1, 1], got {x.dtype}")
    if x.dim() != 4 or x.shape[1] != channels:
        raise ValueError(f"{what} must be {dims}, got shape {tuple(x.shape)}")
    if x.numel():
        low, high = (float(v) for v in torch.aminmax(x.detach()))  # one reduction, one device sync
        if low < -1 - PIXEL_SLACK or high > 1 + PIXEL_SLACK:
            raise ValueError(f"{what} must hold pixel values in [-1, 1] (2v/255 - 1 for an 8-bit value v), got values "
                             f"in [{low:g}, {high:g}]")


class PixelCNN(nn.Module):
    """PixelCNN++ at one resolution. ``forward(x)`` (b, c, h, w) in [−1, 1] -> mixture parameters
    (b, mixture_params(c, m), h, w); :meth:`log_prob` -> (b,) log p(x) in nats."""

    def __init__(self, cfg: PixelCNNConfig):
        super().__init__()
        self.config = cfg
        c, f = cfg.image_shape[0], cfg.filters
        self.u_in = _ShiftedConv(c + 1, f, (2, 3))
        self.ul_in_up = _ShiftedConv(c + 1, f, (1, 3))
        self.ul_in_left = _ShiftedConv(c + 1, f, (2, 1), right=True)
        self.u = nn.ModuleList(_GatedResnet(f, (2, 3), False, False, cfg.dropout) for _ in range(cfg.blocks))
        self.ul = nn.ModuleList(_GatedResnet(f, (2, 2), True, True, cfg.dropout) for _ in range(cfg.blocks))
        self.out = nn.utils.parametrizations.weight_norm(nn.Conv2d(f, mixture_params(c, cfg.mixtures), 1))

    def forward(self, x: Tensor) -> Tensor:
        """The mixture's parameters at every pixel, from the pixels above it and to its left (the two causal
        streams).

        Shapes: x (b, c, h, w) in [−1, 1] -> (b, mixture_params(c, m), h, w): logits, means, log scales and
        coefficients, as :func:`discretized_logistic_mixture_log_prob` reads them.
        """
        check_image_input(x, "x", self.config.image_shape[0])
        # a channel of ones lets the zero padding of the borders be told apart from black pixels
        x = torch.cat([x, torch.ones_like(x[:, :1])], 1)
        u = _down_shift(self.u_in(x))
        ul = _down_shift(self.ul_in_up(x)) + _right_shift(self.ul_in_left(x))
        for block_u, block_ul in zip(self.u, self.ul):
            u = block_u(u)
            ul = block_ul(ul, u)
        return self.out(F.elu(ul))

    def log_prob(self, x: Tensor) -> Tensor:
        """log p(x) in nats (PixelCNN++ Eq. 2). Shapes: x (b, c, h, w) in [−1, 1] -> (b,)."""
        return discretized_logistic_mixture_log_prob(x, self(x), self.config.mixtures)
