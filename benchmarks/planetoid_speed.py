"""Wall time of one Planetoid-T run on Cora with the default recipe (target: under 60 s on 2 CPU cores).

Usage: GENFEAT_DATA=../shared/data python benchmarks/planetoid_speed.py [--threads 2] [--seed 0]
The last stdout line is JSON: seconds (end to end, data loading included), sampling_seconds (time
spent drawing context batches alone), test/val accuracy, threads.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from genfeat.methods.planetoid import PlanetoidRecipe, run
from genfeat.objectives.graph_context import ContextSampler


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

    from genfeat.data.graph import load_planetoid

    g = load_planetoid("cora")
    sampler = ContextSampler(g.edges, g.num_nodes, g.labels, g.train_idx, cfg.context_batch, cfg.r1, cfg.r2,
                             cfg.walk_length, cfg.window, seed=args.seed, pairs_per_walk=cfg.pairs_per_walk)
    t1 = time.perf_counter()
    for _ in range(cfg.pretrain_steps + cfg.steps * cfg.t2 // (cfg.t1 + cfg.t2)):
        next(sampler)
    sampling = time.perf_counter() - t1
    print(json.dumps({"benchmark": "planetoid_t_cora", "seconds": round(seconds, 2),
                      "sampling_seconds": round(sampling, 2), "threads": args.threads,
                      "test_accuracy": res["test_accuracy"], "val_accuracy": res["val_accuracy"]}))


if __name__ == "__main__":
    main()
