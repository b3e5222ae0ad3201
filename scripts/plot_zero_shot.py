"""Draw GPT-1's zero-shot accuracy over pretraining steps (seed paper Fig. 2 right) as a PNG.

    .venv/bin/python scripts/plot_zero_shot.py transformer=runs/gpt_pretrain lstm=runs/pretrain_lstm \
        --out runs/zero_shot_sst2.png

Each NAME=RUN_DIR is a ``method: gpt`` run with ``zero_shot.task`` set; its metrics.jsonl holds the
accuracy of every evaluation (genfeat.eval.zero_shot.read_zero_shot_curve). Prints the points as JSON.
"""

from __future__ import annotations

import argparse
import sys

from genfeat.eval.zero_shot import plot_zero_shot_curves, read_zero_shot_curve
from plot_pretraining import plot_runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="NAME=RUN_DIR, one per curve")
    p.add_argument("--out", required=True, help="the PNG to write")
    args = p.parse_args(argv)
    return plot_runs(args.runs, args.out, read_zero_shot_curve, plot_zero_shot_curves)


if __name__ == "__main__":
    sys.exit(main())
