"""scripts/table219_grid.py: the grid's jobs (what each cell runs, from which checkpoint, in which order), the
scheduler's bookkeeping with a stand-in for genfeat, and the report's medians."""
import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import table219_grid as grid  # noqa: E402


def test_every_cell_runs_its_recipe_from_its_own_pretraining():
    jobs = grid.jobs(Path("R"), Path("T"), [0, 1, 2], smoke=False)
    assert len(jobs) == 10 + 3 * (9 * 7 + 4 * 4)
    assert [j.name for j in jobs[:10]] == [f"pre_{n}" for n in grid.PRETRAIN]
    by_name = {j.name: j for j in jobs}
    assert len(by_name) == len(jobs)
    for name, recipe in grid.PRETRAIN.items():  # pretraining reads the exported text
        argv = by_name[f"pre_{name}"].argv
        assert argv[0] == recipe and (ROOT / recipe).is_file()
        assert argv[argv.index("--data.train_text") + 1] == "T/imdb_train.txt"
    for job in jobs[10:]:
        recipe = job.argv[0]
        assert (ROOT / recipe).is_file(), recipe
        assert job.argv[job.argv.index("--seed") + 1] == str(job.meta["seed"])
        assert job.argv[job.argv.index("--out") + 1] == f"R/{job.out}"
        if job.needs is None:
            assert "--init" not in job.argv and "nopretrain" in recipe
        else:
            assert job.argv[job.argv.index("--init") + 1] == f"R/{job.needs}/final"
    cell = by_name["t219_squad_no_span_s1"]
    assert cell.argv[0] == "recipes/finetune/squad_xlnet.yaml" and cell.needs == "no_span"
    assert by_name["t219_rte_bert_s0"].argv[0] == "recipes/finetune/rte_bert.yaml"
    assert by_name["t5_mrpc_lstm_s2"].argv[0] == "recipes/finetune/mrpc_lstm.yaml"
    assert by_name["t5_mrpc_lstm_s2"].needs == "pretrain_lstm"
    # RACE comes after every seed's other cells; a seed's Table 5 cells after its Table 2.19 ones
    names = [j.name for j in jobs]
    first_race = min(i for i, n in enumerate(names) if "_race_" in n)
    assert all("_race_" in n for n in names[first_race:]) and "t5_rte_gpt_nopretrain_s2" in names[:first_race]
    assert names.index("t219_rte_nopretrain_s0") < names.index("t5_sst2_gpt_s0") < names.index("t219_squad_bert_s1")


def test_fig2_and_smoke_arguments():
    jobs = grid.jobs(Path("R"), None, [0], smoke=True, fig2_steps=5000)
    fig2 = [j for j in jobs if j.name.startswith("pre_fig2_")]
    assert [j.argv[0] for j in fig2] == ["recipes/gpt/pretrain.yaml", "recipes/gpt/pretrain_lstm.yaml"]
    assert fig2[0].argv[fig2[0].argv.index("--steps") + 1] == "5000"
    assert "--data.train_text" not in fig2[0].argv                       # no --text: imdb:train itself
    assert all(fig2[0].argv[fig2[0].argv.index(f) + 1] == v for f, v in zip(grid.SMOKE_DATA[::2], grid.SMOKE_DATA[1::2]))
    assert fig2[0].argv.count("--steps") == 1 and fig2[0].argv.count("--train.eval_every") == 1
    with pytest.raises(SystemExit, match="'nope.jsonl' is not a file"):
        grid.read_records(["nope.jsonl"])
    ft = [j for j in jobs if j.meta["kind"] != "pretrain"]
    assert all(j.argv[j.argv.index("--steps") + 1] == "4" for j in ft)
    assert all(("--vocab_size" in j.argv) == (j.needs is None) for j in ft)


def test_scheduler_records_dependencies_failures_and_skips_finished(tmp_path, monkeypatch):
    """A stand-in genfeat: pretraining 'pretrain_k6' fails, everything else prints a result; the cells that need
    pretrain_k6 are recorded as skipped, a run finished by an earlier call or recorded as finished in --done's
    file is not run again."""
    fake = tmp_path / "genfeat" / "cli.py"
    fake.parent.mkdir()
    (fake.parent / "__init__.py").write_text("")
    fake.write_text(
        "import json, sys\n"
        "a = sys.argv[2:]\n"
        "out = a[a.index('--out') + 1]\n"
        "if out.endswith('/pretrain_k6'):\n"
        "    sys.exit('error: broken recipe')\n"
        "import pathlib\n"
        "pathlib.Path(out).mkdir(parents=True, exist_ok=True)\n"
        "pathlib.Path(out, 'results.json').write_text('{}')\n"
        "print(json.dumps({'dev_accuracy_mean': 0.5, 'steps_mean': 1, 'valid_loss_mean': 1.0,\n"
        "                  'flags': [f for f in a if f in ('--resume', '--overwrite')]}))\n")
    runs = tmp_path / "runs"
    (runs / "ft" / "t219_rte_bert_s0").mkdir(parents=True)
    (runs / "ft" / "t219_rte_bert_s0" / "results.json").write_text("{}")
    (runs / "ft" / "t219_rte_nsp_s0" / "last").mkdir(parents=True)       # killed by an earlier call after a checkpoint
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(grid, "ROOT", tmp_path)  # the stand-in's folder comes first on PYTHONPATH
    monkeypatch.setattr(grid, "T219_TASKS", ("rte",))
    monkeypatch.setattr(grid, "T5_TASKS", ())
    earlier = tmp_path / "earlier.jsonl.gz"  # a grid on another machine finished one cell and failed another
    with gzip.open(earlier, "wt") as f:
        f.write(json.dumps({"name": "t219_rte_no_span_s0", "kind": "t219", "rc": 0, "result": {"x": 1}}) + "\n")
        f.write(json.dumps({"name": "t219_rte_no_bidir_s0", "kind": "t219", "rc": 1, "result": None}) + "\n")
    monkeypatch.setattr(sys, "argv", ["table219_grid.py", "run", "--runs", str(runs), "--out", str(tmp_path / "out"),
                                      "--seeds", "0", "--workers", "4", "--done", str(earlier)])
    assert grid.main() == 1
    records = {r["name"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert records["pre_pretrain_k6"]["rc"] == 1 and "broken recipe" in records["pre_pretrain_k6"]["stderr_tail"]
    assert records["t219_rte_xlnet_k6_s0"]["rc"] is None
    assert records["t219_rte_xlnet_k6_s0"]["note"] == "pre_pretrain_k6 failed"
    assert records["t219_rte_nsp_s0"]["rc"] == 0 and records["t219_rte_nsp_s0"]["result"]["dev_accuracy_mean"] == 0.5
    assert records["t219_rte_nsp_s0"]["result"]["flags"] == ["--resume"] and records["t219_rte_nsp_s0"]["resumed"]
    assert records["t219_rte_dae_txl_s0"]["result"]["flags"] == ["--overwrite"]
    assert records["t219_rte_dae_txl_s0"]["argv"][-2:] == ["--train.save_every", "100"]
    assert "t219_rte_bert_s0" not in records                             # finished before: not run again
    assert "t219_rte_no_span_s0" not in records and records["t219_rte_no_bidir_s0"]["rc"] == 0  # --done
    assert records["t219_race_xlnet_k6_s0"]["rc"] is None and records["t219_race_bert_s0"]["rc"] == 0
    assert "pre_gpt_pretrain" not in records and "pre_pretrain_lstm" not in records  # no Table 5 cell needs them
    # a later call for RACE of two rows: their pretraining runs finished above, so only the two cells run; its OUT
    # holds a record an earlier call was killed while writing: the new records start on lines of their own
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / "results.jsonl").write_text('{"name": "cut')
    monkeypatch.setattr(sys, "argv", ["table219_grid.py", "run", "--runs", str(runs), "--out", str(tmp_path / "out2"),
                                      "--seeds", "1", "--only", "race_bert", "race_no_memory"])
    assert grid.main() == 0
    again = [r["name"] for r in grid.read_records([str(tmp_path / "out2" / "results.jsonl")])]
    assert sorted(again) == ["t219_race_bert_s1", "t219_race_no_memory_s1"]


def test_report_medians_over_seeds(tmp_path, capsys):
    lines = [{"name": f"t219_sst2_bert_s{s}", "kind": "t219", "task": "sst2", "row": "bert", "seed": s, "rc": 0,
              "wall_s": 10.0, "note": "", "result": {"dev_accuracy_mean": v}} for s, v in enumerate((0.7, 0.9, 0.8))]
    lines.append({"name": "t219_rte_bert_s0", "kind": "t219", "task": "rte", "row": "bert", "seed": 0, "rc": None,
                  "wall_s": 0.0, "note": "deadline before start", "result": None})
    pre = {"name": "pre_bert_pretrain", "kind": "pretrain", "row": "bert_pretrain", "rc": 0, "wall_s": 5.0, "note": "",
           "result": {"steps_mean": 4, "valid_loss_mean": 6.5}}
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [pre, *lines]))
    later = tmp_path / "later.jsonl"  # a second call: pretrains again, finishes the RTE cell after a kill and a resume
    killed = {**lines[-1], "wall_s": 30.0, "note": "killed at the deadline"}
    later.write_text("".join(json.dumps(r) + "\n" for r in [{**pre, "wall_s": 7.0}, killed,
                                                            {**lines[-1], "rc": 0, "note": "",
                                                             "result": {"dev_accuracy_mean": 0.5}}]))
    grid.report([str(path)])
    out = capsys.readouterr().out
    assert "| BERT (MLM + NSP) | 0.800 (n=3: 0.700, 0.900, 0.800) |" in out
    assert "deadline before start (1): t219_rte_bert_s0" in out and "4 jobs finished, 35 s" in out
    assert "| bert_pretrain | 4 | 6.500 | 5 s | results.jsonl |" in out
    grid.report([str(path), str(later)])
    out = capsys.readouterr().out
    assert "0.500 (n=1: 0.500)" in out and ("6 jobs finished, 42 s of job wall time; 1 runs killed at a deadline "
                                            "after 30 s of job wall time (a part of them resumed later); not finished: 0"
                                            ) in out
    assert "| bert_pretrain | 4 | 6.500 | 7 s | later.jsonl |" in out


def test_export_text_reads_back_as_the_same_documents(tmp_path, monkeypatch):
    from genfeat.data.documents import read_documents

    source = tmp_path / "corpus.txt"
    source.write_text("First review. It was Good!\nSecond line here.\n\nAnother document? Yes.\n")
    monkeypatch.setattr(grid, "TEXT_FILES", {"train": (str(source), 10, "train.txt")})
    grid.export_text(tmp_path / "text")
    assert read_documents(str(tmp_path / "text" / "train.txt")) == read_documents(str(source))
    assert read_documents(str(source)) == [["First review.", "It was Good!", "Second line here."],
                                           ["Another document?", "Yes."]]


def test_a_record_cut_short_is_left_out_with_a_warning_and_the_next_call_starts_a_new_line(tmp_path, capsys):
    """A grid killed while writing its last record leaves a cut line: report and --done read the whole records
    before it (naming the cut one), and a later call appends on a line of its own instead of gluing onto it."""
    good = {"name": "t219_sst2_bert_s0", "kind": "t219", "task": "sst2", "row": "bert", "seed": 0, "rc": 0,
            "wall_s": 10.0, "note": "", "result": {"dev_accuracy_mean": 0.7}}
    path = tmp_path / "results.jsonl"
    whole = json.dumps(good) + "\n"
    path.write_text(whole + whole.replace("s0", "s1")[:40])
    assert [r["name"] for r in grid.read_records([str(path)])] == ["t219_sst2_bert_s0"]
    assert f"{path} line 2 is not a whole record" in capsys.readouterr().err
    gz = tmp_path / "results.jsonl.gz"
    gz.write_bytes(gzip.compress((whole * 50).encode())[:-20])
    assert 0 < len(grid.read_records([str(gz)])) <= 50 and "ends before its last record" in capsys.readouterr().err
