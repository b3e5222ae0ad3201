"""Transformer-XL invariants: memory equals full context, adaptive softmax normalises, ablations run."""

import pytest
import torch

from genfeat.config import from_dict
from genfeat.errors import ConfigError
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel
from genfeat.nn.attention import causal_mask, rel_shift

ATTN = ["relative", "shaw", "absolute_sinusoid", "absolute_learned"]


def tiny(**kw):
    base = dict(n_token=97, cutoffs=[20, 50], div_val=2, d_model=32, n_head=2, d_head=16, d_inner=64, n_layer=2,
                mem_len=24, dropout=0.0, max_klen=64)
    base.update(kw)
    torch.manual_seed(0)
    model = TransformerXLLMHeadModel(TransformerXLConfig(**base)).eval()
    # The 0.02-std init gives nearly uniform predictions; larger weights make context matter.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def data(b=3, t=24, v=97, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, v, (b, t), generator=g), torch.randint(0, v, (b, t), generator=g)


def segmented(model, x, y, cuts):
    mems, parts = None, []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        out = model(x[:, lo:hi], mems=mems, labels=y[:, lo:hi])
        mems = out.mems
        parts.append(out.target_log_probs)
    return torch.cat(parts, 1), mems


@pytest.mark.parametrize("attn", ["relative", "shaw"])
@pytest.mark.parametrize("untie_r, pre_lnorm", [(False, False), (True, True)])
def test_segments_with_memory_equal_full_context(attn, untie_r, pre_lnorm):
    model = tiny(attn_type=attn, untie_r=untie_r, pre_lnorm=pre_lnorm)
    x, y = data()
    with torch.no_grad():
        full = model(x, labels=y).target_log_probs
        seg, _ = segmented(model, x, y, [0, 8, 15, 24])
        no_mem = torch.cat([model(x[:, lo:hi], labels=y[:, lo:hi]).target_log_probs
                            for lo, hi in [(0, 8), (8, 15), (15, 24)]], 1)
    torch.testing.assert_close(seg, full, atol=1e-5, rtol=1e-5)
    assert (no_mem - full)[:, 8:].abs().max() > 1e-3, "without memory the later segments must differ"


def test_memory_is_truncated_and_detached():
    model = tiny(mem_len=10).train()
    x, y = data(t=8)
    out = model(x, labels=y)
    out2 = model(x, mems=out.mems, labels=y)
    assert len(out2.mems) == model.config.n_layer
    assert all(m.shape == (3, 10, 32) and not m.requires_grad for m in out2.mems)
    out2.target_log_probs.sum().backward()  # stop-gradient: no graph through the memory


def test_memory_keeps_the_last_mem_len_layer_inputs():
    model = tiny(mem_len=6)
    x, y = data(t=16)
    with torch.no_grad():
        first = model(x[:, :8], labels=y[:, :8])
        second = model(x[:, 8:16], mems=first.mems, labels=y[:, 8:16])
        # Layer 0's input is the scaled embedding: the memory must hold those of the last 6 tokens.
        torch.testing.assert_close(first.mems[0], model.word_emb(x[:, 2:8]))
        torch.testing.assert_close(second.mems[0], model.word_emb(x[:, 10:16]))
        # Deeper memories are the previous layer's outputs for the same positions.
        torch.testing.assert_close(second.mems[1][:, -6:], model.layers[0](
            model.word_emb(x[:, 8:16]), first.mems[0], model._positions(14, -1, x.device),
            causal_mask(8, 6, x.device), (model.r_w_bias, model.r_r_bias))[:, -6:])


@pytest.mark.parametrize("cutoffs, div_val, d_embed", [([], 1, 32), ([20, 50], 1, 16), ([20, 50], 2, 32), ([30], 4, 64)])
def test_adaptive_softmax_normalises_and_gathers(cutoffs, div_val, d_embed):
    model = tiny(cutoffs=cutoffs, div_val=div_val, d_embed=d_embed)
    x, y = data()
    with torch.no_grad():
        out = model(x, labels=y, return_log_probs=True)
    assert out.log_probs.shape == (3, 24, 97)
    torch.testing.assert_close(out.log_probs.logsumexp(-1), torch.zeros(3, 24), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.log_probs.gather(-1, y[..., None]).squeeze(-1), out.target_log_probs)


def test_tied_weights_are_shared():
    model = tiny(cutoffs=[20, 50], div_val=2)
    for out_layer, emb in zip(model.crit.layers, model.word_emb.layers):
        assert out_layer.weight is emb.weight
    assert model.crit.projs[1] is model.word_emb.projs[1] and model.crit.projs[0] is not model.word_emb.projs[0]
    untied = tiny(tie_weight=False)
    assert untied.crit.layers[0].weight is not untied.word_emb.layers[0].weight


@pytest.mark.parametrize("attn", ATTN)
def test_every_attention_type_trains(attn):
    model = tiny(attn_type=attn, dropout=0.1, dropatt=0.1).train()
    x, y = data()
    out = model(x, labels=y)
    out2 = model(x, mems=out.mems, labels=y)
    loss = -out2.target_log_probs.mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert out2.hidden.shape == (3, 24, 32)


def test_absolute_encodings_break_segment_equivalence():
    """Temporal confusion: positions restart each segment, so memory is not the same as context."""
    model = tiny(attn_type="absolute_sinusoid")
    x, y = data()
    with torch.no_grad():
        full = model(x, labels=y).target_log_probs
        seg, _ = segmented(model, x, y, [0, 12, 24])
    assert (seg - full)[:, 12:].abs().max() > 1e-3


def test_same_length_and_clamp_len_change_only_what_they_should():
    x, y = data()
    base = tiny()
    with torch.no_grad():
        ref = base(x, labels=y).target_log_probs
        clamped = base(x, labels=y, clamp_len=4).target_log_probs
        huge_clamp = base(x, labels=y, clamp_len=1000).target_log_probs
    assert (clamped - ref).abs().max() > 1e-4
    torch.testing.assert_close(huge_clamp, ref)
    same = tiny(same_length=True, mem_len=8)
    with torch.no_grad():
        first = same(x[:, :8], labels=y[:, :8])
        second = same(x[:, 8:16], mems=first.mems, labels=y[:, 8:16]).target_log_probs
        plain = base(x[:, 8:16], mems=first.mems, labels=y[:, 8:16]).target_log_probs
    assert (second - plain).abs().max() > 1e-4


def test_same_length_mask_gives_every_query_mem_len_recent_keys():
    t, m = 8, 8
    mask = causal_mask(t, m, "cpu", same_length=True, mem_len=m)
    for i in range(t):
        visible = (~mask[i]).nonzero().flatten().tolist()
        assert visible == list(range(i + 1, m + i + 1))
    plain = causal_mask(t, m, "cpu")
    assert [(~plain[i]).sum().item() for i in range(t)] == [m + i + 1 for i in range(t)]


def test_rel_shift_aligns_distances():
    t, m = 3, 2
    k = t + m
    # Column c holds distance k - 1 - c; after the shift, (i, j) must hold distance (m + i) - j.
    dist = torch.arange(k - 1, -1, -1).float().expand(t, k)
    shifted = rel_shift(dist)
    for i in range(t):
        for j in range(m + i + 1):
            assert shifted[i, j] == m + i - j


def test_bf16_autocast_forward():
    model = tiny()
    x, y = data()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lp = model(x, labels=y).target_log_probs
    assert torch.isfinite(lp).all()


@pytest.mark.parametrize("fields, match", [
    ({"n_token": 50, "cutoffs": [60]}, "cutoffs"),
    ({"tie_projs": [True]}, "tie_projs"),
    ({"attn_type": "rotary"}, "attn_type"),
    ({"dropout": 1.5}, "dropout"),
])
def test_bad_configs_are_rejected(fields, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(TransformerXLConfig, {"cutoffs": [2, 5], **fields})


def test_layer_checkpointing_gives_the_same_gradients():
    x, y = data()
    grads = []
    for flag in (False, True):
        model = tiny(checkpoint_layers=flag, dropout=0.1).train()
        torch.manual_seed(5)
        out = model(x, labels=y)
        model(x, mems=out.mems, labels=y).target_log_probs.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
