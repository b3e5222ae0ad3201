"""GPT-1's zero-shot SST-2 heuristic (eval.zero_shot): equal to a hand computation from the logits, multi-piece
label words, truncation, the CLI, clear errors, and the accuracy-over-steps curve."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

import genfeat
from genfeat.cli import main
from genfeat.data.tokenizers import TokenizerConfig, train_tokenizer
from genfeat.errors import DataError
from genfeat.eval.zero_shot import (ZERO_SHOT_TASKS, ZeroShotEvaluator, candidate_rows, read_zero_shot_curve,
                                    score_rows)
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
from genfeat.models.lstm_lm import LSTMLMConfig, LSTMLMHeadModel
from genfeat.tasks import load_task

SST2 = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "glue" / "SST-2" / "dev.tsv"
pytestmark = pytest.mark.skipif(not SST2.is_file(), reason="needs GENFEAT_DATA with glue/SST-2")
SST = ZERO_SHOT_TASKS["sst2"]
N = 12


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """A BPE tokenizer of the first SST-2 dev sentences, with "very", "positive", "negative" as whole words."""
    texts = [e.texts[0] for e in load_task("sst2", "dev")[:200]] + ["very positive", "very negative"] * 50
    tmp = tmp_path_factory.mktemp("zs")
    (tmp / "corpus.txt").write_text("\n".join(texts) + "\n")
    return train_tokenizer(TokenizerConfig("bpe", 800, lowercase=True), tmp / "corpus.txt", tmp / "tok")


def gpt(n_token, **kw):
    torch.manual_seed(3)  # a large init spreads the logits: with this seed the predictions differ between sentences
    return GPTLMHeadModel(GPTConfig(**{"n_token": n_token, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 32,
                                       "max_position": 96, "init_std": 0.5, **kw})).eval()


def test_accuracy_equals_a_hand_computation_from_the_logits(vocab):
    model = gpt(len(vocab))
    evaluator = ZeroShotEvaluator(vocab, "sst2", "dev", limit=N, max_len=96)
    word_ids = [vocab.tokenizer.token_to_id(f"{w}</w>") for w in SST.words]  # negative, positive: one piece each
    assert None not in word_ids
    examples = load_task("sst2", "dev")[:N]
    hand, log_probs = [], []
    with torch.no_grad():
        for e in examples:
            ids = torch.tensor([vocab.encode(e.texts[0] + " very")])
            last = model(ids).logits[0, -1]  # the next-token logits after "very"
            hand.append(int(last[word_ids[1]] > last[word_ids[0]]))
            log_probs.append(torch.log_softmax(last, -1)[word_ids])
    scores = evaluator.scores(model)
    torch.testing.assert_close(scores, torch.stack(log_probs))
    assert scores.argmax(1).tolist() == hand and 0 < sum(hand) < N  # both words are chosen somewhere
    figures = evaluator(model)
    labels = [e.label for e in examples]
    assert figures["zero_shot_accuracy"] == pytest.approx(sum(h == y for h, y in zip(hand, labels)) / N)
    assert figures["zero_shot_positive_rate"] == pytest.approx(sum(hand) / N) and figures["zero_shot_examples"] == N
    lstm = LSTMLMHeadModel(LSTMLMConfig(n_token=len(vocab), d_model=16, d_hidden=24, max_position=96)).eval()
    assert 0.0 <= evaluator(lstm)["zero_shot_accuracy"] <= 1.0  # any model of the causal LM protocol


def test_a_label_word_of_several_pieces_scores_all_of_them(tmp_path):
    lines = [e.texts[0] for e in load_task("sst2", "dev")[:100]]
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n")
    small = train_tokenizer(TokenizerConfig("bpe", 300, lowercase=True), tmp_path / "c.txt", tmp_path / "tok")
    model = gpt(len(small))
    text = lines[0]
    rows = candidate_rows(small, text, SST)
    context = small.encode(text + " very")
    for (ids, n), word in zip(rows, SST.words):
        assert ids[:len(context)] == context and n == len(ids) - len(context) > 1  # split into pieces
        assert small.decode(ids[len(context):]) == word
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids[:-1]])).logits[0], -1)
        by_hand = sum(float(lp[i - 1, ids[i]]) for i in range(len(context), len(ids)))
        assert float(score_rows(model, [(ids, n)])) == pytest.approx(by_hand, abs=1e-4)
    batched = score_rows(model, rows + [(rows[0][0][:5], 1)], batch_size=2)  # padding never changes a score
    torch.testing.assert_close(batched[:2], torch.cat([score_rows(model, [r]) for r in rows]))
    cut = candidate_rows(small, text, SST, max_len=8)
    assert all(len(ids) - 1 == 8 and ids[-n:] == full[-n:] for (ids, n), (full, _) in zip(cut, rows))


def test_transformer_xl_rows_are_scored_through_its_labels():
    from _txl_fixtures import tiny

    model = tiny(mem_len=0)
    g = torch.Generator().manual_seed(3)
    rows = [(torch.randint(0, 97, (length,), generator=g).tolist(), n) for length, n in ((9, 1), (5, 2), (12, 3))]
    with torch.no_grad():
        by_hand = [float(model(torch.tensor([ids[:-1]]), labels=torch.tensor([ids[1:]])).target_log_probs[0, -n:].sum())
                   for ids, n in rows]
    assert score_rows(model, rows, batch_size=2).tolist() == pytest.approx(by_hand, abs=1e-4)


def test_cli_scores_a_checkpoint_and_refuses_what_it_cannot(vocab, tmp_path, capsys):
    model = gpt(len(vocab))
    genfeat.save_pretrained(model, tmp_path / "ckpt", vocab)
    assert main(["zero-shot", "--checkpoint", str(tmp_path / "ckpt"), "--task", "sst2", "--max-examples", str(N),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["examples"] == N and result["split"] == "dev"
    assert result["accuracy"] == ZeroShotEvaluator(vocab, "sst2", limit=N, max_len=96)(model)["zero_shot_accuracy"]
    from genfeat.models.bert import BertConfig, BertForMaskedLM

    genfeat.save_pretrained(BertForMaskedLM(BertConfig(n_token=len(vocab), d_model=8, n_layer=1, n_head=2,
                                                       d_inner=16)), tmp_path / "bert", vocab)
    assert main(["zero-shot", "--checkpoint", str(tmp_path / "bert"), "--task", "sst2"]) == 2
    assert "holds a bert model" in capsys.readouterr().err


def test_a_vocabulary_without_the_label_words_is_one_clear_error(tmp_path):
    (tmp_path / "c.txt").write_text("the cat sat on the mat\n" * 20)  # no 'p', 'v', 'i', 'g'
    tiny = train_tokenizer(TokenizerConfig("bpe", 20), tmp_path / "c.txt", tmp_path / "tok")
    with pytest.raises(DataError, match="cannot spell the label word 'negative'"):
        candidate_rows(tiny, "a fine film", SST)


def test_the_curve_is_read_from_metrics_and_drawn(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    records = [{"step": 10, "event": "eval", "zero_shot_accuracy": 0.5}, {"step": 10, "lm": 3.0},
               {"step": 20, "event": "eval", "zero_shot_accuracy": 0.55}, {"step": 10, "event": "eval",
                                                                           "zero_shot_accuracy": 0.52}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert read_zero_shot_curve(run) == [(10, 0.52), (20, 0.55)]  # a resumed run's repeated step: the last
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    from plot_zero_shot import main as plot_main

    assert plot_main([f"transformer={run}", "--out", str(tmp_path / "zs.png")]) == 0
    assert (tmp_path / "zs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_main([str(run), "--out", str(tmp_path / "x.png")]) == 2
    assert "is not NAME=RUN_DIR" in capsys.readouterr().err
    with pytest.raises(DataError, match="holds no zero_shot_accuracy"):
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "lm": 2.0}) + "\n")
        read_zero_shot_curve(run)
