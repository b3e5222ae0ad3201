"""The gdan method (genfeat.methods.gdan): the span loss, the schedules of the Table 3.4
settings, the Context pseudo-questions, the debug recipe end to end on real data, and the errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from genfeat.config import from_dict
from genfeat.data.gdan import GDANDataConfig, Paragraph, QAExample, build_vocab, context_questions, load_gdan_data
from genfeat.methods.gdan import GDANRecipe, build, score
from genfeat.objectives.span_qa import D_GEN, D_TRUE, span_nll
from genfeat.runner import run_recipe

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
needs_data = pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="needs GENFEAT_DATA with squad/")


@pytest.fixture(autouse=True)
def _data_root(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA))


def test_span_nll_is_half_the_start_and_end_negative_log_likelihood():
    start, end = torch.randn(3, 5), torch.randn(3, 5)
    gold_s, gold_e = torch.tensor([0, 2, 4]), torch.tensor([1, 2, 4])
    expected = -(start.log_softmax(-1)[range(3), gold_s] + end.log_softmax(-1)[range(3), gold_e]) / 2
    torch.testing.assert_close(span_nll(start, end, gold_s, gold_e), expected)


def test_context_questions_are_the_window_around_the_chunk():
    p = Paragraph.of("x", "a b c d e f g h i j")
    chunk = lambda s, e: QAExample(f"x#{s}", p, (), s, e, (p.span_text(s, e),))  # noqa: E731
    (q,) = context_questions([chunk(4, 5)], window=2)
    assert q.question == ("c", "d", "g", "h") and (q.start, q.end) == (4, 5) and q.answers == ("e f",)
    edge = context_questions([chunk(0, 0), chunk(9, 9)], window=5)
    assert [e.question for e in edge] == [("b", "c", "d", "e", "f"), ("e", "f", "g", "h", "i")]
    whole = Paragraph.of("y", "only")
    assert context_questions([QAExample("y#0", whole, (), 0, 0, ("only",))], window=5) == []


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
    model, pretrain, phase, n_unl, *_ = build(_cfg(setting), data, vocab, seed=0)
    assert pretrain is None and list(model) == ["d"]
    terms = phase.terms()
    assert [t.objective.domain for t in terms] == domains
    assert (n_unl > 0) == (setting != "sl")
    batch = next(terms[-1].stream)
    assert batch["question"].shape[0] == (16 if setting == "sl" else 8)


@needs_data
def test_reader_special_ids_are_the_vocabularys(small):
    from genfeat.data.gdan import D_GEN as TAG_GEN, D_TRUE as TAG_TRUE
    from genfeat.errors import ConfigError
    data, vocab = small
    reader = build(_cfg("context_domain"), data, vocab, seed=0).model.d.config
    assert vocab.symbols[reader.d_true_id] == TAG_TRUE and vocab.symbols[reader.d_gen_id] == TAG_GEN
    assert vocab.symbols[reader.first_word_id - 1] == "</s>" and not vocab.symbols[reader.first_word_id].startswith("<")
    # refused with the recipe, before any data is read
    with pytest.raises(ConfigError, match=r"reader.d_gen_id is 4, the vocabulary's is 3; reader.first_word_id is 5, "
                                          r"the vocabulary's is 6.*leave these reader fields out"):
        from_dict(GDANRecipe, {"setting": "sl", "reader": {"first_word_id": 5, "d_gen_id": 4}})
    assert from_dict(GDANRecipe, {"d_init": "runs/bert", "reader": {"first_word_id": 5}}).d_init, \
        "d_init replaces the GA reader: its ids are not checked"


@needs_data
def test_word_vectors_start_the_readers_embeddings(small, tmp_path, capsys):
    from genfeat.data.gdan import SPECIALS
    from genfeat.errors import ConfigError
    from genfeat.models.word2vec import save_word2vec_format
    data, vocab = small
    words = [vocab.symbols[10], vocab.symbols[20], "not-in-the-vocabulary", SPECIALS[1]]
    vectors = torch.arange(64, dtype=torch.float32).view(4, 16)
    path = save_word2vec_format(tmp_path / "v.txt", words, vectors)
    d = build(_cfg("sl"), data, vocab, seed=0).model.d.embed.weight
    start = build(_cfg("sl", d_vectors=str(path)), data, vocab, seed=0).model.d.embed.weight
    assert "for 2 of the" in capsys.readouterr().err
    assert torch.equal(start[10], vectors[0]) and torch.equal(start[20], vectors[1])
    others = [i for i in range(len(vocab)) if i not in (10, 20)]
    assert torch.equal(start[others], d[others]), "other words and the special words keep their random start"
    with pytest.raises(ConfigError, match="16-dimensional.*set reader.embed_dim to 3"):
        build(_cfg("sl", d_vectors=str(save_word2vec_format(tmp_path / "w.txt", words, torch.zeros(4, 3)))),
              data, vocab, seed=0)
    with pytest.raises(ConfigError, match="d_vectors and d_init are both set"):
        build(_cfg("sl", d_vectors=str(path), d_init="runs/none"), data, vocab, seed=0)
    from genfeat.errors import DataError
    with pytest.raises(DataError, match="holds none of the"):
        build(_cfg("sl", d_vectors=str(save_word2vec_format(tmp_path / "x.txt", ["zzqx"], torch.zeros(1, 16)))),
              data, vocab, seed=0)
    # a resumed run takes its weights from the checkpoint: the vectors are not read (nor needed)
    assert build(_cfg("sl", d_vectors=str(tmp_path / "gone.txt")), data, vocab, seed=0, resume=True).model.d


@needs_data
def test_d_steps_fit_the_labelled_questions(small):
    """A few Adam steps on J(L) lower the loss on the labelled questions (the schedule trains D)."""
    from genfeat.framework import Trainer

    data, vocab = small
    cfg = _cfg("sl", steps=40, d_optim={"name": "adam", "lr": 0.01})
    data.labelled = data.labelled[:16]
    model, _, phase, *_ = build(cfg, data, vocab, seed=0)
    term = phase.terms()[0]
    batch = next(iter(term.stream))

    def loss():
        model.eval()
        with torch.no_grad():
            return float(term.objective(model, batch).mean)

    before = loss()
    Trainer(model, [phase], from_dict(type(cfg.train), {"device": "cpu", "progress": False})).fit()
    assert loss() < 0.5 * before
    assert score(model, data.labelled, vocab, None)["f1"] > 0.3, "D reproduces answers it was trained on"


def _gcfg(setting, **kw):
    return _cfg(setting, generator={"d_embed": 8, "d_hidden": 8, "d_answer": 2}, max_question_words=6, **kw)


@needs_data
@pytest.mark.parametrize("setting, domains, g_stage", [("gen", [None, None], False),
                                                       ("gen_domain", [D_TRUE, D_GEN], False),
                                                       ("gen_dual", [None, None], True), ("gdan", [D_TRUE, D_GEN], True),
                                                       ("gen_gan", [D_TRUE, D_GEN], True)])
def test_generator_settings_follow_algorithm_1(small, setting, domains, g_stage):
    data, vocab = small
    model, pretrain, phase, n_chunks, *_ = build(_gcfg(setting, steps=6, t_d=3, t_g=2), data, vocab, seed=0)
    assert sorted(model) == ["d", "g"] and pretrain is not None and n_chunks > 0
    d_stage = phase.stages[0]
    assert [t.objective.domain for t in d_stage.terms] == domains and d_stage.repeat == 3
    if g_stage:
        assert [s.optimizer for s in phase.stages] == ["d", "g"] and phase.stages[1].repeat == 2
        assert phase.steps == 6 + 2 * 2, "6 D steps and T_G = 2 G steps after each of the 2 rounds"
    else:
        assert len(phase.stages) == 1 and phase.steps == 6
    generated = next(d_stage.terms[1].stream)
    assert generated["question"].shape[0] == 8 and generated["question_mask"][:, 0].all()
    assert (generated["end"] < generated["paragraph_mask"].sum(1)).all()


@needs_data
def test_rewards_are_d_log_likelihoods_with_the_setting_s_tag_and_sign(small):
    from genfeat.data.question_gen import collate_qg
    from genfeat.methods.gdan import d_reward, reader_batch, unlabelled_answers
    from genfeat.objectives.span_qa import read

    data, vocab = small
    cfg = _gcfg("gdan")
    model, *_ = build(cfg, data, vocab, seed=0)
    batch = collate_qg(unlabelled_answers(cfg, data, 0)[:4], vocab)
    questions = model.g.sample(*batch.model_inputs(), 7)
    qa = reader_batch(batch, questions, vocab)
    model.eval()
    for setting, domain, sign in [("gdan", D_TRUE, 1), ("gen_dual", None, 1), ("gen_gan", D_GEN, -1)]:
        out = read(model, qa, domain)
        log_p = (out.start_logits.log_softmax(-1).gather(1, qa["start"][:, None])
                 + out.end_logits.log_softmax(-1).gather(1, qa["end"][:, None]))[:, 0]
        torch.testing.assert_close(d_reward(model, vocab, setting)(batch, questions), sign * log_p)


@pytest.fixture(scope="module")
def debug_run(tmp_path_factory):
    """recipes/gdan/debug.yaml run once on real data: (its output directory, run_recipe's result)."""
    if not (DATA / "squad").is_dir():
        pytest.skip("needs GENFEAT_DATA with squad/")
    os.environ["GENFEAT_DATA"] = str(DATA)
    tmp_path = tmp_path_factory.mktemp("gdan_debug")
    # the SQuAD file named relative to the working directory, as a user may (evaluate then runs from elsewhere)
    squad = os.path.relpath(DATA / "squad" / "dev-v1.1.json")
    return tmp_path, run_recipe(ROOT / "recipes/gdan/debug.yaml", {"data.squad_file": squad}, out_dir=tmp_path / "run",
                                progress=False)


def test_debug_recipe_runs_on_real_data(debug_run):
    tmp_path, out = debug_run
    for key in ("test_f1_mean", "test_em_mean", "dev_f1_mean"):
        assert 0.0 <= out[key] <= 1.0
    assert out["seeds"] == [0] and out["seconds"] > 0
    run = out["runs"][0]
    assert run["labelled"] == round(0.05 * 5928) and run["unlabelled_questions"] > 0
    assert run["steps"] == 4 + 2, "4 D steps, one G step after each 2"
    assert (run["d_steps"], run["g_steps"]) == (4, 2), "the recipe's steps are D's; G's REINFORCE steps apart"
    assert (tmp_path / "run" / "results.json").is_file() and (tmp_path / "run" / "metrics.jsonl").is_file()
    # every checkpoint names what extracted the answer chunks (the debug recipe asks for the rules)
    for folder in ("last", "final/d", "final/g"):
        assert json.loads((tmp_path / "run" / folder / "config.json").read_text())["answer_chunks"] == "rules", folder
    # OUT/final: D is a hub architecture that scores as the run did; G loads as generate-questions loads it
    from genfeat.hub import load_checkpoint
    from genfeat.methods.question_gen import load_generator

    d, vocab = load_checkpoint(tmp_path / "run" / "final" / "d")
    assert type(d).__name__ == "GAReader" and not d.training
    dev = load_gdan_data(GDANDataConfig(labelling_rate=0.05, wikitext=[]), seed=0).dev[:100]
    assert score(d, dev, vocab, D_TRUE)["f1"] == run["dev_f1"]
    g, g_vocab = load_generator(tmp_path / "run" / "final" / "g")
    assert type(g).__name__ == "QuestionGenerator" and len(g_vocab) == len(vocab)
    # OUT/g_mle/last holds G as MLE pretraining left it, before the REINFORCE steps changed it
    g_mle, mle_vocab = load_generator(tmp_path / "run" / "g_mle" / "last")
    assert mle_vocab.symbols == g_vocab.symbols
    assert any(not torch.equal(a, b) for a, b in zip(g_mle.state_dict().values(), g.state_dict().values()))


def evaluate_cli(checkpoint, split, capsys, *extra):
    """``genfeat evaluate --task squad_split`` on a saved D: its exit status and JSON result (or stderr)."""
    from genfeat.cli import main

    code = main(["evaluate", "--checkpoint", str(checkpoint), "--task", "squad_split", "--split", split, "--json",
                 *extra])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out.strip().splitlines()[-1]) if code == 0 else captured.err)


def test_evaluate_scores_final_d_as_the_run_did(debug_run, tmp_path, capsys, monkeypatch):
    """``genfeat evaluate --checkpoint OUT/final/d --task squad_split`` gives the run's dev and test F1/EM (GA reader,
    tagged setting: questions read with d_true), from another directory than the run's (its relative data.squad_file
    is saved resolved), and refuses another split."""
    out_dir, out = debug_run
    monkeypatch.chdir(tmp_path)
    run = out["runs"][0]
    final_d = out_dir / "run" / "final" / "d"
    for split in ("dev", "test"):
        code, result = evaluate_cli(final_d, split, capsys, "--max-examples", "100",
                                    "--predictions", str(tmp_path / f"{split}.json"))
        assert code == 0 and result["examples"] == 100
        assert (result["squad_f1"], result["exact_match"]) == (run[f"{split}_f1"], run[f"{split}_em"]), split
        predictions = json.loads((tmp_path / f"{split}.json").read_text())
        assert len(predictions) == 100 and all(isinstance(v, str) for v in predictions.values())
    code, err = evaluate_cli(final_d, "train", capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "split dev or test" in err


@needs_data
def test_cli_reports_a_bad_labelling_rate_on_one_line():
    proc = subprocess.run([sys.executable, "-m", "genfeat.cli", "run", str(ROOT / "recipes/gdan/sl.yaml"),
                           "--data.labelling_rate", "1.5"], check=False, capture_output=True, text=True,
                          env={**os.environ, "GENFEAT_DATA": str(DATA)})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.labelling_rate is 1.5, outside (0, 1]" in lines[0]


def test_train_flags_on_a_recipe_keep_model_selection_on_dev():
    """--train.* flags override single fields of the recipe's loop: dev-F1 model selection stays on (the recipes
    write their train block out; without one, a flag rebuilt TrainConfig from its own defaults)."""
    from genfeat.runner import load_recipe

    for name in ("sl", "gdan", "sl_bert", "sl_xlnet", "gdan_xlnet"):
        _, cfg = load_recipe(ROOT / f"recipes/gdan/{name}.yaml", {"train.eval_every": 7})
        assert (cfg.train.eval_every, cfg.train.keep_best, cfg.train.early_stop_metric) == (7, True, "dev_f1"), name


@pytest.mark.parametrize("setting", ["gen", "gdan"])
def test_a_generator_setting_under_torchrun_is_refused_before_any_work(setting, tmp_path, monkeypatch):
    """Several processes (torchrun sets WORLD_SIZE): one clear error before the data are read, not an
    AttributeError on the DDP wrapper; SL and Context (D alone) are not refused."""
    from genfeat.errors import ConfigError
    from genfeat.methods.gdan import run

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path / "nothing"))   # the data are never reached
    with pytest.raises(ConfigError, match=f"GDAN's {setting} setting does not run under torchrun") as e:
        run(_gcfg(setting), seed=0, out_dir=tmp_path / "out")
    assert "run it as one process" in e.value.fix
    with pytest.raises(Exception) as e:
        run(_cfg("sl"), seed=0, out_dir=tmp_path / "sl")
    assert "torchrun" not in str(e.value)
