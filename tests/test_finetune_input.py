"""Fine-tuning inputs and checkpoints (genfeat.methods.finetune) on real data (../shared/data): a fine-tuned head
scores only the task it was trained for (and stays a fine-tuning init for any task), bad data settings are one
error line before any data work, and every split cut to max_len is noted on stderr, once, with its count."""

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from genfeat import cli
from genfeat.errors import CheckpointError
from genfeat.methods.finetune import check_head
from genfeat.models.heads import FineTuneConfig, FineTuneModel, HeadConfig
from genfeat.runner import run_recipe
from genfeat.tasks import get_task

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
needs_glue = pytest.mark.skipif(not (DATA / "glue" / "CoLA" / "dev.tsv").is_file()
                                or not (DATA / "glue" / "SST-2" / "test.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
TINY = {"n_token": 50, "d_model": 16, "n_layer": 1, "n_head": 2, "d_inner": 32, "max_position": 32}
NOTE = re.compile(r"note: (\d+) of (\d+) (\w+) examples were cut to fit max_len 12$")


def _main(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(code, err, *needles):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory):
    """One step of the debug recipe on SST-2 with inputs cut to 12 tokens: OUT, the result and its stderr."""
    out = tmp_path_factory.mktemp("ft") / "sst2"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = run_recipe("recipes/finetune/debug.yaml", {
            "data": {"max_train_examples": 32, "max_eval_examples": 8, "batch_size": 8, "max_len": 12,
                     "test_split": "test"},
            "vocab_size": 200, "steps": 1, "train": {"eval_every": 0, "progress": False}}, [0], out_dir=out,
            progress=False)
    return out, result, err.getvalue()


def _model(task: str, kind: str = "classification", n_labels: int = 2) -> FineTuneModel:
    head = HeadConfig(kind=kind, n_labels=n_labels, d_model=16, pool=True)
    return FineTuneModel(FineTuneConfig(task=task, backbone="bert", backbone_config=TINY, head=head, max_len=32))


def test_a_head_serves_the_task_it_was_trained_for_and_a_foreign_one_is_checked_by_shape():
    sst2 = _model("sst2")
    check_head(sst2, get_task("sst2"), "ckpt")
    for other in ("cola", "wnli", "mrpc"):                    # labels 0/1 too, with other meanings
        with pytest.raises(CheckpointError, match=f"fine-tuned for task 'sst2' and predicts its labels, not those of "
                                                  f"task '{other}'. fix: evaluate it on 'sst2', or fine-tune for "
                                                  f"'{other}'"):
            check_head(sst2, get_task(other), "ckpt")
    # a head genfeat trained for a task registered elsewhere (not in TASKS here) serves that task alone
    with pytest.raises(CheckpointError, match="fine-tuned for task 'reviews' and predicts its labels, not those of task "
                       "'sst2'. fix: evaluate it on 'reviews' .a task this genfeat does not know: add its TaskSpec"):
        check_head(_model("reviews"), get_task("sst2"), "ckpt")
    # a Hugging Face task model names no genfeat task: a head of the task's kind and label count serves it
    check_head(_model("reviews"), get_task("sst2"), "hf", native=False)     # (run_glue's finetuning_task)
    check_head(_model("hf:BertForSequenceClassification"), get_task("cola"), "hf", native=False)
    with pytest.raises(CheckpointError, match="with 2 labels.*needs a classification head with 3 labels. fix: evaluate it on "
                       "a task that takes a classification head with 2 labels, or fine-tune for .mnli."):
        check_head(_model("hf:BertForSequenceClassification"), get_task("mnli"), "hf", native=False)
    # a span head points into its input, so it answers any span task (the article split of SQuAD's dev file)
    check_head(_model("squad_v1.1", "span"), get_task("squad_split"), "squad")


@needs_glue
def test_evaluate_refuses_another_task_and_the_head_is_still_replaced_for_one(sst2_run, capsys, tmp_path):
    out, _, _ = sst2_run
    final = str(out / "final")
    code, _, err = _main(["evaluate", "--checkpoint", final, "--task", "cola", "--max-examples", "8"], capsys)
    _one_error_line(code, err, f"checkpoint '{final}' was fine-tuned for task 'sst2'", "not those of task 'cola'",
                    f"fix: evaluate it on 'sst2', or fine-tune for 'cola' (init: {final})")
    # the fix works: the fine-tuned model is an init for CoLA (its backbone taken, the head new), then scores CoLA
    result = run_recipe("recipes/finetune/sst2_bert.yaml", {
        "init": final, "steps": 1, "data": {"task": "cola", "max_train_examples": 8, "max_eval_examples": 8,
                                            "batch_size": 8, "max_len": 32}, "train": {"eval_every": 0}},
        [0], out_dir=tmp_path / "cola", progress=False)
    assert result["dev_examples"] == 8 and -1.0 <= result["dev_matthews"] <= 1.0
    code, stdout, err = _main(["evaluate", "--checkpoint", str(tmp_path / "cola" / "final"), "--task", "cola",
                               "--max-examples", "8", "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout.splitlines()[-1])["matthews"] == pytest.approx(result["dev_matthews"], abs=1e-12)


@needs_glue
def test_every_cut_split_is_noted_once_with_its_count(sst2_run, capsys):
    out, result, err = sst2_run
    notes = {m[3]: (int(m[1]), int(m[2])) for m in map(NOTE.match, err.splitlines()) if m}
    assert notes == {"train": (result["train_truncated"], 32), "dev": (result["dev_truncated"], 8),
                     "test": (result["test_truncated"], 8)}, err
    assert min(n for n, _ in notes.values()) > 0, "12 tokens cut SST-2 sentences in every split"
    assert len([line for line in err.splitlines() if line.startswith("note:")]) == 3
    code, stdout, err = _main(["evaluate", "--checkpoint", str(out / "final"), "--task", "sst2", "--max-examples", "8",
                               "--json"], capsys)
    figures = json.loads(stdout.splitlines()[-1])
    assert code == 0 and [NOTE.match(line).groups() for line in err.splitlines() if line.startswith("note:")] == \
        [(str(figures["truncated"]), "8", "dev")] and figures["truncated"] == result["dev_truncated"]


@pytest.mark.parametrize("field, value, least", [
    ("doc_stride", 0, 1), ("max_len", 3, 5), ("batch_size", -2, 1), ("eval_batch_size", 0, 1),
    ("max_query_len", 0, 1), ("max_segments", 0, 1), ("max_train_examples", -1, 0), ("max_eval_examples", -5, 0)])
def test_bad_data_settings_are_one_error_line_before_any_data_work(field, value, least, capsys, monkeypatch, tmp_path):
    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the settings were checked")

    monkeypatch.setattr("genfeat.methods.finetune.load_task", no_data)
    code, _, err = _main(["run", "recipes/finetune/debug.yaml", "--out", str(tmp_path / "out"), f"--data.{field}",
                          str(value)], capsys)
    _one_error_line(code, err, "section 'data'", f"{field} is {value}, but must be >= {least}")
    assert not (tmp_path / "out").exists()
