"""Trains the tiny two-head model for the DDP test; run directly or under torchrun.

Writes OUT/rank{r}.pt with the final parameters and the logged per-step losses.
"""

import json
import sys
from pathlib import Path

import torch

from genfeat.framework import OptimConfig, TrainConfig, Trainer, one_phase

from _framework_fixtures import SquaredError, TwoHead, make_stream


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = TwoHead()
    trainer = Trainer(model, one_phase(SquaredError("a"), make_stream(batch_size=8), 6,
                                       OptimConfig(name="adamw", lr=1e-2)),
                      TrainConfig(progress=False, log_every=1, clip_norm=1.0), out_dir=out)
    trainer.fit()
    rank = trainer.dist.rank
    losses = []
    if rank == 0:
        losses = [r["mse_a"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                  if "mse_a" in r]
    torch.save({"params": {k: v.detach() for k, v in model.state_dict().items()}, "losses": losses},
               out / f"rank{rank}.pt")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    main(out)
