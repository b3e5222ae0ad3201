"""CPU time of a few training steps of pretraining recipes (the Table 2.19 group), in one process.

Each recipe runs through ``genfeat.runner.run_recipe`` with ``--steps STEPS``, no evaluation during
training, the first ``--documents`` training documents (enough text for the steps) and a given
tokenizer, so reading the corpus and training a tokenizer stay out of the figure; the time of
``Trainer.fit`` less its evaluations and checkpoints (the training steps only: the phase's final evaluation and
save are timed and left out; before 2026-11-28 they were counted, which a run of few steps scaled up) is taken
with ``time.process_time`` (CPU seconds of this process: with OMP_NUM_THREADS=1 about the wall time on an idle
core) and with the wall clock.

    OMP_NUM_THREADS=1 GENFEAT_DATA=../shared/data .venv/bin/python benchmarks/pretrain_step_time.py \\
        --sentencepiece OUT_OF_A_RUN/tokenizer --wordpiece OUT_OF_A_BERT_RUN/tokenizer

One JSON line per recipe: ``fit_cpu`` and ``fit_wall`` seconds for the steps and
``minutes_per_1500_steps`` (fit_cpu / steps x 1500 / 60).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUP = ["xlnet/pretrain_k6", "xlnet/pretrain_k7", "xlnet/no_memory", "xlnet/no_span", "xlnet/no_bidir", "xlnet/nsp",
         "xlnet/dae_txl", "bert/pretrain"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentencepiece", required=True, help="tokenizer folder for the XLNet-backbone recipes")
    parser.add_argument("--wordpiece", required=True, help="tokenizer folder for the BERT recipe")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("recipes", nargs="*", default=GROUP, help="recipes under recipes/ (default: the group)")
    args = parser.parse_args()

    from genfeat.framework import Trainer
    from genfeat.runner import run_recipe

    measured: dict[str, float] = {}
    left_out = {"cpu": 0.0, "wall": 0.0}
    fit, run_eval, save = Trainer.fit, Trainer._run_eval, Trainer._save

    def timed(method, into=None):
        def wrapper(trainer, *args, **kwargs):
            cpu, wall = time.process_time(), time.time()
            result = method(trainer, *args, **kwargs)
            cpu, wall = time.process_time() - cpu, time.time() - wall
            if into is None:   # fit: its time less the evaluations and saves inside it
                measured.update(cpu=cpu - left_out["cpu"], wall=wall - left_out["wall"])
                left_out.update(cpu=0.0, wall=0.0)
            else:
                into["cpu"] += cpu
                into["wall"] += wall
            return result
        return wrapper

    Trainer.fit, Trainer._run_eval, Trainer._save = timed(fit), timed(run_eval, left_out), timed(save, left_out)
    for recipe in args.recipes:
        tokenizer = args.wordpiece if recipe.startswith("bert") else args.sentencepiece
        # into a temporary OUT: the recipe's default OUT holds its real run (a run of this script at 4ee7418
        # wrote its 20-step runs there and replaced seven 1,500-step pretraining checkpoints)
        with tempfile.TemporaryDirectory() as out:
            run_recipe(ROOT / "recipes" / f"{recipe}.yaml", progress=False, out_dir=out,
                       overrides={"steps": args.steps, "train.eval_every": 0, "data.max_documents": args.documents,
                                  "data.valid_documents": 20, "data.tokenizer": tokenizer})
        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        print(json.dumps({"recipe": recipe, "steps": args.steps, "fit_cpu": measured["cpu"],
                          "fit_wall": measured["wall"], "minutes_per_1500_steps": measured["cpu"] / args.steps * 25,
                          "load": load}), flush=True)


if __name__ == "__main__":
    main()
