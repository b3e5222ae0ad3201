"""genfeat's BERT on its own: shapes, gradients, the head at asked positions, padding, bad input."""

import pytest
import torch

from genfeat.models.bert import BertConfig, BertForMaskedLM
from genfeat.nn.feedforward import PositionwiseFeedForward

V = 50


def tiny(**kw):
    torch.manual_seed(0)
    cfg = dict(n_token=V, d_model=16, n_layer=2, n_head=2, d_inner=32, max_position=12, dropout=0.0, dropatt=0.0)
    return BertForMaskedLM(BertConfig(**{**cfg, **kw}))


def test_shapes_and_every_parameter_gets_a_gradient():
    model = tiny(nsp=True).train()
    ids = torch.randint(1, V, (3, 10))
    asked = torch.zeros(3, 10, dtype=torch.bool)
    asked[:, 4] = True
    asked[0, 7] = True
    out = model(ids, token_type_ids=torch.ones_like(ids), masked_positions=asked)
    assert out.hidden.shape == (3, 10, 16) and out.logits.shape == (4, V) and out.nsp_logits.shape == (3, 2)
    (out.logits.logsumexp(-1).sum() + out.nsp_logits.sum()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_padding_embedding_gets_no_gradient_from_the_input_side():
    model = tiny()
    ids = torch.tensor([[3, 4, 0, 0]])
    model(ids, attention_mask=(ids > 0).long(), return_logits=False).hidden.sum().backward()
    grad = model.bert.word_emb.weight.grad
    assert grad[0].abs().sum() == 0 and grad[3].abs().sum() > 0
    assert model.bert.word_emb.weight[0].abs().sum() == 0  # and starts at zero, as BERT's


def test_head_at_asked_positions_equals_the_full_head_there():
    model = tiny().eval()
    ids = torch.randint(1, V, (2, 9))
    asked = torch.rand(2, 9) < 0.4
    asked[0, 0] = True
    with torch.no_grad():
        full = model(ids).logits
        part = model(ids, masked_positions=asked).logits
        assert model(ids, return_logits=False).logits is None
    assert full.shape == (2, 9, V)
    assert torch.allclose(part, full[asked], atol=1e-6)
    with pytest.raises(ValueError, match="bool tensor of the input's shape"):
        model(ids, masked_positions=asked.long())


def test_padding_does_not_change_the_other_positions():
    model = tiny(init_std=0.3).eval()
    ids = torch.randint(1, V, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 6), torch.zeros(1, 3)], 1).long()
    with torch.no_grad():
        alone = model(ids).logits
        with_pad = model(padded, attention_mask=mask).logits[:, :6]
        unmasked = model(padded).logits[:, :6]
    assert torch.allclose(alone, with_pad, atol=1e-5)
    assert not torch.allclose(alone, unmasked, atol=1e-2)  # the mask is what keeps padding out


def test_bad_input_and_config_are_refused():
    model = tiny()
    with pytest.raises(ValueError, match="longer than the 12 positions"):
        model(torch.ones(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input ids hold ids in \[1, 50\], outside the vocabulary \[0, 50\)"):
        model(torch.tensor([[1, 50]]))
    with pytest.raises(ValueError, match="token type ids"):
        model(torch.tensor([[1, 2]]), token_type_ids=torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="must divide d_model"):
        BertConfig(d_model=10, n_head=3)
    with pytest.raises(ValueError, match="pad_id"):
        BertConfig(n_token=5, pad_id=5)
    with pytest.raises(ValueError, match="activation must be 'relu', 'gelu' or 'gelu_tanh', got 'swish'"):
        PositionwiseFeedForward(8, 16, 0.0, recompute=True, activation="swish")


def test_bf16_autocast_trains_close_to_fp32():
    model = tiny(init_std=0.2).train()
    ids = torch.randint(1, V, (4, 10), generator=torch.Generator().manual_seed(1))
    asked = torch.rand(4, 10, generator=torch.Generator().manual_seed(2)) < 0.3
    labels = ids[asked]
    ref = torch.nn.functional.cross_entropy(model(ids, masked_positions=asked).logits, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids, masked_positions=asked).logits
    assert logits.dtype == torch.bfloat16
    loss = torch.nn.functional.cross_entropy(logits.float(), labels)
    assert abs(loss.item() - ref.item()) < 0.05 * ref.item()
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_layer_checkpointing_gives_the_same_gradients_with_dropout_on():
    ids = torch.randint(1, V, (2, 12), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    grads = []
    for recompute in (False, True):
        model = tiny(checkpoint_layers=recompute, dropout=0.2, dropatt=0.2).train()
        calls = []
        model.bert.layers[0].register_forward_pre_hook(lambda *_: calls.append(1))
        torch.manual_seed(7)  # the same dropout masks in both runs; recomputation replays them
        out = model(ids, attention_mask=mask, masked_positions=ids > V // 2)
        out.logits.logsumexp(-1).sum().backward()
        assert len(calls) == (2 if recompute else 1), "the layer is run again in the backward pass"
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-7, msg=k)
    assert any(g.abs().sum() > 0 for g in grads[0].values())
