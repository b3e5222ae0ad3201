"""Two phases, as two recipes or as one: BERT masked-LM pretraining writes OUT/final, and fine-tuning starts
from exactly those weights and that tokenizer (real data: WikiText-2, MRPC). A fine-tuning recipe with a
``pretrain`` section runs both phases in one ``genfeat run`` (recipes/finetune/chain_bert_mrpc_debug.yaml)."""

import json
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genfeat import cli
from genfeat.errors import CheckpointError, ConfigError
from genfeat.runner import run_recipe

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
CHAIN = "recipes/finetune/chain_bert_mrpc_debug.yaml"
# a few steps of pretraining on 3 documents, scored on 1 held-out one; 16 MRPC pairs, 8 scored
TINY = {"pretrain.overrides.steps": 3, "pretrain.overrides.data.max_documents": 3,
        "pretrain.overrides.data.valid_documents": 1, "pretrain.overrides.data.vocab_size": 500,
        "steps": 2, "train.eval_every": 0, "data.max_train_examples": 16, "data.max_eval_examples": 8,
        "data.batch_size": 8}
# a vanishing learning rate: after the fine-tuning steps the backbone still holds the pretrained weights
VANISHING = {**TINY, "optim.lr": 1.0e-12, "optim.warmup_steps": 0}

needs_data = pytest.mark.skipif(not (DATA / "glue" / "MRPC" / "dev.tsv").is_file()
                                or not (DATA / "wikitext-2" / "wiki.valid.tokens").is_file()
                                or not (DATA / "wikitext-2" / "wiki.test.tokens").is_file(),
                                reason="data not in GENFEAT_DATA")


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _assert_backbone_is(pre: Path, ft: Path) -> None:
    """The fine-tuned checkpoint ``ft`` holds the pretrained weights of ``pre`` as its backbone, and its tokenizer."""
    pre_w, ft_w = _weights(pre), _weights(ft)
    assert {f"backbone.{k}" for k in pre_w} <= set(ft_w)
    for k, v in pre_w.items():
        torch.testing.assert_close(ft_w[f"backbone.{k}"], v, atol=1e-6, rtol=0)
    assert (ft / "vocab.json").read_text() == (pre / "vocab.json").read_text()


@needs_data
def test_finetuning_starts_from_the_pretrained_checkpoint(tmp_path):
    lines = (DATA / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:1200]), encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(lines[1200:1500]), encoding="utf-8")
    run_recipe("recipes/bert/debug.yaml", {"steps": 3, "train.eval_every": 0, "data.train_text": str(tmp_path / "train.txt"),
                                           "data.valid_text": str(tmp_path / "valid.txt"), "data.vocab_size": 1000},
               [0], out_dir=tmp_path / "pre", progress=False)
    # a vanishing learning rate: after one step the backbone still holds the pretrained weights
    result = run_recipe("recipes/finetune/mrpc_bert.yaml", {
        "init": str(tmp_path / "pre" / "final"), "steps": 1, "optim.lr": 1.0e-12, "optim.warmup_steps": 0,
        "data.max_train_examples": 16, "data.max_eval_examples": 8, "data.max_len": 64, "data.batch_size": 8},
        [0], out_dir=tmp_path / "ft", progress=False)
    assert result["new_params"] == (32 * 32 + 32) + (32 * 2 + 2), "only the pooler and the output layer are new"
    _assert_backbone_is(tmp_path / "pre" / "final", tmp_path / "ft" / "final")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A chained run with a vanishing fine-tuning learning rate: (OUT, result)."""
    out = tmp_path_factory.mktemp("chain") / "out"
    return out, run_recipe(CHAIN, VANISHING, [0], out_dir=out, progress=False)


@needs_data
def test_one_recipe_pretrains_then_finetunes_from_exactly_the_pretrained_weights(chain):
    out, result = chain
    run = result["runs"][0]
    pre = json.loads((out / "pretrain" / "results.json").read_text())
    assert pre["steps"] == 3 and run["pretrain_steps"] == 3, "the pretrain overrides reached the pretraining recipe"
    assert run["pretrain_valid_loss"] == pre["valid_loss"] > 0 and run["pretrain_valid_accuracy"] == pre["valid_accuracy"]
    assert 0 <= run["dev_accuracy"] <= 1 and 0 <= run["dev_f1"] <= 1 and run["dev_examples"] == 8
    assert json.loads((out / "results.json").read_text()) == run, "OUT/results.json holds both phases' figures"
    _assert_backbone_is(out / "pretrain" / "final", out / "final")
    recipe = json.loads((out / "last" / "config.json").read_text())["recipe"]
    assert recipe["init"] == str(out / "pretrain" / "final") and recipe["pretrain"] is None


@needs_data
def test_seeds_run_one_whole_chain_each_and_summarise_both_phases(tmp_path, capsys):
    out = tmp_path / "chain"
    argv = ["run", CHAIN, "--seeds", "2", "--out", str(out), "--json"]
    for key, value in TINY.items():
        argv += [f"--{key}", str(value)]
    assert cli.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    runs = result["runs"]
    for key in ("dev_accuracy", "dev_f1", "pretrain_valid_loss"):
        assert result[f"{key}_mean"] == pytest.approx((runs[0][key] + runs[1][key]) / 2)
        assert f"{key}_std" in result
    summary = [k for k in result if k.endswith(("_mean", "_std", "_median"))]
    assert list(result)[-len(summary):] == summary and "dev_accuracy_mean" in summary, \
        "the JSON line ends with the metrics' summary (issue 12: `genfeat run --seeds N --json` ends with them)"
    assert runs[0]["pretrain_valid_loss"] != runs[1]["pretrain_valid_loss"], "each seed pretrains its own model"
    assert result["pretrain_valid_loss_std"] > 0
    for seed in (0, 1):
        assert (out / f"seed{seed}" / "pretrain" / "final" / "model.safetensors").is_file()
        assert (out / f"seed{seed}" / "final" / "model.safetensors").is_file()


@needs_data
def test_resume_continues_an_interrupted_pretraining_and_skips_a_finished_one(chain, tmp_path):
    whole_out, whole = chain
    # the whole run's tokenizer: WordPiece training on a corpus this small breaks count ties differently from
    # run to run, which is not what is compared here
    same = {**VANISHING, "pretrain.overrides.data.tokenizer": str(whole_out / "pretrain" / "tokenizer")}
    part = run_recipe(CHAIN, {**same, "pretrain.overrides.train.stop_after_steps": 2}, [0], out_dir=tmp_path,
                      progress=False)
    assert part["interrupted"] == 1.0 and part["pretrain_steps"] == 2 and "dev_accuracy" not in part
    assert not (tmp_path / "final").exists(), "no fine-tuning after an interrupted pretraining"
    resumed = run_recipe(CHAIN, same, [0], out_dir=tmp_path, progress=False, resume=True)
    assert resumed["pretrain_valid_loss"] == whole["pretrain_valid_loss"]
    assert resumed["dev_accuracy"] == whole["dev_accuracy"] and resumed["dev_f1"] == whole["dev_f1"]
    for name in ("pretrain/final", "final"):
        a, b = _weights(whole_out / name), _weights(tmp_path / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    # a finished pretraining is not run again: its checkpoint and log stay as they are
    pre = tmp_path / "pretrain"
    stamp = ((pre / "final" / "model.safetensors").stat().st_mtime_ns, (pre / "metrics.jsonl").read_text())
    again = run_recipe(CHAIN, same, [0], out_dir=tmp_path, progress=False, resume=True)
    assert ((pre / "final" / "model.safetensors").stat().st_mtime_ns, (pre / "metrics.jsonl").read_text()) == stamp
    assert again["pretrain_valid_loss"] == whole["pretrain_valid_loss"] and again["dev_f1"] == whole["dev_f1"]
    # a finished stage's figures that cannot be read back: one error naming the file, nothing run
    (pre / "results.json").write_text("{cut off")
    with pytest.raises(CheckpointError, match=re.escape(f"'{pre / 'results.json'}', the figures of the finished "
                                                        "pretraining stage, cannot be read back: it is not JSON")):
        run_recipe(CHAIN, same, [0], out_dir=tmp_path, progress=False, resume=True)
    assert (pre / "metrics.jsonl").read_text() == stamp[1]
    # the fix it names: without the file the stage finishes again from its last checkpoint, to the same figures
    (pre / "results.json").unlink()
    again = run_recipe(CHAIN, same, [0], out_dir=tmp_path, progress=False, resume=True)
    assert again["pretrain_valid_loss"] == whole["pretrain_valid_loss"] and again["dev_f1"] == whole["dev_f1"]
    # another pretraining (here: more steps) is not taken for the finished one: the run's record refuses it, and
    # without that record (a run from before genfeat kept it) the stage's own stage.json does
    with pytest.raises(ConfigError, match=r"was started with another recipe \(pretrain.overrides.steps 3 then, 99 now\)"):
        run_recipe(CHAIN, {**same, "pretrain.overrides.steps": 99}, [0], out_dir=tmp_path, progress=False, resume=True)
    record = json.loads((tmp_path / "provenance.json").read_text())
    (tmp_path / "provenance.json").write_text(json.dumps({"invocations": [
        {k: v for k, v in r.items() if k != "run"} for r in record["invocations"]]}))
    with pytest.raises(CheckpointError, match=r"holds a pretraining whose steps differ"):
        run_recipe(CHAIN, {**same, "pretrain.overrides.steps": 99}, [0], out_dir=tmp_path, progress=False, resume=True)


def test_an_error_of_the_pretraining_recipe_file_names_the_file_not_the_overrides(tmp_path):
    """With overrides set, an error the stage's recipe file itself gives is the file's (its path, its field)."""
    bad = tmp_path / "pre.yaml"
    bad.write_text(Path("recipes/bert/debug.yaml").read_text() + "\ndropout_rat: 0.1\n")
    with pytest.raises(ConfigError) as e:
        run_recipe(CHAIN, {**TINY, "pretrain.recipe": str(bad)}, [0], out_dir=tmp_path / "out", progress=False)
    assert e.value.cause.startswith(f"pretrain stage: recipe '{bad}': unknown config field 'dropout_rat'"), e.value
    assert "pretrain.overrides" not in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides, cause", [
    ({"init": "runs/bert_pretrain/final"}, "the recipe sets both init and pretrain"),
    ({"pretrain.recipe": "recipes/bert/no_such.yaml"}, "pretrain.recipe 'recipes/bert/no_such.yaml' does not exist"),
    ({"pretrain.recipe": "recipes/finetune/debug.yaml"},
     "'recipes/finetune/debug.yaml' is a finetune recipe, not a pretraining one"),
    # the pretraining's model section is checked when the recipe is read, not once its tokenizer is trained into
    # OUT/pretrain; the error names the field by the fine-tuning recipe's path
    ({"pretrain.overrides.model.d_modl": "8"},
     "unknown config field 'pretrain.overrides.model.d_modl'. fix: did you mean 'pretrain.overrides.model.d_model'?"),
    ({"pretrain.overrides.model.d_model": "x"}, "config field 'pretrain.overrides.model.d_model' has value 'x'"),
])
def test_a_bad_pretrain_stage_is_one_config_error_before_any_work(tmp_path, capsys, overrides, cause):
    with pytest.raises(ConfigError, match=re.escape(cause)):
        run_recipe(CHAIN, overrides, [0], out_dir=tmp_path / "out", progress=False)
    argv = ["run", CHAIN, "--out", str(tmp_path / "out")]
    for key, value in overrides.items():
        argv += [f"--{key}", value]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and cause in err[0] and "fix:" in err[0]
    assert not (tmp_path / "out").exists()
