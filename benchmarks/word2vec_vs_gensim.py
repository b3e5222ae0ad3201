"""genfeat's word2vec against gensim 4's, same corpus, vocabulary and settings, in one process run.

Usage: GENFEAT_DATA=../shared/data python benchmarks/word2vec_vs_gensim.py [--corpus ptb:train wikitext2:valid wikitext2:test]
    [--tokens whitespace|words] [--lowercase] [--max-documents 0]
    [--architecture skipgram] [--loss negative] [--epochs 5] [--dim 100] [--window 5] [--negatives 5] [--min-count 5]
    [--sample 1e-3] [--threads 2] [--workers 2] [--genfeat-threads 1] [--batch-size 1024] [--row-cap 128] [--seed 0] [--words bank fire money ...]

Both sides read the same sentences (genfeat.methods.word2vec.read_sentences) and build their vocabulary with
the same min_count; gensim trains with ``--threads`` worker threads (default 2), genfeat with ``--workers``
Hogwild worker processes (default 2, the recipe field ``workers``) of ``--genfeat-threads`` torch intra-op
threads each (default 1: a second one makes its small operations slower, docs/BENCHMARKS.md); the same window, negatives, dimension, subsampling, α 0.025 → 0.0001 and epochs;
``--loss hierarchical`` trains both with the hierarchical softmax (gensim ``hs=1, negative=0``). Both models are scored by
genfeat.eval.word_vectors (equal to gensim's own evaluate_word_pairs / evaluate_word_analogies, see
tests/test_word2vec.py): WordSim-353 Spearman and questions-words 3CosAdd accuracy (restricted to the first
300,000 words, gensim's default). Training words/s = epochs × corpus words in the vocabulary (before
subsampling) / training seconds, the same numerator for both; genfeat's training seconds are those of
``fit_word2vec`` (model, sampler and optimizer set-up and the workers' fork included; torch.optim's one-time import of
torch._dynamo is paid before timing), gensim's those of ``Word2Vec.train`` (its vocabulary built before).
Nearest-neighbour lists of ``--words`` are printed for both, and a genfeat step is timed part by part
(``step_ms_sample`` / ``_forward`` / ``_backward`` / ``_optimizer``, in one process, beside ``step_ms_genfeat``,
the whole step in the training loop: training seconds per step of one worker), and ``step_ms_arithmetic`` is the step's tensor arithmetic alone on the same
batches (gathers, scores, closed-form gradients, index_add_; a bound on what a leaner eager step could reach).
The last stdout line is JSON with speedup (genfeat words/s ÷ gensim's), spearman_genfeat, spearman_gensim,
analogy_genfeat, analogy_gensim, the settings and the machine's 1-minute load average at the start and the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import numpy as np
import torch

from genfeat.eval.word_vectors import evaluate_vectors, gensim_test_file
from genfeat.methods.word2vec import Word2VecRecipe, build_vocab, encode_sentences, fit_word2vec, read_sentences
from genfeat.eval.word_vectors import nearest_neighbours


def step_arithmetic(model, batch: dict[str, torch.Tensor], lr: float) -> None:
    """The tensor arithmetic of a step alone, as a bound: gather the rows, the scores, the closed-form gradients
    with the learning rate folded in, index_add_ into both tables; no sampler, autograd, optimizer or row cap."""
    w_in, w_out = model.input.weight.data, model.output.weight.data
    inputs, targets, weight = batch["inputs"], batch["targets"], batch["weight"]
    (b, n), d = inputs.shape, w_in.shape[1]
    h = w_in.index_select(0, inputs.reshape(-1)).view(b, n, d)
    if model.config.architecture == "cbow":
        h = h.mean(1, keepdim=True)
    u = w_out.index_select(0, targets.reshape(-1)).view(b, targets.shape[1], d)
    s = torch.linalg.vecdot(u, h).unsqueeze(1) if h.shape[1] == 1 else torch.bmm(h, u.transpose(1, 2))
    g = (torch.sigmoid(s) - (batch["sign"].unsqueeze(1) > 0).float()) * weight * -lr  # (b, k, T)
    grad_u = g.transpose(1, 2) * h if h.shape[1] == 1 else torch.bmm(g.transpose(1, 2), h)
    w_out.index_add_(0, targets.reshape(-1), grad_u.reshape(-1, d))
    w_in.index_add_(0, inputs.reshape(-1), torch.bmm(g, u).expand(b, n, d).reshape(-1, d))


def step_breakdown(ids, sent, counts, cfg: Word2VecRecipe, steps: int = 30) -> dict[str, float]:
    """Milliseconds per step of each part of a genfeat training step (sampling the batch, forward, backward,
    sparse SGD), timed outside the training loop on the same model, sampler and optimizer, after 5 warm-up steps;
    then ``arithmetic``, :func:`step_arithmetic` on the same batches."""
    from genfeat.methods.word2vec import SparseSGDConfig, model_config
    from genfeat.models.word2vec import Word2Vec
    from genfeat.objectives.word2vec import WindowSampler, Word2VecObjective

    model = Word2Vec(model_config(len(counts), cfg))
    sampler = WindowSampler(ids, sent, counts, cfg.window, cfg.negatives, cfg.batch_size, cfg.sample, cfg.ns_exponent,
                            0, cfg.architecture, cfg.row_cap, cfg.shared_negatives, cfg.loss, cfg.predicts)
    opt = SparseSGDConfig(name="sgd", lr=cfg.lr * cfg.batch_size).build(model.parameters())
    objective = Word2VecObjective()
    parts = dict.fromkeys(("sample", "forward", "backward", "optimizer"), 0.0)
    batches = []
    for i in range(steps + 5):
        t = [time.perf_counter()]
        batch = next(sampler)
        batches.append(batch)
        t.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        out = objective(model, batch)
        t.append(time.perf_counter())
        (out.loss_sum / out.count).backward()
        t.append(time.perf_counter())
        opt.step()
        t.append(time.perf_counter())
        if i >= 5:
            for k, (a, b) in zip(parts, itertools.pairwise(t)):
                parts[k] += (b - a) * 1000 / steps
    t = time.perf_counter()
    for batch in batches[5:]:
        step_arithmetic(model, batch, cfg.lr)
    parts["arithmetic"] = (time.perf_counter() - t) * 1000 / steps
    return {f"step_ms_{k}": round(v, 2) for k, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", nargs="+", default=["ptb:train", "wikitext2:valid", "wikitext2:test"])
    ap.add_argument("--tokens", choices=["whitespace", "words"], default="whitespace",
                    help="words: the BERT pre-tokeniser, for raw text such as imdb:train (the recipe field tokens)")
    ap.add_argument("--lowercase", action="store_true", help="lower-case the text first (the recipe field lowercase)")
    ap.add_argument("--max-documents", type=int, default=0, help="read at most this many documents of each corpus")
    ap.add_argument("--architecture", choices=["skipgram", "cbow"], default="skipgram")
    ap.add_argument("--loss", choices=["negative", "hierarchical"], default="negative",
                    help="negative sampling, or the hierarchical softmax (gensim hs=1, negative=0) on both sides")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--negatives", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--sample", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2, help="gensim's worker threads")
    ap.add_argument("--workers", type=int, default=2, help="genfeat's Hogwild worker processes")
    ap.add_argument("--genfeat-threads", type=int, default=1,
                    help="torch intra-op threads of genfeat (1 is faster than 2 for word2vec's small operations)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--row-cap", type=float, default=128.0)
    ap.add_argument("--per-pair-negatives", action="store_true", help="genfeat draws K negatives per pair, not per window")
    ap.add_argument("--predicts", choices=["center", "context"], default="center",
                    help="genfeat skip-gram with shared negatives: each context word's vector scores the center (center, "
                         "word2vec.c's order, the recipe's default) or the center word's vector scores the window (context)")
    ap.add_argument("--lr", type=float, default=0.025)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--words", nargs="*", default=["bank", "fire", "money", "company", "music", "war"])
    ap.add_argument("--breakdown-steps", type=int, default=30, help="steps timed part by part (0: skip)")
    args = ap.parse_args()
    from gensim.models import Word2Vec as GensimWord2Vec

    cfg = Word2VecRecipe(corpus=args.corpus, tokens=args.tokens, lowercase=args.lowercase,
                         max_documents=args.max_documents, architecture=args.architecture, loss=args.loss, dim=args.dim, window=args.window,
                         negatives=args.negatives, min_count=args.min_count, sample=args.sample, epochs=args.epochs,
                         batch_size=args.batch_size, row_cap=args.row_cap, shared_negatives=not args.per_pair_negatives, predicts=args.predicts, lr=args.lr, threads=args.genfeat_threads,
                         workers=args.workers)
    sim_file, ana_file = gensim_test_file("wordsim353.tsv"), gensim_test_file("questions-words.txt")
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    sentences = read_sentences(cfg)
    words, counts = build_vocab(sentences, cfg.min_count)
    ids, sent = encode_sentences(sentences, words)
    print(f"corpus {args.corpus}: {len(sentences):,} sentences, {len(ids):,} words in a vocabulary of {len(words):,} "
          f"(read in {time.perf_counter() - t0:.1f} s)", flush=True)

    torch.set_num_threads(args.genfeat_threads)
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))])  # the first optimizer imports torch._dynamo: seconds
    t0 = time.perf_counter()
    model, _, steps = fit_word2vec(ids, sent, counts, cfg, args.seed, progress=False)
    ours_s = time.perf_counter() - t0
    ours = evaluate_vectors(model.vectors, words, sim_file, ana_file)

    gm = GensimWord2Vec(vector_size=args.dim, window=args.window, min_count=args.min_count, sample=args.sample,
                        negative=args.negatives if args.loss == "negative" else 0, hs=int(args.loss == "hierarchical"),
                        sg=int(args.architecture == "skipgram"), workers=args.threads,
                        alpha=args.lr, min_alpha=0.0001, seed=args.seed, epochs=args.epochs)
    gm.build_vocab(sentences)
    t0 = time.perf_counter()
    gm.train(sentences, total_examples=len(sentences), epochs=args.epochs)
    theirs_s = time.perf_counter() - t0
    g_words = list(gm.wv.index_to_key)
    g_vec = torch.from_numpy(np.ascontiguousarray(gm.wv.vectors))
    theirs = evaluate_vectors(g_vec, g_words, sim_file, ana_file)

    breakdown = step_breakdown(ids, sent, counts, cfg, args.breakdown_steps) if args.breakdown_steps else {}
    words_total = args.epochs * len(ids)
    ours_wps, theirs_wps = words_total / ours_s, words_total / theirs_s
    for name, vec, vocab in (("genfeat", model.vectors, words), ("gensim", g_vec, g_words)):
        for w in args.words:
            if w in vocab:
                near = ", ".join(f"{n} {c:.2f}" for n, c in nearest_neighbours(vec, vocab, w, 8))
                print(f"{name:>8} {w}: {near}")
    for name, figs, secs, wps in (("genfeat", ours, ours_s, ours_wps), ("gensim", theirs, theirs_s, theirs_wps)):
        print(f"{name:>8}: {secs:7.1f} s  {wps:9,.0f} words/s  spearman {figs['spearman']:.4f} "
              f"({figs['similarity_pairs']} pairs)  analogy {figs['analogy']:.4f} ({figs['analogy_questions']} questions)")
    print(json.dumps({
        "benchmark": "word2vec_vs_gensim", "corpus": args.corpus, "tokens": args.tokens,
        "lowercase": args.lowercase, "architecture": args.architecture, "loss": args.loss,
        "epochs": args.epochs, "dim": args.dim, "window": args.window, "negatives": args.negatives,
        "min_count": args.min_count, "sample": args.sample, "threads": args.threads, "genfeat_threads": args.genfeat_threads, "workers": args.workers, "batch_size": args.batch_size, "row_cap": args.row_cap, "shared_negatives": not args.per_pair_negatives, "predicts": args.predicts,
        "seed": args.seed, "vocab_genfeat": len(words), "vocab_gensim": len(g_words), "corpus_words": len(ids),
        "steps_genfeat": steps, "seconds_genfeat": round(ours_s, 2), "seconds_gensim": round(theirs_s, 2),
        "words_per_s_genfeat": round(ours_wps), "words_per_s_gensim": round(theirs_wps),
        "speedup": round(ours_wps / theirs_wps, 3),
        "spearman_genfeat": round(ours["spearman"], 4), "spearman_gensim": round(theirs["spearman"], 4),
        "analogy_genfeat": round(ours["analogy"], 4), "analogy_gensim": round(theirs["analogy"], 4),
        "similarity_pairs": ours["similarity_pairs"], "analogy_questions": ours["analogy_questions"],
        "step_ms_genfeat": round(ours_s * 1000 * args.workers / steps, 2), **breakdown,
        "load_1min_start_end": [load_start, os.getloadavg()[0]]}))


if __name__ == "__main__":
    main()
