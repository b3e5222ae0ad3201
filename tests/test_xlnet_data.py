"""XLNet's two-segment input through its objectives: special tokens, NSP, per-example seeds, the
masked-LM path of the backbone ("DAE + Transformer-XL") and held-out scoring."""

import pytest
import torch
import torch.nn.functional as F

from genfeat.data.documents import PairLayout, XLNetPairStream
from genfeat.methods.xlnet import held_out_loss
from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel
from genfeat.objectives.masked_lm import MaskedLMConfig, MaskedLMObjective
from genfeat.objectives.permutation_lm import PermutationLMConfig, PermutationLMObjective

V, SEP, CLS, MASK = 60, 1, 2, 3


def model(**kw):
    torch.manual_seed(0)
    return XLNetLMHeadModel(XLNetConfig(n_token=V, d_model=16, n_layer=2, n_head=2, d_head=8, d_inner=32,
                                        dropout=0.0, dropatt=0.0, init_std=0.3, **kw)).eval()


def pairs(bi_data=False, seed=0, batch_size=4):
    ids = torch.randint(4, V, (1200,), generator=torch.Generator().manual_seed(0))
    sent = torch.arange(1200) // 9
    return XLNetPairStream(ids, sent, batch_size, 24, 8, PairLayout(SEP, CLS), bi_data, seed)


def test_special_tokens_are_never_predicted_and_seeds_fix_each_row():
    batch = next(pairs())
    plm = PermutationLMObjective(PermutationLMConfig(num_predict=6), special_ids=[SEP, CLS])
    perm, mapping, positions = plm.sample(batch["input_ids"], batch["seed"])
    assert positions.shape == (4, 6)
    assert not torch.isin(batch["input_ids"].gather(1, positions), torch.tensor([SEP, CLS])).any()
    # row 2 alone, with its seed, gets the same predicted tokens and order as inside the batch
    alone = plm.sample(batch["input_ids"][2:3], batch["seed"][2:3])
    assert torch.equal(alone[0][0], perm[2]) and torch.equal(alone[2][0], positions[2])
    mlm = MaskedLMObjective(MaskedLMConfig(), MASK, V, [SEP, CLS])
    masked = mlm.mask(batch)
    again = mlm.mask({k: v[1:3] for k, v in batch.items() if k != "new_epoch"})
    assert torch.equal(again.input_ids, masked.input_ids[1:3]) and torch.equal(again.positions, masked.positions[1:3])
    assert not masked.positions[batch["input_ids"] == CLS].any()


def test_next_sentence_prediction_reads_cls_and_adds_its_loss():
    net = model(nsp=True, mem_len=8)
    batch = next(pairs())
    torch.manual_seed(1)
    with_nsp = PermutationLMObjective(PermutationLMConfig(num_predict=6, nsp=True), special_ids=[SEP, CLS])(net, batch)
    plain = PermutationLMObjective(PermutationLMConfig(num_predict=6), special_ids=[SEP, CLS])(net, batch)
    # <cls> is context: its content state sees the context tokens only, as under the objective's masks
    perm, mapping, _ = PermutationLMObjective(PermutationLMConfig(num_predict=6), special_ids=[SEP, CLS]).sample(
        batch["input_ids"], batch["seed"])
    nsp = net(batch["input_ids"], perm_mask=perm, target_mapping=mapping, token_type_ids=batch["token_type_ids"]).nsp_logits
    out = net(batch["input_ids"], token_type_ids=batch["token_type_ids"])
    # pooled from the content state of the last position, <cls>
    torch.testing.assert_close(out.nsp_logits, net.nsp_head(torch.tanh(net.pooler(out.hidden[:, -1]))))
    want = F.cross_entropy(nsp, batch["next_sentence_label"], reduction="sum") * 24 / 4
    assert nsp.shape == (4, 2)
    torch.testing.assert_close(with_nsp.loss_sum - plain.loss_sum, want)
    assert with_nsp.count == plain.count == 24 and "nsp_loss" in with_nsp.logs
    with pytest.raises(ValueError, match="masked_positions"):
        net(batch["input_ids"], target_mapping=torch.zeros(4, 1, 24), masked_positions=torch.ones(4, 24, dtype=bool))


def test_masked_positions_head_equals_the_full_content_head_there():
    net = model()
    x = torch.randint(4, V, (2, 10), generator=torch.Generator().manual_seed(2))
    types = (torch.arange(10) >= 5).long().expand(2, -1)
    where = torch.rand(2, 10, generator=torch.Generator().manual_seed(3)) < 0.3
    full = net(x, token_type_ids=types).logits                         # [b, t, V], every position sees every other
    part = net(input_ids=x, masked_positions=where, token_type_ids=types).logits
    assert part.shape == (int(where.sum()), V)
    torch.testing.assert_close(part, full[where])
    # DAE + Transformer-XL: the masked-LM objective trains the XLNet backbone
    loss = MaskedLMObjective(MaskedLMConfig(), MASK, V, [SEP, CLS])(net.train(), {"input_ids": x, "token_type_ids": types})
    loss.loss_sum.backward()
    assert net.word_emb.weight.grad.abs().sum() > 0 and net.mask_emb.grad is None   # no query stream


def test_held_out_loss_is_fixed_and_reads_the_reversed_half():
    stream = pairs(bi_data=True, seed=7)
    net = model(mem_len=8, bi_data=True)
    plm = PermutationLMObjective(PermutationLMConfig(num_predict=5), special_ids=[SEP, CLS])
    first = held_out_loss(net, plm, stream)
    assert first == held_out_loss(net, plm, stream), "a fixed seed and a fresh pass each time"
    assert first["valid_items"] == stream.n_batches * 4 * 5
    net.config.bi_data = False
    assert abs(held_out_loss(net, plm, stream)["valid_loss"] - first["valid_loss"]) > 1e-3
    assert held_out_loss(net, plm, stream, limit=2)["valid_items"] == 2 * 4 * 5
