"""RECL (Dai et al. 2019, App. C; thesis §2.1.4) on a hand-computed group, synthetic curves and real models."""

import copy
import math

import numpy as np
import pytest
import torch

from genfeat.errors import ConfigError
from genfeat.eval.lm import token_losses
from genfeat.eval.recl import recl_from_losses, run_recl

from _txl_fixtures import periodic, tiny

GRID = [10, 20, 30, 40, 50, 60]


def synthetic():
    rng = np.random.default_rng(0)
    base = rng.uniform(2, 6, size=2000)

    def curve(limit, offset=0.0):
        return np.stack([base + offset - 0.3 * min(c, limit) / 10 for c in GRID])

    # A keeps improving up to 40 tokens, B only up to 20, C is A made uniformly worse.
    return np.stack([curve(40), curve(20), curve(40, offset=2.0)])


# Two models, contexts 1..4 (Δ = 1), four tokens. Rows: l_i(c, t) for c = 1, 2, 3, 4.
HAND = np.array([
    [[2.0, 4.0, 1.0, 3.0], [1.0, 2.0, 1.0, 3.0], [1.0, 2.0, 0.5, 2.9], [0.2, 1.5, 0.1, 2.9]],  # A
    [[3.0, 3.0, 2.0, 3.0], [3.0, 3.0, 0.5, 2.9], [1.0, 1.5, 0.5, 2.9], [1.0, 1.5, 0.5, 2.9]],  # B
])


def test_relative_gain_on_a_hand_computed_group():
    # c = 1 -> 2: baseline b(1, .) = [2, 3, 1, 3].
    #   r = 1: T = all; f(1, 1) = 9/4. f_A(1, 2) = mean(min(b, [1, 2, 1, 3])) = 7/4,
    #          f_B(1, 2) = mean(min(b, [3, 3, .5, 2.9])) = 8.4/4.
    #   r = .5: T = the 2 largest b = tokens 1 and 3; f(1, 1) = 3, f_A = (2 + 3)/2, f_B = (3 + 2.9)/2.
    # The gain is the relative perplexity reduction 1 - exp(f(c, c') - f(c, c)), not a loss ratio.
    res = recl_from_losses(HAND, [1, 2, 3, 4], r=1.0)
    assert res["starts"] == [1, 2, 3]
    assert res["gains"][:, 0] == pytest.approx([1 - math.exp(-0.5), 1 - math.exp(-0.15)])
    assert res["unnormalised"][:, 0] == pytest.approx([math.exp(2.25) - math.exp(1.75), math.exp(2.25) - math.exp(2.1)])
    half = recl_from_losses(HAND, [1, 2, 3, 4], r=0.5)
    assert half["gains"][:, 0] == pytest.approx([1 - math.exp(-0.5), 1 - math.exp(-0.05)])
    # c = 2 -> 3: b(2, .) = [1, 2, .5, 2.9]; A gains nothing, B gains 0.125 nats (r = 1).
    # c = 3 -> 4: b(3, .) = [1, 1.5, .5, 2.9]; A gains 0.3 nats on the easy tokens 0 and 2 only, B nothing.
    assert res["gains"][:, 1] == pytest.approx([0.0, 1 - math.exp(-0.125)])
    assert res["gains"][:, 2] == pytest.approx([1 - math.exp(-0.3), 0.0])
    assert half["gains"][:, 2] == pytest.approx([0.0, 0.0]), "r = .5 keeps only the hard tokens 1 and 3"


def test_recl_walks_from_the_smallest_context_and_stops_at_the_first_small_gain():
    # A gains 1 -> 2, then not 2 -> 3: RECL 2, although it gains again 3 -> 4 (r = 1).
    # B gains 1 -> 2 and 2 -> 3, then not 3 -> 4: RECL 3.
    res = recl_from_losses(HAND, [1, 2, 3, 4], r=1.0, threshold=0.01)
    assert res["recl"] == [2, 3] and res["at_grid_end"] == [False, False]
    # B's gain 1 -> 2 on the hard half is 1 - exp(-.05) = 0.0488: below a 0.05 threshold it stays at 1.
    assert recl_from_losses(HAND, [1, 2, 3, 4], r=0.5, threshold=0.05)["recl"] == [2, 1]
    assert recl_from_losses(HAND, [1, 2, 3, 4], r=1.0, threshold=0.05)["recl"] == [2, 3]
    # No gain reaches the threshold: RECL is the initial context.
    assert recl_from_losses(HAND, [1, 2, 3, 4], threshold=0.5)["recl"] == [1, 1]
    # Every step on the grid gains: RECL is the last context reached, flagged as a lower bound.
    short = recl_from_losses(HAND[:, :2], [1, 2])
    assert short["recl"] == [2, 2] and short["at_grid_end"] == [True, True]


def test_recl_matches_construction():
    res = recl_from_losses(synthetic(), GRID, r=1.0, threshold=0.01)
    assert res["starts"] == [10, 20, 30, 40, 50]
    # A improves up to 40 tokens, B up to 20. C improves on its own, but never beats the group's
    # short-context baseline, so none of its gain counts and it stays at the initial context.
    assert res["recl"] == [40, 20, 10]
    assert np.abs(res["unnormalised"][2]).max() < 1e-9
    assert res["gains"][0][2] == pytest.approx(1 - np.exp(-0.3))


def test_top_r_restricts_to_hard_tokens():
    losses = synthetic()
    # Make the long-context gain of A beyond 30 tokens exist only on the easiest half of the tokens.
    hard = losses[0, 0] >= np.median(losses[0, 0])
    for j in range(3, len(GRID)):
        losses[0, j, hard] = losses[0, 2, hard]
    assert recl_from_losses(losses, GRID, r=1.0)["recl"][0] == 40
    assert recl_from_losses(losses, GRID, r=0.1)["recl"][0] == 30


def test_delta_must_land_on_grid_and_inputs_are_checked():
    with pytest.raises(ConfigError, match="smallest context 10 \\+ Δ is not on the grid"):
        recl_from_losses(synthetic(), GRID, delta=7)
    with pytest.raises(ConfigError, match="not increasing"):
        recl_from_losses(synthetic(), GRID[::-1])
    res = recl_from_losses(synthetic(), GRID, delta=20)
    assert res["starts"] == [10, 20, 30, 40]
    assert res["recl"] == [50, 30, 10], "the walk is 10 -> 30 -> 50"
    assert res["at_grid_end"] == [True, False, False]
    with pytest.raises(ConfigError, match="r is the fraction"):
        recl_from_losses(synthetic(), GRID, r=0.0)
    with pytest.raises(ValueError, match="6 contexts"):
        recl_from_losses(synthetic()[:, :5], GRID)


@pytest.fixture(scope="module")
def copy_model():
    """A 1-layer LM trained to copy the token 6 steps back (fresh period-6 patterns every step)."""
    model = tiny(scale=0.0, init_std=0.2, proj_init_std=0.2, n_layer=1, mem_len=12).train()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for step in range(150):
        x, y, _ = periodic(b=16, t=12, period=6, alphabet=4, seed=step + 1)
        first = model(x[:, :12], labels=y[:, :12])
        loss = -model(x[:, 12:], mems=first.mems, labels=y[:, 12:]).target_log_probs.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def png_size(path):
    head = open(path, "rb").read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_run_recl_finds_the_context_a_copy_model_needs(tmp_path, copy_model):
    # Held-out patterns (seed 0 was never trained on), 8 streams of 60 tokens. With segments of 2
    # every token sees between c - 1 and c tokens. The copy model needs the token 6 back: context 4
    # cannot see it, 8 can, 16 adds nothing, so its RECL is 8. With its attention output zeroed the
    # model sees only the current token: no context helps and its RECL is the smallest context.
    x, _, _ = periodic(b=8, t=60, period=6, alphabet=4, segments=1, seed=0)
    tokens = x.flatten()
    blind = copy.deepcopy(copy_model)
    with torch.no_grad():
        blind.layers[0].attn.out.weight.zero_()
    contexts = [2, 4, 8, 16]
    res = run_recl({"copy": copy_model, "blind": blind}, tokens, contexts, r=[1.0, 0.5], out_dir=tmp_path,
                   seg_len=2, batch_size=8)
    assert res["recl"] == {"copy": {"r=1": 8, "r=0.5": 8}, "blind": {"r=1": 2, "r=0.5": 2}}
    assert res["recl_lower_bounds"] == {"copy": [], "blind": []}
    assert res["tokens"] == 8 * 59
    ppl = res["ppl"]
    for c in (4, 8):  # the reported perplexities are those of the per-token losses at each context
        want = math.exp(float(token_losses(copy_model, tokens, c, seg_len=2, batch_size=8).mean()))
        assert ppl["copy"][str(c)] == pytest.approx(want, rel=1e-5)
    assert ppl["copy"]["4"] > 10 * max(ppl["copy"]["8"], ppl["copy"]["16"])
    assert max(ppl["blind"].values()) == pytest.approx(min(ppl["blind"].values()), rel=1e-5)
    table = (tmp_path / "recl.txt").read_text().splitlines()
    assert table[1].split() == ["copy", "8", "8"] and table[2].split() == ["blind", "2", "2"]
    assert "extend --contexts" not in "\n".join(table)
    # Figures of figsize x 120 dpi with the curves drawn: more than a few colours, the first
    # line colour (matplotlib's C0) among them.
    from matplotlib.image import imread

    gain_plot, ppl_plot = res["plots"]
    assert png_size(gain_plot) == (1200, 432) and png_size(ppl_plot) == (600, 432)
    for plot in res["plots"]:
        pixels = (imread(plot)[..., :3] * 255).round().astype(int).reshape(-1, 3)
        colours = {tuple(p) for p in pixels}
        assert len(colours) > 20 and (31, 119, 180) in colours


def test_run_recl_on_a_short_grid_flags_lower_bounds(tmp_path, copy_model):
    x, _, _ = periodic(b=4, t=60, period=6, alphabet=4, segments=1, seed=0)
    res = run_recl({"copy": copy_model}, x.flatten(), [4, 8], out_dir=tmp_path, seg_len=2, batch_size=4)
    assert res["recl"] == {"copy": {"r=1": 8}} and res["recl_lower_bounds"] == {"copy": ["r=1"]}
    assert res["tokens"] == 4 * 59
    assert "extend --contexts" in (tmp_path / "recl.txt").read_text()
