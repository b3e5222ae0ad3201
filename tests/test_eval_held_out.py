"""Held-out scoring (genfeat.eval.held_out): the one loop behind the methods' validation figures gives the
very numbers of the hand-written loops it replaced, draws only the batches it scores, sums the
objective's logs and restores the model's mode."""

import math

import pytest
import torch

from genfeat.data.chars import CharVocab
from genfeat.data.lm import iter_lm_segments
from genfeat.errors import DataError
from genfeat.eval.held_out import evaluate_objective, row_batches
from genfeat.framework.objective import LossOutput
from genfeat.methods.bert import masked_lm_figures
from genfeat.methods.elmo import bilm_figures
from genfeat.methods.gpt import causal_lm_loss
from genfeat.models.bert import BertConfig, BertForMaskedLM
from genfeat.models.elmo import ElmoBiLM, ElmoConfig
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
from genfeat.objectives.bilm import BiLMObjective
from genfeat.objectives.causal_lm import CausalLMObjective
from genfeat.objectives.masked_lm import MaskedLMConfig, MaskedLMObjective

WORDS = "the bank raised its rates while the river bank flooded and the fire spread near the old mill".split()


def tiny_elmo():
    chars, vocab = CharVocab.from_words(WORDS, 12), sorted(set(WORDS))
    torch.manual_seed(0)
    model = ElmoBiLM(ElmoConfig(n_token=len(vocab), n_char=len(chars), max_chars=12, char_dim=4, filters=[(2, 4)],
                                d_proj=8, d_lstm=8, dropout=0.0)).eval()
    model.set_spelling(chars.spell_table(vocab))
    return model, len(vocab)


def test_bilm_figures_equal_the_hand_written_loop():
    model, v = tiny_elmo()
    words = torch.randint(0, v, (11, 6), generator=torch.Generator().manual_seed(4))
    for limit in (0, 7):
        # the loop bilm_figures ran before it used evaluate_objective (a limit of 7 reads whole batches: 9 rows)
        fwd = bwd = pairs = 0.0
        with torch.no_grad():
            for start in range(0, limit or 11, 3):
                out = BiLMObjective()(model, {"word_ids": words[start:start + 3]})
                fwd, bwd, pairs = fwd + out.logs["forward"], bwd + out.logs["backward"], pairs + float(out.count)
        f, b = fwd / pairs, bwd / pairs
        assert bilm_figures(model, words, 3, limit) == {
            "valid_loss": f + b, "valid_forward_loss": f, "valid_backward_loss": b,
            "valid_forward_ppl": math.exp(f), "valid_backward_ppl": math.exp(b), "valid_pairs": int(pairs)}


def test_masked_lm_and_causal_lm_figures_equal_the_hand_written_loops():
    torch.manual_seed(0)
    bert = BertForMaskedLM(BertConfig(n_token=60, d_model=16, n_layer=2, n_head=2, d_inner=32, max_position=40,
                                      pad_id=0)).eval()
    ids = torch.randint(4, 60, (13, 20), generator=torch.Generator().manual_seed(0))
    examples = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def scorer():
        return MaskedLMObjective(MaskedLMConfig(), 3, 60, [0, 1, 2, 3], generator=torch.Generator().manual_seed(3))

    obj, loss, correct, count = scorer(), 0.0, 0.0, 0.0
    with torch.no_grad():
        for start in (0, 4):   # limit 5 in batches of 4: the batches from rows 0 and 4, each whole
            out = obj(bert, {k: v[start:start + 4] for k, v in examples.items()})
            loss, correct, count = loss + float(out.loss_sum), correct + out.logs["correct"], count + float(out.count)
    assert masked_lm_figures(bert, scorer(), examples, 4, limit=5) == {
        "valid_loss": loss / count, "valid_accuracy": correct / count, "valid_masked": int(count)}

    torch.manual_seed(0)
    gpt = GPTLMHeadModel(GPTConfig(n_token=40, d_model=16, n_layer=2, n_head=2, d_inner=32, max_position=16)).eval()
    tokens = torch.randint(0, 40, (101,), generator=torch.Generator().manual_seed(2))
    loss = count = 0.0
    with torch.no_grad():
        for batch in iter_lm_segments(tokens, 3, 8):
            out = CausalLMObjective(recurrence=False)(gpt, batch)
            loss, count = loss + float(out.loss_sum), count + float(out.count)
    assert causal_lm_loss(gpt, tokens, seq_len=8, batch_size=3) == {
        "valid_loss": loss / count, "valid_ppl": math.exp(loss / count), "valid_tokens": int(count)}


class Recorder:
    """An objective of fixed sums that records the model's mode and whether gradients were on."""

    def __init__(self):
        self.seen = []

    def __call__(self, model, batch):
        self.seen.append((model.training, torch.is_grad_enabled(), batch["x"].device.type))
        return LossOutput(torch.tensor(float(batch["x"].sum())), 2, {"correct": 1.0, "other": 0.5})


def test_only_the_first_limit_batches_are_drawn_and_the_mode_comes_back():
    model = torch.nn.Linear(2, 2).train()
    drawn = []

    def batches():
        for i in range(10):
            drawn.append(i)
            yield {"x": torch.tensor([float(i)])}

    rec = Recorder()
    totals = evaluate_objective(model, rec, batches(), limit=3)
    assert drawn == [0, 1, 2], "a lazy stream (XLNet's held-out pass) is not advanced past the limit"
    assert rec.seen == [(False, False, "cpu")] * 3 and model.training
    assert (totals.loss_sum, totals.count, totals.correct, totals.logs) == (3.0, 6.0, 3.0, {"other": 1.5})
    assert evaluate_objective(model, Recorder(), batches()).count == 20
    with pytest.raises(ValueError, match="limit"):
        evaluate_objective(model, rec, batches(), limit=-1)


def test_row_batches_and_empty_held_out_data():
    rows = {"a": torch.arange(7), "b": torch.arange(7) * 2}
    assert [b["a"].tolist() for b in row_batches(rows, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b["b"].tolist() for b in row_batches(rows, 3, limit=4)] == [[0, 2, 4], [6, 8, 10]]
    model, _ = tiny_elmo()
    with pytest.raises(DataError, match="no predicted tokens"):   # no batches: a clear error, not a 0 loss
        bilm_figures(model, torch.zeros(0, 6, dtype=torch.long), 3)
