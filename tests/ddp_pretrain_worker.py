"""One pretraining run for tests/test_ddp_pretrain.py; run directly or under torchrun.

``ddp_pretrain_worker.py OUT RECIPE [--field.path value ...]`` runs RECIPE through the command line
with those overrides (metrics.jsonl, results.json and checkpoints go to OUT as usual) and also writes
OUT/rank{r}.pt with the final parameters of every rank.
"""

import sys
from pathlib import Path

from ddp_worker import save_params

from genfeat import cli
from genfeat.framework import Trainer


def main(out: Path, recipe: str, overrides: list[str]) -> int:
    fit = Trainer.fit

    def fit_and_save(trainer: Trainer):
        result = fit(trainer)
        save_params(trainer.model, out / f"rank{trainer.dist.rank}.pt")
        return result

    Trainer.fit = fit_and_save
    return cli.main(["run", recipe, "--out", str(out), "--no-progress", *overrides])


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    sys.exit(main(out, sys.argv[2], sys.argv[3:]))
