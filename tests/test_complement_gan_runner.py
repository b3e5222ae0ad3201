"""Complement GAN end to end on real MNIST (a few steps, tiny networks): the test-error count in the
results and the metrics log, exact resume, the supervised baseline, the PixelCNN++ pretraining and the
low-density term with its checkpoint, the 2-D case study's figures, and bad input."""

import json
import os
import pathlib

import pytest
import torch

from genfeat.errors import CheckpointError, ConfigError
from genfeat.framework.checkpoint import load_weights, save_checkpoint
from genfeat.hub import from_pretrained
from genfeat.methods.complement_gan import count_errors, load_density, load_splits, max_logp_of_samples
from genfeat.models.pixelcnn import PixelCNN, PixelCNNConfig
from genfeat.runner import load_recipe, run_recipe

DATA = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))
RECIPES = pathlib.Path(__file__).resolve().parents[1] / "recipes" / "complement_gan"
pytestmark = pytest.mark.skipif(not (DATA / "mnist" / "train-images-idx3-ubyte.gz").is_file(), reason="no MNIST")

TINY = {"steps": 4, "model.d_hidden": [32, 16], "model.g_hidden": [32], "unlabelled_batch": 20, "init_batch": 50,
        "train.eval_every": 2, "train.save_every": 2, "train.progress": False}


@pytest.fixture(autouse=True)
def _data(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))
    torch.set_num_threads(1)


def _evals(out):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r.get("event") == "eval"]


def test_mnist_fm_recipe_reports_the_test_error_count_and_logs_it(tmp_path):
    result = run_recipe(RECIPES / "mnist_fm.yaml", TINY, out_dir=tmp_path / "out", progress=False)
    assert {"test_errors_mean", "test_errors_std", "seeds", "seconds"} <= set(result)
    run = result["runs"][0]
    assert isinstance(run["test_errors"], int) and 0 <= run["test_errors"] <= 10000 and run["test_examples"] == 10000
    evals = _evals(tmp_path / "out")
    assert [e["step"] for e in evals] == [2, 4] and evals[-1]["test_errors"] == run["test_errors"]
    assert (tmp_path / "out" / "samples.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "out" / "results.json").read_text())["test_errors"] == run["test_errors"]
    # OUT/final: the trained D and G, as from_pretrained loads them; its D makes the run's error count again
    final = from_pretrained(tmp_path / "out" / "final", "complement_gan")
    assert json.loads((tmp_path / "out" / "final" / "config.json").read_text())["method"] == "complement_gan"
    data = load_splits(load_recipe(RECIPES / "mnist_fm.yaml", TINY)[1], 0)
    assert count_errors(final, data.x_test, data.y_test) == run["test_errors"]


def test_every_seed_keeps_its_own_sample_grid(tmp_path):
    run_recipe(RECIPES / "mnist_fm.yaml", {**TINY, "steps": 2, "samples_png": str(tmp_path / "grid_{seed}.png")},
               seeds=[0, 1], out_dir=tmp_path / "out", progress=False)
    grids = [(tmp_path / "out" / f"seed{s}" / "samples.png").read_bytes() for s in (0, 1)]
    assert grids[0][:4] == b"\x89PNG" and grids[0] != grids[1]
    assert [(tmp_path / f"grid_{s}.png").read_bytes() for s in (0, 1)] == grids


def test_an_interrupted_run_resumes_to_the_same_weights_and_errors(tmp_path):
    full = run_recipe(RECIPES / "mnist_fm_vi.yaml", TINY, out_dir=tmp_path / "a", progress=False)["runs"][0]
    part = run_recipe(RECIPES / "mnist_fm_vi.yaml", {**TINY, "train.stop_after_steps": 2}, out_dir=tmp_path / "b",
                      progress=False)["runs"][0]
    assert part["interrupted"] == 1.0
    # a checkpoint in the layout of the runner's hand-built config.json (before complement_gan was a hub
    # architecture) resumes the same
    config = tmp_path / "b" / "last" / "config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({k: saved[k] for k in ("architecture", "model", "recipe")}))
    resumed = run_recipe(RECIPES / "mnist_fm_vi.yaml", TINY, out_dir=tmp_path / "b", progress=False,
                         resume=True)["runs"][0]
    assert resumed["test_errors"] == full["test_errors"]
    a = (tmp_path / "a" / "last" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "b" / "last" / "model.safetensors").read_bytes()


def test_supervised_baseline_trains_only_the_discriminator(tmp_path):
    run = run_recipe(RECIPES / "mnist_supervised.yaml", TINY, out_dir=tmp_path / "out", progress=False)["runs"][0]
    assert 0 <= run["test_errors"] <= 10000
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert any("d/lab" in r for r in records) and not any("g" in r or "d/unl" in r for r in records)


def test_pixelcnn_pretraining_then_fm_ld_uses_it(tmp_path):
    pix = run_recipe(RECIPES / "pixelcnn_mnist.yaml", {"steps": 2, "model.filters": 4, "model.blocks": 1,
                                                        "batch_size": 4, "eval_images": 20, "train.progress": False},
                     out_dir=tmp_path / "pix", progress=False)["runs"][0]
    assert 0 < pix["test_bpd"] < 20
    density = load_density(tmp_path / "pix" / "final", (1, 28, 28))
    assert not any(p.requires_grad for p in density.parameters())
    over = {**TINY, "density_checkpoint": str(tmp_path / "pix" / "final"), "ld_reference": 40, "ld_every": 1, "ld_start": 0,
            "ld_batch": 5}
    run = run_recipe(RECIPES / "mnist_fm_ld.yaml", over, out_dir=tmp_path / "ld", progress=False)["runs"][0]
    assert run["max_logp_generated"] < 0 and run["ld_epsilon"] < 0
    records = [json.loads(line) for line in (tmp_path / "ld" / "metrics.jsonl").read_text().splitlines()]
    assert any("g/ld" in r for r in records)
    # the same figure from the checkpoints afterwards (how it is measured for a run without LD)
    again = max_logp_of_samples(tmp_path / "ld" / "last", tmp_path / "pix" / "final", seed=0)
    assert again == pytest.approx(run["max_logp_generated"], rel=1e-6)


def test_density_checkpoint_of_other_images_is_refused(tmp_path):
    cfg = PixelCNNConfig(image_shape=(1, 8, 8), filters=4, blocks=1, mixtures=2)
    save_checkpoint(tmp_path / "p", PixelCNN(cfg), None,
                    {"architecture": "pixelcnn", "model": {"image_shape": [1, 8, 8], "filters": 4, "blocks": 1,
                                                           "mixtures": 2, "dropout": 0.0}})
    load_weights(tmp_path / "p", PixelCNN(cfg))
    with pytest.raises(CheckpointError, match=r"trained on images of shape \(1, 8, 8\), this run's are \(1, 28, 28\)"):
        load_density(tmp_path / "p", (1, 28, 28))


def test_labelled_size_not_divisible_by_the_classes_or_too_large_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="labelled is 105, not a positive multiple of the 10 classes"):
        run_recipe(RECIPES / "mnist_fm.yaml", {**TINY, "labelled": 105}, out_dir=tmp_path / "a", progress=False)
    with pytest.raises(ConfigError, match="class 5 has only 5421 examples. fix: set labelled to at most 54210"):
        run_recipe(RECIPES / "mnist_fm.yaml", {**TINY, "labelled": 60000}, out_dir=tmp_path / "b", progress=False)


def test_synthetic_2d_case_study_writes_its_figures(tmp_path):
    run = run_recipe(RECIPES / "synthetic_2d.yaml", {"steps": 10, "figures_dir": str(tmp_path / "fig"),
                                                     "train.progress": False}, out_dir=tmp_path / "out",
                     progress=False)["runs"][0]
    assert run["test_examples"] == 1000
    for name in ("points", "boundaries", "features"):
        png = (tmp_path / "fig" / f"complement_gan_2d_{name}.png").read_bytes()
        assert png[:4] == b"\x89PNG" and (tmp_path / "out" / "figures" / f"complement_gan_2d_{name}.png").read_bytes() == png


def test_an_output_the_dataset_does_not_draw_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="figures_dir holds the 2-D case study's figures; mnist writes a sample grid"):
        run_recipe(RECIPES / "mnist_fm.yaml", {**TINY, "figures_dir": str(tmp_path)}, out_dir=tmp_path / "a",
                   progress=False)
    with pytest.raises(ConfigError, match="samples_png is a grid of generated images"):
        run_recipe(RECIPES / "synthetic_2d.yaml", {"steps": 1, "samples_png": str(tmp_path / "x.png")},
                   out_dir=tmp_path / "b", progress=False)
