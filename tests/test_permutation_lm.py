"""Permutation LM (genfeat.objectives.permutation_lm): the identity test, mask invariants, counts, spans."""

import pytest
import torch
import torch.nn.functional as F

from genfeat.data.lm import LMBatch
from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel
from genfeat.objectives.permutation_lm import (PermutationLMConfig, PermutationLMObjective, permutation_inputs,
                                               sample_predicted, sample_spans)

V = 30


def model(**kw):
    """A tiny XLNet whose predictions are far from uniform (init_std 0.3), so that losses differ."""
    torch.manual_seed(0)
    return XLNetLMHeadModel(XLNetConfig(n_token=V, d_model=16, n_layer=2, n_head=2, d_head=8, d_inner=32,
                                        dropout=0.0, dropatt=0.0, init_std=0.3, **kw)).eval()


def causal_nll(net, x, mems=None):
    """sum_p -log p(x_p | x_<p) with each prediction made from a run over x_<=p alone: the future is
    not in the input at all, and x_p is hidden from every position (the model's causal LM)."""
    b, t = x.shape
    total = 0.0
    for p in range(t):
        blocked = torch.ones(p + 1, p + 1, dtype=torch.bool).triu(1)
        blocked[:, p] = True
        mapping = F.one_hot(torch.full((b, 1), p), p + 1).float()
        out = net(x[:, :p + 1], perm_mask=blocked.expand(b, -1, -1), target_mapping=mapping, mems=mems)
        total = total + F.cross_entropy(out.logits[:, 0], x[:, p], reduction="sum")
    return total


@pytest.mark.parametrize("mem", [False, True])
def test_identity_order_with_k1_is_the_causal_lm(mem):
    net = model(mem_len=6)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (2, 7), generator=g)
    prev = net(torch.randint(0, V, (2, 6), generator=g)).mems if mem else None
    objective = PermutationLMObjective(PermutationLMConfig(k=1, order="identity", span=False))
    objective.mems = prev
    with torch.no_grad():
        got = objective(net, LMBatch(x, x, new_epoch=False))
        want = causal_nll(net, x, prev)
    assert got.count == 14
    assert abs(got.loss_sum.item() - want.item()) < 2e-4
    # a random order is another factorisation: another value of the loss
    objective = PermutationLMObjective(PermutationLMConfig(k=1, span=False), torch.Generator().manual_seed(0))
    objective.mems = prev
    with torch.no_grad():
        assert abs(objective(net, LMBatch(x, x, new_epoch=False)).loss_sum.item() - want.item()) > 0.05


@pytest.mark.parametrize("span", [True, False])
def test_mask_invariants_and_the_number_of_predicted_tokens(span):
    cfg = PermutationLMConfig(k=4, num_predict=9, span=span)
    g = torch.Generator().manual_seed(2)
    for _ in range(20):
        predicted = torch.stack([sample_predicted(32, 9, cfg, g) for _ in range(3)])
        perm, mapping, positions = permutation_inputs(predicted, "random", g)
        assert (predicted.sum(1) == 9).all()
        assert mapping.shape == (3, 9, 32) and torch.equal(mapping.argmax(2), positions)
        assert (mapping.sum(2) == 1).all() and predicted.gather(1, positions).all()
        for r in range(3):
            tgt, ctx = predicted[r], ~predicted[r]
            blocked = perm[r]
            assert blocked.diagonal()[tgt].all(), "a predicted token never sees itself"
            assert not blocked.diagonal()[ctx].any()
            assert torch.equal(blocked[ctx], tgt.expand(int(ctx.sum()), -1)), "context sees context only"
            assert not blocked[tgt][:, ctx].any(), "predicted tokens see the whole context"
            among = ~blocked[tgt][:, tgt]  # who-sees-whom among the predicted: a strict total order
            assert sorted(among.sum(1).tolist()) == list(range(9))
            assert not (among & among.t()).any()


def test_objective_counts_and_carries_memory():
    net = model(mem_len=8).train()
    objective = PermutationLMObjective(PermutationLMConfig(k=6, num_predict=5))
    x = torch.randint(0, V, (2, 16))
    out = objective(net, LMBatch(x, x, new_epoch=True))
    out.loss_sum.backward()
    assert out.count == 10 and net.mask_emb.grad is not None
    assert len(objective.mems) == 2 and objective.mems[0].shape == (2, 8, 16)
    state = objective.state_dict()
    objective.reset_state()
    assert objective.mems is None
    objective.load_state_dict(state)
    assert torch.equal(objective.mems[0], state["mem.0"])
    objective(net, LMBatch(x, x, new_epoch=True))
    assert objective.mems[0].shape == (2, 8, 16)
    # default count: round(t / K)
    assert PermutationLMObjective(PermutationLMConfig(k=4)).sample(torch.zeros(3, 20, dtype=torch.long))[2].shape == (3, 5)


def test_span_lengths_and_windows():
    g = torch.Generator().manual_seed(3)
    lengths = []
    for _ in range(200):
        spans = sample_spans(120, 3, 5, 40, g)
        assert sum(e - b for b, e in spans) <= 40
        ends = [0] + [e for _, e in spans]
        assert all(b >= prev for (b, _), prev in zip(spans, ends)), "spans are disjoint, in order"
        lengths += [e - b for b, e in spans[:-1]]  # the last one may be cut to meet the goal
    counts = torch.bincount(torch.tensor(lengths), minlength=6)
    assert counts[0] == 0 and counts.sum() == counts[1:6].sum(), "L in [1, 5]"
    # p(L) ∝ 1/L: L=1 about five times as often as L=5
    assert 3.5 < counts[1] / counts[5] < 7
    # each span inside a window of K·L tokens: about 1/K of the sequence when the goal is not binding
    covered = [sum(e - b for b, e in sample_spans(3000, 3, 5, 3000, g)) for _ in range(5)]
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in covered)


def test_config_checks():
    with pytest.raises(ValueError, match="k"):
        PermutationLMConfig(k=0.5)
    with pytest.raises(ValueError, match="num_predict"):
        PermutationLMConfig(num_predict=0)
    with pytest.raises(ValueError, match="same number of predicted tokens"):
        permutation_inputs(torch.tensor([[True, False, True], [True, False, False]]))
