"""XLNet backbone (genfeat.models.xlnet): two-stream attention invariants, memory, shapes and backward."""

import pytest
import torch

from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel

V = 40


def model(**kw):
    torch.manual_seed(0)
    args = dict(n_token=V, d_model=16, n_layer=2, n_head=2, d_head=8, d_inner=32, dropout=0.0, dropatt=0.0)
    args.update(kw)
    return XLNetLMHeadModel(XLNetConfig(**args)).eval()


def one_hot_targets(positions, t):
    return torch.zeros(len(positions), len(positions[0]), t).scatter_(2, torch.tensor(positions)[:, :, None], 1.0)


def test_query_stream_knows_the_position_but_not_the_token():
    net = model()
    t = 6
    x = torch.randint(0, V, (1, t), generator=torch.Generator().manual_seed(1))
    perm = torch.zeros(1, t, t, dtype=torch.bool)
    perm[0, :, 3] = True                                # nobody sees x_3 ...
    mapping = one_hot_targets([[3, 5]], t)
    y = x.clone()
    y[0, 3] = (x[0, 3] + 1) % V
    with torch.no_grad():
        a = net(x, perm_mask=perm, target_mapping=mapping).logits
        b = net(y, perm_mask=perm, target_mapping=mapping).logits
        # ... but the content stream of position 3 sees its own token
        ha = net(x, perm_mask=perm).logits
        hb = net(y, perm_mask=perm).logits
    assert torch.equal(a[0, 0], b[0, 0]) and torch.equal(a[0, 1], b[0, 1])
    assert not torch.allclose(ha[0, 3], hb[0, 3])
    assert torch.equal(ha[0, [0, 1, 2, 4, 5]], hb[0, [0, 1, 2, 4, 5]])
    # the same query vector at another position predicts differently: the position is known
    assert not torch.allclose(a[0, 0], net(x, perm_mask=perm, target_mapping=one_hot_targets([[2, 5]], t)).logits[0, 0])


def test_segment_with_memory_equals_one_pass_over_both():
    """Relative positions and memory: the second half read with the first half's memory gives the
    query stream the same outputs as one pass in which the first half never sees the second."""
    t1, t2 = 5, 4
    net = model(mem_len=t1)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, V, (2, t1 + t2), generator=g)
    perm2 = torch.rand(2, t2, t2, generator=g) < 0.5
    perm2 |= torch.eye(t2, dtype=torch.bool)
    perm = torch.zeros(2, t1 + t2, t1 + t2, dtype=torch.bool)
    perm[:, :t1, t1:] = True
    perm[:, t1:, t1:] = perm2
    targets = [[1, 3], [0, 2]]
    with torch.no_grad():
        first = net(x[:, :t1])
        second = net(x[:, t1:], perm_mask=perm2, target_mapping=one_hot_targets(targets, t2), mems=first.mems)
        full = net(x, perm_mask=perm, target_mapping=one_hot_targets([[t1 + p for p in r] for r in targets], t1 + t2))
    assert (second.logits - full.logits).abs().max() < 1e-5
    assert len(first.mems) == 2 and first.mems[0].shape == (2, t1, 16) and not first.mems[0].requires_grad


def test_reuse_len_and_mem_len_choose_the_memory():
    net = model(mem_len=5, reuse_len=4)
    x = torch.randint(0, V, (1, 6))
    with torch.no_grad():
        emb = net.word_emb(x)
        out = net(x)
        again = net(x, mems=out.mems)
    assert torch.equal(out.mems[0], emb[:, :4])                                  # the first reuse_len positions
    assert torch.equal(again.mems[0], torch.cat([emb[:, 3:4], emb[:, :4]], 1))  # the last mem_len of [memory, reused]
    assert model().forward(x).mems == []


def test_shapes_backward_and_layer_checkpointing():
    torch.manual_seed(3)
    x = torch.randint(0, V, (2, 7))
    perm = torch.rand(2, 7, 7) < 0.5
    mapping = one_hot_targets([[1, 2, 6], [0, 4, 5]], 7)
    types = torch.tensor([[0] * 4 + [1] * 3, [0] * 2 + [1] * 5])
    grads = []
    for ckpt in (False, True):
        net = model(checkpoint_layers=ckpt).train()
        out = net(x, perm_mask=perm, target_mapping=mapping, token_type_ids=types)
        assert out.logits.shape == (2, 3, V) and out.hidden.shape == (2, 3, 16)
        out.logits.logsumexp(-1).sum().backward()
        assert net.mask_emb.grad.abs().sum() > 0 and net.layers[0].seg_embed.grad.abs().sum() > 0
        grads.append([p.grad for p in net.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))


def test_bf16_autocast_follows_fp32():
    net = model(init_std=0.3)
    x = torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(5))
    perm = torch.rand(2, 8, 8, generator=torch.Generator().manual_seed(6)) < 0.5
    perm[:, :, 0] = False
    mapping = one_hot_targets([[2, 5], [7, 1]], 8)
    with torch.no_grad():
        want = net(x, perm_mask=perm, target_mapping=mapping).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = net(x, perm_mask=perm, target_mapping=mapping).logits
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() < 0.05 * want.abs().max()


def test_bad_inputs_name_the_argument():
    net = model()
    x = torch.randint(0, V, (2, 5))
    with pytest.raises(ValueError, match="perm_mask"):
        net(x, perm_mask=torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="target_mapping"):
        net(x, target_mapping=torch.zeros(2, 3, 6))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        net(x + V)
    with pytest.raises(ValueError, match="reuse_len"):
        XLNetConfig(reuse_len=0)


def test_a_mixing_target_mapping_and_hugging_face_shaped_mems_are_refused():
    # both would otherwise run: a soft mapping read at its argmax, [m, b, d] memory with m = b read as batch-first
    net = model(mem_len=4)
    x = torch.randint(0, V, (4, 5))
    mems = net(x).mems
    soft = one_hot_targets([[1, 2]] * 4, 5) * 0.5
    with pytest.raises(ValueError, match="one-hot at the predicted position"):
        net(x, target_mapping=soft)
    with pytest.raises(ValueError, match="one-hot"):
        net(x, target_mapping=one_hot_targets([[1, 2]] * 4, 5) + one_hot_targets([[3, 3]] * 4, 5))
    padded = one_hot_targets([[1, 2]] * 4, 5)
    padded[:, 1] = 0                                             # an all-zero row pads
    assert net(x, target_mapping=padded).logits.shape == (4, 2, V)
    with pytest.raises(ValueError, match=r"mems must be 2 tensors \[b, m, d\].*transpose"):
        net(x, mems=[mem.permute(1, 0, 2)[:3] for mem in mems])  # HF's [m, b, d] with m != b
    with pytest.raises(ValueError, match="mems must be 2 tensors"):
        net(x, mems=mems[:1])
    assert net(x, mems=mems).logits.shape == (4, 5, V)


def test_attention_at_chosen_query_rows_matches_the_full_rows_with_gradients():
    """nn.attention's query_pos (gather/scatter of distances) against the same queries placed at
    every position (the strided relative shift), values and all gradients, with memory."""
    from genfeat.nn.attention import RelativeMultiHeadAttention, sinusoid

    torch.manual_seed(4)
    b, t, m, d, heads, e = 2, 6, 3, 8, 2, 4
    attn = RelativeMultiHeadAttention(d, heads, e).double()
    h, mem = torch.randn(b, t, d, dtype=torch.double), torch.randn(b, m, d, dtype=torch.double)
    g = torch.randn(b, 2, d, dtype=torch.double, requires_grad=True)
    rows = torch.tensor([[1, 4], [5, 0]])
    u, v, sb = (torch.randn(heads, e, dtype=torch.double, requires_grad=True) for _ in range(3))
    seg_embed = torch.randn(2, heads, e, dtype=torch.double, requires_grad=True)
    pos = sinusoid(torch.arange(m + t, -t, -1), d).double()
    mask = torch.rand(b, t, m + t) < 0.3
    seg = torch.nn.functional.one_hot((torch.rand(b, t, m + t) < 0.5).long(), 2)
    pick = torch.arange(b)[:, None], rows

    def run(chosen: bool):
        if chosen:
            return attn(h, pos, mask[pick], u, v, query=g, seg_mat=seg[pick], seg_embed=seg_embed, r_s_bias=sb,
                        pos_max=m + t, mem=mem, query_pos=rows)
        full = torch.zeros(b, t, d, dtype=torch.double).index_put((pick[0], rows), g)
        return attn(h, pos, mask, u, v, query=full, seg_mat=seg, seg_embed=seg_embed, r_s_bias=sb, pos_max=m + t,
                    mem=mem)[pick]

    weights = torch.randn(b, 2, d, dtype=torch.double)
    inputs = [g, u, v, sb, seg_embed, *attn.parameters()]
    grads = []
    for chosen in (True, False):
        out = run(chosen)
        grads.append((out, torch.autograd.grad((out * weights).sum(), inputs)))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-10)
    assert all(torch.allclose(a, c, atol=1e-10) for a, c in zip(grads[0][1], grads[1][1]))


@pytest.mark.parametrize("name", ["debug", "pretrain_k6", "pretrain_k7", "no_memory", "no_span", "no_bidir", "nsp",
                                  "dae_txl"])
def test_recipe_model_sections_are_valid_configs(name):
    from pathlib import Path

    from genfeat.config import from_dict
    from genfeat.runner import load_recipe

    _, cfg = load_recipe(Path(__file__).resolve().parents[1] / "recipes" / "xlnet" / f"{name}.yaml")
    assert from_dict(XLNetConfig, {**cfg.model, "n_token": 100}, "model").n_token == 100


def test_without_logits_the_states_and_memory_are_unchanged():
    m = model(mem_len=4)
    ids = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(1))
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 2]] * 2)
    full = m(ids, token_type_ids=types)
    bare = m(ids, token_type_ids=types, return_logits=False)
    assert full.logits.shape[:2] == (2, 7) and bare.logits is None and len(bare.mems) == 2
    torch.testing.assert_close(bare.hidden, full.hidden, rtol=0, atol=0)
    for a, b in zip(bare.mems, full.mems):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
