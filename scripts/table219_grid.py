"""Thesis Table 2.19 (downstream) and GPT-1 Table 5 as one grid of runs, for a machine with a GPU.

Three sub-commands:

    python scripts/table219_grid.py export-text DIR
        (here, where GENFEAT_DATA holds imdb/) writes the pretraining text of every pretraining recipe of the
        grid, the first 10,000 documents of imdb:train and the first 100 of imdb:valid, as two text files
        (one sentence per line, a blank line after each document), which ``genfeat`` reads back as the same
        documents (checked here as they are written). A machine that cannot hold the 28 MB archive gets 13 MB
        of text instead (gzip them to carry them).

    python scripts/table219_grid.py run --runs RUNS --out OUT [--text DIR] [--workers N] [--seeds 0 1 2]
                                        [--deadline SECONDS] [--only PART ...] [--done RESULTS ...]
                                        [--fig2-steps N] [--smoke]
        runs every job of the grid as its own ``python -m genfeat.cli run`` process, ``--workers`` at a time
        (they share the GPU; on an H200, 12 of them kept it 97-100 % busy most of the time), a job starting once the
        pretraining it fine-tunes has finished: the 10 pretraining recipes (recipes/xlnet/{pretrain_k6,
        pretrain_k7, no_memory, no_span, no_bidir, nsp, dae_txl}, recipes/bert/pretrain, recipes/gpt/{pretrain,
        pretrain_lstm}), then per seed the Table 2.19 cells (9 inits x SST-2, MRPC, STS-B, CoLA, RTE, RACE, the
        SQuAD article split: recipes/finetune/TASK_{xlnet,bert,nopretrain}.yaml, the XLNet recipe with
        ``--init`` for each XLNet / DAE row; RACE after every seed's other cells) and the GPT-1 Table 5 cells
        (Transformer with and without the auxiliary LM, the LSTM, no pretraining x SST-2, MRPC, STS-B, RTE).
        ``--only`` keeps the fine-tuning jobs whose name (``t219_TASK_ROW_sSEED``, ``t5_TASK_ROW_sSEED``)
        holds one of the PARTs; ``--done`` drops the fine-tuning jobs that the given results.jsonl files (of
        earlier grids, e.g. docs/data/table219_grid_*.jsonl.gz) record as finished; of the pretraining runs only
        those that a remaining fine-tuning job needs are run. ``--fig2-steps N`` adds GPT-1's and the LSTM's
        pretraining recipes run for N steps (zero-shot SST-2 evaluated every N/20), right after the pretraining. Each finished job appends one line to OUT/results.jsonl at once (name, command, exit
        status, wall seconds and the run's ``--json`` result), so a run stopped at ``--deadline`` (jobs still
        running are killed, those not started are listed as such) or by a timeout keeps what finished; a job
        whose output folder in RUNS holds a finished run is not run again, and a job killed by an earlier call
        resumes (``--resume``) from its last checkpoint (a fine-tuning job writes one every 100 steps; a
        pretraining one as its recipe says), so a second call on the same RUNS goes on where the first stopped.
        ``--text DIR`` reads the pretraining text from DIR's files of ``export-text`` instead of imdb:train /
        imdb:valid. ``--smoke`` shrinks every job to a few steps on a few examples: a check of the commands, not
        a result.

    python scripts/table219_grid.py report OUT/results.jsonl [...]   (.jsonl.gz too)
        prints the grid's tables in Markdown: per cell the median over the seeds that finished, their count and
        each seed's figure (a cell finished in several files: its last record); then the pretraining runs'
        held-out figures with the file that holds each, the finished jobs' total wall time and the jobs that
        did not finish, by reason.

The recipes fix every budget (RESULTS.md, "Table 2.19 downstream"); the grid adds only the seed, ``--init``, the
output folder and the text files.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from genfeat.framework.checkpoint import has_checkpoint  # noqa: E402

PRETRAIN = {  # run name -> recipe
    "pretrain_k6": "recipes/xlnet/pretrain_k6.yaml",
    "pretrain_k7": "recipes/xlnet/pretrain_k7.yaml",
    "no_memory": "recipes/xlnet/no_memory.yaml",
    "no_span": "recipes/xlnet/no_span.yaml",
    "no_bidir": "recipes/xlnet/no_bidir.yaml",
    "nsp": "recipes/xlnet/nsp.yaml",
    "dae_txl": "recipes/xlnet/dae_txl.yaml",
    "bert_pretrain": "recipes/bert/pretrain.yaml",
    "gpt_pretrain": "recipes/gpt/pretrain.yaml",
    "pretrain_lstm": "recipes/gpt/pretrain_lstm.yaml",
}
# Table 2.19 rows: row name -> (fine-tuning recipe family, pretraining run or None)
T219_ROWS = {"bert": ("bert", "bert_pretrain"), "dae_txl": ("xlnet", "dae_txl"), "xlnet_k6": ("xlnet", "pretrain_k6"),
             "xlnet_k7": ("xlnet", "pretrain_k7"), "no_memory": ("xlnet", "no_memory"),
             "no_span": ("xlnet", "no_span"), "no_bidir": ("xlnet", "no_bidir"), "nsp": ("xlnet", "nsp"),
             "nopretrain": ("nopretrain", None)}
ROW_LABELS = {"bert": "BERT (MLM + NSP)", "dae_txl": "DAE + Transformer-XL", "xlnet_k6": "XLNet K = 6",
              "xlnet_k7": "XLNet K = 7", "no_memory": "XLNet K = 6 − memory", "no_span": "XLNet K = 6 − span-based prediction",
              "no_bidir": "XLNet K = 6 − bidirectional data", "nsp": "XLNet K = 6 + next-sentence prediction",
              "nopretrain": "none (random init)", "gpt": "Transformer, aux LM", "gpt_noaux": "Transformer, no aux LM",
              "lstm": "LSTM, aux LM", "gpt_nopretrain": "Transformer, no pretraining"}
T219_TASKS = ("squad", "sst2", "cola", "stsb", "mrpc", "rte")  # longest first within a seed; RACE after all seeds
# GPT-1 Table 5 rows: row name -> (recipe suffix, pretraining run or None)
T5_ROWS = {"gpt": ("gpt", "gpt_pretrain"), "gpt_noaux": ("gpt_noaux", "gpt_pretrain"),
           "lstm": ("lstm", "pretrain_lstm"), "gpt_nopretrain": ("gpt_nopretrain", None)}
T5_TASKS = ("sst2", "stsb", "mrpc", "rte")

SAVE_EVERY = 100  # fine-tuning steps between checkpoints (OUT/last), from which a job killed at a deadline resumes
TEXT_FILES = {"train": ("imdb:train", 10_000, "imdb_train.txt"), "valid": ("imdb:valid", 100, "imdb_valid.txt")}

SMOKE_DATA = ["--data.max_documents", "200", "--data.valid_documents", "5", "--data.vocab_size", "600"]
SMOKE_PRETRAIN = ["--steps", "4", "--train.eval_every", "2", "--train.log_every", "2", *SMOKE_DATA]
SMOKE_FINETUNE = ["--steps", "4", "--train.eval_every", "2", "--train.log_every", "2", "--data.max_train_examples", "64",
                  "--data.max_eval_examples", "32"]


@dataclass
class Job:
    name: str
    argv: list[str]
    out: str
    needs: str | None = None
    meta: dict = field(default_factory=dict)


def export_text(out: Path) -> None:
    """Writes TEXT_FILES into ``out`` and checks that genfeat reads them back as the same documents."""
    from genfeat.data.documents import read_documents

    out.mkdir(parents=True, exist_ok=True)
    for spec, count, name in TEXT_FILES.values():
        docs = read_documents(spec, count)
        tmp = out / (name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for doc in docs:
                f.write("\n".join(doc) + "\n\n")
        if read_documents(str(tmp)) != docs:
            raise SystemExit(f"{spec}: the text file does not read back as the same documents")
        tmp.replace(out / name)
        print(f"{out / name}: {len(docs)} documents of {spec}")


def _finetune(runs: Path, table: str, task: str, row: str, suffix: str, pre: str | None, seed: int) -> Job:
    """The fine-tuning job of one cell: recipes/finetune/TASK_SUFFIX.yaml from pretraining run ``pre``."""
    name = f"{table}_{task}_{row}_s{seed}"
    argv = [f"recipes/finetune/{task}_{suffix}.yaml", *(["--init", str(runs / pre / "final")] if pre else [])]
    return Job(name, argv, f"ft/{name}", pre, {"kind": table, "task": task, "row": row, "seed": seed})


def jobs(runs: Path, text: Path | None, seeds: list[int], smoke: bool, fig2_steps: int = 0) -> list[Job]:
    text_args = []
    if text is not None:
        text_args = ["--data.train_text", str(text / TEXT_FILES["train"][2]),
                     "--data.valid_text", str(text / TEXT_FILES["valid"][2])]
    out = [Job(f"pre_{name}", [recipe, "--seed", "0", "--out", str(runs / name), *text_args,
                               *(SMOKE_PRETRAIN if smoke else [])], name, meta={"kind": "pretrain", "row": name})
           for name, recipe in PRETRAIN.items()]
    if fig2_steps:  # GPT-1 Fig. 2 (right) over a longer pretraining: the two recipes, evaluated 20 times
        out += [Job(f"pre_fig2_{name}", [PRETRAIN[name], "--seed", "0", "--out", str(runs / f"fig2_{name}"), *text_args,
                                         *(SMOKE_DATA if smoke else []),   # its data's size; the steps asked
                                         "--steps", str(fig2_steps), "--train.eval_every", str(max(1, fig2_steps // 20))],
                    f"fig2_{name}", meta={"kind": "pretrain", "row": f"fig2_{name}"})
                for name in ("gpt_pretrain", "pretrain_lstm")]
    cells = [(seed, task) for seed in seeds for task in T219_TASKS] + [(seed, "race") for seed in seeds]
    for seed, task in cells:
        for row, (family, pre) in T219_ROWS.items():
            out.append(_finetune(runs, "t219", task, row, family, pre, seed))
        if task == T219_TASKS[-1]:  # the seed's GPT-1 Table 5 cells after its Table 2.19 cells but RACE
            out += [_finetune(runs, "t5", t5_task, row, suffix, pre, seed)
                    for t5_task in T5_TASKS for row, (suffix, pre) in T5_ROWS.items()]
    for job in out:
        if job.meta["kind"] != "pretrain":
            job.argv += ["--seed", str(job.meta["seed"]), "--out", str(runs / job.out), "--train.save_every",
                         str(SAVE_EVERY)]
            if smoke:  # (a random init's tokenizer is trained on the few texts: a smaller vocabulary)
                job.argv += SMOKE_FINETUNE + ([] if job.needs else ["--vocab_size", "400"])
    return out


def run_grid(args) -> int:
    runs, out = Path(args.runs).resolve(), Path(args.out).resolve()
    (runs / "logs").mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    pending = jobs(runs, Path(args.text).resolve() if args.text else None, args.seeds, args.smoke, args.fig2_steps)
    if args.only:
        pending = [j for j in pending if j.meta["kind"] == "pretrain" or any(o in j.name for o in args.only)]
    if args.done:  # fine-tuning cells that an earlier grid (another machine) finished
        finished = {r["name"] for r in read_records(args.done) if r["rc"] == 0 and r["result"] and r["kind"] != "pretrain"}
        pending = [j for j in pending if j.name not in finished]
    needed = {j.needs for j in pending  # pretraining that no cell left to run needs is not run
              if j.meta["kind"] != "pretrain" and not (runs / j.out / "results.json").is_file()}
    pending = [j for j in pending if j.meta["kind"] != "pretrain" or j.out in needed or j.out.startswith("fig2_")]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done: dict[str, int] = {}          # job name -> exit status
    running: dict[str, tuple[Job, subprocess.Popen, float]] = {}
    start = time.time()
    path = out / "results.jsonl"
    cut = path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    results = open(path, "a", encoding="utf-8")
    if cut:   # an earlier call killed while writing a record: the next starts on a line of its own
        results.write("\n")

    def record(job: Job, rc, wall: float, note: str = "") -> None:
        result = None
        stdout = runs / "logs" / f"{job.name}.out"
        if rc == 0 and stdout.exists():
            try:
                result = json.loads(stdout.read_text())
            except json.JSONDecodeError:
                note = note or "stdout is not JSON"
        err = runs / "logs" / f"{job.name}.err"
        tail = err.read_text(errors="replace")[-600:] if rc not in (0, None) and err.exists() else ""
        results.write(json.dumps({"name": job.name, **job.meta, "argv": job.argv, "rc": rc, "wall_s": round(wall, 1),
                                  "result": result, "note": note, "stderr_tail": tail}) + "\n")
        results.flush()

    while pending or running:
        for name, (job, proc, t0) in list(running.items()):
            if proc.poll() is not None:
                done[name] = proc.returncode
                record(job, proc.returncode, time.time() - t0)
                del running[name]
        over = args.deadline and time.time() - start > args.deadline
        for job in list(pending):
            dep = f"pre_{job.needs}" if job.needs else None
            if over or (dep and done.get(dep, 0) != 0):
                pending.remove(job)
                done[job.name] = -1
                record(job, None, 0.0, "deadline before start" if over else f"{dep} failed")
            elif (runs / job.out / "results.json").is_file():  # finished by an earlier call of the grid
                pending.remove(job)
                done[job.name] = 0
            elif len(running) < args.workers and (dep is None or dep in done):
                pending.remove(job)
                resume = has_checkpoint(runs / job.out / "last")  # killed by an earlier call: go on from there
                cmd = [sys.executable, "-m", "genfeat.cli", "run", *job.argv, "--json",
                       "--resume" if resume else "--overwrite"]
                job.meta["resumed"] = resume
                with open(runs / "logs" / f"{job.name}.out", "w") as o, open(runs / "logs" / f"{job.name}.err", "w") as e:
                    running[job.name] = (job, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=o, stderr=e), time.time())
        if over:
            for name, (job, proc, t0) in list(running.items()):
                proc.kill()
                proc.wait()
                done[name] = -1
                record(job, None, time.time() - t0, "killed at the deadline")
                del running[name]
        time.sleep(0.5)
    results.close()
    failed = [n for n, rc in done.items() if rc != 0]
    print(f"{len(done)} jobs in {time.time() - start:.0f} s; not finished or failed: {len(failed)}"
          + (f" ({', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''})" if failed else ""))
    return 1 if failed else 0


# task -> the figures a cell shows (dev first; the first is the one the medians are of)
METRICS = {"sst2": ("dev_accuracy",), "mrpc": ("dev_f1", "dev_accuracy"), "stsb": ("dev_pearson", "dev_spearman"),
           "cola": ("dev_matthews", "dev_accuracy"), "rte": ("dev_accuracy",), "race": ("dev_accuracy", "test_accuracy"),
           "squad": ("dev_squad_f1", "dev_exact_match", "test_squad_f1")}


def read_records(paths: list[str]) -> list[dict]:
    """The job records of results.jsonl files (gzipped ones too), in order. A line that is not a whole record (the
    grid killed while writing it, a gzip file cut short) is left out with a warning naming the file and line."""
    records = []
    for p in paths:
        if not Path(p).is_file():
            sys.exit(f"error: '{p}' is not a file. fix: pass the results.jsonl of a grid run (or docs/data/*.jsonl.gz)")
        try:
            with (gzip.open if p.endswith(".gz") else open)(p, "rt", encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        print(f"warning: {p} line {number} is not a whole record ({e.msg}); left out", file=sys.stderr)
        except (EOFError, gzip.BadGzipFile) as e:
            print(f"warning: {p} ends before its last record ({e}); the records before it are read", file=sys.stderr)
    return records


def report(paths: list[str]) -> None:
    """Prints the tables of the grid's results (module doc) from one or more results.jsonl files."""
    records = read_records(paths)
    finished = {r["name"]: r for r in records if r["rc"] == 0 and r["result"]}
    for table, rows, tasks in (("t219", T219_ROWS, ("sst2", "mrpc", "stsb", "cola", "rte", "race", "squad")),
                               ("t5", T5_ROWS, T5_TASKS)):
        heads = [f"{t} {' / '.join(METRICS[t])}" for t in tasks]
        print(f"\n| init | {' | '.join(heads)} |")
        print("|---|" + "---|" * len(tasks))
        for row in rows:
            cells = []
            for task in tasks:
                runs = sorted((r for r in finished.values() if r["kind"] == table and r["row"] == row and r["task"] == task),
                              key=lambda r: r["seed"])
                if not runs:
                    cells.append("not run")
                    continue
                figs = [[r["result"][f"{m}_mean"] for r in runs] for m in METRICS[task]]
                median = " / ".join(f"{statistics.median(f):.3f}" for f in figs)
                seeds = ", ".join(f"{v:.3f}" for v in figs[0])
                cells.append(f"{median} (n={len(runs)}: {seeds})")
            print(f"| {ROW_LABELS[row]} | {' | '.join(cells)} |")
    print("\n| pretraining run | steps | held-out loss | wall | results file |\n|---|---|---|---|---|")
    for path in paths:  # per file: each call of the grid on a fresh machine pretrains again
        for r in read_records([path]):
            if r["kind"] == "pretrain" and r["rc"] == 0:
                res = r["result"]
                extra = (f", zero-shot SST-2 {res['zero_shot_accuracy_mean']:.3f}" if "zero_shot_accuracy_mean" in res
                         else "")
                print(f"| {r['row']} | {res['steps_mean']:.0f} | {res['valid_loss_mean']:.3f}{extra} | {r['wall_s']:.0f} s "
                      f"| {Path(path).name} |")
    walls = [r["wall_s"] for r in records if r["rc"] == 0 and r["result"]]  # every finished job of every file
    # a job killed at a deadline ran for its record's wall_s; resumed later, its finished record counts only the rest
    killed = [r["wall_s"] for r in records if r["note"] == "killed at the deadline"]
    last = {r["name"]: r for r in records}  # a job's last record, over the files in order
    failed = [r for r in last.values() if r["name"] not in finished]
    print(f"\n{len(walls)} jobs finished, {sum(walls):.0f} s of job wall time; {len(killed)} runs killed at a deadline "
          f"after {sum(killed):.0f} s of job wall time (a part of them resumed later); not finished: {len(failed)}")
    for note in sorted({r["note"] or f"exit {r['rc']}" for r in failed}):
        names = [r["name"] for r in failed if (r["note"] or f"exit {r['rc']}") == note]
        print(f"- {note} ({len(names)}): {', '.join(names)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export-text")
    p.add_argument("dir")
    p = sub.add_parser("report")
    p.add_argument("results", nargs="+")
    p = sub.add_parser("run")
    p.add_argument("--runs", required=True, help="folder for the runs' checkpoints and logs")
    p.add_argument("--out", required=True, help="folder for results.jsonl")
    p.add_argument("--text", help="folder holding export-text's files (default: imdb:train / imdb:valid)")
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--deadline", type=float, default=0, help="seconds; 0: none")
    p.add_argument("--only", nargs="+", help="only the fine-tuning jobs whose name holds one of these")
    p.add_argument("--done", nargs="+", help="results.jsonl files of earlier grids: their finished cells are not run")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--fig2-steps", type=int, default=0,
                   help="also pretrain GPT-1 and the LSTM for this many steps (GPT-1 Fig. 2 right); 0: not")
    args = parser.parse_args()
    if args.command == "export-text":
        export_text(Path(args.dir))
        return 0
    if args.command == "report":
        report(args.results)
        return 0
    return run_grid(args)


if __name__ == "__main__":
    sys.exit(main())
