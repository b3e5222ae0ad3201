"""Parity of genfeat's GPT-1 with Hugging Face OpenAIGPTLMHeadModel / OpenAIGPTDoubleHeadsModel (random weights, fp32)."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf_interop
from transformers import OpenAIGPTConfig  # noqa: E402
from transformers import OpenAIGPTDoubleHeadsModel as HFDoubleHeads  # noqa: E402
from transformers import OpenAIGPTLMHeadModel as HFLMHead  # noqa: E402

import genfeat  # noqa: E402
from genfeat.errors import CheckpointError  # noqa: E402
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel  # noqa: E402

V = 97


def hf_model(cls=HFLMHead, **kw):
    cfg = OpenAIGPTConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=24, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0, initializer_range=0.2, **kw)
    torch.manual_seed(0)
    model = cls(cfg).eval()
    with torch.no_grad():  # move away from the init (zero biases, unit norms) so every parameter matters
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def inputs(b=3, t=11, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, -3:] = 0  # one sequence padded on the right
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.randint(0, V, (b, t), generator=g))


def test_lm_logits_match_hugging_face(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    assert isinstance(ours, GPTLMHeadModel) and not ours.config.mc_head and ours.config.d_inner == 128
    x = inputs()
    with torch.no_grad():
        expected = hf(**x).logits
        out = ours(**x)
        assert out.logits.shape == expected.shape == (3, 11, V)
        assert (out.logits - expected).abs().max() <= 1e-4
        # without mask and token types: the plain causal path
        assert (ours(x["input_ids"]).logits - hf(input_ids=x["input_ids"]).logits).abs().max() <= 1e-4


def test_left_padded_rows_with_position_ids_match_hugging_face(tmp_path):
    """Left padding (generate's batches of prompts of different lengths): HF's position_ids and attention mask, the
    logits at the real tokens (padding's own states differ: a query with no key attends to itself in genfeat)."""
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    ids = inputs()["input_ids"]
    mask = torch.ones_like(ids)
    mask[0, :4], mask[2, :1] = 0, 0
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        got = ours(ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    assert torch.isfinite(got).all() and (got[real] - expected[real]).abs().max() <= 1e-4


def test_greedy_generation_with_the_cache_matches_hugging_face_generate(tmp_path):
    """HF's OpenAI-GPT has no key/value cache: its generate recomputes the whole sequence every step. Greedy
    decoding from the same weights must give the same tokens as genfeat's cached generation."""
    hf = hf_model()
    with torch.no_grad():   # large position embeddings: each step's state differs, greedy decoding does not settle
        hf.transformer.positions_embed.weight.normal_(0, 1, generator=torch.Generator().manual_seed(2))
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    context = inputs(b=2, t=5)["input_ids"]
    with torch.no_grad():
        expected = hf.generate(context, attention_mask=torch.ones_like(context), max_new_tokens=19,
                               do_sample=False, pad_token_id=0)[:, 5:]
    got = ours.generate(context, 19, top_k=1)
    assert got.shape == expected.shape == (2, 19) and torch.equal(got, expected)
    assert min(len(set(row.tolist())) for row in got) > 5, "a row that repeats few tokens would check little"


@pytest.mark.skipif(int(transformers.__version__.split(".")[0]) < 5,
                    reason="transformers 4.x's OpenAI-GPT generate drops the attention mask of left-padded prompts")
def test_left_padded_greedy_generation_matches_hugging_face_generate(tmp_path):
    hf = hf_model()
    with torch.no_grad():
        hf.transformer.positions_embed.weight.normal_(0, 1, generator=torch.Generator().manual_seed(2))
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    context = inputs(b=3, t=6)["input_ids"]
    mask = torch.ones_like(context)
    mask[0, :3], mask[2, :1] = 0, 0
    with torch.no_grad():
        expected = hf.generate(context, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)[:, 6:]
    got = ours.generate(context, 12, top_k=1, attention_mask=mask)
    assert torch.equal(got, expected)
    assert not torch.equal(ours.generate(context, 12, top_k=1)[0], expected[0]), "the padding matters (can fail)"


def test_double_heads_match_hugging_face_and_export_loads_back(tmp_path):
    hf = hf_model(HFDoubleHeads)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    assert ours.config.mc_head
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, V, (2, 3, 9), generator=g)  # 2 questions, 3 choices each
    extract = torch.randint(4, 9, (2, 3), generator=g)
    with torch.no_grad():
        ref = hf(input_ids=ids, mc_token_ids=extract)
        out = ours(ids, mc_token_ids=extract)
        assert out.mc_logits.shape == ref.mc_logits.shape == (2, 3)
        assert (out.logits - ref.logits).abs().max() <= 1e-4
        assert (out.mc_logits - ref.mc_logits).abs().max() <= 1e-4
        # default extract position: the last token, as Hugging Face
        assert (ours(ids).mc_logits - hf(input_ids=ids).mc_logits).abs().max() <= 1e-4

    genfeat.save_pretrained(ours, tmp_path / "back", hf=True)
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == ["OpenAIGPTDoubleHeadsModel"]
    again = HFDoubleHeads.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        back = again(input_ids=ids, mc_token_ids=extract)
    assert (back.logits - ref.logits).abs().max() <= 1e-5
    assert (back.mc_logits - ref.mc_logits).abs().max() <= 1e-5


def test_special_tokens_export_as_one_table_and_load_back_split(tmp_path):
    torch.manual_seed(5)
    ours = GPTLMHeadModel(GPTConfig(n_token=V, d_model=32, n_layer=2, n_head=4, d_inner=128, max_position=24,
                                    dropout=0.0, dropemb=0.0, dropatt=0.0, init_std=0.2)).eval()
    start, delim, extract = ours.add_special_tokens(3)
    assert (start, delim, extract) == (V, V + 1, V + 2)
    ids = torch.tensor([[start, 5, 6, delim, 7, 8, extract], [start, 9, delim, 10, 11, 12, extract]])
    genfeat.save_pretrained(ours, tmp_path / "hf", hf=True)
    hf = HFLMHead.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.vocab_size == V + 3
    with torch.no_grad():
        expected = ours(ids).logits
        assert expected.shape == (2, 7, V + 3)
        assert (hf(input_ids=ids).logits - expected).abs().max() <= 1e-4
        again = genfeat.from_pretrained(tmp_path / "hf")
        assert (again.config.n_token, again.config.n_special) == (V, 3)
        assert torch.equal(again(ids).logits, expected)
    # and the genfeat checkpoint format round-trips too
    genfeat.save_pretrained(ours, tmp_path / "ours")
    again = genfeat.from_pretrained(tmp_path / "ours", architecture="gpt")
    with torch.no_grad():
        assert torch.equal(again(ids).logits, expected)


def test_pytorch_bin_with_tied_copy_loads(tmp_path):
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(hf.state_dict(), tmp_path / "hf" / "pytorch_model.bin")  # every name, lm_head.weight included
    ours = genfeat.from_pretrained(tmp_path / "hf")
    x = inputs(seed=7)
    with torch.no_grad():
        assert (ours(**x).logits - hf(**x).logits).abs().max() <= 1e-4


def test_double_heads_table_stored_as_lm_head_loads(tmp_path):
    """transformers 5 ties OpenAIGPTDoubleHeadsModel's token table to its LM head and saves only lm_head.weight;
    the same file is made here under 4.x too."""
    from safetensors.torch import load_file, save_file

    hf = hf_model(HFDoubleHeads)
    hf.save_pretrained(tmp_path / "hf")
    weights = load_file(tmp_path / "hf" / "model.safetensors")
    if "transformer.tokens_embed.weight" in weights:
        weights["lm_head.weight"] = weights.pop("transformer.tokens_embed.weight")
    save_file(weights, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    ours = genfeat.from_pretrained(tmp_path / "hf")
    ids = torch.randint(0, V, (2, 3, 9), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        ref, out = hf(input_ids=ids), ours(ids)
    assert (out.logits - ref.logits).abs().max() <= 1e-4
    assert (out.mc_logits - ref.mc_logits).abs().max() <= 1e-4


def test_other_architectures_and_mismatched_weights_are_refused(tmp_path):
    hf_model(afn="relu").save_pretrained(tmp_path / "relu")
    with pytest.raises(CheckpointError, match="afn='relu' is not supported"):
        genfeat.from_pretrained(tmp_path / "relu")
    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    untied = {k: v.clone() for k, v in hf.state_dict().items()}
    untied["lm_head.weight"] += 1.0
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(untied, tmp_path / "hf" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="untied head"):
        genfeat.from_pretrained(tmp_path / "hf")
    hf.save_pretrained(tmp_path / "hf2")
    cfg = json.loads((tmp_path / "hf2" / "config.json").read_text())
    cfg["n_layer"] = 1
    (tmp_path / "hf2" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="no place for"):
        genfeat.from_pretrained(tmp_path / "hf2")
    cfg["n_layer"], cfg["vocab_size"] = 2, V + 1
    (tmp_path / "hf2" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="has shape"):
        genfeat.from_pretrained(tmp_path / "hf2")
    wide = GPTLMHeadModel(GPTConfig(n_token=V, d_model=32, n_layer=1, n_head=4, d_inner=96, max_position=8))
    with pytest.raises(CheckpointError, match="d_inner 96 has no Hugging Face form"):
        genfeat.save_pretrained(wide, tmp_path / "wide", hf=True)
    assert not (tmp_path / "wide").exists()


def test_hugging_face_gpt_tokenizer_loads_beside_its_bpe_vocab_json(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from genfeat.hub import load_checkpoint

    hf = hf_model()
    hf.save_pretrained(tmp_path / "hf")
    words = {f"w{i}": i for i in range(V)}
    (tmp_path / "hf" / "vocab.json").write_text(json.dumps(words))  # the BPE vocabulary of OpenAIGPTTokenizer
    Tokenizer(WordLevel(words, unk_token="w0")).save(str(tmp_path / "hf" / "tokenizer.json"))
    model, vocab = load_checkpoint(tmp_path / "hf", architecture="gpt")
    assert len(vocab) == model.config.n_token == V
    # with fine-tuning special tokens: the pretrained vocabulary or one that includes them
    model.add_special_tokens(2)
    genfeat.save_pretrained(model, tmp_path / "ft", hf=True)
    for n in (V, V + 2):
        Tokenizer(WordLevel({f"w{i}": i for i in range(n)}, unk_token="w0")).save(str(tmp_path / "ft" / "tokenizer.json"))
        assert len(load_checkpoint(tmp_path / "ft")[1]) == n
    Tokenizer(WordLevel({f"w{i}": i for i in range(V + 1)}, unk_token="w0")).save(str(tmp_path / "ft" / "tokenizer.json"))
    with pytest.raises(CheckpointError, match=f"vocabulary of {V + 1} types but the model predicts {V}"):
        load_checkpoint(tmp_path / "ft")
