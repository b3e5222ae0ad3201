"""The SVHN (1,000 labels) and CIFAR-10 (4,000 labels) recipes of the complement GAN end to end, on stand-in
files in the datasets' real formats (random images: the canonical files are not available offline): each
runs two steps with tiny networks and reports its test-error count; the density recipes train the PixelCNN++
that an LD run then reads."""

import json

import pytest
import torch

from genfeat.runner import load_recipe, run_recipe

from _data_fixtures import stand_in_images
from _gan_fixtures import RECIPES, TINY_CONV, TINY_PIXELCNN

LABELLED = {"svhn": 1000, "cifar10": 4000}


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def _check_errors(result: dict, out) -> dict:
    """The run's test-error count: an integer out of the 30 stand-in test images, in the results and the log."""
    assert {"test_errors_mean", "test_errors_std", "seeds", "seconds"} <= set(result)
    run = result["runs"][0]
    assert isinstance(run["test_errors"], int) and 0 <= run["test_errors"] <= 30 and run["test_examples"] == 30
    assert result["test_errors_mean"] == run["test_errors"]
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r.get("event") == "eval"]
    assert [e["step"] for e in evals] == [1, 2] and evals[-1]["test_errors"] == run["test_errors"]
    assert json.loads((out / "results.json").read_text())["test_errors"] == run["test_errors"]
    assert (out / "samples.png").read_bytes()[:4] == b"\x89PNG"
    return run


@pytest.mark.parametrize("recipe", ["svhn_fm", "svhn_fm_pt_ent", "svhn_fm_ld", "cifar10_fm", "cifar10_fm_vi"])
def test_recipe_keeps_the_thesis_labels_and_conv_networks(recipe):
    _, cfg = load_recipe(RECIPES / f"{recipe}.yaml")
    assert cfg.labelled == LABELLED[cfg.dataset] and cfg.model.architecture == "conv"
    assert tuple(cfg.model.image_shape) == (3, 32, 32) and min(cfg.model.dropout) > 0


@pytest.mark.parametrize("recipe", ["svhn_fm", "svhn_fm_pt_ent", "cifar10_fm", "cifar10_fm_vi"])
def test_recipe_reports_the_test_error_count(recipe, tmp_path, monkeypatch):
    stand_in_images(monkeypatch, tmp_path / "data", recipe.split("_")[0])
    result = run_recipe(RECIPES / f"{recipe}.yaml", TINY_CONV, out_dir=tmp_path / "out", progress=False)
    _check_errors(result, tmp_path / "out")


@pytest.mark.parametrize("dataset, recipe, ld", [("svhn", "svhn_fm_ld", {}),
                                                 ("cifar10", "cifar10_fm", {"ld_weight": 1e-4})])
def test_density_recipe_trains_the_pixelcnn_an_ld_run_reads(dataset, recipe, ld, tmp_path, monkeypatch):
    stand_in_images(monkeypatch, tmp_path / "data", dataset)
    pix = run_recipe(RECIPES / f"pixelcnn_{dataset}.yaml", TINY_PIXELCNN, out_dir=tmp_path / "pix", progress=False)
    assert 0 < pix["runs"][0]["test_bpd"] < 20
    over = {**TINY_CONV, **ld, "density_checkpoint": str(tmp_path / "pix" / "final")}
    run = _check_errors(run_recipe(RECIPES / f"{recipe}.yaml", over, out_dir=tmp_path / "ld", progress=False),
                        tmp_path / "ld")
    assert run["ld_epsilon"] < 0 and run["max_logp_generated"] < 0
    records = [json.loads(line) for line in (tmp_path / "ld" / "metrics.jsonl").read_text().splitlines()]
    assert any("g/ld" in r for r in records)
