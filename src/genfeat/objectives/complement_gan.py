"""Complement ("bad") GAN objectives (thesis §3.1.3): the discriminator's Eq. (3.6) and the generator's Eq. (3.5).

With the fake-class logit fixed at zero and s(x) = log Σ_{k≤K} exp l_k(x) (logsumexp of the real logits):

    log P(y ≤ K | x) = s − softplus(s),      log P(K+1 | x) = −softplus(s).

Discriminator, Eq. (3.6), minimised:
    −E_{(x,y)~L} log P(y | x, y ≤ K)  −  w_u E_{x~U} log P(y ≤ K | x)  −  w_g E_{x~G} log P(K+1 | x)
    + w_e E_{x~U} H(P(· | x, y ≤ K))            (the optional conditional-entropy term)
(w_u = w_g = 1/2 in the released code.)

Generator, Eq. (3.5), minimised over G (and the encoder q):
    ||E_{x~U} h(x) − E_{z} h(G(z))||² / d                        feature matching (FM)
    − H(p_G), by either  w_pt · PT(h(G(z)))                      pull-away term (PT)
                    or   w_vi · E_z[−log q(z | G(z))]            variational bound (VI)
    + w_ld · E_z[log p(G(z)) · 1[log p(G(z)) > ε]]              low density (LD), p a frozen density model
Each term is a switch (its weight 0, or ``feature_matching`` false), giving the rows of Table 3.2.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..framework.objective import LossOutput, Objective


def log_prob_real(logits: Tensor) -> Tensor:
    """log P(y ≤ K | x) = s − softplus(s), s = logsumexp of the real logits; (b, k) -> (b,)."""
    s = torch.logsumexp(logits, -1)
    return s - F.softplus(s)


def log_prob_fake(logits: Tensor) -> Tensor:
    """log P(K+1 | x) = −softplus(s) with the fake logit fixed at 0; (b, k) -> (b,)."""
    return -F.softplus(torch.logsumexp(logits, -1))


def conditional_entropy(logits: Tensor) -> Tensor:
    """H(P(· | x, y ≤ K)) = −Σ_k p_k log p_k over the K real classes; (b, k) -> (b,)."""
    logp = logits.log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def pull_away(features: Tensor) -> Tensor:
    """Pull-away term (Zhao et al. 2017): mean squared cosine similarity of distinct rows; (b, d) -> ()."""
    f = F.normalize(features, dim=1)
    sim = f @ f.t()
    n = len(f)
    return ((sim ** 2).sum() - n) / (n * (n - 1))


def gaussian_nll(mean: Tensor, log_sigma: Tensor, z: Tensor) -> Tensor:
    """−log N(z; mean, diag σ²) summed over the z dimensions; (b, z) each -> (b,)."""
    return (log_sigma + 0.5 * ((z - mean) / log_sigma.exp()) ** 2 + 0.5 * math.log(2 * math.pi)).sum(-1)


def density_input(x: Tensor, pixel_range: tuple[float, float]) -> Tensor:
    """Images in ``pixel_range`` as the density model reads them: rounded to the 256 values of an 8-bit
    pixel and mapped to [−1, 1]. The discretised likelihood puts the whole tail below the lowest value
    on that value, so an off-grid generated pixel at 0.002 (a "black" background) would be scored as
    an interior bin of tiny mass; rounding scores it as black, as a saved image would be. The rounding
    passes gradients straight through. Shapes: any -> the same."""
    lo, hi = pixel_range
    u = (x - lo) / (hi - lo) * 255
    return (u + (u.round() - u).detach()) / 127.5 - 1


def _pack(terms: dict[str, Tensor], count: int, logs: dict[str, float]) -> LossOutput:
    """The summed weighted batch means as a LossOutput over ``count`` items (each log a mean times count)."""
    total = sum(terms.values())
    logs = {**{k: float(v.detach()) * count for k, v in terms.items()}, **logs}
    return LossOutput(total * count, count, logs)


class DiscriminatorObjective(Objective):
    """Eq. (3.6), the discriminator's loss; every term a batch mean.

    Args:
        unlabelled_weight: w_u of −log P(y ≤ K | x) on unlabelled data (default 0.5, the released code).
        generated_weight: w_g of −log P(K+1 | G(z)) on generated data (default 0.5).
        entropy_weight: w_e of the conditional entropy on unlabelled data (default 0.0: off).
    Batch:
        ``x_lab`` (b_l, c, h, w), ``y_lab`` (b_l,) int64 in 0..K−1, ``x_unl`` (b_u, c, h, w); G(z) has b_u rows.
        With all three weights 0 (the supervised baseline) ``x_unl`` is not used.
    Logs (means per step): ``lab`` the labelled cross-entropy, ``unl``, ``gen``, ``ent`` the other terms
    (weighted), ``lab_acc`` the labelled batch accuracy, ``gen_fake`` the share of G(z) classed fake.
    """

    name = "d"

    def __init__(self, unlabelled_weight: float = 0.5, generated_weight: float = 0.5, entropy_weight: float = 0.0):
        self.unlabelled_weight = unlabelled_weight
        self.generated_weight = generated_weight
        self.entropy_weight = entropy_weight

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        lab = model(batch["x_lab"]).logits
        terms = {"lab": F.cross_entropy(lab, batch["y_lab"])}
        logs = {}
        count = len(batch["y_lab"])
        if self.unlabelled_weight or self.entropy_weight or self.generated_weight:
            count = len(batch["x_unl"])
        if self.unlabelled_weight or self.entropy_weight:
            unl = model(batch["x_unl"]).logits
            if self.unlabelled_weight:
                terms["unl"] = -self.unlabelled_weight * log_prob_real(unl).mean()
            if self.entropy_weight:
                terms["ent"] = self.entropy_weight * conditional_entropy(unl).mean()
        if self.generated_weight:
            with torch.no_grad():
                _, fake = model.generate(len(batch["x_unl"]))
            gen = model(fake).logits
            fake_p = log_prob_fake(gen)
            terms["gen"] = -self.generated_weight * fake_p.mean()
            logs["gen_fake"] = float((fake_p.detach() > math.log(0.5)).float().sum())
        logs["lab_acc"] = float((lab.argmax(-1) == batch["y_lab"]).float().mean()) * count
        return _pack(terms, count, logs)


class GeneratorObjective(Objective):
    """Eq. (3.5), the generator's loss on b_u generated images (b_u = the unlabelled batch size).

    Args:
        feature_matching: the FM term (default True).
        pt_weight: w_pt of the pull-away term on h(G(z)) (default 0.0: off).
        vi_weight: w_vi of −log q(z | G(z)) (default 0.0: off; needs the model's encoder).
        ld_weight: w_ld of the low-density term (default 0.0: off; needs ``density``).
        density: frozen density model with ``log_prob(x) -> (b,)`` in nats per image, x in [−1, 1] (read
            through :func:`density_input`).
        epsilon: ε, the threshold on log p (the q-th centile of the training images' log p).
        ld_batch: generated images the density model scores at an LD step (default 30, the released code).
        ld_every: an LD step every this many generator steps (default 10, the released code's p = 0.1).
        ld_start: no LD step before this many generator steps (default 0).
    Batch:
        ``x_unl`` (b_u, c, h, w).
    Logs: ``fm``, ``pt``, ``vi``, ``ld`` the weighted terms, ``ld_active`` the share of scored images
    above ε. The trainer averages a log over all generator steps of its window, so ``ld`` and
    ``ld_active`` there are their LD-step values times about 1 / ld_every; 0 means no image was above ε.
    """

    name = "g"

    def __init__(self, feature_matching: bool = True, pt_weight: float = 0.0, vi_weight: float = 0.0,
                 ld_weight: float = 0.0, density: nn.Module | None = None, epsilon: float | None = None,
                 ld_batch: int = 30, ld_every: int = 10, ld_start: int = 0):
        if ld_weight and (density is None or epsilon is None):
            raise ValueError("the low-density term needs a density model and epsilon")
        if not (feature_matching or pt_weight or vi_weight):
            raise ValueError("the generator objective needs feature matching, PT or VI (LD runs only every "
                             "ld_every steps)")
        self.feature_matching = feature_matching
        self.pt_weight = pt_weight
        self.vi_weight = vi_weight
        self.ld_weight = ld_weight
        self.density = density
        self.epsilon = epsilon
        self.ld_batch = ld_batch
        self.ld_every = ld_every
        self.ld_start = ld_start
        self.calls = 0

    def reset_state(self) -> None:
        self.calls = 0

    def state_dict(self) -> dict[str, Tensor]:
        return {"calls": torch.tensor(self.calls)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.calls = int(state["calls"])

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        unl = batch["x_unl"]
        z, fake = model.generate(len(unl))
        terms: dict[str, Tensor] = {}
        logs: dict[str, float] = {}
        if self.feature_matching or self.pt_weight:
            h_fake = model(fake).features
            if self.feature_matching:
                with torch.no_grad():
                    h_real = model(unl).features
                terms["fm"] = ((h_fake.mean(0) - h_real.mean(0)) ** 2).mean()
            if self.pt_weight:
                terms["pt"] = self.pt_weight * pull_away(h_fake)
        if self.vi_weight:
            q = model.encoder(fake)
            terms["vi"] = self.vi_weight * gaussian_nll(q.mean, q.log_sigma, z).mean()
        if self.ld_weight and self.calls >= self.ld_start and (self.calls - self.ld_start) % self.ld_every == 0:
            n = min(self.ld_batch, len(fake))
            logp = self.density.log_prob(density_input(fake[:n], model.config.pixel_range))
            active = logp.detach() > self.epsilon
            terms["ld"] = self.ld_weight * (logp * active).mean()
            logs["ld_active"] = float(active.float().mean()) * len(unl)
        self.calls += 1
        return _pack(terms, len(unl), logs)


class DensityObjective(Objective):
    """−log p(x) of a density model with ``log_prob`` (the PixelCNN++ pretraining), summed over the batch's
    images; logs ``bpd``, bits per dimension.

    Batch: ``x`` (b, c, h, w) in [−1, 1].
    """

    name = "nll"

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        nll = -model.log_prob(batch["x"])
        bits = float(nll.detach().sum()) / (batch["x"][0].numel() * math.log(2))
        return LossOutput(nll.sum(), len(nll), {"bpd": bits})
