"""GLUE metrics (genfeat.eval.metrics.task_scores) against values worked out by hand."""

import math

import pytest

from genfeat.errors import DataError
from genfeat.eval.metrics import task_scores


def test_classification_metrics_by_hand():
    labels = [1, 1, 1, 0, 0, 0]
    preds = [1, 1, 0, 0, 0, 1]  # TP 2, FN 1, TN 2, FP 1
    s = task_scores(["accuracy", "f1", "matthews"], preds, labels)
    assert s["accuracy"] == pytest.approx(4 / 6)
    assert s["f1"] == pytest.approx(2 / 3)          # P = R = 2/3
    assert s["matthews"] == pytest.approx((2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3))
    assert task_scores(["matthews"], [0, 1, 0, 1], [1, 0, 1, 0])["matthews"] == pytest.approx(-1.0)


def test_regression_metrics_by_hand():
    labels = [0.0, 1.0, 2.0, 3.0]
    s = task_scores(["pearson", "spearman"], [0.0, 1.0, 4.0, 9.0], labels)
    assert s["spearman"] == pytest.approx(1.0)      # monotone: ranks agree exactly
    x, y = labels, [0.0, 1.0, 4.0, 9.0]
    mx, my = sum(x) / 4, sum(y) / 4
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    r = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert s["pearson"] == pytest.approx(r) and r < 0.97
    assert math.isnan(task_scores(["pearson"], [1.0, 1.0, 1.0], [0.0, 1.0, 2.0])["pearson"])


def test_bad_metric_inputs():
    with pytest.raises(DataError, match="2 predictions for 3 labelled examples"):
        task_scores(["accuracy"], [0, 1], [0, 1, 1])
    with pytest.raises(DataError, match="unknown task metric"):
        task_scores(["bleu"], [0], [0])
    with pytest.raises(DataError, match="no predicted tokens or examples"):
        task_scores(["accuracy"], [], [])
    with pytest.raises(DataError, match="pearson correlation needs 2 or more examples, got 1"):
        task_scores(["pearson", "spearman"], [0.5], [1.0])          # scipy raises a bare ValueError
    assert task_scores(["accuracy", "matthews"], [1], [1])["accuracy"] == 1.0
