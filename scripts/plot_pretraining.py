"""Draw the pretraining curves of several runs (held-out loss and training loss against step) as one PNG.

    .venv/bin/python scripts/plot_pretraining.py "XLNet K=6=runs/pretrain_k6" BERT=runs/bert_pretrain \
        --out docs/figures/table_2_19_pretraining.png

Each NAME=RUN_DIR (split at the last '=') is a run directory of ``genfeat run``: its metrics.jsonl holds a
training record every ``log_every`` steps (the objective's mean loss under its own name: ``plm`` for the
permutation LM, ``mlm`` for the masked LM; ``--train-key`` picks another) and an evaluation record
(``event: eval``, ``valid_loss``) every ``eval_every`` steps. A resumed run logs some steps twice; the
last record of a step counts. The losses of different objectives are not on one scale (a permutation-LM
loss predicts the last 1/K of a factorization order from the rest, a masked-LM loss 15 % of the tokens
from the other 85 %): the figure puts them side by side, it does not rank them. Prints the curves as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from genfeat.errors import ConfigError, DataError, GenfeatError
from genfeat.io import atomic_path

# fields of a training record that are not the objective's loss
_META = {"step", "phase", "phase_step", "lr", "items_per_s", "event"}


def read_curves(run_dir: str | Path, train_key: str | None = None) -> dict:
    """{"train": [(step, loss)], "valid": [(step, valid_loss)], "train_key": name} from RUN_DIR/metrics.jsonl."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise DataError(f"{path} does not exist", "pass the --out directory of a `genfeat run`")
    train: dict[int, float] = {}
    valid: dict[int, float] = {}
    keys = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{n} is not JSON ({e.msg})", "the file is a genfeat metrics log") from None
        if rec.get("event") == "eval":
            if "valid_loss" in rec:
                valid[int(rec["step"])] = float(rec["valid_loss"])
        elif rec.get("event") is None and "step" in rec:
            key = train_key or _loss_key(rec, path, n)
            if key in rec:
                keys.add(key)
                train[int(rec["step"])] = float(rec[key])
    if train_key and not train:
        raise DataError(f"no training record of {path} holds '{train_key}'", "pass a --train-key the run logs (or "
                        "none: the objective's loss)")
    if not train and not valid:
        raise DataError(f"{path} holds no training or evaluation records", "the run has not logged yet")
    return {"train": sorted(train.items()), "valid": sorted(valid.items()),
            "train_key": ",".join(sorted(keys)) or None}


def _loss_key(rec: dict, path: Path, n: int) -> str:
    losses = [k for k, v in rec.items() if k not in _META and "/" not in k and isinstance(v, (int, float))]
    if len(losses) != 1:
        raise DataError(f"{path}:{n}: cannot tell the training loss among {losses}", "name it with --train-key")
    return losses[0]


def plot(curves: dict[str, dict], out: str | Path) -> Path:
    """Two panels, held-out loss and training loss against step, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (valid_ax, train_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for name, c in curves.items():
        if c["valid"]:
            valid_ax.plot(*zip(*c["valid"]), "-o", markersize=4, label=name)
        if c["train"]:
            train_ax.plot(*zip(*c["train"]), "-", linewidth=1.2, label=f"{name} ({c['train_key']})")
    valid_ax.set_title("held-out loss (the run's own objective)")
    train_ax.set_title("training loss as logged (NSP rows: + NSP loss)")
    for ax in (valid_ax, train_ax):
        ax.set_xlabel("step")
        ax.set_ylabel("nats per predicted token")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return out


def named_runs(specs: list[str]) -> dict[str, str]:
    """{NAME: RUN_DIR} from NAME=RUN_DIR arguments, split at the last '=' (a name may hold one)."""
    runs = {}
    for spec in specs:
        name, sep, run_dir = spec.rpartition("=")
        if not (sep and name and run_dir):
            raise ConfigError(f"'{spec}' is not NAME=RUN_DIR", "name each run, e.g. XLNet=runs/pretrain_k6")
        runs[name] = run_dir
    return runs


def plot_runs(specs: list[str], out: str, read, draw) -> int:
    """The plotting scripts' main: ``read`` each NAME=RUN_DIR's curve, ``draw`` them all into ``out``, print
    the points as JSON; 0, or 2 after one error line for bad input."""
    try:
        curves = {name: read(run_dir) for name, run_dir in named_runs(specs).items()}
        draw(curves, out)
    except GenfeatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": out, "curves": curves}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="NAME=RUN_DIR, one per curve")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--train-key", help="the training record's loss field (default: the record's only loss)")
    args = p.parse_args(argv)
    return plot_runs(args.runs, args.out, lambda run_dir: read_curves(run_dir, args.train_key), plot)


if __name__ == "__main__":
    sys.exit(main())
