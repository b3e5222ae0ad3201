"""Parity with Hugging Face Transformer-XL (transformers 4.37.2, the last release that runs it unpatched)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf_interop
TransfoXLConfig = getattr(transformers, "TransfoXLConfig", None)
if TransfoXLConfig is None:
    pytest.skip(f"transformers {transformers.__version__} has no Transformer-XL (removed in 5.0); its parity runs "
                "under transformers==4.37.2 (.venv)", allow_module_level=True)
from transformers import TransfoXLLMHeadModel  # noqa: E402

import genfeat  # noqa: E402
from genfeat.errors import CheckpointError  # noqa: E402
from genfeat.interop.hf_transfo_xl import load_hf_transfo_xl  # noqa: E402

CONFIGS = [
    dict(cutoffs=[20, 50], div_val=2, untie_r=True, d_embed=32),
    dict(cutoffs=[], div_val=1, untie_r=False, d_embed=32),
    dict(cutoffs=[20, 50], div_val=1, untie_r=False, d_embed=16, same_length=True, clamp_len=5),
    dict(cutoffs=[30], div_val=4, untie_r=True, d_embed=64, pre_lnorm=True),
]


def hf_model(**kw):
    cfg = TransfoXLConfig(vocab_size=100, d_model=32, n_head=2, d_head=16, d_inner=64, n_layer=3, mem_len=10,
                          dropout=0.0, **kw)
    torch.manual_seed(0)
    model = TransfoXLLMHeadModel(cfg).eval()
    with torch.no_grad():  # move away from the near-uniform init so differences would show
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def hf_log_probs(model, x, cut):
    # HF fills a fresh memory with mem_len zeros; the original code and genfeat start empty.
    empty = [torch.zeros(0, x.shape[0], model.config.d_model) for _ in range(model.config.n_layer)]
    first = model(x[:, :cut], mems=empty)
    second = model(x[:, cut:], mems=first.mems)
    return torch.cat([first.prediction_scores, second.prediction_scores], 1)


def ours_log_probs(model, x, cut):
    first = model(x[:, :cut], return_log_probs=True)
    second = model(x[:, cut:], mems=first.mems, return_log_probs=True)
    return torch.cat([first.log_probs, second.log_probs], 1)


@pytest.mark.parametrize("kw", CONFIGS)
def test_same_log_probs_over_two_segments_with_memory(tmp_path, kw):
    hf = hf_model(**kw)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    x = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_log_probs(hf, x, 8)
        got = ours_log_probs(ours, x, 8)
    assert (expected - got).abs().max() <= 1e-4


@pytest.mark.parametrize("kw", CONFIGS[:2])
def test_export_loads_in_hugging_face(tmp_path, kw):
    hf = hf_model(**kw)
    hf.save_pretrained(tmp_path / "hf")
    ours = genfeat.from_pretrained(tmp_path / "hf")
    genfeat.save_pretrained(ours, tmp_path / "back", hf=True)
    again = TransfoXLLMHeadModel.from_pretrained(tmp_path / "back").eval()
    x = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf_log_probs(hf, x, 6) - hf_log_probs(again, x, 6)).abs().max() <= 1e-5


def test_pytorch_bin_is_read_without_unpickling_objects(tmp_path):
    hf = hf_model(cutoffs=[20], div_val=1, untie_r=False)
    hf.save_pretrained(tmp_path / "hf", safe_serialization=False)
    assert (tmp_path / "hf" / "pytorch_model.bin").is_file()
    ours = load_hf_transfo_xl(tmp_path / "hf")
    x = torch.randint(0, 100, (1, 9))
    with torch.no_grad():
        assert (hf_log_probs(hf, x, 4) - ours_log_probs(ours, x, 4)).abs().max() <= 1e-4
    torch.save({"x": __import__("collections").OrderedDict(a=object)}, tmp_path / "hf" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="not a plain tensor file") as err:
        load_hf_transfo_xl(tmp_path / "hf")
    assert "weights_only" not in str(err.value), "never suggest unpickling an untrusted file"


def test_mismatched_weights_are_rejected(tmp_path):
    hf = hf_model(cutoffs=[20], div_val=1, untie_r=False)
    hf.save_pretrained(tmp_path / "hf")
    cfg = (tmp_path / "hf" / "config.json").read_text().replace('"n_layer": 3', '"n_layer": 2')
    (tmp_path / "hf" / "config.json").write_text(cfg)
    with pytest.raises(CheckpointError, match="do not match|disagree"):
        genfeat.from_pretrained(tmp_path / "hf")
