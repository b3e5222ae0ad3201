"""The complement GAN's helpers put every input on the device of the network that reads it and bring the
results back to the CPU for numpy and the PNGs (a run with ``train.device cuda``). A CPU-only machine has
no second device to get wrong, so each side is checked with a stand-in: networks with their parameters on
the meta device, whose forward asserts that its input is there too, and tensors that, as CUDA tensors do,
refuse a numpy view until ``.cpu()``. (tests/test_cuda.py runs the method itself on a GPU.)"""

import math

import torch
from torch import nn

from genfeat.methods.complement_gan import (ImageSplits, _bits_per_dim, count_errors, log_probs, plot_case_study,
                                            save_grid, two_moons)
from genfeat.models.complement_gan import ComplementGAN, ComplementGANConfig, DiscriminatorOutput


class _OnMeta(nn.Module):
    """A 3-class discriminator and a density model with their parameters on the meta device. Each call asserts
    that its input is on that device and answers on the CPU (a meta tensor holds no values): logits all 0
    (every image read as class 0), log p(x) of 1 bit per dimension."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(3, device="meta"))
        self.seen = 0

    def _read(self, x: torch.Tensor) -> int:
        assert x.device == self.weight.device, f"input on {x.device}, parameters on {self.weight.device}"
        self.seen += len(x)
        return len(x)

    def forward(self, x):
        n = self._read(x)
        return DiscriminatorOutput(torch.zeros(n, 3), torch.zeros(n, 2))

    def log_prob(self, x):
        return torch.full((self._read(x),), -x[0].numel() * math.log(2))


class _NoNumpy(torch.Tensor):
    """A tensor that, like one on a GPU, has no numpy view (so numpy and matplotlib cannot read it) until .cpu()."""

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert a device tensor to numpy: use .cpu() first")

    def cpu(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor)


class _GANOnDevice(ComplementGAN):
    """The networks of the 2-D case study, their outputs standing in for tensors on a GPU."""

    def forward(self, x):
        out = super().forward(x)
        return DiscriminatorOutput(out.logits.as_subclass(_NoNumpy), out.features.as_subclass(_NoNumpy))

    def generate(self, n):
        z, x = super().generate(n)
        return z.as_subclass(_NoNumpy), x.as_subclass(_NoNumpy)


def test_count_errors_sends_every_batch_to_the_models_device():
    model, y = _OnMeta(), torch.tensor([0, 1, 2, 0, 0, 1, 2])
    assert count_errors(model, torch.rand(7, 3, 2, 2), y, batch=3) == 4
    assert model.seen == 7


def test_log_probs_and_bits_per_dim_score_on_the_density_models_device():
    density = _OnMeta()
    logp = log_probs(density, torch.rand(5, 3, 2, 2), (0.0, 1.0), batch=2)
    assert logp.device.type == "cpu" and torch.allclose(logp, torch.full((5,), -12 * math.log(2)))
    assert math.isclose(_bits_per_dim(density, torch.rand(4, 3, 2, 2) * 2 - 1), 1.0, rel_tol=1e-6)
    assert density.seen == 9


def test_a_sample_grid_of_device_images_is_drawn_on_the_cpu(tmp_path):
    save_grid(torch.rand(12, 3, 4, 4).as_subclass(_NoNumpy), tmp_path / "grid.png", (0.0, 1.0))
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"


def test_the_2d_case_study_draws_device_outputs_on_the_cpu(tmp_path):
    x, y = two_moons(60, seed=0)
    xt, yt = two_moons(20, seed=1)
    x, xt = torch.from_numpy(x).reshape(-1, 1, 1, 2), torch.from_numpy(xt).reshape(-1, 1, 1, 2)
    y, yt = torch.from_numpy(y), torch.from_numpy(yt)
    data = ImageSplits(x[:4], y[:4], x, y, xt, yt)
    model = _GANOnDevice(ComplementGANConfig(image_shape=(1, 1, 2), num_classes=2, noise_size=2, d_hidden=[8, 4],
                                             g_hidden=[8]))
    paths = plot_case_study(model, data, tmp_path, seed=0)
    assert [p.name for p in paths] == [f"complement_gan_2d_{n}.png" for n in ("points", "boundaries", "features")]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
