import math

import pytest
import torch

from genfeat.errors import DataError
from genfeat.eval.metrics import MAX_LOG_PERPLEXITY, Totals, accuracy, bits_per_token, lm_summary, perplexity


def test_ppl_and_bpc_from_sums():
    assert perplexity(30.0, 10) == pytest.approx(math.exp(3.0))
    assert bits_per_token(10 * math.log(2) * 1.5, 10) == pytest.approx(1.5)
    s = lm_summary(7.0, 4)
    assert s == pytest.approx({"loss": 1.75, "ppl": math.exp(1.75), "bpc": 1.75 / math.log(2)})


def test_perplexity_is_capped_at_exp_50_and_the_loss_is_not():
    assert MAX_LOG_PERPLEXITY == 50.0
    assert perplexity(49.0 * 3, 3) == pytest.approx(math.exp(49.0))
    assert perplexity(1000.0, 1) == math.exp(50.0)                 # math.exp(1000) would overflow
    assert lm_summary(1000.0, 1)["loss"] == 1000.0 and lm_summary(1000.0, 1)["ppl"] == math.exp(50.0)


def test_totals_weight_batches_by_count_not_by_batch():
    torch.manual_seed(0)
    nll = torch.rand(103, dtype=torch.float64) * 5
    chunks = nll.split(25)  # the last batch holds only 3 tokens
    totals = Totals()
    for c in chunks:
        totals.add(c.sum(), c.numel())
    exact = float(nll.mean())
    assert totals.lm()["loss"] == pytest.approx(exact, rel=1e-12)
    assert totals.lm()["tokens"] == 103
    mean_of_means = sum(float(c.mean()) for c in chunks) / len(chunks)
    assert abs(mean_of_means - exact) > 1e-3  # the naive average really is different here


def test_merge_and_single_process_all_reduce():
    a = Totals().add(3.0, 2, correct=1)
    b = Totals().add(5.0, 6, correct=4)
    m = a.merge(b)
    assert (m.loss_sum, m.count, m.correct) == (8.0, 8, 5)
    assert m.accuracy() == pytest.approx(5 / 8)
    r = m.all_reduce()
    assert (r.loss_sum, r.count, r.correct) == (8.0, 8, 5) and r is not m
    # named logs (the biLM's forward and backward) are summed alike
    a.add(1.0, 1, logs={"forward": 0.25})
    b.add(1.0, 1, logs={"forward": 0.5, "backward": 2.0})
    assert a.merge(b).logs == {"forward": 0.75, "backward": 2.0}
    assert b.all_reduce().logs == {"forward": 0.5, "backward": 2.0} and b.all_reduce().logs is not b.logs


def test_empty_counts_are_user_errors():
    with pytest.raises(DataError):
        lm_summary(0.0, 0)
    with pytest.raises(DataError):
        accuracy(0, 0)
    with pytest.raises(DataError):
        Totals().lm()
