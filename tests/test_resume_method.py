"""``genfeat run --resume`` into the output of a run of another method: one CheckpointError naming both methods
before any work, and nothing written into OUT (it said "trained with another vocabulary or data", or failed on the
tokenizer after writing OUT/tokenizer into the other run)."""

import os
from pathlib import Path

import pytest
import torch

from genfeat import cli
from genfeat.config import to_dict
from genfeat.errors import CheckpointError, with_article
from genfeat.framework.checkpoint import save_checkpoint
from genfeat.runner import _METHODS, _import_methods, check_resume_method, get_method, recipe_record, run_recipe

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()


def _fake_run(out: Path, method: str, architecture: str, **extra) -> list[str]:
    """OUT/last as a run of ``method`` leaves it (its recipe in config.json); returns OUT's listing."""
    recipe = to_dict(get_method(method).config_cls())
    save_checkpoint(out / "last", torch.nn.Linear(2, 2), {"global_step": 1},
                    {"architecture": architecture, "model": {}, "recipe": recipe, **extra})
    return sorted(p.name for p in out.rglob("*"))


@pytest.mark.parametrize("recipe, other, arch", [("recipes/transformer_xl/debug.yaml", "gpt", "gpt"),
                                                 ("recipes/xlnet/debug.yaml", "transformer_xl", "transformer_xl"),
                                                 ("recipes/xlnet/debug.yaml", "dae_txl", "xlnet"),
                                                 ("recipes/bert/debug.yaml", "finetune", "finetune")])
def test_resume_into_another_methods_run_is_refused_before_any_write(tmp_path, capsys, recipe, other, arch):
    out = tmp_path / "out"
    before = _fake_run(out, other, arch)
    code = cli.main(["run", recipe, "--out", str(out), "--resume"])
    _, err = capsys.readouterr()
    mine = Path(recipe).parent.name
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"checkpoint of method {other} ({with_article(arch)} model)" in err and f"of method {mine}" in err and "fix:" in err
    assert sorted(p.name for p in out.rglob("*")) == before


def test_resume_of_several_seeds_into_another_methods_seed_is_refused_before_any_write(tmp_path, capsys):
    """Each seed folder of a run of several seeds is checked like OUT of one: a finished seed of another method is
    not read back as this recipe's figures."""
    out = tmp_path / "out"
    (out / "seed0").mkdir(parents=True)
    (out / "seed0" / "results.json").write_text('{"valid_loss": 1.0}')
    _fake_run(out / "seed0", "gpt", "gpt")
    before = sorted(p.name for p in out.rglob("*"))
    code = cli.main(["run", "recipes/transformer_xl/debug.yaml", "--out", str(out), "--resume", "--seeds", "2"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"'{out / 'seed0' / 'last'}' is a checkpoint of method gpt" in err and "of method transformer_xl" in err
    assert sorted(p.name for p in out.rglob("*")) == before


def test_the_same_method_or_an_unknown_writer_passes(tmp_path):
    out = tmp_path / "out"
    _fake_run(out, "gpt", "gpt")
    check_resume_method(get_method("gpt"), out)                      # its own method
    check_resume_method(get_method("gpt"), tmp_path / "nowhere")     # no checkpoint: the method says so itself
    save_checkpoint(out / "last", torch.nn.Linear(2, 2), {}, {"architecture": "gpt", "recipe": {"no": "such"}})
    check_resume_method(get_method("transformer_xl"), out)           # a recipe no method accepts: not told
    save_checkpoint(out / "last", torch.nn.Linear(2, 2), {}, {"architecture": "gpt", "method": "gpt"})
    with pytest.raises(CheckpointError, match="method gpt"):
        check_resume_method(get_method("transformer_xl"), out)


def test_every_methods_recipe_is_recorded_with_its_method():
    """A checkpoint's config.json gets ``method`` and ``recipe`` from recipe_record, which finds the method by its
    config class: one class per method, so every method's record names the method itself."""
    _import_methods()
    assert len({spec.config_cls for spec in _METHODS.values()}) == len(_METHODS)
    for name, spec in _METHODS.items():
        cfg = spec.config_cls()
        assert recipe_record(cfg) == {"method": name, "recipe": to_dict(cfg)}
    with pytest.raises(TypeError, match="Linear is not the config class"):
        recipe_record(torch.nn.Linear(1, 1))


@pytest.mark.skipif(not (DATA / "wikitext-2").is_dir(), reason="WikiText-2 not in GENFEAT_DATA")
def test_a_resumed_run_without_out_tokenizer_writes_none_before_comparing_vocabularies(tmp_path):
    """An xlnet run resumed where OUT/tokenizer is missing trains its tokenizer outside OUT, to compare it with the
    checkpoint's vocab.json: a mismatch leaves OUT as it was."""
    from genfeat.data.vocab import SymbolVocab

    out = tmp_path / "out"
    recipe = to_dict(get_method("xlnet").config_cls())
    save_checkpoint(out / "last", torch.nn.Linear(2, 2), {"global_step": 1},
                    {"architecture": "xlnet", "model": {}, "recipe": recipe},
                    lambda d: SymbolVocab(["a", "b"], "word").save(d / "vocab.json"))
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(CheckpointError, match="tokenizer"):
        run_recipe("recipes/xlnet/debug.yaml", {"data.max_documents": 3}, [0], out_dir=out, progress=False, resume=True)
    assert sorted(p.name for p in out.rglob("*")) == before and not (out / "tokenizer").exists()
