"""The gdan method (genfeat.methods.gdan): span decoding, the span loss, the schedules of the Table 3.4
settings, the Context pseudo-questions, the debug recipe end to end on real data, and the errors."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from genfeat.config import from_dict
from genfeat.data.gdan import GDANDataConfig, Paragraph, build_vocab, context_questions, load_gdan_data
from genfeat.errors import ConfigError
from genfeat.methods.gdan import GDANRecipe, best_spans, build, score
from genfeat.objectives.span_qa import D_GEN, D_TRUE, span_nll
from genfeat.runner import run_recipe

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
needs_data = pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="needs GENFEAT_DATA with squad/")


@pytest.fixture(autouse=True)
def _data_root(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA))


def test_best_spans_respects_order_and_length():
    start = torch.tensor([[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 9.0]])
    end = torch.tensor([[4.0, 0.0, 0.0, 1.0], [8.0, 0.0, 1.0, 0.0]])
    s, e = best_spans(start, end, max_words=4)
    # row 0: end 0 precedes start 1, so (1, 3); row 1: (3, 3) scores 9, (0, 0) only 8
    assert s.tolist() == [1, 3] and e.tolist() == [3, 3]
    s, e = best_spans(start, end, max_words=2)
    assert (s.tolist(), e.tolist()) == ([1, 3], [1, 3]), "spans longer than max_words are excluded"


def test_span_nll_is_half_the_start_and_end_negative_log_likelihood():
    start, end = torch.randn(3, 5), torch.randn(3, 5)
    gold_s, gold_e = torch.tensor([0, 2, 4]), torch.tensor([1, 2, 4])
    expected = -(start.log_softmax(-1)[range(3), gold_s] + end.log_softmax(-1)[range(3), gold_e]) / 2
    torch.testing.assert_close(span_nll(start, end, gold_s, gold_e), expected)


def test_context_questions_are_the_window_around_the_chunk():
    p = Paragraph.of("x", "a b c d e f g h i j")
    (q,) = context_questions([p], [[(4, 5)]], window=2, per_paragraph=3, seed=0)
    assert q.question == ("c", "d", "g", "h") and (q.start, q.end) == (4, 5) and q.answers == ("e f",)
    edge = context_questions([p], [[(0, 0), (2, 2), (9, 9)]], window=5, per_paragraph=2, seed=0)
    assert len(edge) == 2 and all(len(e.question) <= 10 for e in edge)


@pytest.fixture(scope="module")
def small():
    os.environ["GENFEAT_DATA"] = str(DATA)
    data = load_gdan_data(GDANDataConfig(labelling_rate=0.02, wikitext=[]), seed=0)
    data.unlabelled = data.unlabelled[:8]
    return data, build_vocab(data)


def _cfg(setting, **kw):
    return from_dict(GDANRecipe, {"setting": setting, "reader": {"embed_dim": 16, "hidden": 8, "layers": 2,
                                                               "dropout": 0.0},
                                  "chunks": {"backend": "rules"}, "batch_size": 16, "unlabelled_batch": 8, **kw})


@needs_data
@pytest.mark.parametrize("setting, domains", [("sl", [None]), ("context", [None, None]),
                                              ("context_domain", [D_TRUE, D_GEN])])
def test_settings_build_their_terms(small, setting, domains):
    data, vocab = small
    model, phases, n_unl = build(_cfg(setting), data, vocab, seed=0)
    terms = phases[0].terms()
    assert [t.objective.domain for t in terms] == domains
    assert (n_unl > 0) == (setting != "sl")
    batch = next(terms[-1].stream)
    assert batch["question"].shape[0] == (16 if setting == "sl" else 8)


@needs_data
def test_d_steps_fit_the_labelled_questions(small):
    """A few Adam steps on J(L) lower the loss on the labelled questions (the schedule trains D)."""
    from genfeat.framework import Trainer

    data, vocab = small
    cfg = _cfg("sl", steps=40, d_optim={"name": "adam", "lr": 0.01})
    data.labelled = data.labelled[:16]
    model, phases, _ = build(cfg, data, vocab, seed=0)
    term = phases[0].terms()[0]
    batch = next(iter(term.stream))

    def loss():
        model.eval()
        with torch.no_grad():
            return float(term.objective(model, batch).mean)

    before = loss()
    Trainer(model, phases, from_dict(type(cfg.train), {"device": "cpu", "progress": False})).fit()
    assert loss() < 0.5 * before
    assert score(model, data.labelled, vocab, None)["f1"] > 0.3, "D reproduces answers it was trained on"


@needs_data
def test_generator_settings_are_refused_until_g_is_wired(small):
    data, vocab = small
    with pytest.raises(ConfigError, match="setting 'gdan' needs the question generator G"):
        build(_cfg("gdan"), data, vocab, seed=0)


@needs_data
def test_debug_recipe_runs_on_real_data(tmp_path):
    out = run_recipe(ROOT / "recipes/gdan/debug.yaml", out_dir=tmp_path / "run", progress=False)
    for key in ("test_f1_mean", "test_em_mean", "dev_f1_mean"):
        assert 0.0 <= out[key] <= 1.0
    assert out["seeds"] == [0] and out["seconds"] > 0
    run = out["runs"][0]
    assert run["labelled"] == round(0.05 * 5928) and run["unlabelled_questions"] > 0 and run["steps"] == 6
    assert (tmp_path / "run" / "results.json").is_file() and (tmp_path / "run" / "metrics.jsonl").is_file()


@needs_data
def test_cli_reports_a_bad_labelling_rate_on_one_line():
    proc = subprocess.run([sys.executable, "-m", "genfeat.cli", "run", str(ROOT / "recipes/gdan/sl.yaml"),
                           "--data.labelling_rate", "1.5"], capture_output=True, text=True,
                          env={**os.environ, "GENFEAT_DATA": str(DATA)})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.labelling_rate is 1.5, outside (0, 1]" in lines[0]
