"""Wall time of one Planetoid-T run on Cora with the default recipe (target: under 60 s on 2 CPU cores).

Usage: GENFEAT_DATA=../shared/data python benchmarks/planetoid_speed.py [--threads 2] [--seed 0]
The last stdout line is JSON: seconds (end to end, data loading included), sampling_seconds (time
spent drawing the context batches of every phase alone, measured afterwards on fresh samplers),
test/val accuracy, threads.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from genfeat.methods.planetoid import PlanetoidRecipe, build, run
from genfeat.objectives.graph_context import GraphContextObjective


def _sampling_seconds(cfg: PlanetoidRecipe, seed: int) -> float:
    """Draw as many context batches as each phase of the run consumes, with nothing else."""
    _, _, _, init, train = build(cfg, seed)
    t0 = time.perf_counter()
    for phase in [*init, train]:
        for step in range(phase.steps):
            for term in phase.stage_at(step).terms:
                if isinstance(term.objective, GraphContextObjective):
                    next(term.stream)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = PlanetoidRecipe(dataset="cora", mode="t", threads=args.threads)
    t0 = time.perf_counter()
    res = run(cfg, seed=args.seed, out_dir=None, progress=False)
    seconds = time.perf_counter() - t0
    print(json.dumps({"benchmark": "planetoid_t_cora", "seconds": round(seconds, 2),
                      "sampling_seconds": round(_sampling_seconds(cfg, args.seed), 2), "threads": args.threads,
                      "test_accuracy": res["test_accuracy"], "val_accuracy": res["val_accuracy"]}))


if __name__ == "__main__":
    main()
