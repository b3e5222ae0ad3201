"""The ``genfeat`` commands on tiny models and corpora written here: several seeds and their resume, refused resume,
the evaluation options, export round trip, Ctrl-C and SIGTERM."""

import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import genfeat
from genfeat.cli import main
from genfeat.data.vocab import IdVocab
from genfeat.eval.lm import evaluate_lm
from genfeat.framework.checkpoint import load_trainer_state, resume_dir
from genfeat.hub import load_checkpoint
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel
from genfeat.provenance import invocation
from genfeat.runner import get_method
from torchrun_launch import torchrun

TINY_MODEL = "{d_model: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 1, mem_len: 8, dropout: 0.0}"


def write_recipe(tmp_path: Path, steps: int = 3, train: str = "{progress: false}") -> Path:
    """A character-level Transformer-XL recipe over a 3,000-character text written here."""
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefgh"), size=rng.integers(2, 6))) for _ in range(40)]
    (tmp_path / "corpus.txt").write_text(" ".join(rng.choice(words, size=600)) + "\n")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"""method: transformer_xl
data: {{corpus: {tmp_path / 'corpus.txt'}, vocab: {{kind: char}}, holdout: 0.1, test_split: null,
       batch_size: 4, tgt_len: 8}}
model: {TINY_MODEL}
optim: {{name: adam, lr: 1.0e-2}}
train: {train}
eval: {{batch_size: 2}}
steps: {steps}
""")
    return recipe


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_run_several_seeds_writes_a_folder_per_seed_and_summarises(tmp_path, capsys):
    recipe = write_recipe(tmp_path)
    out = tmp_path / "out"
    rc, stdout, err = run_cli(capsys, "run", recipe, "--seeds", 2, "--seed", 3, "--out", out, "--json",
                              "--no-progress")
    assert rc == 0, err
    result = last_json(stdout)
    assert result["seeds"] == [3, 4]
    for seed, run in zip(result["seeds"], result["runs"]):
        assert json.loads((out / f"seed{seed}" / "results.json").read_text()) == run
        assert (out / f"seed{seed}" / "final" / "model.safetensors").is_file()
    losses = [run["valid_loss"] for run in result["runs"]]
    assert losses[0] != losses[1], "the seeds must give different runs"
    assert result["valid_loss_mean"] == pytest.approx(statistics.fmean(losses), rel=1e-12)
    assert result["valid_loss_std"] == pytest.approx(statistics.stdev(losses), rel=1e-12)
    assert "valid_loss" not in result, "several seeds report the summary, not one run's figure"
    # the same command again would replace the finished seeds: refused, naming them
    rc, _, err = run_cli(capsys, "run", recipe, "--seeds", 2, "--seed", 3, "--out", out, "--no-progress")
    assert rc == 2 and err.count("\n") == 1, err
    assert f"output directory '{out}' already holds a finished transformer_xl run (seed3/, seed4/)" in err
    assert "--resume" in err and "--overwrite" in err
    # --overwrite replaces the run: the earlier seeds' folders do not linger beside the new one-seed run, nor do the
    # outputs other methods write beside a run (word2vec's vectors); files of the user's own stay
    (out / "vectors.bin").write_bytes(b"old")
    (out / "notes.txt").write_text("mine")
    # ... but a replacement refused before it wrote anything leaves the run it would have replaced as it was
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    rc, _, err = run_cli(capsys, "run", recipe, "--out", out, "--overwrite", "--data.corpus", tmp_path / "nowhere.txt")
    assert rc == 2 and "nowhere.txt" in err, err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--overwrite", "--json", "--no-progress")
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["final", "last", "metrics.jsonl", "notes.txt", "provenance.json",
                                                     "results.json"]
    assert json.loads((out / "results.json").read_text()) == last_json(stdout)["runs"][0]
    # every checkpoint names the method that wrote it beside its recipe
    for ckpt in ("final", "last"):
        saved = json.loads((out / ckpt / "config.json").read_text())
        assert saved["method"] == "transformer_xl" and saved["recipe"]["steps"] == result["runs"][0]["steps"]


def test_provenance_records_every_invocation_of_a_run(tmp_path, capsys):
    """OUT/provenance.json names the code (genfeat's git commit here, an editable install from a clone), the
    command and the machine of the fresh run and of each --resume; the JSON line carries the current record."""
    recipe = write_recipe(tmp_path, steps=2, train="{progress: false, save_every: 1, stop_after_steps: 1}")
    out = tmp_path / "out"
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--json", "--no-progress", "--optim.lr", "0.02")
    assert rc == 0, err
    first = last_json(stdout)["provenance"]
    head = subprocess.run(["git", "-C", str(Path(genfeat.__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    if head.returncode == 0:
        assert first["git"]["commit"] == head.stdout.strip() and isinstance(first["git"]["dirty"], bool)
    else:
        assert first["git"] is None
    assert first["command"] == ["genfeat", "run", str(recipe), "--out", str(out), "--json", "--no-progress",
                                "--optim.lr", "0.02"]
    assert first["recipe"] == str(recipe) and first["overrides"] == {"optim.lr": 0.02} and first["seeds"] == [0]
    assert first["resume"] is False and first["torch"] == torch.__version__ and first["cpus"] == os.cpu_count()
    assert json.loads((out / "provenance.json").read_text()) == {"invocations": [first]}
    # a resume is refused with another recipe than the run started with (the train section aside) or another seed
    for argv, needle in [(["--optim.lr", "0.03"], "was started with another recipe (optim.lr 0.02 then, 0.03 now)"),
                         ([], "optim.lr 0.02 then, 0.01 now"), (["--optim.lr", "0.02", "--seed", "4"],
                                                                  "is of seed 0, and --seed 4 was asked. fix: pass --seed 0")]:
        rc, _, err = run_cli(capsys, "run", recipe, "--out", out, "--no-progress", "--resume", *argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert json.loads((out / "provenance.json").read_text()) == {"invocations": [first]}, "refusals leave no record"
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--json", "--no-progress", "--resume",
                              "--optim.lr", "0.02", "--train.stop_after_steps", 0)
    assert rc == 0, err
    second = last_json(stdout)["provenance"]
    assert second["resume"] is True and second["overrides"] == {"optim.lr": 0.02, "train.stop_after_steps": 0}
    assert second["run"]["recipe"]["optim"]["lr"] == 0.02 and second["run"]["method"] == "transformer_xl"
    assert json.loads((out / "provenance.json").read_text()) == {"invocations": [first, second]}
    # an invocation that ended before any other output left only its record: a new run replaces it, unasked
    died = tmp_path / "died"
    died.mkdir()
    (died / "provenance.json").write_text(json.dumps({"invocations": [first]}))
    earlier = (died / "provenance.json").read_bytes()
    # ... and a run refused before any output leaves OUT as it found it: the earlier record, or no OUT at all
    rc, _, err = run_cli(capsys, "run", recipe, "--out", died, "--data.corpus", tmp_path / "nowhere.txt")
    assert rc == 2 and "nowhere.txt" in err, err
    assert (died / "provenance.json").read_bytes() == earlier and [p.name for p in died.iterdir()] == ["provenance.json"]
    rc, _, err = run_cli(capsys, "run", recipe, "--out", tmp_path / "new", "--data.corpus", tmp_path / "nowhere.txt")
    assert rc == 2 and not (tmp_path / "new").exists(), err
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", died, "--json", "--no-progress")
    assert rc == 0, err
    assert json.loads((died / "provenance.json").read_text()) == {"invocations": [last_json(stdout)["provenance"]]}
    # beside other files, an earlier record is no run: refused as a folder of other files, which it names
    for p in died.iterdir():
        if p.name != "provenance.json":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    (died / "notes.txt").write_text("")
    rc, _, err = run_cli(capsys, "run", recipe, "--out", died, "--no-progress")
    assert rc == 2 and "is not empty and holds no run (notes.txt)" in err, err
    # a value JSON has no type for (a YAML date) is recorded as text, not a crash
    assert invocation(recipe, {"note": datetime.date(2020, 1, 1)}, [0], False)["overrides"] == {"note": "2020-01-01"}


def test_a_run_an_overwrite_set_aside_and_was_killed_over_is_put_back_or_removed(tmp_path, capsys):
    """--overwrite moves the old run into OUT/.replaced; a kill (no Python cleanup) leaves it there. The next
    invocation puts it back when OUT holds no run outputs (the killed run wrote none), else removes it; a note says
    which."""
    import shutil

    recipe = write_recipe(tmp_path)
    out = tmp_path / "out"
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--json", "--no-progress")
    assert rc == 0, err
    finished = json.loads((out / "results.json").read_text())
    names = sorted(p.name for p in out.iterdir())
    (out / ".replaced").mkdir()
    for name in names:                                     # as a killed --overwrite leaves OUT
        (out / name).rename(out / ".replaced" / name)
    (out / "provenance.json").write_text('{"invocations": []}')
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--json", "--no-progress", "--resume")
    assert rc == 0 and "note: put back into" in err, err
    again = last_json(stdout)["runs"][0]
    assert sorted(p.name for p in out.iterdir()) == names
    assert again["steps"] == finished["steps"] and again["valid_loss"] == finished["valid_loss"], "the same run"
    # the killed run had written outputs of its own: the old run had been replaced
    (out / ".replaced").mkdir()
    shutil.copytree(out / "final", out / ".replaced" / "final")
    rc, _, err = run_cli(capsys, "run", recipe, "--out", out, "--no-progress", "--resume")
    assert rc == 0 and "note: removed" in err and not (out / ".replaced").exists(), err


def test_run_refuses_an_out_holding_a_run_or_other_files_without_resume_or_overwrite(tmp_path, capsys):
    recipe = write_recipe(tmp_path, steps=2, train="{progress: false, save_every: 1, stop_after_steps: 1}")
    out = tmp_path / "out"
    assert run_cli(capsys, "run", recipe, "--out", out, "--no-progress")[0] == 0
    assert not (out / "results.json").exists() and (out / "last").is_dir()
    rc, _, err = run_cli(capsys, "run", recipe, "--out", out, "--no-progress")
    assert rc == 2 and err.count("\n") == 1, err
    assert "already holds a partial transformer_xl run (last/, metrics.jsonl). fix: pass --resume to continue it" in err
    # --resume continues it; --resume with --overwrite is a contradiction
    assert run_cli(capsys, "run", recipe, "--out", out, "--no-progress", "--resume", "--train.stop_after_steps", 0)[0] == 0
    assert (out / "results.json").is_file()
    rc, _, err = run_cli(capsys, "run", recipe, "--out", out, "--resume", "--overwrite")
    assert rc == 2 and "pass one of them" in err
    # a folder of other files: refused, and with --overwrite the run is written among them, which stay
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    rc, _, err = run_cli(capsys, "run", recipe, "--out", other, "--no-progress")
    assert rc == 2 and f"output directory '{other}' is not empty and holds no run (todo.txt)" in err
    assert sorted(p.name for p in other.iterdir()) == ["todo.txt"]
    assert run_cli(capsys, "run", recipe, "--out", other, "--no-progress", "--overwrite",
                   "--train.stop_after_steps", 0)[0] == 0
    assert (other / "todo.txt").read_text() == "keep me" and (other / "results.json").is_file()
    # a run that ended before its first checkpoint has nothing to resume: --overwrite, not --resume, is offered
    died = tmp_path / "died"
    died.mkdir()
    (died / "metrics.jsonl").write_text("")
    rc, _, err = run_cli(capsys, "run", recipe, "--out", died, "--no-progress")
    assert rc == 2 and "it has no checkpoint to resume from: pass --overwrite" in err and "--resume" not in err, err
    rc, _, err = run_cli(capsys, "run", recipe, "--out", died, "--no-progress", "--resume")
    assert rc == 2 and "--overwrite" in err, err
    # so did one that died in a first stage (GDAN's G pretraining, a fine-tuning run's pretraining, Planetoid's
    # initialisation) before that stage's first checkpoint: its folder alone is nothing to resume from
    for stage in ("g_mle", "pretrain", "init"):
        early = tmp_path / f"died_in_{stage}"
        (early / stage).mkdir(parents=True)
        (early / stage / "metrics.jsonl").write_text("")
        if stage == "pretrain":
            (early / stage / "stage.json").write_text("{}")
        rc, _, err = run_cli(capsys, "run", recipe, "--out", early, "--no-progress")
        assert rc == 2 and "it has no checkpoint to resume from: pass --overwrite" in err, (stage, err)
        owner = {"g_mle": "gdan", "pretrain": "finetune", "init": "planetoid"}[stage]
        assert f"a partial {owner} run ({stage}/)" in err, "the run is named by its method, not its stage's"
        (early / stage / "last").mkdir()
        rc, _, err = run_cli(capsys, "run", recipe, "--out", early, "--no-progress")
        assert rc == 2 and "fix: pass --resume to continue it" in err, (stage, err)
    # an empty folder is fine
    (tmp_path / "empty").mkdir()
    assert run_cli(capsys, "run", recipe, "--out", tmp_path / "empty", "--no-progress")[0] == 0


def without_timings(figures: dict) -> dict:
    """Figures (a run's, or their summary) but wall times (train_seconds, valid_seconds), which no two runs share."""
    return {k: v for k, v in figures.items() if "_seconds" not in k}


def summary(result: dict) -> dict:
    return {k: v for k, v in result.items() if k.endswith(("_mean", "_std", "_median"))}


def mtimes(out: Path) -> dict:
    """When each entry under ``out`` was last written: a run's outputs rewritten change it."""
    return {p: p.stat().st_mtime_ns for p in out.rglob("*")}


def test_an_interrupted_run_of_several_seeds_resumes_to_the_figures_of_an_uninterrupted_one(tmp_path, capsys,
                                                                                           monkeypatch):
    """--resume with several seeds: the finished seed is read back, not run again; the interrupted one continues
    from its checkpoint; the one not started runs; per-seed figures and summary are those of a run never cut."""
    recipe = write_recipe(tmp_path, steps=4)
    args = ["--seeds", 3, "--json", "--no-progress"]
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", tmp_path / "whole", *args)
    assert rc == 0, err
    whole = last_json(stdout)
    # Ctrl-C in seed 1 after its checkpoint at step 2 of 4: seed 0 has finished, seed 2 has not started
    spec = get_method("transformer_xl")
    run = spec.run

    def ctrl_c_in_seed_1(cfg, *, seed, **kw):
        if seed == 1:
            run(replace(cfg, train=replace(cfg.train, stop_after_steps=2)), seed=seed, **kw)
            raise KeyboardInterrupt
        return run(cfg, seed=seed, **kw)

    monkeypatch.setattr(spec, "run", ctrl_c_in_seed_1)
    out = tmp_path / "part"
    assert run_cli(capsys, "run", recipe, "--out", out, *args)[0] == 130
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["provenance.json", "seed0", "seed1"]
    assert (out / "seed0" / "results.json").is_file() and not (out / "seed1" / "results.json").exists()
    assert load_trainer_state(out / "seed1" / "last")["global_step"] == 2
    finished = mtimes(out / "seed0")
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--resume", *args)
    assert rc == 0, err
    resumed = last_json(stdout)
    assert mtimes(out / "seed0") == finished, "the finished seed ran again"
    assert resumed["seeds"] == whole["seeds"] == [0, 1, 2] and len(resumed["runs"]) == 3
    for seed, run_figures, whole_figures in zip(resumed["seeds"], resumed["runs"], whole["runs"]):
        assert json.loads((out / f"seed{seed}" / "results.json").read_text()) == run_figures
        assert without_timings(run_figures) == without_timings(whole_figures), seed
    assert summary(resumed).keys() == summary(whole).keys() and "valid_loss_mean" in summary(whole)
    assert without_timings(summary(resumed)) == without_timings(summary(whole))
    invocations = json.loads((out / "provenance.json").read_text())["invocations"]
    assert [(i["seeds"], i["resume"]) for i in invocations] == [([0, 1, 2], False), ([0, 1, 2], True)]
    assert invocations[-1] == resumed["provenance"]
    # resumed again, the finished run reads every seed back and runs none
    held = {p: t for p, t in mtimes(out).items() if p.name != "provenance.json"}
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--resume", *args)
    assert rc == 0, err
    again = last_json(stdout)
    assert again["runs"] == resumed["runs"] and summary(again) == summary(resumed)
    assert {p: t for p, t in mtimes(out).items() if p.name != "provenance.json"} == held


def test_resume_asks_for_every_seed_of_the_run_in_out_and_may_add_more(tmp_path, capsys):
    """More seeds than OUT holds extend the run (its seeds read back); fewer seeds, another first seed or one seed
    would summarise only some of the run's seeds: refused before any work, naming the flags that continue it."""
    recipe = write_recipe(tmp_path)
    out = tmp_path / "out"
    rc, stdout, err = run_cli(capsys, "run", recipe, "--seeds", 2, "--out", out, "--json", "--no-progress")
    assert rc == 0, err
    first = last_json(stdout)
    held = mtimes(out / "seed0") | mtimes(out / "seed1")
    rc, stdout, err = run_cli(capsys, "run", recipe, "--seeds", 3, "--out", out, "--json", "--no-progress", "--resume")
    assert rc == 0, err
    more = last_json(stdout)
    assert more["seeds"] == [0, 1, 2] and more["runs"][:2] == first["runs"], "seeds 0 and 1 are read back, as they were"
    assert mtimes(out / "seed0") | mtimes(out / "seed1") == held
    assert json.loads((out / "seed2" / "results.json").read_text()) == more["runs"][2]
    losses = [run["valid_loss"] for run in more["runs"]]
    assert more["valid_loss_mean"] == statistics.fmean(losses) and more["valid_loss_std"] == statistics.stdev(losses)
    before = mtimes(out)
    for flags, cause, fix in (
            (["--seeds", 2], "and --resume was asked for seeds 0, 1, without 2", "pass --seed 0 --seeds 3"),
            (["--seed", 1, "--seeds", 3], "and --resume was asked for seeds 1, 2, 3, without 0", "pass --seed 0 --seeds 3"),
            ([], "and --resume was asked to continue one seed", "pass --seed 0 --seeds 3")):
        rc, _, err = run_cli(capsys, "run", recipe, "--out", out, "--resume", "--no-progress", *flags)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, err
        assert f"output directory '{out}' holds seeds 0, 1, 2 of a run" in err and cause in err and f"fix: {fix}" in err
        assert mtimes(out) == before, "a refused resume changed OUT"
    # a seed paused by train.stop_after_steps: no summary over the others alone, the result says which are unfinished
    rc, stdout, err = run_cli(capsys, "run", recipe, "--seeds", 4, "--out", out, "--json", "--no-progress", "--resume",
                              "--train.save_every", 1, "--train.stop_after_steps", 1)
    assert rc == 0, err
    paused = last_json(stdout)
    assert paused["interrupted"] == 1.0 and paused["unfinished_seeds"] == [3]
    assert not any(k.endswith(("_mean", "_std", "_median")) for k in paused), "a summary over seeds 0-2 alone"
    rc, stdout, err = run_cli(capsys, "run", recipe, "--seeds", 4, "--out", out, "--json", "--no-progress", "--resume")
    done = last_json(stdout)
    assert rc == 0 and "interrupted" not in done and len(done["runs"]) == 4 and "valid_loss_mean" in done, err
    assert done["runs"][:3] == more["runs"]


def test_resume_of_several_seeds_is_refused_before_any_work_where_out_cannot_continue(tmp_path, capsys):
    """No run, a one-seed run, a finished seed's results.json that is not its figures, or a seed that ended before its
    first checkpoint: one error line naming the cause and the fix, and OUT as it was (no OUT where there was none)."""
    recipe = write_recipe(tmp_path)

    def refused(out: Path, *expected: str) -> None:
        before = mtimes(out) if out.exists() else None
        rc, _, err = run_cli(capsys, "run", recipe, "--seeds", 2, "--resume", "--out", out, "--no-progress")
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and "fix:" in lines[0], err
        assert all(text in lines[0] for text in expected), err
        assert (mtimes(out) if out.exists() else None) == before

    refused(tmp_path / "none", f"there is no run in '{tmp_path / 'none'}' to resume", "run without --resume")
    one = tmp_path / "one"
    one.mkdir()
    (one / "results.json").write_text('{"valid_loss": 1.0}')
    (one / "metrics.jsonl").write_text("")
    refused(one, f"'{one}' holds a one-seed run (results.json, metrics.jsonl)", "pass --seeds 1")
    for text, why in (("{not json", "it is not JSON"), ("[1, 2]", "not a JSON object of figures"),
                      ('{"valid_loss": "low"}', "not a JSON object of figures")):
        bad = tmp_path / f"bad{len(text)}"
        (bad / "seed0").mkdir(parents=True)
        (bad / "seed0" / "results.json").write_text(text)
        refused(bad, f"'{bad / 'seed0' / 'results.json'}', the figures of finished seed 0, cannot be read back", why,
                "delete it to run seed 0 again")
    died = tmp_path / "died"
    (died / "seed0").mkdir(parents=True)
    (died / "seed0" / "results.json").write_text('{"valid_loss": 1.0}')
    (died / "seed1").mkdir()
    (died / "seed1" / "metrics.jsonl").write_text("")
    refused(died, f"seed 1 of the run in '{died}' ended before its first checkpoint", f"delete '{died / 'seed1'}'")
    (died / "seed1" / "g_mle").mkdir()    # a first stage's folder without a checkpoint in it
    refused(died, f"seed 1 of the run in '{died}' ended before its first checkpoint", f"delete '{died / 'seed1'}'")


@pytest.fixture
def relative_checkpoint(tmp_path):
    """A relative-attention Transformer-XL over 50 ids, saved with its vocabulary, and 200 ids of data.

    Its weights are drawn wide (std 0.5), far from the near-uniform initial model, so that what it
    attends to, and thus the relative distances it sees, visibly changes its predictions.
    """
    torch.manual_seed(0)
    model = TransformerXLLMHeadModel(TransformerXLConfig(n_token=50, d_model=16, n_head=2, d_head=8, d_inner=32,
                                                         n_layer=2, mem_len=16, dropout=0.0))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.5)
    genfeat.save_pretrained(model, tmp_path / "ckpt", IdVocab(50))
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 50, size=200))
    return tmp_path / "ckpt", tmp_path / "ids.npy"


def evaluate(capsys, checkpoint, data, *extra):
    rc, stdout, err = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, "--data", data, "--tgt-len", 8,
                              "--mem-len", 16, "--json", *extra)
    assert rc == 0, err
    return last_json(stdout)


def test_evaluate_max_tokens_and_clamp_len_change_what_is_scored(relative_checkpoint, capsys):
    ckpt, data = relative_checkpoint
    full = evaluate(capsys, ckpt, data)
    assert full["tokens"] == 199
    head = evaluate(capsys, ckpt, data, "--max-tokens", 50)
    assert head["tokens"] == 49 and head["loss"] != full["loss"]
    # segments of 8 with a memory of 16 attend over at most 24 positions: distances 0..23
    assert evaluate(capsys, ckpt, data, "--clamp-len", 24)["loss"] == full["loss"]
    assert evaluate(capsys, ckpt, data, "--clamp-len", 0)["loss"] == full["loss"], "0 does not clamp (--help)"
    clamped = evaluate(capsys, ckpt, data, "--clamp-len", 2)
    assert clamped["clamp_len"] == 2 and abs(clamped["loss"] - full["loss"]) > 1e-4
    model, _ = load_checkpoint(ckpt)
    direct = evaluate_lm(model, torch.from_numpy(np.load(data)), tgt_len=8, mem_len=16, clamp_len=2)
    assert clamped["loss"] == pytest.approx(float(direct["loss"]), rel=1e-9)


def test_export_genfeat_format_round_trips(relative_checkpoint, tmp_path, capsys):
    ckpt, _ = relative_checkpoint
    out = tmp_path / "exported"
    rc, stdout, err = run_cli(capsys, "export", "--checkpoint", ckpt, "--out", out, "--format", "genfeat", "--json")
    assert rc == 0, err
    assert last_json(stdout) == {"out": str(out), "format": "genfeat"}
    original, vocab = load_checkpoint(ckpt)
    again, vocab_again = load_checkpoint(out)
    assert json.loads((out / "config.json").read_text())["architecture"] == "transformer_xl"
    assert type(vocab_again) is IdVocab and len(vocab_again) == len(vocab)
    x = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = original(x, return_log_probs=True)
        got = again(x, return_log_probs=True)
    assert torch.equal(got.log_probs, expected.log_probs)
    assert all(torch.equal(a, b) for a, b in zip(got.mems, expected.mems))


def signal_run(recipe: Path, out: Path, sig: signal.Signals, ready, delay: float, *args: str,
               launcher: tuple[str, ...] = ()) -> tuple[int, str]:
    """``genfeat run recipe --out out *args`` in a process (``python *launcher -m genfeat.cli ...``) sent ``sig``
    ``delay`` seconds after ``ready()`` holds: its exit status and stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # SIGINT back to its default in the child: a shell running the tests in the background ignores it,
    # and Python then keeps ignoring it instead of raising KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, *launcher, "-m", "genfeat.cli", "run", str(recipe), "--out", str(out),
                             *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not ready() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        assert ready(), "the run never wrote what the signal waits for"
        time.sleep(delay)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stderr


def assert_one_line(stderr: str, start: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith(start) and "--resume" in lines[0], stderr


def assert_complete(out: Path) -> None:
    """No temporary file or directory (a write the signal cut short) in OUT, and its checkpoint loads whole."""
    leftovers = [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == [], f"half-written output left behind: {leftovers}"
    # what is there is complete: the checkpoint (or, cut between its two renames, its backup) loads whole
    last = resume_dir(out / "last")
    state = load_trainer_state(last)
    model, vocab = load_checkpoint(last)
    assert state["global_step"] >= 1 and len(vocab) == model.config.n_token
    records = (out / "metrics.jsonl").read_text().splitlines()
    assert len(records) >= state["global_step"] and all(json.loads(line)["step"] for line in records)


def test_ctrl_c_exits_130_with_one_line_and_leaves_no_partial_output(tmp_path):
    # a long run with a checkpoint every step, so the signal most likely lands among the writes
    recipe = write_recipe(tmp_path, steps=100000, train="{progress: false, log_every: 1, save_every: 1}")
    out = tmp_path / "out"
    rc, stderr = signal_run(recipe, out, signal.SIGINT, (out / "last").is_dir, 0.3)
    assert rc == 130, stderr
    assert_one_line(stderr, "interrupted")
    assert_complete(out)


@pytest.mark.parametrize("when", ["set aside", "checkpointed"])
def test_sigterm_unwinds_as_ctrl_c_does_and_settles_an_overwrite(when, tmp_path, capsys):
    """SIGTERM (a scheduler's stop, timeout's, kill's) to ``run --overwrite`` over a finished run: exit status 143 and
    one line, as Ctrl-C's; no temporary file, and no OUT/.replaced left for the next invocation: the old run is back
    (signalled as soon as it was set aside, most likely before the new run wrote anything) or replaced (signalled
    once the new run wrote a checkpoint)."""
    out = tmp_path / "out"
    assert run_cli(capsys, "run", write_recipe(tmp_path), "--out", out, "--no-progress")[0] == 0
    old = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "provenance.json"}
    recipe = write_recipe(tmp_path, steps=100000, train="{progress: false, log_every: 1, save_every: 1}")
    if when == "set aside":
        ready, delay = (out / ".replaced").is_dir, 0.0
    else:   # the old last/ moved aside, and the new run's in its place
        ready, delay = lambda: (out / ".replaced" / "last").is_dir() and (out / "last").is_dir(), 0.3
    rc, stderr = signal_run(recipe, out, signal.SIGTERM, ready, delay, "--overwrite")
    assert rc == 143, stderr
    assert_one_line(stderr, "terminated (SIGTERM)")
    assert not (out / ".replaced").exists()
    now = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "provenance.json"}
    if now == old:   # put back: the new run had written nothing
        assert when == "set aside"
        return
    assert not (out / "results.json").exists() and not (out / "final").exists(), "the old run is replaced whole"
    assert_complete(out)


def test_sigterm_to_torchrun_ends_every_rank_in_order(tmp_path):
    """torchrun passes SIGTERM on to its ranks: each unwinds and says so in one line (torchrun's own report of the
    signal follows), none waits on the other in a collective, and OUT is left complete."""
    recipe = write_recipe(tmp_path, steps=100000, train="{progress: false, log_every: 1, save_every: 1}")
    out = tmp_path / "out"
    _, stderr = signal_run(recipe, out, signal.SIGTERM, (out / "last").is_dir, 0.3, launcher=tuple(torchrun(2)))
    assert sum(line.startswith("terminated (SIGTERM) (outputs written") for line in stderr.splitlines()) == 2, stderr
    assert "gloo" not in stderr and "RuntimeError" not in stderr, stderr
    assert_complete(out)


def test_evaluate_reports_and_warns_about_text_outside_the_vocabulary(tmp_path, capsys):
    from genfeat.data.vocab import SymbolVocab

    vocab = SymbolVocab.build("the cat sat on the mat <eos> <unk>".split(), "word", specials=("<eos>",), unk="<unk>")
    torch.manual_seed(0)
    model = TransformerXLLMHeadModel(TransformerXLConfig(n_token=len(vocab), d_model=16, n_head=2, d_head=8,
                                                         d_inner=32, n_layer=1, mem_len=4))
    genfeat.save_pretrained(model, tmp_path / "ckpt", vocab)
    (tmp_path / "own.txt").write_text("the cat sat on the mat\n<unk> sat\n")
    (tmp_path / "other.txt").write_text("the dog sat on a log\n<unk> cat ran\n")
    args = ["evaluate", "--checkpoint", tmp_path / "ckpt", "--tgt-len", 4, "--mem-len", 4, "--json", "--data"]
    rc, stdout, err = run_cli(capsys, *args, tmp_path / "own.txt")
    assert rc == 0 and last_json(stdout)["oov_rate"] == 0.0 and err == ""
    rc, stdout, err = run_cli(capsys, *args, tmp_path / "other.txt")
    assert rc == 0
    # 11 tokens with <eos>; dog, a, log and ran are not in the vocabulary (the text's own <unk> is)
    assert last_json(stdout)["oov_rate"] == pytest.approx(4 / 11)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: 36.4% of the 11 tokens of") and "7-type vocabulary" in lines[0]


def test_a_resume_may_change_a_methods_loop_fields_but_not_what_it_trains(tmp_path):
    """Planetoid keeps its loop settings at the top of its recipe (a run done in chunks with stop_after_steps and
    --resume); the identity check of a resume lets them change, as it lets every method's train section change."""
    from genfeat.errors import ConfigError
    from genfeat.runner import _check_resume_identity, get_method

    started = {"method": "planetoid", "recipe": {"steps": 10, "stop_after_steps": 4, "threads": 1, "tsne_png": "",
                                                 "train": {"seed": 0}}}
    (tmp_path / "provenance.json").write_text(json.dumps({"invocations": [{"seeds": [0], "run": started}]}))
    now = {"method": "planetoid", "recipe": {**started["recipe"], "stop_after_steps": 0, "threads": 2,
                                             "tsne_png": "t.png", "train": {"seed": 3}}}
    _check_resume_identity(tmp_path, get_method("planetoid"), now, [0])
    with pytest.raises(ConfigError, match="steps 10 then, 11 now"):
        _check_resume_identity(tmp_path, get_method("planetoid"), {**now, "recipe": {**now["recipe"], "steps": 11}}, [0])
    # in the train section only the loop's own fields: not what the steps compute
    with pytest.raises(ConfigError, match="train.clip_norm None then, 1.0 now"):
        _check_resume_identity(tmp_path, get_method("planetoid"),
                               {**now, "recipe": {**now["recipe"], "train": {"seed": 3, "clip_norm": 1.0}}}, [0])
    with pytest.raises(ConfigError, match="stop_after_steps 4 then, 0 now"):     # not a loop field of every method
        _check_resume_identity(tmp_path, get_method("transformer_xl"), {**now, "method": "planetoid"}, [0])
