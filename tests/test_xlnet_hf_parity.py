"""Parity with Hugging Face XLNet (``XLNetLMHeadModel`` of transformers 4.37.2) on random weights, fp32."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf_interop
from transformers import XLNetConfig as HFXLNetConfig, XLNetLMHeadModel as HFXLNetLMHeadModel  # noqa: E402

import genfeat  # noqa: E402
from genfeat.errors import CheckpointError  # noqa: E402
from genfeat.interop.hf_xlnet import load_hf_xlnet  # noqa: E402
from genfeat.models.xlnet import XLNetLMHeadModel  # noqa: E402

V, B, T, N = 60, 2, 9, 4


def hf_model(**kw):
    args = dict(vocab_size=V, d_model=32, n_layer=3, n_head=2, d_inner=64, dropout=0.0, mem_len=7)
    args.update(kw)
    torch.manual_seed(0)
    model = HFXLNetLMHeadModel(HFXLNetConfig(**args)).eval()
    with torch.no_grad():  # away from the near-uniform init, so that differences would show
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def batch(seed):
    """HF-style inputs: a random perm mask in which every predicted row sees some key (HF averages
    all values where every key is blocked, genfeat attends to nothing), one-hot target mapping,
    two segments."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (B, T), generator=g)
    perm = torch.rand(B, T, T, generator=g) < 0.5
    perm[:, :, 0] = False
    target = torch.stack([torch.randperm(T - 1, generator=g)[:N] + 1 for _ in range(B)])  # [B, N]
    perm[torch.arange(B)[:, None], target, target] = True          # a predicted token never sees itself
    mapping = torch.zeros(B, N, T).scatter_(2, target[:, :, None], 1.0)
    types = (torch.arange(T)[None, :] >= torch.randint(2, T - 1, (B, 1), generator=g)).long()
    return dict(input_ids=x, perm_mask=perm.float(), target_mapping=mapping, token_type_ids=types)


def two_segments(model, hf: bool, **kw):
    """Logits of two consecutive segments, the second with the first's memory, and the memory."""
    extra = dict(use_mems=True) if hf else {}
    first = model(**batch(1), **kw, **extra)
    second = model(**batch(2), mems=first.mems, **kw, **extra)
    mems = [m.transpose(0, 1) for m in second.mems] if hf else second.mems
    return torch.cat([first.logits, second.logits], 1), mems


@pytest.mark.parametrize("kw", [dict(), dict(ff_activation="relu", clamp_len=3, reuse_len=5),
                                dict(bi_data=True, clamp_len=4)])
def test_both_streams_with_memory_match(tmp_path, kw):
    hf = hf_model(**kw)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    assert isinstance(ours, XLNetLMHeadModel)
    with torch.no_grad():
        want, want_mems = two_segments(hf, True)
        got, got_mems = two_segments(ours, False)
    assert got.shape == (B, 2 * N, V)
    assert (want - got).abs().max() <= 1e-4
    assert len(got_mems) == 3 and got_mems[0].shape == (B, 7, 32)
    assert max((a - b).abs().max() for a, b in zip(want_mems, got_mems)) <= 1e-4


def test_content_stream_and_padding_match(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    x = batch(3)
    pad = torch.ones(B, T)
    pad[1, -3:] = 0
    with torch.no_grad():
        want = hf(x["input_ids"], token_type_ids=x["token_type_ids"], attention_mask=pad).logits
        got = ours(x["input_ids"], token_type_ids=x["token_type_ids"], attention_mask=pad).logits
    assert got.shape == (B, T, V)
    assert (want - got).abs().max() <= 1e-4


def test_export_loads_in_hugging_face(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    genfeat.save_pretrained(ours, tmp_path / "back", hf=True)
    again = HFXLNetLMHeadModel.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert (two_segments(hf, True)[0] - two_segments(again, True)[0]).abs().max() <= 1e-6
    # and genfeat's own checkpoint format round-trips
    genfeat.save_pretrained(ours, tmp_path / "ours")
    mine = genfeat.from_pretrained(tmp_path / "ours", architecture="xlnet")
    with torch.no_grad():
        assert torch.equal(two_segments(ours, False)[0], two_segments(mine, False)[0])


def test_a_model_pretrained_with_the_bidirectional_pipeline_exports_for_downstream_use(tmp_path):
    """bi_data is a pretraining-pipeline setting: in transformers it splits every batch into forward and reversed
    halves (a batch of one gave an empty output). The export writes it false; its function is genfeat's model with
    bi_data off, row by row."""
    import copy
    import dataclasses

    hf = hf_model(bi_data=True)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf").eval()
    assert ours.config.bi_data
    genfeat.save_pretrained(ours, tmp_path / "out", hf=True)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["bi_data"] is False
    again = HFXLNetLMHeadModel.from_pretrained(tmp_path / "out").eval()
    plain = copy.deepcopy(ours)
    plain.config = dataclasses.replace(ours.config, bi_data=False)
    x = batch(1)
    with torch.no_grad():
        for row in range(B):
            one = {k: v[row:row + 1] for k, v in x.items()}
            got = again(**one).logits
            assert got.shape[0] == 1 and (got - plain(**one).logits).abs().max() <= 1e-5


def test_another_architecture_or_mismatched_weights_are_rejected(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["n_layer"] = 2
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no genfeat counterpart"):
        genfeat.from_pretrained(tmp_path / "hf")
    cfg["n_layer"], cfg["d_inner"] = 3, 32
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="disagree"):
        genfeat.from_pretrained(tmp_path / "hf")
    cfg["d_inner"], cfg["attn_type"] = 64, "uni"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="attn_type"):
        genfeat.from_pretrained(tmp_path / "hf")
    cfg["attn_type"] = "bi"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="not transformer_xl"):
        genfeat.from_pretrained(tmp_path / "hf", architecture="transformer_xl")
    transformers.XLNetForSequenceClassification(hf.config).save_pretrained(tmp_path / "cls")
    # a task model loads as one (genfeat.interop.hf_finetune), never as the LM
    with pytest.raises(CheckpointError, match="holds a finetune model, not xlnet"):
        genfeat.from_pretrained(tmp_path / "cls", architecture="xlnet")
    with pytest.raises(CheckpointError, match="without the LM head"):
        load_hf_xlnet(tmp_path / "cls")


def test_export_of_a_model_with_a_next_sentence_head_says_it_is_left_out(tmp_path, capsys):
    from genfeat.models.xlnet import XLNetConfig

    ours = XLNetLMHeadModel(XLNetConfig(n_token=50, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32, nsp=True))
    genfeat.save_pretrained(ours, tmp_path / "hf", hf=True)
    assert "next-sentence head" in capsys.readouterr().err
    again = HFXLNetLMHeadModel.from_pretrained(tmp_path / "hf")
    assert torch.equal(again.transformer.word_embedding.weight, ours.word_emb.weight.detach())
    capsys.readouterr()  # transformers 5 draws a loading progress bar on stderr: only genfeat's export is checked
    genfeat.save_pretrained(XLNetLMHeadModel(XLNetConfig(n_token=50, d_model=16, n_layer=1, n_head=2, d_head=8,
                                                         d_inner=32)), tmp_path / "plain", hf=True)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kw", [dict(), dict(ff_activation="relu", bi_data=True)])
def test_training_gradients_match(tmp_path, kw):
    """Every parameter's gradient of a two-segment permutation-LM loss (memory carried) matches HF's:
    checks the hand-written backward passes (attention, recomputed feed-forward, layer norms that
    keep their outputs) against autograd through HF's code."""
    from genfeat.interop.hf_xlnet import hf_state_to_ours

    hf = hf_model(**kw).train()
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf").train()
    assert ours.config.recompute_ff
    labels = torch.randint(0, V, (B, 2 * N), generator=torch.Generator().manual_seed(5))
    grads = []
    for model, is_hf in ((hf, True), (ours, False)):
        logits, _ = two_segments(model, is_hf)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
        grads.append({k: p.grad if p.grad is not None else torch.zeros_like(p) for k, p in model.named_parameters()})
    want = hf_state_to_ours(grads[0], ours.config)
    assert want.keys() == grads[1].keys()
    for k, g in grads[1].items():
        assert (g - want[k]).abs().max() <= 1e-4, k
    assert grads[1]["layers.0.ff.fc1.weight"].abs().max() > 1e-3  # the gradients are not all ~0
