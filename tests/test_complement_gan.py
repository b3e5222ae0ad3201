"""Complement GAN: each term of Eq. (3.6) and Eq. (3.5) against a direct formula, the networks'
invariants (fake logit 0, instance noise only in training, weight-norm data init, bounded encoder
variance), and the PixelCNN++ likelihood (normalised over the 256 values of a pixel, causal)."""

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from genfeat.models.complement_gan import (ComplementGAN, ComplementGANConfig, DiscriminatorOutput, WNConv2d,
                                           WNLinear, data_init)
from genfeat.models.pixelcnn import PixelCNN, PixelCNNConfig, discretized_logistic_mixture_log_prob
from genfeat.objectives.complement_gan import (DensityObjective, DiscriminatorObjective, GeneratorObjective,
                                               conditional_entropy, density_input, gaussian_nll, log_prob_fake, log_prob_real,
                                               pull_away)


@dataclass
class _Cfg:
    pixel_range: tuple = (0.0, 1.0)


class _Stub(nn.Module):
    """A linear "discriminator" on 4-pixel images with 3 classes, features tanh(x), a linear "generator"."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.d = nn.Linear(4, 3)
        self.g = nn.Linear(2, 4)
        self.config = _Cfg()

    def forward(self, x):
        x = x.flatten(1)
        return DiscriminatorOutput(self.d(x), torch.tanh(x @ torch.ones(4, 2)))

    def generate(self, n):
        z = torch.rand(n, 2)
        return z, torch.sigmoid(self.g(z))


def _k_plus_1(logits):
    """log-softmax over K+1 classes with the fake logit appended as 0."""
    return torch.cat([logits, torch.zeros(len(logits), 1)], 1).log_softmax(1)


def test_real_and_fake_log_probabilities_are_those_of_k_plus_1_classes_with_fake_logit_zero():
    logits = torch.randn(6, 4) * 3
    full = _k_plus_1(logits)
    assert torch.allclose(log_prob_fake(logits), full[:, -1], atol=1e-6)
    assert torch.allclose(log_prob_real(logits), torch.logsumexp(full[:, :-1], 1), atol=1e-6)
    assert torch.allclose(log_prob_real(logits).exp() + log_prob_fake(logits).exp(), torch.ones(6), atol=1e-6)


def test_conditional_entropy_pull_away_and_gaussian_nll_match_direct_formulas():
    logits = torch.randn(5, 3)
    p = logits.softmax(1)
    assert torch.allclose(conditional_entropy(logits), -(p * p.log()).sum(1), atol=1e-6)
    f = torch.randn(4, 3)
    pt = sum((F.cosine_similarity(f[i], f[j], 0) ** 2) for i in range(4) for j in range(4) if i != j) / 12
    assert torch.allclose(pull_away(f), pt, atol=1e-6)
    mean, log_sigma, z = torch.randn(3, 5), torch.randn(3, 5) * 0.3, torch.randn(3, 5)
    want = -torch.distributions.Normal(mean, log_sigma.exp()).log_prob(z).sum(1)
    assert torch.allclose(gaussian_nll(mean, log_sigma, z), want, atol=1e-5)


def _batch():
    g = torch.Generator().manual_seed(1)
    return {"x_lab": torch.rand(4, 1, 2, 2, generator=g), "y_lab": torch.tensor([0, 1, 2, 1]),
            "x_unl": torch.rand(6, 1, 2, 2, generator=g)}


@pytest.mark.parametrize("w_u, w_g, w_e", [(0.5, 0.5, 0.0), (1.0, 0.3, 0.2), (0.0, 0.0, 0.0)])
def test_discriminator_loss_is_eq_3_6_term_by_term(w_u, w_g, w_e):
    model, batch = _Stub(), _batch()
    torch.manual_seed(3)
    out = DiscriminatorObjective(w_u, w_g, w_e)(model, batch)
    torch.manual_seed(3)
    _, fake = model.generate(6)
    lab, unl, gen = model(batch["x_lab"]).logits, model(batch["x_unl"]).logits, model(fake).logits
    # labelled term conditioned on y <= K: the softmax over the K real classes
    want = F.cross_entropy(lab, batch["y_lab"])
    want = want - w_u * torch.logsumexp(_k_plus_1(unl)[:, :-1], 1).mean() - w_g * _k_plus_1(gen)[:, -1].mean()
    want = want + w_e * conditional_entropy(unl).mean()
    assert torch.allclose(out.mean, want, atol=1e-6)
    assert out.count == (4 if (w_u, w_g, w_e) == (0, 0, 0) else 6)
    assert set(out.logs) >= {"lab", "lab_acc"} and (("gen" in out.logs) == bool(w_g))


def test_generator_loss_feature_matching_pt_and_vi_match_eq_3_5():
    model = ComplementGAN(ComplementGANConfig(image_shape=(1, 2, 2), d_hidden=[5, 3], g_hidden=[4], noise_size=3,
                                              encoder=True, encoder_hidden=[4]))
    x_unl = torch.rand(8, 1, 2, 2)
    torch.manual_seed(4)
    out = GeneratorObjective(True, pt_weight=0.7, vi_weight=0.1)(model, {"x_unl": x_unl})
    torch.manual_seed(4)
    z, fake = model.generate(8)
    h_fake = model(fake).features
    h_real = model(x_unl).features
    fm = ((h_fake.mean(0) - h_real.mean(0)) ** 2).sum() / h_fake.shape[1]
    q = model.encoder(fake)
    vi = -torch.distributions.Normal(q.mean, q.log_sigma.exp()).log_prob(z).sum(1).mean()
    assert torch.allclose(out.mean, fm + 0.7 * pull_away(h_fake) + 0.1 * vi, atol=1e-5)
    out.mean.backward()
    assert model.generator.net[0].weight.grad is not None and model.encoder.net[0].weight.grad is not None


class _Density(nn.Module):
    """log p(x) = −100 · mean of x: known values to check the threshold and the rescaling to [−1, 1]."""

    def log_prob(self, x):
        assert x.min() >= -1 and x.max() <= 1
        return -100 * x.flatten(1).mean(1)


def test_low_density_term_counts_only_samples_above_epsilon_every_ld_every_steps():
    model, x_unl = _Stub(), torch.rand(6, 1, 2, 2)
    obj = GeneratorObjective(False, pt_weight=1e-9, ld_weight=0.5, density=_Density(), epsilon=0.0, ld_batch=4,
                             ld_every=2, ld_start=1)
    logs = []
    for step in range(4):
        torch.manual_seed(step)
        out = obj(model, {"x_unl": x_unl})
        torch.manual_seed(step)
        _, fake = model.generate(6)
        logp = -100 * ((fake[:4] * 255).round() / 127.5 - 1).flatten(1).mean(1)
        ld = 0.5 * (logp * (logp > 0)).mean()
        logs.append("ld" in out.logs)
        if "ld" in out.logs:
            assert math.isclose(out.logs["ld"] / 6, float(ld.detach()), rel_tol=1e-5)
    assert logs == [False, True, False, True], "first LD step after ld_start, then every ld_every"
    state = obj.state_dict()
    again = GeneratorObjective(False, pt_weight=1e-9, ld_weight=0.5, density=_Density(), epsilon=0.0, ld_every=2,
                               ld_start=1)
    again.load_state_dict(state)
    assert again.calls == 4


def test_density_input_rounds_to_8_bit_values_with_a_straight_through_gradient():
    x = torch.tensor([0.0, 0.001, 0.31, 0.999, 1.0], requires_grad=True)
    y = density_input(x, (0.0, 1.0))
    assert torch.allclose(y, torch.tensor([0, 0, 79, 255, 255]) / 127.5 - 1)
    y.sum().backward()
    assert torch.allclose(x.grad, torch.full((5,), 2.0))
    assert torch.allclose(density_input(torch.tensor([-1.0, 1.0]), (-1.0, 1.0)), torch.tensor([-1.0, 1.0]))


def test_ld_needs_density_and_generator_needs_a_term():
    with pytest.raises(ValueError, match="density model and epsilon"):
        GeneratorObjective(True, ld_weight=1.0)
    with pytest.raises(ValueError, match="feature matching, PT or VI"):
        GeneratorObjective(False)


def test_mlp_discriminator_noise_only_while_training_and_data_init_standardises():
    cfg = ComplementGANConfig()
    model = ComplementGAN(cfg)
    hidden, out = model.discriminator.features[1], model.discriminator.out[1]
    assert isinstance(hidden, WNLinear) and isinstance(out, WNLinear)
    # the released code fixes the hidden layers' scales after the data init; the output layer's trains
    assert "g" in dict(hidden.named_buffers()) and "g" not in dict(hidden.named_parameters())
    assert "g" in dict(out.named_parameters())
    x = torch.rand(300, 1, 28, 28)
    net = nn.Sequential(WNLinear(784, 20), nn.ReLU(), WNLinear(20, 7))
    data_init(net, x.flatten(1))
    with torch.no_grad():
        hidden = net[0](x.flatten(1))
        for pre in (hidden, net[2](hidden.relu())):
            assert pre.mean(0).abs().max() < 1e-4 and (pre.std(0, unbiased=False) - 1).abs().max() < 1e-3
    model.eval()
    a, b = model(x[:5]), model(x[:5])
    assert torch.equal(a.logits, b.logits) and a.logits.shape == (5, 10) and a.features.shape == (5, 250)
    model.train()
    assert not torch.equal(model(x[:5]).logits, model(x[:5]).logits), "instance noise while training"
    z, images = model.generate(7)
    assert images.shape == (7, 1, 28, 28) and 0 <= images.min() and images.max() <= 1 and z.shape == (7, 100)


def test_conv_networks_shapes_spatial_dropout_and_encoder_bounds():
    cfg = ComplementGANConfig(image_shape=(3, 32, 32), architecture="conv", conv_widths=(8, 16), encoder=True,
                              encoder_hidden=[16], noise_size=10, log_sigma_min=-2.0, log_sigma_max=0.5)
    model = ComplementGAN(cfg)
    assert any(isinstance(m, nn.Dropout2d) for m in model.discriminator.modules())
    assert any(isinstance(m, WNConv2d) for m in model.discriminator.modules())
    _, images = model.generate(4)
    assert images.shape == (4, 3, 32, 32) and images.abs().max() <= 1
    out = model(images)
    assert out.logits.shape == (4, 10) and out.features.shape == (4, 16)
    with torch.no_grad():
        model.encoder.net[-1].b.fill_(1e3)
        assert torch.allclose(model.encoder(images).log_sigma, torch.full((4, 10), 0.5))
        model.encoder.net[-1].b.fill_(-1e3)
        assert torch.allclose(model.encoder(images).log_sigma, torch.full((4, 10), -2.0))
    with pytest.raises(ValueError, match="32 x 32"):
        ComplementGANConfig(architecture="conv")


def test_pixelcnn_likelihood_sums_to_one_over_the_256_values_of_a_pixel():
    m = 3
    torch.manual_seed(0)
    params = torch.randn(1, 3 * m, 1, 1).repeat(256, 1, 1, 1)
    params[:, m:2 * m] *= 0.6  # means inside [-1, 1] and beyond
    values = (torch.arange(256).float() / 127.5 - 1).view(256, 1, 1, 1)
    p = discretized_logistic_mixture_log_prob(values, params, m).exp()
    assert abs(float(p.sum()) - 1.0) < 1e-4
    # a sharp component still normalises (its centre bin takes the pdf branch or the cdf difference)
    params[:, 2 * m:3 * m] = -4.0
    assert abs(float(discretized_logistic_mixture_log_prob(values, params, m).exp().sum()) - 1.0) < 1e-3


@pytest.mark.parametrize("channels", [1, 3])
def test_pixelcnn_is_causal_and_trains(channels):
    torch.manual_seed(0)
    model = PixelCNN(PixelCNNConfig(image_shape=(channels, 6, 6), filters=8, blocks=2, mixtures=2))
    x = torch.rand(2, channels, 6, 6) * 2 - 1
    out = model(x)
    y = x.clone()
    y[:, :, 3, 2] = -y[:, :, 3, 2]
    changed = (model(y) - out).abs().amax((0, 1)) > 1e-6
    # the parameters of pixel (i, j) depend only on the rows above and the pixels to its left
    before = torch.zeros(6, 6, dtype=torch.bool)
    before[:3] = True
    before[3, :3] = True
    assert not changed[before].any() and changed[3, 3]
    loss = DensityObjective()(model, {"x": x})
    assert loss.count == 2 and loss.logs["bpd"] > 0
    loss.mean.backward()
    assert all(p.grad is not None for p in model.parameters())
