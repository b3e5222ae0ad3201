"""Algorithm 2 context sampling: empirical ratios, pairs within the window, resumable stream; Eq. 3.12 loss."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csg
import torch

from genfeat.errors import DataError
from genfeat.objectives.graph_context import ContextSampler, GraphContextObjective, window_pairs


def _two_paths():
    # two disjoint paths of 12 nodes each; labels: first path class 0, second class 1
    edges = [(i, i + 1) for i in range(11)] + [(i, i + 1) for i in range(12, 23)]
    e = np.array(edges + [(b, a) for a, b in edges], dtype=np.int64)
    labels = np.array([0] * 12 + [1] * 12)
    return e, labels


def test_empirical_ratios_and_window():
    e, labels = _two_paths()
    s = ContextSampler(e, 24, labels, np.array([0, 5, 12, 20]), batch_size=400, r1=0.7, r2=0.6,
                       walk_length=6, window=2, seed=3)
    batches = [next(s) for _ in range(5)]
    gamma = torch.cat([b["gamma"] for b in batches])
    graph = torch.cat([b["graph"] for b in batches])
    assert abs(float((gamma > 0).float().mean()) - 0.7) < 0.02
    assert abs(float(graph.float().mean()) - 0.6) < 0.02
    dist = csg.shortest_path(sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(24, 24)), unweighted=True)
    i = torch.cat([b["i"] for b in batches]).numpy()
    c = torch.cat([b["c"] for b in batches]).numpy()
    pos_graph = ((gamma > 0) & graph).numpy()
    assert pos_graph.sum() > 1000
    assert (dist[i[pos_graph], c[pos_graph]] <= 2).all()
    pos_label = ((gamma > 0) & ~graph).numpy()
    assert (labels[i[pos_label]] == labels[c[pos_label]]).all()
    assert set(i[pos_label]) <= {0, 5, 12, 20} and set(c[pos_label]) <= {0, 5, 12, 20}
    # negatives are uniform corruptions: they reach nodes far outside the window
    neg = (gamma < 0).numpy()
    assert np.isinf(dist[i[neg], c[neg]]).any()


def test_window_pairs_enumerate_the_released_walk_pairs():
    pos, other = window_pairs(11, 3)
    # a walk of 11 nodes (the released path_size 10) has 2 * (10 + 9 + 8) pairs within 3 steps, no self-pairs
    assert len(pos) == 54
    assert set(zip(pos.tolist(), other.tolist())) == {(l, m) for l in range(11) for m in range(11) if 1 <= abs(l - m) <= 3}


def test_window_pairs_with_self_pairs_are_the_released_65():
    pos, other = window_pairs(11, 3, self_pairs=True)
    assert len(pos) == 65 and ((pos == other).sum()) == 11
    assert set(zip(pos.tolist(), other.tolist())) == {(l, m) for l in range(11) for m in range(11) if abs(l - m) <= 3}


def _walk_starts(sampler, calls):
    # with all_pairs each walk's block opens with the pair (0, 1), so its first i is the start node
    per = sampler.pairs_per_walk
    return [next(sampler)["i"].numpy()[::per].tolist() for _ in range(calls)]


def test_permutation_starts_every_node_once_per_pass():
    # the released gen_graph: walks start at the nodes of a fresh permutation, batch after batch
    e, _ = _two_paths()
    s = ContextSampler(e, 24, None, None, batch_size=5, r1=1.0, walk_length=4, window=1, seed=2, all_pairs=True,
                       walk_starts="permutation")
    starts = sum(_walk_starts(s, 10), [])
    assert len(starts) == 50
    # passes of 24 cross batch boundaries (5 does not divide 24)
    assert sorted(starts[:24]) == list(range(24)) and sorted(starts[24:48]) == list(range(24))
    assert starts[:24] != starts[24:48]
    # the position in the passes is sampler state: the stream resumes exactly
    seven = ContextSampler(e, 24, None, None, batch_size=5, r1=1.0, walk_length=4, window=1, seed=2, all_pairs=True,
                           walk_starts="permutation")
    _walk_starts(seven, 7)
    r = ContextSampler(e, 24, None, None, batch_size=5, r1=1.0, walk_length=4, window=1, seed=2, all_pairs=True,
                       walk_starts="permutation")
    r.load_state_dict(seven.state_dict())
    assert _walk_starts(r, 3) == [starts[35:40], starts[40:45], starts[45:50]]
    uniform = ContextSampler(e, 24, None, None, batch_size=24, r1=1.0, walk_length=4, window=1, seed=2,
                             all_pairs=True)
    assert len(set(_walk_starts(uniform, 1)[0])) < 24


def test_permutation_starts_cover_every_node_when_label_context_takes_part_of_each_batch():
    # with r2 < 1 a batch draws fewer walks than N2; the next batch must go on where this one stopped
    e, _ = _two_paths()
    labels = np.arange(24) % 2
    s = ContextSampler(e, 24, labels, np.arange(6), batch_size=10, r1=1.0, r2=0.5, walk_length=4, window=1, seed=3,
                       pairs_per_walk=2, walk_starts="permutation")
    started, walk = [], s.random_walks
    s.random_walks = lambda starts, rng: (started.extend(starts.tolist()), walk(starts, rng))[1]
    while len(started) < 48:
        next(s)
    assert sorted(started[:24]) == list(range(24)) and sorted(started[24:48]) == list(range(24))


def test_self_pairs_need_the_enumeration():
    e, _ = _two_paths()
    with pytest.raises(ValueError, match="self_pairs needs all_pairs"):
        ContextSampler(e, 24, self_pairs=True)
    s = ContextSampler(e, 24, None, None, batch_size=4, r1=1.0, walk_length=5, window=2, all_pairs=True,
                       self_pairs=True)
    batch = next(s)
    assert s.pairs_per_walk == 2 * (4 + 3) + 5 and int((batch["i"] == batch["c"]).sum()) >= 4 * 5


def test_all_pairs_takes_every_window_pair_of_each_walk():
    e, _ = _two_paths()
    s = ContextSampler(e, 24, None, None, batch_size=50, r1=1.0, walk_length=6, window=2, seed=0, pairs_per_walk=3,
                       all_pairs=True)
    assert s.pairs_per_walk == 2 * (5 + 4)
    batch = next(s)
    i, c = batch["i"].numpy(), batch["c"].numpy()
    assert len(i) == 50 * 18 and (batch["gamma"] == 1).all()
    dist = csg.shortest_path(sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(24, 24)), unweighted=True)
    assert (dist[i, c] <= 2).all()
    # every pair of a walk is there in both directions
    for w in range(50):
        block = list(zip(i[w * 18:(w + 1) * 18].tolist(), c[w * 18:(w + 1) * 18].tolist()))
        assert sorted(block) == sorted((b, a) for a, b in block)


def test_stream_resumes_exactly():
    e, labels = _two_paths()
    a = ContextSampler(e, 24, labels, np.array([0, 12]), batch_size=10, seed=1)
    next(a)
    state = a.state_dict()
    want = next(a)
    b = ContextSampler(e, 24, labels, np.array([0, 12]), batch_size=10, seed=1)
    b.load_state_dict(state)
    got = next(b)
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_empty_graph_is_refused():
    with pytest.raises(DataError, match="no edges"):
        ContextSampler(np.zeros((0, 2), np.int64), 5)


class _Dot(torch.nn.Module):
    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def context_score(self, i, c):
        return self.scores[i, c]


def test_negative_sampling_loss_matches_eq_3_12():
    scores = torch.tensor([[0.0, 2.0], [-1.0, 0.5]])
    batch = {"i": torch.tensor([0, 1, 1]), "c": torch.tensor([1, 0, 1]), "gamma": torch.tensor([1.0, -1.0, 1.0])}
    out = GraphContextObjective()(_Dot(scores), batch)
    want = -(np.log(1 / (1 + np.exp(-2.0))) + np.log(1 / (1 + np.exp(-1.0))) + np.log(1 / (1 + np.exp(-0.5))))
    assert out.count == 3
    assert abs(float(out.loss_sum) - want) < 1e-5


class _Full(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits
        self.calls = []

    def context_logits(self, i):
        self.calls.append(i.clone())
        return self.logits[i]


def test_softmax_context_loss_is_negative_log_likelihood_of_positive_pairs():
    # the released code's default (neg_samp = 0): -log softmax over all nodes, negatives ignored
    logits = torch.tensor([[0.0, 2.0, -1.0], [1.0, 0.5, 0.0], [0.3, 0.0, 0.0]])
    batch = {"i": torch.tensor([1, 0, 1, 2, 1]), "c": torch.tensor([2, 1, 0, 0, 1]),
             "gamma": torch.tensor([1.0, 1.0, 1.0, -1.0, 1.0])}
    model = _Full(logits)
    out = GraphContextObjective("softmax")(model, batch)
    logp = logits.log_softmax(-1)
    want = -(logp[1, 2] + logp[0, 1] + logp[1, 0] + logp[1, 1])
    assert out.count == 4
    assert torch.allclose(out.loss_sum, want)
    # each distinct centre node is normalised once, and the negative's node not at all
    assert sorted(model.calls[0].tolist()) == [0, 1]


def test_unknown_context_loss_is_refused():
    with pytest.raises(ValueError, match="negative_sampling or softmax"):
        GraphContextObjective("nce")


def test_excluded_nodes_are_crossed_but_never_paired():
    # the released inductive code: walks pass through test nodes, pairs never contain one
    e, labels = _two_paths()
    s = ContextSampler(e, 24, None, None, batch_size=300, walk_length=6, window=2, seed=0, exclude=np.array([5, 17]))
    batches = [next(s) for _ in range(3)]
    i = torch.cat([b["i"] for b in batches]).numpy()
    c = torch.cat([b["c"] for b in batches]).numpy()
    assert len(i) < 3 * 300 * 10 and not ({5, 17} & (set(i) | set(c)))
    # (4, 6) is only reachable within the window by walking through node 5
    assert ((i == 4) & (c == 6)).any()
