"""Milliseconds per training-loop step of genfeat's word2vec, for A/B comparisons of two versions or settings.

Usage: GENFEAT_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/word2vec_step_time.py [--label new]
    [--steps 400] [--recipe '{"predicts": "center"}']

Trains ``fit_word2vec`` (the training loop, sampler and optimizer included) on PTB's training text with the
recipe's defaults (skip-gram, negative sampling, 1,024 center words a step) updated by ``--recipe`` (JSON),
for 20 warm-up steps and then ``--steps`` timed steps, and prints one JSON line. To compare two versions on a
loaded machine, run it in alternating processes with PYTHONPATH pointing at each version's src/
(docs/BENCHMARKS.md did so for the code before and after the closed-form step).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from genfeat.config import from_dict
from genfeat.errors import GenfeatError
from genfeat.methods.word2vec import Word2VecRecipe, build_vocab, encode_sentences, fit_word2vec, read_sentences


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="", help="a name for this run in the JSON line")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--recipe", default="{}", help="JSON of Word2VecRecipe fields to set")
    args = ap.parse_args()
    if args.steps < 1:   # fit_word2vec's steps 0 means every epoch
        ap.error(f"--steps must be >= 1, got {args.steps}")
    torch.set_num_threads(1)
    try:
        cfg = from_dict(Word2VecRecipe, {"corpus": ["ptb:train"], **json.loads(args.recipe)})
    except (GenfeatError, ValueError) as e:   # an unknown or ill-typed field; JSON that does not parse
        ap.error(f"--recipe: {e}")
    sentences = read_sentences(cfg)
    words, counts = build_vocab(sentences, cfg.min_count)
    ids, sent = encode_sentences(sentences, words)
    fit_word2vec(ids, sent, counts, cfg, 0, steps=20)  # warm-up (and torch.optim's one-time import)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    fit_word2vec(ids, sent, counts, cfg, 0, steps=args.steps)
    print(json.dumps({"label": args.label, "recipe": args.recipe, "steps": args.steps,
                      "ms_per_step": round((time.perf_counter() - t0) * 1000 / args.steps, 2),
                      "load_1min_start": load}))


if __name__ == "__main__":
    main()
