"""word2vec: the gradients of negative sampling and the hierarchical softmax, the Huffman tree, the noise and
subsampling distributions, the windows, export to the word2vec formats (read back by gensim when it is
installed) and a tiny corpus whose related words end up closer than unrelated ones."""

import heapq
import itertools
import json
import math
import multiprocessing
import os
import re
import signal
import time

import numpy as np
import pytest
import torch

from genfeat.errors import ConfigError, DataError, GenfeatError
from genfeat.eval.word_vectors import analogy_accuracy, word_similarity
from genfeat.framework.trainer import Trainer
from genfeat.methods import word2vec as w2v_method
from genfeat.methods.word2vec import Word2VecRecipe, build_vocab, corpus_shards, encode_sentences, fit_word2vec
from genfeat.eval.word_vectors import nearest_neighbours
from genfeat.models.word2vec import Word2Vec, Word2VecConfig, load_word2vec_format, save_word2vec_format
from genfeat.objectives.word2vec import (WindowSampler, Word2VecObjective, huffman_tree, keep_probability,
                                         noise_distribution)
from genfeat.signals import sigterm_interrupts


def _random_model(arch, v=12, d=6, seed=0, output="negative", sparse=False):
    torch.manual_seed(seed)
    model = Word2Vec(Word2VecConfig(v, d, arch, sparse=sparse, output=output))
    with torch.no_grad():
        model.output.weight.normal_(0, 0.5)
        model.input.weight.normal_(0, 0.5)
    return model


def _sampler(arch="skipgram", n=400, v=12, window=3, negatives=4, batch=16, sample=0.0, seed=0, row_cap=0.0,
             shared=True, output="negative", predicts="context"):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, v, n)
    sentence = np.repeat(np.arange(n // 10 + 1), 10)[:n]
    counts = np.bincount(ids, minlength=v)
    sampler = WindowSampler(ids, sentence, counts, window, negatives, batch, sample, seed=seed, architecture=arch,
                            row_cap=row_cap, shared_negatives=shared, output=output, predicts=predicts)
    return sampler, ids, sentence, counts


@pytest.mark.parametrize("arch, row_cap, shared, output, sparse, predicts", [
    ("skipgram", 0.0, True, "negative", False, "context"), ("cbow", 0.0, True, "negative", True, "context"),
    ("skipgram", 20.0, True, "negative", True, "context"), ("cbow", 5.0, True, "negative", False, "context"),
    ("skipgram", 20.0, False, "negative", True, "context"), ("skipgram", 5.0, True, "negative", True, "center"),
    ("skipgram", 5.0, True, "hierarchical", True, "context"), ("cbow", 5.0, True, "hierarchical", False, "context"),
    ("skipgram", 0.0, True, "hierarchical", False, "context")])
def test_gradients_match_word2vec_updates(arch, row_cap, shared, output, sparse, predicts):
    """The model's closed-form backward pass equals word2vec.c's hand-written update: for each score
    s = u_t^T h_j with label l (1: a true target or branch 0; 0: a noise word or branch 1) and pair count c,
    g = c (σ(s) − l); u_t gets g h_j and h_j gets g u_t (CBOW: every window vector the whole of it); with
    the row cap each of these scaled by its lookup's factor. Dense and sparse gradients alike."""
    model = _random_model(arch, output=output, sparse=sparse)
    batch = next(_sampler(arch, row_cap=row_cap, shared=shared, output=output, predicts=predicts)[0])
    ones = lambda x: torch.ones(x.shape)
    in_scale = batch.get("input_grad_scale", ones(batch["inputs"])).numpy()
    out_scale = batch.get("target_grad_scale", ones(batch["targets"])).numpy()
    assert (in_scale < 1).any() == (out_scale < 1).any() == (row_cap > 0)
    out = Word2VecObjective()(model, batch)
    out.loss_sum.backward()
    win, wout = model.input.weight.detach().numpy(), model.output.weight.detach().numpy()
    grad_in, grad_out = np.zeros_like(win), np.zeros_like(wout)
    loss = 0.0
    for r in range(len(batch["targets"])):
        mask = batch["input_mask"][r].numpy()
        slots = batch["inputs"][r].numpy()
        if arch == "cbow":  # one h, the window's mean, whose gradient every window vector gets
            hs = [win[slots[mask]].mean(0) if mask.any() else np.zeros(win.shape[1])]
            feeds = [list(np.flatnonzero(mask))]
        else:  # each input slot its own h
            hs = [win[i] for i in slots]
            feeds = [[j] if mask[j] else [] for j in range(len(slots))]
        for j, (h, feed) in enumerate(zip(hs, feeds)):
            grad_h = np.zeros_like(h)
            for t, (w, sign) in enumerate(zip(batch["targets"][r].numpy(), batch["sign"][r].numpy())):
                c = float(batch["weight"][r, j, t])
                s = float(wout[w] @ h)
                label = 1.0 if sign > 0 else 0.0
                loss += c * -np.log(1 / (1 + np.exp(-sign * s)))
                g = c * (1 / (1 + np.exp(-s)) - label)
                grad_out[w] += out_scale[r, t] * g * h
                grad_h += g * wout[w]
            for i in feed:
                grad_in[slots[i]] += in_scale[r, i] * grad_h
    assert float(out.loss_sum.detach()) == pytest.approx(loss, rel=1e-5)
    dense = lambda g: (g.to_dense() if g.is_sparse else g).numpy()
    assert model.output.weight.grad.is_sparse == model.input.weight.grad.is_sparse == sparse
    np.testing.assert_allclose(dense(model.output.weight.grad), grad_out, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(dense(model.input.weight.grad), grad_in, rtol=1e-4, atol=1e-6)
    assert out.count == len(batch["targets"])


def _huffman_reference_cost(counts):
    """Σ count · code length of an optimal prefix code (the sum of every merge of a heap-built Huffman tree)."""
    heap, cost = list(counts), 0
    heapq.heapify(heap)
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        cost += merged
        heapq.heappush(heap, merged)
    return cost


def test_huffman_tree_is_an_optimal_prefix_code():
    """The codes are a complete prefix code (no code a prefix of another; Kraft sum exactly 1), a more frequent
    word never has a longer code, the total length Σ count · L(w) is the optimum, every path starts at the
    root and each inner node has exactly two children; the textbook example gets the textbook lengths."""
    assert huffman_tree(np.array([5, 9, 12, 13, 16, 45])).lengths.tolist() == [4, 4, 3, 3, 3, 1]
    counts = np.random.default_rng(0).zipf(1.5, 300).clip(max=10**6) + 4
    tree = huffman_tree(counts)
    v = len(counts)
    codes = ["".join(map(str, tree.codes[w, :tree.lengths[w]])) for w in range(v)]
    assert len(set(codes)) == v and sum(2.0 ** -len(c) for c in codes) == 1.0
    ordered = sorted(codes)
    assert not any(b.startswith(a) for a, b in zip(ordered, ordered[1:]))
    order = np.lexsort((tree.lengths, -counts))  # by count, most frequent first; equal counts by length
    assert (np.diff(tree.lengths[order]) >= 0).all()
    assert (counts * tree.lengths).sum() == _huffman_reference_cost(counts.tolist())
    assert (tree.points[:, 0] == v - 2).all()
    children = {}
    for w in range(v):
        for l in range(tree.lengths[w]):
            children.setdefault(int(tree.points[w, l]), set()).add(codes[w][:l + 1])
    assert sorted(children) == list(range(v - 1))
    assert all(len({c[-1] for c in kids}) == 2 for kids in children.values())
    single = huffman_tree(np.array([7]))
    assert single.lengths.tolist() == [0] and single.points.shape == (1, 0)


def test_hierarchical_softmax_is_a_distribution():
    """P(w | h) = Π_l σ((1 − 2 c_l) u_{n(w,l)}^T h) sums to 1 over the vocabulary for random h and inner-node
    vectors (float64, to rounding), through the model's scores and the tree's signs."""
    counts = np.random.default_rng(1).zipf(1.3, 500).clip(max=10**6) + 1
    tree = huffman_tree(counts)
    torch.manual_seed(0)
    model = Word2Vec(Word2VecConfig(len(counts), 8, output="hierarchical")).double()
    assert model.output.weight.shape == (len(counts) - 1, 8)
    with torch.no_grad():
        model.output.weight.normal_(0, 1.0)
        model.input.weight.normal_(0, 1.0)
    for center in range(3):
        inputs = torch.full((len(counts), 1), center)
        torch.set_grad_enabled(False)
        scores = model(inputs, torch.ones_like(inputs, dtype=torch.bool), torch.from_numpy(tree.points)).scores[:, 0]
        sign = torch.from_numpy(tree.signs).double()
        log_p = (torch.nn.functional.logsigmoid(sign * scores) * (sign != 0)).sum(1)
        assert abs(float(log_p.exp().sum()) - 1.0) < 1e-12
        assert float(log_p.exp().min()) > 0
    torch.set_grad_enabled(True)


@pytest.mark.parametrize("arch", ["skipgram", "cbow"])
def test_hierarchical_rows(arch):
    """Hierarchical-softmax rows: the targets are the center word's path and the signs its code; skip-gram
    weighs (context slot, path node) by both masks, CBOW (the window's mean, path node) by a non-empty window."""
    m = 3
    sampler, ids, _, counts = _sampler(arch, window=m, batch=50, output="hierarchical")
    tree = huffman_tree(counts)
    batch = next(sampler)
    centers = ids[:50]
    assert torch.equal(batch["targets"], torch.from_numpy(tree.points[centers]))
    path = np.arange(tree.points.shape[1]) < tree.lengths[centers][:, None]
    np.testing.assert_array_equal(batch["sign"].numpy(), np.where(path, 1 - 2 * tree.codes[centers], 0))
    mask = batch["input_mask"].numpy()
    assert batch["inputs"].shape == (50, 2 * m) and mask.any(1).all()
    expect = mask[:, :, None] * path[:, None] if arch == "skipgram" else mask.any(1)[:, None, None] * path[:, None]
    np.testing.assert_array_equal(batch["weight"].numpy(), expect)
    assert float(batch["pairs"]) == (mask.sum() if arch == "skipgram" else mask.any(1).sum())


def test_skipgram_rows_are_the_pairs_of_each_window():
    """Skip-gram rows against a brute-force reading: window slots are the words within the drawn span in the
    same sentence, the negatives count once per pair of the window, and no negative equals its center."""
    sampler, ids, sentence, _ = _sampler(window=3, batch=50, n=200)
    batch = next(sampler)
    kept, sent = sampler._epoch(0)
    assert np.array_equal(kept, ids) and np.array_equal(sent, sentence)  # sample 0 keeps every word
    m = 3
    for r in range(50):
        center = batch["inputs"][r, 0].item()
        assert center == ids[r]
        slots = batch["targets"][r, :2 * m].numpy()
        mask = batch["weight"][r, 0, :2 * m].numpy() > 0
        context = {(p - r) for p in range(max(0, r - m), min(len(ids), r + m + 1))
                   if p != r and sentence[p] == sentence[r]}
        offsets = np.array([-3, -2, -1, 1, 2, 3])
        got = set(offsets[mask].tolist())
        assert got <= context
        span = max(abs(o) for o in got) if got else 0
        assert got == {o for o in context if abs(o) <= span} or not got
        assert np.array_equal(slots[mask], ids[r + offsets[mask]])
        negs = batch["targets"][r, 2 * m:].numpy()
        assert (negs != center).all()
        assert (batch["weight"][r, 0, 2 * m:].numpy() == mask.sum()).all()
        assert (batch["sign"][r, :2 * m] == 1).all() and (batch["sign"][r, 2 * m:] == -1).all()
    assert float(batch["pairs"]) == float(batch["weight"][:, 0, :2 * m].sum())


def test_row_cap_counts_each_rows_pair_terms():
    """target scale = min(1, C / Σ weights of the row's scores with that target); input scale = min(1, C / Σ over
    the row's input slots of the weights of the scores their vector h enters), brute force."""
    cap = 30.0
    for arch, output in (("skipgram", "negative"), ("cbow", "negative"), ("skipgram", "hierarchical"),
                         ("cbow", "hierarchical")):
        batch = {k: v.numpy() for k, v in next(_sampler(arch, batch=40, row_cap=cap, output=output)[0]).items()}
        out_load, in_load = {}, {}
        for r in range(40):
            weight = batch["weight"][r]  # (k, T)
            for w, c in zip(batch["targets"][r], weight.sum(0)):
                out_load[w] = out_load.get(w, 0.0) + c
            for j, (w, m) in enumerate(zip(batch["inputs"][r], batch["input_mask"][r])):
                if m:
                    in_load[w] = in_load.get(w, 0.0) + weight[j if len(weight) > 1 else 0].sum()
        for r in range(40):
            for w, f in zip(batch["targets"][r], batch["target_grad_scale"][r]):
                assert f == pytest.approx(min(1.0, cap / out_load[w]) if out_load[w] > 0 else 1.0, rel=1e-6)
            for w, m, f in zip(batch["inputs"][r], batch["input_mask"][r], batch["input_grad_scale"][r]):
                if m:
                    assert f == pytest.approx(min(1.0, cap / in_load[w]), rel=1e-6)


def test_skipgram_predicting_the_center():
    """predicts center: each context slot's vector h scores the center word (+1) and the K shared negatives (−1),
    weighted 1 where the slot holds a word; a misspelt value is refused; per-pair negatives ignore it."""
    m, k = 3, 4
    sampler, ids, _, _ = _sampler(window=m, negatives=k, batch=50, predicts="center")
    batch = next(sampler)
    assert batch["inputs"].shape == (50, 2 * m) and batch["targets"].shape == (50, 1 + k)
    assert torch.equal(batch["targets"][:, 0], torch.from_numpy(ids[:50]))
    assert (batch["sign"][:, 0] == 1).all() and (batch["sign"][:, 1:] == -1).all()
    assert torch.equal(batch["weight"], batch["input_mask"].float().unsqueeze(2).expand(50, 2 * m, 1 + k))
    assert float(batch["pairs"]) == float(batch["input_mask"].sum())
    with pytest.raises(ConfigError, match="predicts"):
        _sampler(predicts="centre")
    # K negatives per pair: the center word's rows whatever predicts says
    per_pair = next(_sampler(window=m, negatives=k, batch=50, shared=False, predicts="center")[0])
    assert per_pair["inputs"].shape == (50, 1) and per_pair["targets"].shape == (50, 2 * m + 2 * m * k)


def test_per_pair_negatives():
    """shared_negatives=False: K negatives for every window slot, each counting once where the slot holds a
    context word, none equal to the center word."""
    m, k = 3, 4
    batch = next(_sampler(window=m, negatives=k, batch=50, shared=False)[0])
    assert batch["targets"].shape == (50, 2 * m + 2 * m * k)
    mask = batch["weight"][:, 0, :2 * m] > 0
    assert torch.equal(batch["weight"][:, 0, 2 * m:], mask.repeat_interleave(k, 1).float())
    assert (batch["sign"][:, 2 * m:] == -1).all()
    assert (batch["targets"][:, 2 * m:] != batch["inputs"]).all()


def test_dynamic_window_span_is_uniform():
    """The span b ~ U{1..m}: the share of windows whose farthest slot is k is about 1/m for every k
    (sentences long enough that the sentence never cuts a window)."""
    n, m = 20000, 4
    ids = np.arange(n) % 50
    sampler = WindowSampler(ids, np.zeros(n, np.int64), np.bincount(ids), m, 1, n - 2 * m, 0.0)
    sampler.offset = m  # no window touches the corpus ends
    w = next(sampler)["input_mask"].numpy()  # the default rows predict the center: the inputs are the window
    span = np.abs(np.array([-4, -3, -2, -1, 1, 2, 3, 4]) * w).max(1)
    share = np.bincount(span, minlength=m + 1)[1:] / len(span)
    np.testing.assert_allclose(share, 1 / m, atol=0.02)


def test_noise_distribution_is_unigram_to_the_three_quarters():
    counts = np.array([1000, 100, 10, 1])
    p = noise_distribution(counts)
    np.testing.assert_allclose(p, counts ** 0.75 / (counts ** 0.75).sum())
    # the sampler's negatives follow it (center word 4 is outside the noise support, so nothing is redrawn)
    n = 200000
    ids = np.full(n, 4)
    sampler = WindowSampler(ids, np.arange(n), np.append(counts, 0), 1, 1, n, 0.0)
    negs = next(sampler)["targets"][:, -1].numpy()
    np.testing.assert_allclose(np.bincount(negs, minlength=5)[:4] / n, p, atol=4e-3)


def test_subsampling_probability():
    """word2vec.c / gensim: keep = (sqrt(f/(sT)) + 1) sT/f, capped at 1; and each epoch keeps that share."""
    counts = np.array([50000, 5000, 500, 50, 5])
    s, total = 1e-3, counts.sum()
    expected = np.minimum((np.sqrt(counts / (s * total)) + 1) * s * total / counts, 1.0)
    np.testing.assert_allclose(keep_probability(counts, s), expected)
    assert keep_probability(counts, s)[0] < 0.5 and keep_probability(counts, s)[-1] == 1.0
    assert (keep_probability(counts, 0.0) == 1).all()
    ids = np.repeat(np.arange(5), counts)
    sampler = WindowSampler(ids, np.zeros(len(ids), np.int64), counts, 2, 2, 10, s)
    kept = np.bincount(sampler._epoch(0)[0], minlength=5) / counts
    np.testing.assert_allclose(kept, expected, atol=0.02)
    assert sampler.expected_centers() == pytest.approx((counts * expected).sum())


def test_sampler_resumes_exactly_across_epochs():
    sampler = _sampler(n=100, batch=64, sample=1e-2)[0]
    for _ in range(3):
        next(sampler)
    state = sampler.state_dict()
    a = next(sampler)
    resumed = _sampler(n=100, batch=64, sample=1e-2)[0]
    resumed.load_state_dict(state)
    b = next(resumed)
    assert state["epoch"] >= 1 and all(torch.equal(a[k], b[k]) for k in a)


def _topic_corpus(seed=0, sentences=1500):
    """Two topics: each sentence draws 8 words from one of two disjoint sets of 10 words."""
    rng = np.random.default_rng(seed)
    topics = [[f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]]
    return [list(rng.choice(topics[rng.integers(2)], 8)) for _ in range(sentences)]


@pytest.mark.parametrize("arch, loss", [("skipgram", "negative"), ("cbow", "negative"), ("skipgram", "hierarchical"),
                                       ("cbow", "hierarchical")])
def test_related_words_end_up_closer(arch, loss):
    sentences = _topic_corpus()
    words, counts = build_vocab(sentences, 1)
    ids, sent = encode_sentences(sentences, words)
    cfg = Word2VecRecipe(architecture=arch, loss=loss, dim=16, window=3, negatives=5, min_count=1, sample=0.0, epochs=3,
                         batch_size=256, threads=1)
    model, result, steps = fit_word2vec(ids, sent, counts, cfg, seed=0)
    assert result.steps == steps
    v = model.vectors / model.vectors.norm(dim=1, keepdim=True)
    topic = torch.tensor([w[0] == "a" for w in words])
    cos = v @ v.T
    same = cos[topic][:, topic].sum() - topic.sum()  # off-diagonal mean within topic a
    same = same / (topic.sum() * (topic.sum() - 1))
    across = cos[topic][:, ~topic].mean()
    assert same > across + 0.3, (float(same), float(across))
    near = [w for w, _ in nearest_neighbours(model.vectors, words, "a0", 5)]
    assert all(w.startswith("a") for w in near), near


def test_corpus_shards_cut_at_sentence_starts():
    sentence = np.repeat(np.arange(10), 7)  # 70 words, 10 sentences of 7
    shards = corpus_shards(sentence, 3)
    assert shards[0][0] == 0 and shards[-1][1] == 70
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shards))
    assert [a for a, _ in shards[1:]] == [21, 49]  # 23 and 46 moved to the nearer sentence start
    assert corpus_shards(np.zeros(10, np.int64), 3) == [(0, 3), (3, 6), (6, 10)]  # one sentence: cut inside it
    lopsided = np.repeat([0, 1], [10, 1000])  # the nearest start is far from the middle: cut inside the sentence
    assert corpus_shards(lopsided, 2) == [(0, 505), (505, 1010)]
    with pytest.raises(DataError, match="no word"):
        corpus_shards(np.zeros(0, np.int64), 1)
    with pytest.raises(ConfigError, match="3 words in the vocabulary for 4 workers"):
        corpus_shards(np.arange(3), 4)


def test_sampler_streams():
    """Stream 0 draws what a single-process sampler always drew (``default_rng([seed, epoch, 0])`` subsamples an
    epoch); stream 1, another worker's, draws something else from the same seed."""
    a, ids, sentence, counts = _sampler(sample=1e-2, seed=3)
    b = WindowSampler(ids, sentence, counts, 3, 4, 16, 1e-2, seed=3, stream=1)
    kept = np.random.default_rng([3, 0, 0]).random(len(ids)) < a.keep[ids]
    assert np.array_equal(a._epoch(0)[0], ids[kept])
    assert not np.array_equal(b._epoch(0)[0], ids[kept])


def test_hogwild_workers_share_the_vectors():
    """Topic a fills the first half of the corpus and topic b the second, so with two workers only worker 1 (a forked
    process) ever sees topic b as centre words: b's input vectors move from their initial values and draw together
    only if its updates land in the shared tables. (Whether b also separates from a depends on how the two
    processes interleave: trained one after the other, as one process reading b three times and then a three
    times also shows, every input vector of this 20-word corpus ends in one direction, so that is not asserted.)"""
    rng = np.random.default_rng(0)
    topics = [[f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]]
    sentences = [list(rng.choice(topics[k // 750], 8)) for k in range(1500)]
    words, counts = build_vocab(sentences, 1)
    ids, sent = encode_sentences(sentences, words)
    cfg = Word2VecRecipe(dim=16, window=3, negatives=5, min_count=1, sample=0.0, epochs=3, batch_size=256, workers=2)
    torch.manual_seed(0)
    initial = Word2Vec(w2v_method.model_config(len(words), cfg)).input.weight.detach().clone()
    model, result, steps = fit_word2vec(ids, sent, counts, cfg, seed=0)
    assert result.steps == steps == math.ceil(3 * len(ids) / 256 / 2) * 2
    b = torch.tensor([w[0] == "b" for w in words])
    assert (model.vectors[b] - initial[b]).norm(dim=1).min() > 0.5
    v = model.vectors / model.vectors.norm(dim=1, keepdim=True)
    cos = v @ v.T
    within_b = (cos[b][:, b].sum() - b.sum()) / (b.sum() * (b.sum() - 1))
    initial_b = initial[b] / initial[b].norm(dim=1, keepdim=True)
    assert abs(float(((initial_b @ initial_b.T).sum() - b.sum()) / (b.sum() * (b.sum() - 1)))) < 0.2  # random at start
    assert within_b > 0.9, float(within_b)


@pytest.mark.parametrize("ending", ["killed", "terminated", "raised", "done", "late"])
def test_hogwild_worker_failure_stops_the_run_at_once(ending, tmp_path, monkeypatch):
    """3 processes, shares of about 100 steps, run as the command line runs them (SIGTERM raising in the parent, a
    handler the forked workers inherit). killed / terminated / raised: worker 1 ends (SIGKILL, SIGTERM, an exception)
    before share 0's first step (the parent waits for it, so the order is certain): the run stops after that step
    with one error line naming the worker, its share and the cause; worker 2, sleeping through its share, is
    terminated; no worker process is left; OUT holds only the metrics log so far. done: workers that finish their
    shares early are no failure. late: worker 2 fails once share 0 has ended (OUT holds its ``last``), while worker 1
    still sleeps: the wait for the workers ends at once with worker 2's error, and worker 1 is terminated."""
    parent, taken, workers = os.getpid(), [], []
    train_share, step = w2v_method._train_share, Trainer._step
    share0_done = tmp_path / "share0_done"

    def ending_first(*args, **kwargs):
        worker = {"word2vec-worker-1": 1, "word2vec-worker-2": 2}.get(multiprocessing.current_process().name)
        if (worker, ending) == (1, "killed"):
            os.kill(os.getpid(), signal.SIGKILL)
        if (worker, ending) == (1, "terminated"):
            os.kill(os.getpid(), signal.SIGTERM)
        if (worker, ending) == (1, "raised"):
            raise DataError("worker broke\n" + "x" * 100_000, "nothing")  # one line, cut short (more than a pipe holds)
        if (worker, ending) == (2, "late"):
            while not share0_done.exists():
                time.sleep(0.01)
            raise DataError("worker broke late", "nothing")
        if worker is not None and ending != "done":
            time.sleep(60)
        if worker is not None:
            return None
        if ending != "late":
            workers[0].join(60)
        result = train_share(*args, **kwargs)
        share0_done.touch()
        return result

    def counted_step(self, *args):
        taken.append(os.getpid())
        return step(self, *args)

    def recorded_start(self):  # every worker as it starts (active_children() would miss one that already ended)
        workers.append(self)
        return start(self)

    start = multiprocessing.context.ForkProcess.start
    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", recorded_start)
    monkeypatch.setattr(w2v_method, "_train_share", ending_first)
    monkeypatch.setattr(Trainer, "_step", counted_step)
    (tmp_path / "corpus.txt").write_text("\n".join(" ".join(s) for s in _topic_corpus(sentences=200)) + "\n")
    cfg = Word2VecRecipe(corpus=[str(tmp_path / "corpus.txt")], dim=8, min_count=1, sample=0.0, epochs=3, batch_size=16,
                         workers=3, similarity_file="", analogy_file="")
    out = tmp_path / "out"
    if ending == "done":
        with sigterm_interrupts():
            figures = w2v_method.run(cfg, seed=0, out_dir=out, progress=False)
        last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
        assert last["phase_step"] == len(taken) > 90 and figures["steps"] > 3 * 90  # share 0 to its end
        assert {"final", "vectors.bin", "results.json"} <= set(os.listdir(out))
        return
    with pytest.raises(GenfeatError) as error, sigterm_interrupts():
        w2v_method.run(cfg, seed=0, out_dir=out, progress=False)
    failed, cause = {"killed": (1, r"was killed by signal 9 \(SIGKILL: most likely out of memory\)"),
                     "terminated": (1, r"was killed by signal 15"),
                     "raised": (1, r"raised DataError: worker broke x{1900,1999}"),
                     "late": (2, r"raised DataError: worker broke late\. fix: nothing")}[ending]
    assert re.fullmatch(rf"a word2vec worker process failed: word2vec-worker-{failed} \(share {failed} of shares 0-2: "
                        r"corpus words [\d,]+ to [\d,]+\) " + cause, error.value.cause), error.value.cause
    assert "\n" not in str(error.value)
    assert [p.name for p in workers] == ["word2vec-worker-1", "word2vec-worker-2"]
    assert workers[2 - failed].exitcode == -signal.SIGTERM  # the other one, terminated
    assert not any(os.path.exists(f"/proc/{p.pid}") for p in workers)  # ended and reaped
    if ending == "late":
        assert len(taken) > 90 and sorted(os.listdir(out)) == ["last", "metrics.jsonl"]
    else:
        assert taken == [parent]  # share 0 stopped after its first step
        assert os.listdir(out) == ["metrics.jsonl"]


def test_hogwild_run_cannot_be_resumed():
    sentences = _topic_corpus(sentences=200)
    words, counts = build_vocab(sentences, 1)
    ids, sent = encode_sentences(sentences, words)
    cfg = Word2VecRecipe(dim=8, min_count=1, sample=0.0, epochs=1, batch_size=128, workers=2)
    with pytest.raises(ConfigError, match="cannot be resumed"):
        fit_word2vec(ids, sent, counts, cfg, seed=0, resume_from="somewhere")


def test_divergence_is_a_clear_error():
    sentences = _topic_corpus(sentences=200)
    words, counts = build_vocab(sentences, 1)
    ids, sent = encode_sentences(sentences, words)
    cfg = Word2VecRecipe(dim=8, min_count=1, sample=0.0, epochs=3, batch_size=512, lr=1e20, min_lr=1e20, row_cap=0.0,
                         threads=1)
    with pytest.raises(ConfigError, match="diverged") as e:
        fit_word2vec(ids, sent, counts, cfg, seed=0)
    assert e.value.fix.startswith("lower lr or batch_size, or set row_cap"), "the fix names word2vec's own fields"
    assert "optim" not in e.value.fix and "train." not in e.value.fix


def test_vocabulary_and_encoding():
    words, counts = build_vocab([["x", "y", "x"], ["z", "x", "y"]], 2)
    assert words == ["x", "y"] and counts.tolist() == [3, 2]
    ids, sent = encode_sentences([["x", "z", "y"], ["q"], ["y"]], words)
    assert ids.tolist() == [0, 1, 1] and sent.tolist() == [0, 0, 2]
    with pytest.raises(DataError, match="min_count=5"):
        build_vocab([["x", "y", "x"]], 5)


def test_bad_settings():
    with pytest.raises(ConfigError, match="window is 0"):
        Word2VecRecipe(window=0)
    with pytest.raises(ConfigError, match="set threads 1 and save_every 0"):
        Word2VecRecipe(workers=2, threads=2)
    with pytest.raises(ConfigError, match="set threads 1 and save_every 0"):
        Word2VecRecipe(workers=2, save_every=100)
    with pytest.raises(ConfigError, match="window is 0"):
        WindowSampler(np.array([0, 1]), np.zeros(2, np.int64), np.array([1, 1]), 0, 1)
    with pytest.raises(DataError, match="no word"):
        WindowSampler(np.array([], np.int64), np.array([], np.int64), np.array([1]), 2, 1)
    with pytest.raises(ConfigError, match="not in the 3-word vocabulary"):
        nearest_neighbours(torch.randn(3, 4), ["a", "b", "c"], "d")


@pytest.mark.parametrize("binary", [False, True])
def test_export_formats(tmp_path, binary):
    words = ["the", "naïve", "<unk>"]
    vec = torch.randn(3, 5)
    path = save_word2vec_format(tmp_path / "v", words, vec, binary)
    raw = path.read_bytes()
    assert raw.startswith(b"3 5\n")
    if binary:
        first = raw[4:4 + len(b"the ") + 20]
        assert first[:4] == b"the " and np.array_equal(np.frombuffer(first[4:], "<f4"), vec[0].numpy())
    else:
        rows = raw.decode().splitlines()[1:]
        assert [r.split()[0] for r in rows] == words
        np.testing.assert_array_equal(np.array([r.split()[1:] for r in rows], np.float32), vec.numpy())
    gensim = pytest.importorskip("gensim")
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(path), binary=binary)
    assert list(kv.index_to_key) == words
    np.testing.assert_array_equal(kv.vectors, vec.numpy())
    with pytest.raises(DataError, match="white space"):
        save_word2vec_format(tmp_path / "w", ["a b"], torch.zeros(1, 2))


@pytest.mark.parametrize("binary", [False, True])
def test_load_reads_back_what_gensim_writes_and_reads(tmp_path, binary):
    gensim = pytest.importorskip("gensim")
    words = ["the", "naïve", "<unk>", "n't"]
    kv = gensim.models.KeyedVectors(5)
    kv.add_vectors(words, np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32))
    path = tmp_path / ("v.bin" if binary else "v.txt")
    kv.save_word2vec_format(str(path), binary=binary)
    got_words, got = load_word2vec_format(path)
    assert got_words == words
    np.testing.assert_allclose(got, kv.vectors, rtol=1e-6)        # text keeps gensim's printed digits
    kept, rows = load_word2vec_format(path, wanted={"n't", "the", "absent"})
    assert kept == ["the", "n't"] and np.array_equal(rows, got[[0, 3]])
    # ours written, ours read: exact
    ours = save_word2vec_format(tmp_path / "ours", words, got, binary)
    assert load_word2vec_format(ours)[0] == words and np.array_equal(load_word2vec_format(ours)[1], got)


def test_binary_vectors_read_the_same_where_files_cannot_be_mapped(tmp_path, monkeypatch):
    """A binary file is mapped into memory; on a file system that refuses (some network or FUSE mounts), it is
    read instead, with the same result and the same checks."""
    import mmap

    words, vec = ["the", "of", "and"], np.arange(12, dtype=np.float32).reshape(3, 4)
    path = save_word2vec_format(tmp_path / "v", words, vec, True)
    mapped = load_word2vec_format(path, wanted={"of"})

    def refuse(*args, **kwargs):
        raise OSError(19, "No such device")

    monkeypatch.setattr(mmap, "mmap", refuse)
    read = load_word2vec_format(path, wanted={"of"})
    assert mapped[0] == read[0] == ["of"] and np.array_equal(mapped[1], read[1]) and np.array_equal(read[1], vec[1:2])
    path.write_bytes(path.read_bytes() + b"tail")
    with pytest.raises(DataError, match="5 bytes follow the 3 binary records"):
        load_word2vec_format(path)


def test_load_reads_glove_text_and_refuses_malformed_files(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_bytes(b"\xef\xbb\xbfthe 0.5 -1\n. . . 2 3e-1\r\nthe 9 9\n")   # BOM, a word with spaces, CRLF, a repeat
    words, vec = load_word2vec_format(glove)
    assert words == ["the", ". . ."] and vec.tolist() == [[0.5, -1.0], [2.0, 0.30000001192092896]]
    spaced = tmp_path / "spaced.txt"
    spaced.write_bytes(b"2 2\n\nthe 1 2\nof 3 4\n")                                # a blank line after the header
    assert load_word2vec_format(spaced)[0] == ["the", "of"]
    cases = {"short.txt": (b"2 3\nthe 1 2 3\nof 1 2\n", "line 3 is not a word and 3 numbers"),
             "nan.txt": (b"the 1 x\n", "line 1 holds a value that is not a number"),
             "inf.txt": (b"the 1 inf\n", "'the' holds a value that is not finite"),
             "first.txt": (b"2 2\nthe 1 x\nof 1 2\n", r"neither text \(line 2: line 2 holds a value"),
             "count.txt": (b"3 2\nthe 1 2\nof 1 2\n", "announces 3 vectors and the file holds 2"),
             "cut.bin": (b"2 3\nthe " + np.ones(3, "<f4").tobytes() + b"\nof " + b"\x00\x01", "record 2 of 2 is cut short"),
             "long.bin": (b"1 1\nthe " + np.ones(1, "<f4").tobytes() + b"\nof " + np.ones(1, "<f4").tobytes(),
                          "bytes follow the 1 binary records"),
             "empty.txt": (b"", "hold no vectors")}
    for name, (raw, message) in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(DataError, match=message):
            load_word2vec_format(tmp_path / name)
    with pytest.raises(DataError, match="do not exist"):
        load_word2vec_format(tmp_path / "missing.txt")


def test_evaluation_matches_gensim(tmp_path):
    """Our WordSim-353 Spearman and analogy accuracy equal gensim's evaluate_word_pairs / evaluate_word_analogies
    on the same vectors (random vectors over a vocabulary that covers part of both files)."""
    gensim = pytest.importorskip("gensim")
    from genfeat.eval.word_vectors import gensim_test_file

    sim_file, ana_file = gensim_test_file("wordsim353.tsv"), gensim_test_file("questions-words.txt")
    words = []
    for line in sim_file.read_text().splitlines():
        if not line.startswith("#"):
            words += line.split("\t")[:2]
    for line in ana_file.read_text().splitlines()[:3000]:
        if not line.startswith(":"):
            words += line.split()
    words = list(dict.fromkeys(w.lower() for w in words))[:600]
    words.insert(3, words[5].upper())  # a case variant: the more frequent form must win in both
    vec = torch.randn(len(words), 8, generator=torch.Generator().manual_seed(0))
    kv = gensim.models.KeyedVectors(8)
    kv.add_vectors(words, vec.numpy())
    ours = word_similarity(vec, words, sim_file)
    theirs = kv.evaluate_word_pairs(str(sim_file))
    assert ours["spearman"] == pytest.approx(theirs[1].statistic, abs=1e-6)
    assert ours["pairs"] > 20
    ana = analogy_accuracy(vec, words, ana_file)
    score, sections = kv.evaluate_word_analogies(str(ana_file))
    asked = sum(len(s["correct"]) + len(s["incorrect"]) for s in sections if s["section"] == "Total accuracy")
    assert ana["questions"] == asked > 50
    assert ana["accuracy"] == pytest.approx(score, abs=1e-9)


def test_graphemb_is_deepwalk_through_this_skipgram():
    """Planetoid's GraphEmb baseline trains its node vectors with fit_word2vec on random walks: on two
    10-node cliques joined by one edge, nodes of a clique end up closer than nodes of different cliques."""
    from types import SimpleNamespace

    from genfeat.methods.graph_baselines import GraphBaselineRecipe, _graphemb_features

    clique = [(i, j) for i in range(10) for j in range(10) if i != j]
    edges = np.array(clique + [(i + 10, j + 10) for i, j in clique] + [(0, 10), (10, 0)], np.int64)
    cfg = GraphBaselineRecipe(baseline="graphemb", embed_steps=150, embed_batch=256, embed_size=16, threads=1)
    vec = _graphemb_features(SimpleNamespace(edges=edges, num_nodes=20), cfg, seed=0)
    v = vec / vec.norm(dim=1, keepdim=True)
    cos = v @ v.T
    side = torch.arange(20) < 10
    same = (cos[side][:, side].sum() + cos[~side][:, ~side].sum() - 20) / (2 * 90)
    across = cos[side][:, ~side].mean()
    assert vec.shape == (20, 16) and same > across + 0.3, (float(same), float(across))


def test_words_tokens_split_at_every_white_space_the_vectors_files_split_at():
    """``tokens: words`` (BERT's pre-tokenizer) kept \\x1c-\\x1f inside a word, which str.split() (and so the export's
    check) reads as white space: the run failed after training, with OUT/final written."""
    from genfeat.methods.word2vec import _tokeniser

    split = _tokeniser("words", False)
    assert split("beta\x1cgamma, delta!\x1fx  y") == ["beta", "gamma", ",", "delta", "!", "x", "y"]
    assert split("Don't stop.") == ["Don", "'", "t", "stop", "."]          # BERT's words and punctuation as before
    assert all(w == "".join(w.split()) for w in split("a\x1db\x1ec\u2028d\x85e"))
