"""Why skip-gram predicting the context loses analogy points: its window's shared negatives, spread over more draws.

Usage: GENFEAT_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/word2vec_negative_draws.py [--seed 0]
    [--spread 2] [--redraw-window] [--corpus ptb:train wikitext2:valid wikitext2:test]

Trains genfeat's skip-gram with ``predicts: context`` (the recipe's other defaults, as
benchmarks/word2vec_vs_gensim.py's genfeat side) with the sampler changed in one of two ways, and prints one
JSON line with the WordSim-353 Spearman and questions-words accuracy:

- ``--spread r``: each center word draws r·K shared negatives, each weighted |window| / r instead of K at
  |window| (genfeat.objectives.word2vec). The expected loss is the same; its variance falls with r (with full
  windows r = 2m is the variance of K negatives per pair). If the gap to ``predicts: center`` shrinks with r,
  the variance of the shared negatives is what costs the analogies.
- ``--redraw-window``: a negative equal to any word of the window is drawn again (word2vec.c skips a negative
  equal to the word being predicted; the sampler only redraws one equal to the center word).

Not library options: docs/BENCHMARKS.md (word2vec) gives the figures and why ``predicts: center`` is the default.
"""

from __future__ import annotations

import argparse
import json
import time
from unittest import mock

import numpy as np
import torch

from genfeat.eval.word_vectors import evaluate_vectors, gensim_test_file
from genfeat.methods.word2vec import Word2VecRecipe, build_vocab, encode_sentences, fit_word2vec, read_sentences
from genfeat.objectives import word2vec as objective


def sampler_class(spread: int, redraw_window: bool):
    """A WindowSampler whose context rows carry ``spread`` times the negatives at 1/spread of the weight, and
    optionally no negative equal to a word of the window."""

    class Sampler(objective.WindowSampler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.negatives *= spread

        def _part(self, epoch, start, n):
            inputs, mask, targets, sign, weight, pairs = super()._part(epoch, start, n)
            slots = 2 * self.window  # targets: the 2m window slots, then the negatives
            weight = weight.copy()
            weight[..., slots:] /= spread
            if redraw_window:
                rng = np.random.default_rng([self.seed, epoch, 2, start])
                window = np.where(weight[:, 0, :slots] > 0, targets[:, :slots], -1)  # empty slots match nothing
                neg = targets[:, slots:]  # a view: redraws land in targets
                clash = (neg[:, :, None] == window[:, None, :]).any(2)
                while clash.any():
                    neg[clash] = self.noise(rng, int(clash.sum()))
                    clash = (neg[:, :, None] == window[:, None, :]).any(2) | (neg == inputs[:, :1])
            return inputs, mask, targets, sign, weight, pairs

    return Sampler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", nargs="+", default=["ptb:train", "wikitext2:valid", "wikitext2:test"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread", type=int, default=1, help="r: draw r*K shared negatives, each at weight |window|/r")
    ap.add_argument("--redraw-window", action="store_true", help="redraw a negative equal to a word of the window")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = Word2VecRecipe(corpus=args.corpus, predicts="context")
    sentences = read_sentences(cfg)
    words, counts = build_vocab(sentences, cfg.min_count)
    ids, sent = encode_sentences(sentences, words)
    cpu, t0 = time.process_time(), time.perf_counter()
    if args.spread < 1:   # 0 trained without negatives (the figures printed as if it were a setting)
        ap.error(f"--spread must be >= 1, got {args.spread}")
    with mock.patch.object(objective, "WindowSampler", sampler_class(args.spread, args.redraw_window)):
        model, _, steps = fit_word2vec(ids, sent, counts, cfg, args.seed)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
    figs = evaluate_vectors(model.vectors, words, gensim_test_file("wordsim353.tsv"),
                            gensim_test_file("questions-words.txt"))
    print(json.dumps({"benchmark": "word2vec_negative_draws", "seed": args.seed, "spread": args.spread,
                      "redraw_window": args.redraw_window, "steps": steps, "train_seconds": round(seconds, 1),
                      "train_cpu_seconds": round(cpu, 1), "spearman": round(figs["spearman"], 4),
                      "analogy": round(figs["analogy"], 4)}))


if __name__ == "__main__":
    main()
