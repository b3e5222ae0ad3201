"""The complement GAN, its PixelCNN++ density model and Planetoid as hub architectures: ``from_pretrained``
round trips, checkpoints in the layout written before they were registered (the hand-built config.json of
the runners) load unchanged, and ``genfeat export`` / ``genfeat evaluate`` give the model or one clear error."""

import json
import os
import pathlib

import pytest
import torch

from genfeat.cli import main
from genfeat.config import to_dict
from genfeat.errors import CheckpointError
from genfeat.framework.checkpoint import save_checkpoint
from genfeat.hub import from_pretrained, save_pretrained
from genfeat.models.complement_gan import ComplementGAN, ComplementGANConfig
from genfeat.models.pixelcnn import PixelCNN, PixelCNNConfig

DATA = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))
needs_cora = pytest.mark.skipif(not (DATA / "planetoid" / "ind.cora.x").is_file(), reason="Planetoid data not found")


def _gan() -> ComplementGAN:
    torch.manual_seed(0)
    return ComplementGAN(ComplementGANConfig(image_shape=(1, 4, 4), d_hidden=[8, 6], g_hidden=[8], noise_size=3,
                                             encoder=True, encoder_hidden=[5])).eval()


def _pixelcnn() -> PixelCNN:
    torch.manual_seed(0)
    return PixelCNN(PixelCNNConfig(image_shape=(1, 8, 8), filters=4, blocks=1, mixtures=2)).eval()


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _same_gan(a: ComplementGAN, b: ComplementGAN) -> bool:
    x = torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outs = []
        for m in (a, b):
            torch.manual_seed(2)
            outs.append((m(x).logits, m.generate(5)[1], m.encoder(x).mean))
    return all(torch.equal(u, v) for u, v in zip(*outs))


def _same_density(a: PixelCNN, b: PixelCNN) -> bool:
    x = torch.randint(0, 256, (2, 1, 8, 8), generator=torch.Generator().manual_seed(1)).float() / 127.5 - 1
    with torch.no_grad():
        return torch.equal(a.log_prob(x), b.log_prob(x))


def test_complement_gan_and_pixelcnn_round_trip_through_from_pretrained(tmp_path):
    gan, density = _gan(), _pixelcnn()
    save_pretrained(gan, tmp_path / "gan")
    save_pretrained(density, tmp_path / "pix")
    assert json.loads((tmp_path / "gan" / "config.json").read_text())["architecture"] == "complement_gan"
    again = from_pretrained(tmp_path / "gan", "complement_gan")
    assert type(again) is ComplementGAN and again.config == gan.config and not again.training
    assert _same_weights(gan, again) and _same_gan(gan, again)
    dens = from_pretrained(tmp_path / "pix", "pixelcnn")
    assert dens.config == density.config and _same_weights(density, dens) and _same_density(density, dens)
    with pytest.raises(CheckpointError, match="holds a complement_gan model, not pixelcnn"):
        from_pretrained(tmp_path / "gan", "pixelcnn")


def test_checkpoints_in_the_runners_old_layout_load(tmp_path):
    # exactly the config.json the runners wrote by hand before these architectures were registered: the complement
    # GAN's OUT/last ({architecture, model, recipe}, with the training state beside it) and the PixelCNN's OUT/final
    gan, density = _gan(), _pixelcnn()
    from genfeat.methods.complement_gan import ComplementGANRecipe, load_density, max_logp_of_samples

    recipe = ComplementGANRecipe(model=gan.config)
    save_checkpoint(tmp_path / "last", gan, {"global_step": 1},
                    {"architecture": "complement_gan", "model": to_dict(recipe.model), "recipe": to_dict(recipe)})
    save_checkpoint(tmp_path / "final", density, None,
                    {"architecture": "pixelcnn", "model": {"blocks": 1, "dropout": 0.0, "filters": 4,
                                                           "image_shape": [1, 8, 8], "mixtures": 2}})
    again = from_pretrained(tmp_path / "last")
    assert again.config == gan.config and _same_weights(gan, again) and _same_gan(gan, again)
    dens = load_density(tmp_path / "final", (1, 8, 8))
    assert _same_density(density, dens) and not any(p.requires_grad for p in dens.parameters())
    # the complement GAN's check that the density model reads its images, one clear error
    with pytest.raises(CheckpointError, match=r"trained on images of shape \(1, 8, 8\), this run's are \(1, 4, 4\)"):
        max_logp_of_samples(tmp_path / "last", tmp_path / "final")
    with pytest.raises(CheckpointError, match="holds a pixelcnn model, not complement_gan"):
        max_logp_of_samples(tmp_path / "final", tmp_path / "final")


def _cli(capsys, *args) -> tuple[int, str]:
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def test_export_and_evaluate_of_the_new_architectures(tmp_path, capsys):
    gan, density = _gan(), _pixelcnn()
    save_pretrained(gan, tmp_path / "gan")
    save_pretrained(density, tmp_path / "pix")
    for name, model, same in (("gan", gan, _same_gan), ("pix", density, _same_density)):
        rc, err = _cli(capsys, "export", "--checkpoint", tmp_path / name, "--out", tmp_path / f"{name}_out",
                       "--format", "genfeat")
        assert rc == 0, err
        assert same(model, from_pretrained(tmp_path / f"{name}_out"))
    # no Hugging Face format exists for them: one line naming the cause and the fix
    rc, err = _cli(capsys, "export", "--checkpoint", tmp_path / "gan", "--out", tmp_path / "hf")
    assert rc == 2 and err.strip().splitlines() == [
        "error: saving complement_gan in Hugging Face format is not supported. fix: save a genfeat checkpoint"]
    rc, err = _cli(capsys, "evaluate", "--checkpoint", tmp_path / "pix", "--data", tmp_path / "x.npy", "--tgt-len", 4,
                   "--mem-len", 0)
    assert rc == 2 and err.strip().splitlines() == [
        f"error: checkpoint '{tmp_path / 'pix'}' holds a pixelcnn model, not transformer_xl. fix: pass a "
        "transformer_xl checkpoint"]
    rc, err = _cli(capsys, "evaluate", "--checkpoint", tmp_path / "gan", "--task", "sst2")
    assert rc == 2 and err.strip().splitlines() == [
        f"error: checkpoint '{tmp_path / 'gan'}' holds a complement_gan model without a task head. fix: a "
        "complement_gan model cannot be fine-tuned: its figures are those of the run that trained it (OUT/results.json)"]


def test_a_gdan_training_checkpoint_names_the_models_to_load(tmp_path, capsys):
    # OUT/last of a gdan run holds D and G in one state dict, with D's config only: it is no hub architecture
    (tmp_path / "last").mkdir()
    (tmp_path / "last" / "config.json").write_text(json.dumps({"architecture": "gdan", "reader": {}, "recipe": {}}))
    rc, err = _cli(capsys, "export", "--checkpoint", tmp_path / "last", "--out", tmp_path / "out", "--format", "genfeat")
    assert rc == 2 and err.strip().splitlines() == [
        "error: a gdan checkpoint holds several models trained together, not one model. fix: load the models a gdan "
        "run saves one by one: OUT/final/d (D) or OUT/final/g (G)"]


@needs_cora
def test_planetoid_round_trips_and_loads_the_old_layout(monkeypatch, tmp_path, capsys):
    from genfeat.data.graph import load_planetoid
    from genfeat.methods.planetoid import PlanetoidRecipe, build
    from genfeat.models.planetoid import PlanetoidModel, node_features

    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))
    recipe = PlanetoidRecipe(dataset="cora", mode="i", embedding_size=8, row_normalise=True)
    _, model, *_ = build(recipe, 0)
    model.eval()
    nodes = torch.tensor([0, 5, 2000])
    save_pretrained(model, tmp_path / "new")
    again = from_pretrained(tmp_path / "new", "planetoid")
    assert type(again) is PlanetoidModel and again.config == model.config and _same_weights(model, again)
    # the features are not weights: a loaded model reads its dataset's, normalised as in training
    assert torch.equal(again.features, node_features(load_planetoid("cora"), True))
    assert torch.equal(again(nodes).logits, model(nodes).logits)
    rc, err = _cli(capsys, "export", "--checkpoint", tmp_path / "new", "--out", tmp_path / "out", "--format", "genfeat")
    assert rc == 0, err
    assert torch.equal(from_pretrained(tmp_path / "out")(nodes).logits, model(nodes).logits)
    # the layout the runner wrote by hand before (no dropout or row_normalise: the default dropout, and the
    # recipe's row_normalise, which decides the features the model reads)
    for normalise in (False, True):
        plain = PlanetoidRecipe(dataset="cora", mode="t", embedding_size=8, row_normalise=normalise)
        _, model, *_ = build(plain, 0)
        save_checkpoint(tmp_path / "old", model.eval(), {"global_step": 1},
                        {"architecture": "planetoid",
                         "model": {"dataset": "cora", "mode": "t", "embedding_size": 8, "num_nodes": 2708,
                                   "num_features": 1433, "num_classes": 7},
                         "recipe": to_dict(plain)})
        again = from_pretrained(tmp_path / "old")
        assert again.config.row_normalise is normalise and torch.equal(again.features, model.features)
        assert _same_weights(model, again) and torch.equal(again(nodes).logits, model(nodes).logits)


def test_a_config_json_of_the_wrong_shape_is_one_checkpoint_error(tmp_path):
    """Valid JSON that is not an object, a ``model`` section that is not a mapping, an ``architecture`` that is not
    a name: each a CheckpointError naming the file, never a traceback from deep in the loader."""
    save_pretrained(_pixelcnn(), tmp_path / "m")
    good = json.loads((tmp_path / "m" / "config.json").read_text())
    for content, match in (([1, 2], "holds an array, not a JSON object"), ("x", "holds a string"), (None, "holds null"),
                           ({**good, "model": [1]}, "config section 'model' is a list"),
                           ({**good, "model": "x"}, "config section 'model' is a str"),
                           ({**good, "model": 8}, "config section 'model' is an int"),
                           ({**good, "architecture": ["pixelcnn"]}, r"gives architecture \['pixelcnn'\], not a name"),
                           ({"architectures": 5, "model_type": ["bert"]}, "names neither a genfeat architecture")):
        (tmp_path / "m" / "config.json").write_text(json.dumps(content))
        with pytest.raises(CheckpointError, match=match):
            from_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(good))
    assert _same_density(from_pretrained(tmp_path / "m"), _pixelcnn())


def test_the_package_api_loads_with_the_vocabulary_runs_recipes_and_names_an_unknown_architecture(tmp_path):
    """genfeat.load_checkpoint gives the vocabulary from_pretrained drops (a directory saved without it cannot be
    scored by the command line); genfeat.run_recipe is genfeat run's; an unknown architecture is named as such (it
    read "holds a transformer_xl model, not foo")."""
    import genfeat
    from genfeat.data.vocab import IdVocab
    from genfeat.errors import CheckpointError
    from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

    model = TransformerXLLMHeadModel(TransformerXLConfig(n_token=12, d_model=8, n_head=2, d_head=4, d_inner=16,
                                                         n_layer=1, mem_len=2))
    genfeat.save_pretrained(model, tmp_path / "m", IdVocab(12))
    loaded, vocab = genfeat.load_checkpoint(tmp_path / "m")
    assert len(vocab) == 12 and isinstance(loaded, TransformerXLLMHeadModel)
    with pytest.raises(CheckpointError, match="unknown architecture 'foo'. fix: use one of: .*transformer_xl"):
        genfeat.from_pretrained(tmp_path / "m", "foo")
    result = genfeat.run_recipe("recipes/transformer_xl/debug.yaml", {"steps": 2, "train": {"eval_every": 0}}, [0],
                                out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 2 and (tmp_path / "run" / "final").is_dir()
