"""RECL (Dai et al. 2019, App. C; thesis §2.1.4) on a hand-computed group, synthetic curves and real models."""

import math

import numpy as np
import pytest
import torch

from genfeat.errors import ConfigError
from genfeat.eval.recl import recl_from_losses, run_recl
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

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


def test_run_recl_writes_table_and_plots(tmp_path):
    torch.manual_seed(0)
    cfg = TransformerXLConfig(n_token=30, d_model=16, n_head=2, d_head=8, d_inner=32, n_layer=1, mem_len=8,
                              dropout=0.0)
    models = {"a": TransformerXLLMHeadModel(cfg), "b": TransformerXLLMHeadModel(cfg)}
    tokens = torch.randint(0, 30, (400,))
    res = run_recl(models, tokens, [4, 8, 16], r=[1.0, 0.5], out_dir=tmp_path, seg_len=4, batch_size=2)
    assert set(res["recl"]) == {"a", "b"} and set(res["recl"]["a"]) == {"r=1", "r=0.5"}
    assert res["tokens"] == (400 // 2 - 1) * 2
    for plot in res["plots"]:
        assert open(plot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "recl.txt").read_text()
    assert "r=1" in table
    assert set(res["recl_lower_bounds"]) == {"a", "b"}
    assert ("extend --contexts" in table) == any(res["recl_lower_bounds"].values())
