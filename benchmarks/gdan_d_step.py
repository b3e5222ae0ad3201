"""Speed of GDAN's discriminator D (the gated-attention reader): training steps and dev scoring of a gdan recipe.

Builds the recipe's data, vocabulary, D and training phase (``genfeat.methods.gdan.build``), draws ``--steps``
batches of the labelled stream, and times forward + backward + D's optimizer (the trainer's fused Adam) on
each (after one warm-up step), then scores D on the first ``--eval`` dev questions. CPU seconds (``time.process_time``; with OMP_NUM_THREADS=1
about the wall time on an idle core) and wall seconds; the loss of every step, so two versions of the code
can be checked to train alike (pure speed changes give the same losses for the same batches).

    OMP_NUM_THREADS=1 GENFEAT_DATA=../shared/data .venv/bin/python benchmarks/gdan_d_step.py \\
        --recipe recipes/gdan/sl.yaml --steps 10 --set bucket=1

One JSON line: ``items_per_cpu_s``, ``items_per_wall_s`` (training; ``forward_cpu_s``, ``backward_cpu_s`` and
``optimizer_cpu_s`` its parts), ``eval_items_per_cpu_s``, the mean longest paragraph of the batches, the losses.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default=str(Path(__file__).resolve().parents[1] / "recipes" / "gdan" / "sl.yaml"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--eval", type=int, default=256, help="dev questions to score (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="recipe override, e.g. bucket=1 (YAML value)")
    args = parser.parse_args()
    if args.steps < 1 or args.eval < 0:
        parser.error(f"--steps must be >= 1 and --eval >= 0, got {args.steps} and {args.eval}")

    import yaml

    from genfeat.data.gdan import build_vocab, load_gdan_data
    from genfeat.methods.gdan import build, score
    from genfeat.runner import load_recipe

    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    _, cfg = load_recipe(args.recipe, overrides)
    torch.set_num_threads(1)
    data = load_gdan_data(cfg.data, args.seed)
    vocab = build_vocab(data, cfg.min_freq)
    built = build(cfg, data, vocab, args.seed)
    model, phase = built[0], built[2]
    collate = built[4] if len(built) > 4 else vocab        # D's collate (the code before 2026-11-23 had none)
    term = phase.terms()[0]
    optimizer = cfg.d_optim.build(model["d"].parameters())     # the trainer's (fused) Adam
    batches = [next(term.stream) for _ in range(args.steps + 1)]
    parts = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def step(batch) -> float:
        t0 = time.process_time()
        optimizer.zero_grad()
        out = term.objective(model, batch)
        loss = out.loss_sum / out.count
        t1 = time.process_time()
        loss.backward()
        t2 = time.process_time()
        optimizer.step()
        t3 = time.process_time()
        for name, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
            parts[name] += seconds
        return float(loss.detach())

    model.train()
    step(batches[0])
    parts = dict.fromkeys(parts, 0.0)
    wall, cpu = time.perf_counter(), time.process_time()
    losses = [step(b) for b in batches[1:]]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    items = sum(int(b["start"].shape[0]) for b in batches[1:])
    result = {"recipe": args.recipe, "overrides": overrides, "steps": args.steps, "items": items,
              "cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "items_per_cpu_s": round(items / cpu, 2),
              "items_per_wall_s": round(items / wall, 2), **{f"{k}_cpu_s": round(v, 2) for k, v in parts.items()},
              "mean_longest_paragraph": sum(int(b["paragraph_mask"].sum(1).max()) for b in batches[1:]) / args.steps,
              "losses": [round(x, 5) for x in losses]}
    if args.eval:
        dev = data.dev[:args.eval]
        cpu = time.process_time()
        scores = score(model, dev, collate, None, cfg.eval_batch, cfg.max_answer_words)
        cpu = time.process_time() - cpu
        result.update(eval_items_per_cpu_s=round(len(dev) / cpu, 2), eval_f1=scores["f1"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
