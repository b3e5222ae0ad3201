"""Parity of genfeat's BERT with Hugging Face BertForMaskedLM / BertForPreTraining (random weights, fp32)."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf_interop
from transformers import BertConfig as HFBertConfig  # noqa: E402
from transformers import BertForMaskedLM as HFBertForMaskedLM  # noqa: E402
from transformers import BertForPreTraining as HFBertForPreTraining  # noqa: E402

import genfeat  # noqa: E402
from genfeat.errors import CheckpointError  # noqa: E402
from genfeat.models.bert import BertConfig, BertForMaskedLM  # noqa: E402

V = 97


def hf_model(cls=HFBertForMaskedLM, attn="eager", **kw):
    cfg = HFBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                       max_position_embeddings=24, type_vocab_size=2, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation=attn, **kw)
    torch.manual_seed(0)
    try:
        model = cls(cfg).eval()
    except ValueError as e:  # transformers before 4.41 has no sdpa BERT
        pytest.skip(f"this transformers has no {attn} attention for BERT ({e})")
    with torch.no_grad():  # move away from the init (zero biases, unit norms) so every parameter matters
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def inputs(b=3, t=11, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V, (b, t), generator=g)
    types = (torch.arange(t) >= t // 2).long().expand(b, t).contiguous()
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, -3:] = 0  # one padded sequence
    ids[1, -3:] = 0
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_masked_lm_logits_match_hugging_face(tmp_path, attn):
    hf = hf_model(attn=attn)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    assert isinstance(ours, BertForMaskedLM) and not ours.config.nsp
    x = inputs()
    with torch.no_grad():
        expected = hf(**x).logits
        out = ours(**x)
        assert out.logits.shape == expected.shape == (3, 11, V)
        assert (out.logits - expected).abs().max() <= 1e-4
        # the head at the asked positions only: the same rows of the full logits
        asked = torch.rand(3, 11, generator=torch.Generator().manual_seed(3)) < 0.3
        part = ours(**x, masked_positions=asked).logits
        assert part.shape == (int(asked.sum()), V)
        assert (part - expected[asked]).abs().max() <= 1e-4
        # without token types and attention mask (HF defaults: all type 0, attend everywhere)
        assert (ours(x["input_ids"]).logits - hf(input_ids=x["input_ids"]).logits).abs().max() <= 1e-4


def test_pretraining_heads_match_hugging_face_and_export_loads_back(tmp_path):
    hf = hf_model(HFBertForPreTraining)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    assert ours.config.nsp
    x = inputs(seed=4)
    with torch.no_grad():
        ref = hf(**x)
        out = ours(**x)
    assert (out.logits - ref.prediction_logits).abs().max() <= 1e-4
    assert (out.nsp_logits - ref.seq_relationship_logits).abs().max() <= 1e-4

    genfeat.save_pretrained(ours, tmp_path / "back", hf=True)
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    again = HFBertForPreTraining.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        back = again(**x)
    assert (back.prediction_logits - ref.prediction_logits).abs().max() <= 1e-5
    assert (back.seq_relationship_logits - ref.seq_relationship_logits).abs().max() <= 1e-5


def test_genfeat_model_exports_to_hugging_face_masked_lm(tmp_path):
    torch.manual_seed(5)
    ours = BertForMaskedLM(BertConfig(n_token=V, d_model=32, n_layer=2, n_head=4, d_inner=64, max_position=24,
                                      dropout=0.0, dropatt=0.0, init_std=0.2)).eval()
    genfeat.save_pretrained(ours, tmp_path / "hf", hf=True)
    hf = HFBertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    x = inputs(seed=6)
    with torch.no_grad():
        assert (hf(**x).logits - ours(**x).logits).abs().max() <= 1e-4
    # and the genfeat checkpoint format round-trips too
    genfeat.save_pretrained(ours, tmp_path / "ours")
    again = genfeat.from_pretrained(tmp_path / "ours", architecture="bert")
    with torch.no_grad():
        assert torch.equal(again(**x).logits, ours(**x).logits)


def test_pytorch_bin_with_tied_copies_loads(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    # the older format (transformers 5 no longer writes it): every name, the tied copies included
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(hf.state_dict(), tmp_path / "hf" / "pytorch_model.bin")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    x = inputs(seed=7)
    with torch.no_grad():
        assert (ours(**x).logits - hf(**x).logits).abs().max() <= 1e-4


def test_other_architectures_and_mismatched_weights_are_refused(tmp_path):
    hf_model(hidden_act="relu").save_pretrained(tmp_path / "relu")
    with pytest.raises(CheckpointError, match="hidden_act='relu' is not supported"):
        genfeat.from_pretrained(tmp_path / "relu")
    transformers.BertModel(HFBertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=64)).save_pretrained(tmp_path / "encoder")
    with pytest.raises(CheckpointError, match="without the masked-LM head"):
        genfeat.from_pretrained(tmp_path / "encoder")
    hf_model().save_pretrained(tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["num_hidden_layers"] = 1
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no place for"):
        genfeat.from_pretrained(tmp_path / "hf")
    cfg["num_hidden_layers"], cfg["intermediate_size"] = 2, 48
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="has shape"):
        genfeat.from_pretrained(tmp_path / "hf")


def test_the_tokenizer_beside_a_hugging_face_model_loads_and_must_match_it(tmp_path):
    from genfeat.hub import load_checkpoint

    hf_model().save_pretrained(tmp_path / "hf")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(V - 5)]
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(tokens) + "\n")
    model, vocab = load_checkpoint(tmp_path / "hf", architecture="bert")
    assert len(vocab) == model.config.n_token == V
    assert vocab.encode("w3 w90 zz") == [8, 95, 1]  # lower-cased WordPiece, as transformers' BertTokenizer
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(tokens[:-1]) + "\n")
    with pytest.raises(CheckpointError, match=f"vocabulary of {V - 1} types but the model predicts {V}.*vocab.txt"):
        load_checkpoint(tmp_path / "hf")
