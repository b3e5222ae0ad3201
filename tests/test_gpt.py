"""GPT-1 (models/gpt.py): shapes, causality, the key/value cache, generation, special tokens."""

import pytest
import torch

from genfeat.config import from_dict
from genfeat.errors import ConfigError
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel

V = 50


def model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(n_token=V, d_model=32, n_layer=2, n_head=4, d_inner=64, max_position=40, dropout=0.0, dropemb=0.0,
               dropatt=0.0, init_std=0.2)
    return GPTLMHeadModel(GPTConfig(**{**cfg, **kw})).eval()


def ids(b=2, t=12, seed=1):
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


def test_shapes_backward_and_causality():
    m = model(dropout=0.1, dropatt=0.1, dropemb=0.1).train()
    x = ids()
    out = m(x)
    assert out.logits.shape == (2, 12, V) and out.hidden.shape == (2, 12, 32) and out.past is None
    out.logits.logsumexp(-1).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.eval()
    with torch.no_grad():
        y = x.clone()
        y[:, 7:] = (y[:, 7:] + 1) % V  # change the future: earlier positions must not see it
        a, b = m(x).logits, m(y).logits
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-3


def test_cached_chunks_equal_the_full_pass():
    m = model()
    x = ids(t=15)
    mask = torch.ones_like(x)
    mask[1, -4:] = 0  # right padding
    with torch.no_grad():
        full = m(x, attention_mask=mask).logits
        first = m(x[:, :6], attention_mask=mask[:, :6], use_cache=True)
        assert len(first.past) == 2 and first.past[0][0].shape == (2, 4, 6, 8)
        second = m(x[:, 6:10], attention_mask=mask[:, :10], past=first.past, use_cache=True)  # t > 1 with a cache
        third = m(x[:, 10:], attention_mask=mask, past=second.past)
        assert (torch.cat([first.logits, second.logits, third.logits], 1) - full).abs().max() <= 1e-5
        # one token at a time, no mask
        plain, past, steps = m(x).logits, None, []
        for i in range(15):
            step = m(x[:, i:i + 1], past=past, use_cache=True)
            past = step.past
            steps.append(step.logits)
        assert (torch.cat(steps, 1) - plain).abs().max() <= 1e-5


def test_generation_with_the_cache_equals_recomputation():
    m = model()
    context = ids(b=2, t=5, seed=3)
    cached = m.generate(context, 20, top_k=1)
    recomputed = m.generate(context, 20, top_k=1, use_cache=False)
    assert cached.shape == (2, 20) and torch.equal(cached, recomputed)
    # greedy: each token is the arg-max of the full pass over everything before it
    seq = torch.cat([context, cached], 1)
    with torch.no_grad():
        assert torch.equal(m(seq[:, :-1]).logits[:, 4:].argmax(-1), cached)
    # sampling: the same generator state gives the same tokens either way
    a = m.generate(context[0], 10, top_k=5, temperature=0.7, generator=torch.Generator().manual_seed(0))
    b = m.generate(context[0], 10, top_k=5, temperature=0.7, generator=torch.Generator().manual_seed(0),
                   use_cache=False)
    assert a.shape == (10,) and torch.equal(a, b)
    with pytest.raises(ValueError, match="exceed the model's 40 positions"):
        m.generate(context, 36)


def test_prompts_of_different_lengths_generate_in_one_left_padded_batch_as_each_alone():
    m = model()
    with torch.no_grad():   # large position embeddings: a wrong position shows in the tokens
        m.pos_emb.weight.normal_(0, 1, generator=torch.Generator().manual_seed(5))
    prompts = [ids(1, t, seed=t)[0] for t in (7, 3, 5)]
    alone = [m.generate(p, 15, top_k=1) for p in prompts]
    assert min(len(set(a.tolist())) for a in alone) > 4, "rows that repeat a token would check little"
    width = max(len(p) for p in prompts)
    context = torch.full((3, width), 9)                                  # the pad id is never read
    mask = torch.zeros(3, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        context[i, width - len(p):], mask[i, width - len(p):] = p, 1
    for use_cache in (True, False):
        batch = m.generate(context, 15, top_k=1, attention_mask=mask, use_cache=use_cache)
        assert batch.shape == (3, 15)
        for row, a in zip(batch, alone):
            assert torch.equal(row, a)
    # without the mask the padding is read as tokens: other continuations (the check can fail)
    assert not torch.equal(m.generate(context, 15, top_k=1)[1], alone[1])
    # padding after a token, a row of padding alone, a mask of another shape: refused
    for bad in (mask.flip(1), torch.cat([torch.zeros(1, width, dtype=torch.long), mask[1:]]), mask[:, 1:]):
        with pytest.raises(ValueError, match="attention_mask"):
            m.generate(context, 2, attention_mask=bad)
    with pytest.raises(ValueError, match="padded on the left"):
        m.generate(context, 2, attention_mask=mask.flip(1))
    with pytest.raises(ValueError, match=r"attention_mask must be 0/1 of the context's shape \(3, 7\), got \(7, 3\)"):
        m.generate(context, 2, attention_mask=mask.T.contiguous())          # as many elements: still refused
    with pytest.raises(ValueError, match="length of 0 or more"):
        m.generate(context, -1)
    # forward: a mask or positions of another shape than the input ids
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 7\), the input ids \(3, 2, 7\)"):
        m(context[:, None].expand(3, 2, 7), attention_mask=mask)
    with pytest.raises(ValueError, match=r"position_ids has shape \(7, 3\)"):
        m(context, position_ids=mask.T.contiguous())


def test_a_padding_query_with_no_key_attends_to_itself_alone():
    # SDPA's kernels differ on a softmax over no key (NaN or 0): the mask gives such a query its own key
    m = model()
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    keep = m._keep(4, 0, mask, "cpu")[:, 0]                              # [b, t, t]
    assert keep[0, 0].tolist() == [True, False, False, False] and keep[0, 1].tolist() == [False, True, False, False]
    assert keep[0, 2].tolist() == [False, False, True, False] and keep[0, 3].tolist() == [False, False, True, True]
    assert torch.equal(keep[1], torch.ones(4, 4, dtype=torch.bool).tril()), "rows without padding: causal alone"
    # over a cache: the new token of a row that starts with padding reads its prompt, not the padding
    keep = m._keep(1, 3, torch.tensor([[0, 1, 1, 1]]), "cpu")[0, 0, 0]
    assert keep.tolist() == [False, True, True, True]


def test_fine_tuning_special_tokens_are_not_sampled_unless_asked():
    m = model()
    special = m.add_special_tokens(3)
    with torch.no_grad():   # special embeddings far larger than the others: the tied head favours them
        m.special_emb.weight.mul_(50)
    context = torch.tensor([[special[0], 4, 9]])
    assert (m.generate(context, 10, top_k=1) < V).all()
    assert (m.generate(context, 10, top_k=5, generator=torch.Generator().manual_seed(0)) < V).all()
    assert (m.generate(context, 10, top_k=1, special_tokens=True) >= V).any(), "the check can fail"


def test_a_model_with_the_multiple_choice_head_still_generates_and_scores_as_an_lm():
    """[b, t] input is the LM's (generation, zero-shot scoring): no multiple-choice scores, the same LM as without
    the head; [b, k, t] input gets them (an OpenAIGPTDoubleHeadsModel directory loads with the head)."""
    from genfeat.eval.zero_shot import score_rows

    plain, with_head = model(), model(mc_head=True)
    with_head.load_state_dict({**with_head.state_dict(), **plain.state_dict()})
    context = ids(b=2, t=5, seed=3)
    assert torch.equal(with_head.generate(context, 8, top_k=1), plain.generate(context, 8, top_k=1))
    assert score_rows(with_head, [([1, 2, 3, 4], 1)]) == score_rows(plain, [([1, 2, 3, 4], 1)])
    with torch.no_grad():
        assert with_head(context).mc_logits is None and with_head(context[None]).mc_logits.shape == (1, 2)


def test_special_tokens_get_their_own_table_and_leave_the_pretrained_one_alone():
    m = model()
    pretrained = m.word_emb.weight.detach().clone()
    assert m.add_special_tokens(2) == [V, V + 1]
    first = m.special_emb.weight.detach().clone()
    assert m.add_special_tokens(1) == [V + 2]
    assert m.config.n_special == 3 and torch.equal(m.special_emb.weight[:2], first)
    # fine-tuning with the pretrained table frozen: only the special rows (and the rest) move
    m.word_emb.weight.requires_grad_(False)
    x = torch.tensor([[V, 3, 4, V + 1, 5, V + 2]])
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1)
    m(x).logits.logsumexp(-1).sum().backward()
    opt.step()
    assert torch.equal(m.word_emb.weight, pretrained)
    assert not torch.equal(m.special_emb.weight[:2], first)
    assert m(x).logits.shape == (1, 6, V + 3)
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 53\)"):
        m(torch.tensor([[V + 3]]))


def test_multiple_choice_head_scores_each_choice_at_its_extract_token():
    m = model(mc_head=True)
    x = ids(b=6, t=9).view(2, 3, 9)
    extract = torch.tensor([[8, 5, 6], [7, 8, 4]])
    with torch.no_grad():
        out = m(x, mc_token_ids=extract)
        assert out.mc_logits.shape == (2, 3) and out.logits.shape == (2, 3, 9, V)
        # tokens after a choice's extract token cannot change its score (causal attention)
        y = x.clone()
        y[0, 1, 6:] = (y[0, 1, 6:] + 1) % V
        assert torch.allclose(m(y, mc_token_ids=extract).mc_logits, out.mc_logits, atol=1e-6)
        expected = m.mc_proj(out.hidden[1, 2, 4]).squeeze(-1)
        assert torch.allclose(out.mc_logits[1, 2], expected, atol=1e-6)
    assert m(x[0]).mc_logits is None, "[b, t] input is the LM's: no choices to score"
    with pytest.raises(ValueError, match=r"needs input ids \[b, k, t\]"):
        m.mc_logits(out.hidden[0], None)


def test_bad_config_and_inputs_are_refused():
    with pytest.raises(ConfigError, match="n_head"):
        from_dict(GPTConfig, {"d_model": 30, "n_head": 4})
    with pytest.raises(ConfigError, match="n_special"):
        from_dict(GPTConfig, {"n_special": -1})
    m = model()
    with pytest.raises(ValueError, match="41 tokens .* longer than the 40 positions"):
        m(ids(t=41))
    past = m(ids(t=30), use_cache=True).past
    with pytest.raises(ValueError, match="41 tokens"):
        m(ids(t=11), past=past)
    with pytest.raises(ValueError, match="attention_mask covers 5 tokens, expected the 30 cached and 5 new"):
        m(ids(t=5), attention_mask=torch.ones(2, 5), past=past)


def test_fused_target_log_probs_equal_the_log_softmax_of_the_logits_with_their_gradients():
    m = model()
    m.add_special_tokens(2)
    x = ids(t=10)
    x[0, 3] = V + 1
    targets = x[:, 1:]
    hidden = m(x, return_logits=False).hidden[:, :-1]
    fused = m.target_log_probs(hidden, targets)
    assert fused.shape == (2, 9)
    grads = torch.autograd.grad(fused.sum(), list(m.parameters()))
    logits = m(x).logits[:, :-1]
    plain = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    assert (fused - plain).abs().max() <= 1e-5
    for got, want in zip(grads, torch.autograd.grad(plain.sum(), list(m.parameters()))):
        assert (got - want).abs().max() <= 1e-4 * max(1.0, float(want.abs().max()))
    with pytest.raises(ValueError, match="targets hold ids"):
        m.target_log_probs(hidden, targets + V)


def test_bf16_autocast_trains_close_to_fp32():
    m = model().train()
    x = ids(t=10)
    ref = -m.target_log_probs(m(x, return_logits=False).hidden[:, :-1], x[:, 1:]).mean()
    inner = []
    m.layers[0].ff.register_forward_hook(lambda _m, _i, out: inner.append(out.dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = -m.target_log_probs(m(x, return_logits=False).hidden[:, :-1], x[:, 1:]).mean()
    assert inner == [torch.bfloat16]          # the layers' products ran in bf16
    assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < 0.05 * ref.item()
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_shared_attention_refuses_causal_order_sdpa_would_misalign():
    from genfeat.nn.attention import MultiHeadAttention
    attn = MultiHeadAttention(8, 2)
    h = torch.randn(1, 3, 8)
    _, past = attn(h, causal=True)
    with pytest.raises(ValueError, match="needs keep"):
        attn(h, past=past, causal=True)                  # three new tokens after a cache, no mask
    with pytest.raises(ValueError, match="needs keep"):
        attn(h, causal=True, last=2)
    out, _ = attn(h[:, :1], past=past, causal=True)      # one new token sees every cached one
    assert out.shape == (1, 1, 8)
