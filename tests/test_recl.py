import numpy as np
import pytest
import torch

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


def test_recl_matches_construction():
    res = recl_from_losses(synthetic(), GRID, r=1.0, threshold=0.01)
    assert res["starts"] == [10, 20, 30, 40, 50]
    # A still gains from 30 -> 40 and not after; B from 10 -> 20. C improves on its own, but never
    # beats the group's short-context baseline, so none of its gain counts.
    assert res["recl"] == [30, 10, 0]
    assert np.abs(res["unnormalised"][2]).max() < 1e-9
    assert res["gains"][0][2] == pytest.approx(0.3 / (synthetic()[:, 2].min(0).mean()))


def test_top_r_restricts_to_hard_tokens():
    losses = synthetic()
    # Make the long-context gain of A exist only on the easiest half of the tokens.
    hard = losses[0, 0] >= np.median(losses[0, 0])
    for j in range(3, len(GRID)):
        losses[0, j, hard] = losses[0, 2, hard]
    assert recl_from_losses(losses, GRID, r=1.0)["recl"][0] == 30
    assert recl_from_losses(losses, GRID, r=0.1)["recl"][0] == 20


def test_delta_must_land_on_grid():
    with pytest.raises(ValueError):
        recl_from_losses(synthetic(), GRID, delta=7)
    assert recl_from_losses(synthetic(), GRID, delta=20)["starts"] == [10, 20, 30, 40]


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
    assert "r=1" in (tmp_path / "recl.txt").read_text()
