"""The same functions on CUDA as on CPU: fused attention, the Transformer-XL LM, bf16 training, generation.

Skipped where no GPU is present (CI); run on a GPU machine with ``python -m pytest tests/test_cuda.py``.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from genfeat.generation import generate
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ROOT = Path(__file__).resolve().parents[1]


def tiny(**kw):
    base = dict(n_token=211, cutoffs=[50, 120], d_model=32, d_embed=32, n_head=4, d_head=8, d_inner=64, n_layer=2,
                mem_len=12, dropout=0.0)
    base.update(kw)
    torch.manual_seed(0)
    return TransformerXLLMHeadModel(TransformerXLConfig(**base))


@pytest.mark.parametrize("attn", ["relative", "shaw", "absolute", "learned"])
def test_lm_log_probs_and_gradients_match_cpu(attn):
    # fp32 without TF32, two segments so the second attends over the memory of the first
    torch.backends.cuda.matmul.allow_tf32 = False
    cpu = tiny(attn_type=attn)
    gpu = tiny(attn_type=attn).cuda()
    x = torch.randint(0, 211, (3, 20), generator=torch.Generator().manual_seed(1))
    y = x.roll(-1, 1)
    outs = {}
    for name, model in (("cpu", cpu), ("gpu", gpu)):
        dev = next(model.parameters()).device
        first = model(x[:, :10].to(dev), labels=y[:, :10].to(dev))
        second = model(x[:, 10:].to(dev), mems=first.mems, labels=y[:, 10:].to(dev))
        loss = -(first.target_log_probs.sum() + second.target_log_probs.sum())
        loss.backward()
        outs[name] = (torch.cat([first.target_log_probs, second.target_log_probs], 1).cpu(),
                      {n: p.grad.cpu() for n, p in model.named_parameters()})
    torch.testing.assert_close(outs["gpu"][0], outs["cpu"][0], atol=1e-4, rtol=1e-4)
    for n, g in outs["cpu"][1].items():
        torch.testing.assert_close(outs["gpu"][1][n], g, atol=1e-4, rtol=1e-3, msg=lambda m: f"{n}: {m}")


def test_bf16_autocast_loss_is_close_to_fp32():
    model = tiny().cuda()
    x = torch.randint(0, 211, (4, 24), device="cuda")
    ref = -model(x, labels=x.roll(-1, 1)).target_log_probs.mean()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x, labels=x.roll(-1, 1))
    loss = -out.target_log_probs.mean()
    assert out.target_log_probs.dtype == torch.float32, "log-probabilities are accumulated in fp32"
    assert abs(float(loss) - float(ref)) < 0.05
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_generation_on_cuda_is_reproducible():
    model = tiny().cuda()
    context = torch.tensor([1, 2, 3, 4])
    runs = [generate(model, context, 30, generator=torch.Generator(device="cuda").manual_seed(7)) for _ in range(2)]
    assert runs[0].device.type == "cuda" and runs[0].shape == (30,)
    assert torch.equal(runs[0], runs[1])


@pytest.mark.skipif(not (Path(os.environ.get("GENFEAT_DATA", "")) / "ptb" / "ptb.train.txt").is_file(),
                    reason="needs GENFEAT_DATA with ptb/ptb.train.txt")
def test_debug_recipe_trains_on_cuda_with_bf16(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "genfeat.cli", "run", str(ROOT / "recipes/transformer_xl/debug.yaml"),
                           "--out", str(tmp_path), "--no-progress", "--json", "--train.device", "cuda",
                           "--train.precision", "bf16"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == 20 and result["valid_ppl"] < 10000
