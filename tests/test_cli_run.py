"""The ``genfeat`` commands on tiny models and corpora written here: several seeds, refused resume,
the evaluation options, export round trip, and Ctrl-C."""

import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
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
    # --overwrite replaces the run: the earlier seeds' folders do not linger beside the new one-seed run
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--overwrite", "--json", "--no-progress")
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["final", "last", "metrics.jsonl", "provenance.json", "results.json"]
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
    rc, stdout, err = run_cli(capsys, "run", recipe, "--out", out, "--json", "--no-progress", "--resume",
                              "--train.stop_after_steps", 0)
    assert rc == 0, err
    second = last_json(stdout)["provenance"]
    assert second["resume"] is True and second["overrides"] == {"train.stop_after_steps": 0}
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
    # an empty folder is fine
    (tmp_path / "empty").mkdir()
    assert run_cli(capsys, "run", recipe, "--out", tmp_path / "empty", "--no-progress")[0] == 0


def test_resume_with_several_seeds_is_refused_before_any_work(tmp_path, capsys):
    recipe = write_recipe(tmp_path)
    rc, _, err = run_cli(capsys, "run", recipe, "--seeds", 2, "--resume", "--out", tmp_path / "out")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --resume continues one run") and "fix:" in lines[0]
    assert not (tmp_path / "out").exists()


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


def test_ctrl_c_exits_130_with_one_line_and_leaves_no_partial_output(tmp_path):
    # a long run with a checkpoint every step, so the signal most likely lands among the writes
    recipe = write_recipe(tmp_path, steps=100000, train="{progress: false, log_every: 1, save_every: 1}")
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # SIGINT back to its default in the child: a shell running the tests in the background ignores it,
    # and Python then keeps ignoring it instead of raising KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, "-m", "genfeat.cli", "run", str(recipe), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while not (out / "last").is_dir() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert (out / "last").is_dir(), "the run never wrote its first checkpoint"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("interrupted") and "--resume" in lines[0]
    # a temporary file or directory is a write the signal cut short; a backup (.last.old) is complete
    leftovers = [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == [], f"half-written output left behind: {leftovers}"
    # what is there is complete: the checkpoint (or, cut between its two renames, its backup) loads whole
    last = resume_dir(out / "last")
    state = load_trainer_state(last)
    model, vocab = load_checkpoint(last)
    assert state["global_step"] >= 1 and len(vocab) == model.config.n_token
    records = (out / "metrics.jsonl").read_text().splitlines()
    assert len(records) >= state["global_step"] and all(json.loads(line)["step"] for line in records)


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
