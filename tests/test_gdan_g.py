"""GDAN's question generator G (thesis §3.2, Eq. 3.7) and its objectives: the copy mixture, copying an
out-of-vocabulary paragraph word, beam search vs greedy decoding, MLE sums, and REINFORCE's gradient
estimate and baseline on tiny cases."""

import math

import pytest
import torch

from genfeat.data.gdan import SPECIALS, Paragraph, QAExample
from genfeat.data.question_gen import collate_qg, question_words
from genfeat.data.vocab import SymbolVocab
from genfeat.models.question_gen import QuestionGenConfig, QuestionGenerator
from genfeat.objectives.question_gen import QuestionGenMLE, QuestionGenReinforce, question_mask, shift_right

WORDS = "what who when is was the of in a city river team won founded ? .".split()


def _vocab():
    return SymbolVocab(list(SPECIALS) + WORDS, "word", "<unk>", add_eos=False)


def _example(text, question, answer, uid="x"):
    p = Paragraph.of(uid, text)
    start = p.tokens.index(answer[0])
    return QAExample(uid, p, tuple(question.split()), start, start + len(answer) - 1, (" ".join(answer),))


def _batch(vocab):
    return collate_qg([_example("the city of zyxwv was founded in 1848 .", "what city was founded in 1848 ?", ["zyxwv"]),
                       _example("the team won .", "who won ?", ["team"], "y"),
                       _example("a river in qqq and zyxwv .", "what river is in qqq ?", ["river"], "z")], vocab)


def _model(vocab, **kw):
    torch.manual_seed(0)
    return QuestionGenerator(QuestionGenConfig(n_token=len(vocab), d_embed=16, d_hidden=24, d_answer=4,
                                               dropout=0.0, **kw))


def test_collate_extended_vocabulary():
    vocab = _vocab()
    b = _batch(vocab)
    v = len(vocab)
    # paragraph 0: "zyxwv" and "1848" are outside the vocabulary -> extended ids V, V+1 (its own numbering)
    assert b.oov[0] == ["zyxwv", "1848"] and b.oov[2] == ["qqq", "and", "zyxwv"] and b.n_ext == 3
    assert b.src_ext[0, 3] == v and b.src_ids[0, 3] == vocab.unk_id
    assert b.answer[0].tolist()[:5] == [0, 0, 0, 1, 0]
    # the question's "1848" is a copy target with its paragraph's id; </s> ends the targets
    assert b.tgt_out[0, :7].tolist() == [vocab.index[w] for w in "what city was founded in".split()] + [v + 1, vocab.index["?"]]
    assert b.tgt_out[0, 7] == vocab.index["</s>"] and b.tgt_mask[0].sum() == 8
    assert b.tgt_in[0, 0] == vocab.index["<s>"] and torch.equal(b.tgt_in[0, 1:8], b.tgt_out[0, :7])
    assert question_words(b.tgt_out[2].tolist(), b.oov[2], vocab) == "what river is in qqq ?".split()


def test_shapes_and_copy_mixture_is_a_distribution():
    vocab = _vocab()
    b = _batch(vocab)
    model = _model(vocab)
    out = model(*b.model_inputs(), b.tgt_in)
    bs, t = b.tgt_in.shape
    assert out.vocab_log_probs.shape == (bs, t, len(vocab)) and out.attention.shape == (bs, t, b.src_ids.shape[1])
    assert out.gate.shape == (bs, t) and ((out.gate > 0) & (out.gate < 1)).all()
    assert torch.allclose(out.attention.sum(-1), torch.ones(bs, t), atol=1e-5)
    assert (out.attention[~b.mask[:, None, :].expand_as(out.attention)] == 0).all()
    full = out.log_probs()
    assert full.shape == (bs, t, len(vocab) + b.n_ext)
    assert torch.allclose(full.exp().sum(-1), torch.ones(bs, t), atol=1e-5)
    # the copy part: an extended id only gets (1 - g) * attention mass on its positions
    g, a = out.gate[0, 0], out.attention[0, 0]
    assert torch.allclose(full[0, 0, len(vocab)].exp(), (1 - g) * a[3], atol=1e-6)
    assert torch.allclose(out.target_log_probs(b.tgt_out), full.gather(-1, b.tgt_out[..., None]).squeeze(-1), atol=1e-5)


def test_mle_objective_sums_and_backward():
    vocab = _vocab()
    b = _batch(vocab)
    model = _model(vocab)
    out = QuestionGenMLE()(model, b)
    full = model(*b.model_inputs(), b.tgt_in).log_probs()
    nll = -full.gather(-1, b.tgt_out[..., None]).squeeze(-1)[b.tgt_mask].sum()
    assert out.count == int(b.tgt_mask.sum()) == 8 + 4 + 7  # words + </s>
    assert torch.allclose(out.loss_sum, nll, atol=1e-4)
    out.loss_sum.backward()
    assert model.gate_proj.weight.grad.abs().sum() > 0 and model.answer_embed.weight.grad.abs().sum() > 0


def test_copies_an_out_of_vocabulary_word():
    """Trained on one example, G writes a question containing a paragraph word outside its vocabulary,
    which only the copy path can produce."""
    vocab = _vocab()
    b = collate_qg([_example("the city of zyxwv was founded .", "what city is zyxwv ?", ["founded"])], vocab)
    model = _model(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(60):
        opt.zero_grad()
        QuestionGenMLE()(model, b).mean.backward()
        opt.step()
    model.eval()
    ids = model.sample(*b.model_inputs(), max_len=8, greedy=True)
    assert question_words(ids[0].tolist(), b.oov[0], vocab) == "what city is zyxwv ?".split()
    assert ids[0, 3] == len(vocab)  # the extended id of "zyxwv"
    beam, _ = model.beam_search(*b.model_inputs(), max_len=8, beam=3)
    assert question_words(beam[0].tolist(), b.oov[0], vocab) == "what city is zyxwv ?".split()


def test_beam_one_equals_greedy_and_scores_are_log_probs():
    vocab = _vocab()
    b = _batch(vocab)
    model = _model(vocab).eval()
    greedy = model.sample(*b.model_inputs(), max_len=6, greedy=True)
    beam1, _ = model.beam_search(*b.model_inputs(), max_len=6, beam=1)
    assert torch.equal(greedy, beam1)
    ids, scores = model.beam_search(*b.model_inputs(), max_len=6, beam=4, length_penalty=0.0)
    mask = question_mask(ids, model.config.eos_id)
    with torch.no_grad():
        rescored = (model(*b.model_inputs(), shift_right(ids, model.config.bos_id)).target_log_probs(ids) * mask).sum(1)
    assert torch.allclose(scores, rescored, atol=1e-4)
    with pytest.raises(ValueError):
        model.beam_search(*b.model_inputs(), max_len=6, beam=0)


def test_question_mask_and_shift():
    ids = torch.tensor([[7, 5, 0, 0], [7, 8, 9, 6]])
    assert question_mask(ids, 5).tolist() == [[True, True, False, False], [True, True, True, True]]
    assert shift_right(ids, 4).tolist() == [[4, 7, 5, 0], [4, 7, 8, 9]]


def _one_token_setup(n=3000):
    """max_len 1: a question is one token y, so E[r] = Σ_y p(y) r(y) can be differentiated exactly."""
    vocab = _vocab()
    b = collate_qg([_example("the team won .", "who won ?", ["team"])] * n, vocab)
    model = _model(vocab)
    target = vocab.index["who"]
    reward = lambda batch, q: (q[:, 0] == target).float() * 2.0 - 1.0  # noqa: E731
    return vocab, b, model, target, reward


def test_reinforce_gradient_matches_the_exact_expectation():
    vocab, b, model, target, reward = _one_token_setup()
    torch.manual_seed(1)
    obj = QuestionGenReinforce(reward, max_len=1)
    obj.baseline, obj.seen = torch.tensor(-0.9), torch.tensor(1)  # any baseline independent of the samples (near E[r]: less variance)
    obj(model, b).mean.backward()
    estimate = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad()
    one = collate_qg(b.examples[:1], vocab)
    p = model(*one.model_inputs(), one.tgt_in[:, :1]).log_probs()[0, 0].exp()  # [X]
    r = torch.full_like(p, -1.0)
    r[target] = 1.0
    (-(p * r).sum()).backward()  # the loss is −E[r]
    exact = torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None])
    cos = torch.nn.functional.cosine_similarity(estimate, exact, dim=0)
    assert cos > 0.9, float(cos)
    assert 0.5 < float(estimate.norm() / exact.norm()) < 2.0


def test_reinforce_steps_raise_the_reward():
    vocab, _, model, target, reward = _one_token_setup()
    b = collate_qg([_example("the team won .", "who won ?", ["team"])] * 64, vocab)
    obj = QuestionGenReinforce(reward, max_len=1, decay=0.5)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def p_target():
        with torch.no_grad():
            return float(model(*b.model_inputs(), b.tgt_in[:, :1]).log_probs()[0, 0, target].exp())

    before = p_target()
    torch.manual_seed(0)
    for _ in range(30):
        opt.zero_grad()
        obj(model, b).mean.backward()
        opt.step()
    assert p_target() > max(0.5, 3 * before)


def test_reinforce_baseline_update_and_state():
    vocab = _vocab()
    b = _batch(vocab)
    model = _model(vocab)
    rewards = iter([torch.tensor([1.0, 2.0, 3.0]), torch.tensor([5.0, 5.0, 5.0]), torch.tensor([0.0, 0.0, 3.0])])
    obj = QuestionGenReinforce(lambda batch, q: next(rewards), max_len=4, decay=0.75)
    out = obj(model, b)
    # first batch: each reward against the mean of the others' (2.5, 2, 1.5), not against 0
    assert float(obj.baseline) == 2.0 and out.logs["advantage"] == 0.0
    assert torch.equal(obj.current_baseline(torch.tensor([1.0, 2.0, 3.0])), torch.full((3,), 2.0))
    out = obj(model, b)
    assert math.isclose(out.logs["advantage"], 3 * (5.0 - 2.0))
    assert math.isclose(float(obj.baseline), 0.75 * 2.0 + 0.25 * 5.0)
    state = obj.state_dict()
    fresh = QuestionGenReinforce(lambda batch, q: next(rewards), max_len=4, decay=0.75)
    fresh.load_state_dict(state)
    out = fresh(model, b)
    assert math.isclose(out.logs["advantage"], 3.0 - 3 * 2.75) and int(fresh.seen) == 3
    assert model.training  # sampling in eval mode leaves the mode as it was
    with pytest.raises(ValueError):
        QuestionGenReinforce(lambda batch, q: q, decay=1.0)


def test_reinforce_first_batch_uses_the_leave_one_out_baseline():
    vocab = _vocab()
    b = _batch(vocab)
    model = _model(vocab)
    rewards = torch.tensor([-4.0, -1.0, -7.0])
    obj = QuestionGenReinforce(lambda batch, q: rewards, max_len=4)
    assert torch.equal(obj.current_baseline(rewards), torch.tensor([-4.0, -5.5, -2.5]))
    torch.manual_seed(0)
    loss = obj(model, b).loss_sum
    # the same samples rescored by hand: the loss is −Σ (r_i − b_i) log p(q_i), with b_i the others' mean
    torch.manual_seed(0)
    q = model.eval().sample(*b.model_inputs(), 4)
    log_p = (model(*b.model_inputs(), shift_right(q, model.config.bos_id)).target_log_probs(q)
             * question_mask(q, model.config.eos_id)).sum(1)
    model.train()
    assert torch.allclose(loss, -((rewards - torch.tensor([-4.0, -5.5, -2.5])) * log_p).sum(), atol=1e-5)
    lone = QuestionGenReinforce(lambda batch, q: rewards[:1], max_len=4)
    assert float(lone(model, collate_qg(b.examples[:1], vocab)).loss_sum.detach()) == 0.0  # nothing to compare with


def test_padding_does_not_change_an_example():
    vocab = _vocab()
    b = _batch(vocab)
    model = _model(vocab).eval()
    with torch.no_grad():
        batched = model(*b.model_inputs(), b.tgt_in).target_log_probs(b.tgt_out)
        one = collate_qg(b.examples[1:2], vocab)
        alone = model(*one.model_inputs(), one.tgt_in).target_log_probs(one.tgt_out)
    assert torch.allclose(batched[1, :4], alone[0], atol=1e-5)
