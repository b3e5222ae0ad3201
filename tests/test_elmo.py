"""ELMo biLM: shapes, which tokens each direction sees, the residual connection, the shared parts, the scalar mix,
the character vocabulary."""

import pytest
import torch

from genfeat.data.chars import BOW, EOW, PAD, UNK, CharVocab
from genfeat.errors import ConfigError
from genfeat.models.elmo import ElmoBiLM, ElmoConfig, ScalarMix, reverse_padded

WORDS = ["the", "bank", "raised", "rates", "river", "fire", "present", "<eos>"]


def tiny(**kw) -> tuple[ElmoBiLM, CharVocab]:
    chars = CharVocab.from_words(WORDS, max_chars=10)
    cfg = ElmoConfig(n_token=len(WORDS), n_char=len(chars), max_chars=10, char_dim=4, filters=[(1, 4), (3, 6)],
                     n_highway=1, d_proj=6, d_lstm=8, n_layer=2, dropout=0.0, **kw)
    torch.manual_seed(0)
    return ElmoBiLM(cfg).eval(), chars


def spelled(chars, sentences):
    return chars.spell_batch([s.split() for s in sentences])


def test_shapes_and_padding_are_zero():
    model, chars = tiny()
    x = spelled(chars, ["the bank raised rates", "the river"])
    out = model(x)
    assert out.layers.shape == (3, 2, 4, 12) and out.mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert (out.layers[:, 1, 2:] == 0).all()
    # the token layer is [x; x]: one representation for both directions
    assert torch.equal(out.layers[0, ..., :6], out.layers[0, ..., 6:])


def test_a_padded_sentence_gets_the_vectors_it_gets_alone():
    model, chars = tiny()
    together = model(spelled(chars, ["the bank raised rates", "river fire"])).layers[:, 1, :2]
    alone = model(spelled(chars, ["river fire"])).layers[:, 0]
    torch.testing.assert_close(together, alone)


def test_each_direction_sees_only_its_side():
    """Changing token j changes the forward states at k >= j only and the backward states at k <= j only, so
    neither LM sees the word it predicts (forward at k predicts k+1, backward at k predicts k-1)."""
    model, chars = tiny()
    a = model(spelled(chars, ["the bank raised rates river"])).layers
    b = model(spelled(chars, ["the bank fire rates river"])).layers   # token 2 differs
    changed = (a - b).abs().amax(dim=-1)[:, 0] > 1e-7                 # [L + 1, t] per half below
    fwd = ((a - b)[1:, 0, :, :6].abs().amax(-1) > 1e-7)               # [L, t]
    bwd = ((a - b)[1:, 0, :, 6:].abs().amax(-1) > 1e-7)
    assert fwd.tolist() == [[False, False, True, True, True]] * 2
    assert bwd.tolist() == [[True, True, True, False, False]] * 2
    assert changed[0].tolist() == [False, False, True, False, False]  # the token layer is context-free


def test_word_log_probs_use_only_the_other_side():
    """log p_fwd(t_{k+1}) must not depend on t_{k+1} itself, nor log p_bwd(t_k) on t_k (given the targets)."""
    model, chars = tiny()
    ids = torch.tensor([[0, 1, 2, 3, 4]])
    other = torch.tensor([[0, 1, 5, 3, 4]])
    x, y = chars.spell_table(WORDS)[ids], chars.spell_table(WORDS)[other]
    a, b = model(x, ids, score_words=True), model(y, ids, score_words=True)   # same targets, the input differs at token 2
    # forward column k predicts token k+1 from tokens <= k: columns 0 and 1 (targets 1 and 2) see no change
    assert torch.equal(a.forward_log_probs[:, :2], b.forward_log_probs[:, :2])
    assert not torch.equal(a.forward_log_probs[:, 2:], b.forward_log_probs[:, 2:])
    # backward column k predicts token k from tokens >= k+1: columns 2 and 3 (targets 2 and 3) see no change
    assert torch.equal(a.backward_log_probs[:, 2:], b.backward_log_probs[:, 2:])
    assert not torch.equal(a.backward_log_probs[:, :2], b.backward_log_probs[:, :2])


def test_log_probs_agree_with_the_full_distribution_and_skip_padding():
    model, chars = tiny()
    ids = torch.tensor([[0, 1, 2, 3], [4, 5, 0, 0]])
    x = chars.spell_table(WORDS)[ids]
    x[1, 2:] = PAD
    out = model(x, ids, score_words=True)
    top = out.layers[-1]
    full_f = model.log_probs(top[..., :6])
    full_b = model.log_probs(top[..., 6:])
    torch.testing.assert_close(out.forward_log_probs[0], full_f[0, :-1].gather(1, ids[0, 1:, None]).squeeze(1))
    torch.testing.assert_close(out.backward_log_probs[0], full_b[0, 1:].gather(1, ids[0, :-1, None]).squeeze(1))
    assert out.forward_log_probs[1, 1:].eq(0).all() and out.backward_log_probs[1, 1:].eq(0).all()
    assert out.forward_log_probs[1, 0] < 0


def test_residual_connection_between_layers():
    model, chars = tiny()
    with torch.no_grad():
        for p in list(model.forward_lstms[1].parameters()) + list(model.backward_lstms[1].parameters()):
            p.zero_()   # a zero LSTM outputs 0: o * tanh(c) with c = 0.5 * tanh(0) = 0
    layers = model(spelled(chars, ["the bank raised rates"])).layers
    torch.testing.assert_close(layers[2], layers[1])
    plain, _ = tiny(residual=False)
    plain.load_state_dict(model.state_dict())
    assert plain(spelled(chars, ["the bank raised rates"])).layers[2].abs().max() == 0


def test_the_token_encoder_and_softmax_are_shared_and_the_stacks_are_not():
    model, chars = tiny()
    ids = torch.tensor([[0, 1, 2, 3]])
    out = model(chars.spell_table(WORDS)[ids], ids, score_words=True)
    out.backward_log_probs.sum().backward()
    grads = {n: p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters()}
    assert grads["softmax.layers.0.weight"] and grads["tokens.proj.weight"] and grads["tokens.embed.weight"]
    assert any(v for n, v in grads.items() if n.startswith("backward_lstms"))
    assert not any(v for n, v in grads.items() if n.startswith("forward_lstms"))
    assert len(model.softmax.layers) == 1   # one softmax for both directions


def test_adaptive_softmax_cutoffs_give_a_distribution():
    model, chars = tiny(cutoffs=[3, 6])
    out = model(spelled(chars, ["the bank raised"]))
    lp = model.log_probs(out.layers[-1, ..., :6])
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(1, 3))


def test_the_spelling_table_spells_word_ids_and_the_task_mix_is_added_once():
    model, chars = tiny()
    table = chars.spell_table(WORDS)
    model.set_spelling(table)
    ids = torch.tensor([[1, 5, 7]])
    torch.testing.assert_close(model(word_ids=ids).layers, model(table[ids]).layers)
    mix = model.add_task_mix()
    assert model.add_task_mix() is mix and model.config.task_mix
    rebuilt = ElmoBiLM(model.config)
    rebuilt.load_state_dict(model.state_dict())   # the mix and the spelling are part of the checkpoint
    assert torch.equal(rebuilt.spelling, table)


def test_reverse_padded_is_its_own_inverse_and_keeps_padding():
    x = torch.arange(10.0).view(2, 5, 1)
    r = reverse_padded(x, torch.tensor([5, 3]))
    assert r[:, :, 0].tolist() == [[4, 3, 2, 1, 0], [7, 6, 5, 8, 9]]
    assert torch.equal(reverse_padded(r, torch.tensor([5, 3])), x)


def test_scalar_mix_is_gamma_times_a_softmax_weighted_sum():
    layers = torch.randn(3, 2, 4, 5, generator=torch.Generator().manual_seed(0))
    mix = ScalarMix(3)
    torch.testing.assert_close(mix(layers), layers.mean(0))   # w = 0: an even average, γ = 1
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.0, 1.0, 2.0]))
        mix.gamma.fill_(2.0)
    s = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    torch.testing.assert_close(mix(layers), 2.0 * (s[:, None, None, None] * layers).sum(0))
    normed = ScalarMix(3, layer_norm=True)(layers, torch.ones(2, 4, dtype=torch.bool))
    each = (layers - layers.mean(dim=(1, 2, 3), keepdim=True)) / layers.std(dim=(1, 2, 3), unbiased=False, keepdim=True)
    torch.testing.assert_close(normed, each.mean(0), atol=1e-5, rtol=1e-5)


def test_char_vocab_spells_with_markers_truncates_and_marks_unknown_characters():
    chars = CharVocab.from_words(["ab", "ba", "a"], max_chars=6)
    assert chars.chars == ["a", "b"] and len(chars) == 6
    assert chars.spell("ab") == [BOW, 4, 5, EOW, PAD, PAD]
    assert chars.spell("aaaaaaaa") == [BOW, 4, 4, 4, 4, EOW]   # truncated to max_chars - 2, end marker kept
    assert chars.spell("aé") == [BOW, 4, UNK, EOW, PAD, PAD]
    assert chars.spell_batch([]).shape == (0, 0, 6)
    with pytest.raises(ConfigError, match="no characters"):
        CharVocab.from_words([])


def test_bad_inputs_name_the_problem():
    model, chars = tiny()
    x = spelled(chars, ["the bank"])
    with pytest.raises(ValueError, match="spelled with 12 characters"):
        model(torch.nn.functional.pad(x, (0, 2)))
    with pytest.raises(ValueError, match="must come after"):
        model(torch.cat([torch.zeros_like(x[:, :1]), x], 1))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(x, torch.tensor([[0, 99]]), score_words=True)
    with pytest.raises(ValueError, match="give char_ids or word_ids"):
        model()
    with pytest.raises(ValueError, match="widest filter"):
        ElmoConfig(max_chars=5, filters=[(7, 2)])
