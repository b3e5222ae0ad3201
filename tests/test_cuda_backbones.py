"""XLNet, BERT and GPT-1 on CUDA: the same function as on CPU in fp32 (outputs and every gradient), bf16
autocast near fp32 with the layers' products in bf16, and each pretraining / fine-tuning / ELMo / GDAN debug
recipe training end to end on the GPU.

Skipped where no GPU is present (CI); run them on a GPU machine with
``python -m pytest tests/test_cuda_backbones.py`` (``GENFEAT_DATA`` pointing at the data mirror for the recipe
runs). The inputs of each backbone are those its objectives give it: XLNet two segments with memory, a sampled
permutation mask, a target mapping and segment ids; BERT padding and masked positions; GPT-1 a causal LM.
"""

import math
import os
from pathlib import Path

import pytest
import torch

from genfeat.models.bert import BertConfig, BertForMaskedLM
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel
from genfeat.runner import run_recipe

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("GENFEAT_DATA", ""))
V = 64
BACKBONES = ["xlnet", "bert", "gpt"]


def tiny(name: str, seed: int = 0):
    """A small random backbone whose weights are far from uniform (init_std 0.2), so that a wrong
    computation moves the outputs by much more than the tolerances below."""
    torch.manual_seed(seed)
    common = dict(n_token=V, d_model=32, n_layer=2, n_head=2, d_inner=64, dropout=0.0, dropatt=0.0, init_std=0.2)
    if name == "xlnet":
        return XLNetLMHeadModel(XLNetConfig(**common, d_head=16, mem_len=8))
    if name == "bert":
        return BertForMaskedLM(BertConfig(**common, max_position=32))
    return GPTLMHeadModel(GPTConfig(**common, max_position=32, dropemb=0.0))


def token_log_probs(name: str, model) -> torch.Tensor:
    """Log-probabilities of the target tokens under ``model``'s own objective, [b, n] (fp32)."""
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(1)
    b, t = 4, 12
    ids = torch.randint(5, V, (b, 2 * t), generator=g)
    if name == "xlnet":
        perm = torch.rand(b, t, t, generator=g) < 0.5
        perm.diagonal(dim1=1, dim2=2).fill_(True)                    # no position sees its own token
        predicted = torch.stack([torch.randperm(t, generator=g)[:3] for _ in range(b)])
        mapping = torch.zeros(b, 3, t).scatter_(2, predicted[:, :, None], 1.0)
        types = (torch.arange(t) >= 5).long().expand(b, t)
        first = model(ids[:, :t].to(dev))
        out = model(ids[:, t:].to(dev), perm_mask=perm.to(dev), target_mapping=mapping.to(dev),
                    token_type_ids=types.to(dev), mems=first.mems)
        targets = ids[:, t:].gather(1, predicted)
    elif name == "bert":
        attention = torch.ones(b, 2 * t, dtype=torch.long)
        attention[1, -5:] = 0                                       # a padded sequence
        asked = (torch.rand(b, 2 * t, generator=g) < 0.3) & attention.bool()
        out = model(ids.to(dev), token_type_ids=(torch.arange(2 * t) >= t).long().expand(b, -1).to(dev),
                    attention_mask=attention.to(dev), masked_positions=asked.to(dev))
        targets = ids[asked].view(-1, 1)
        return torch.log_softmax(out.logits.float(), -1).gather(1, targets.to(dev))
    else:
        out = model(ids[:, :-1].to(dev))
        targets = ids[:, 1:]
    return torch.log_softmax(out.logits.float(), -1).gather(-1, targets.to(dev)[..., None])[..., 0]


@cuda
@pytest.mark.parametrize("name", BACKBONES)
def test_fp32_log_probs_and_every_gradient_match_cpu(name):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results = {}
    for dev in ("cpu", "cuda"):
        model = tiny(name).to(dev).train()
        lp = token_log_probs(name, model)
        (-lp.sum()).backward()
        results[dev] = (lp.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None})
    (cpu_lp, cpu_grads), (gpu_lp, gpu_grads) = results["cpu"], results["cuda"]
    assert cpu_lp.abs().mean() > 1.0                         # far from certain: the comparison means something
    torch.testing.assert_close(gpu_lp, cpu_lp, atol=1e-4, rtol=1e-4)
    assert gpu_grads.keys() == cpu_grads.keys() and len(cpu_grads) > 10
    for n, g in cpu_grads.items():
        torch.testing.assert_close(gpu_grads[n], g, atol=1e-4, rtol=1e-3, msg=lambda m: f"{n}: {m}")


@cuda
@pytest.mark.parametrize("name", BACKBONES)
def test_bf16_autocast_is_near_fp32_and_runs_the_products_in_bf16(name):
    model = tiny(name).cuda().train()
    ref = token_log_probs(name, model).detach()
    inner = []
    layers = model.bert.layers if name == "bert" else model.layers
    layers[0].ff.register_forward_hook(lambda _m, _i, out: inner.append(out.dtype))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lp = token_log_probs(name, model)
    assert inner and set(inner) == {torch.bfloat16}
    # bf16 keeps ~3 significant digits: the loss within 3 %, each token within 0.25 nats, where another
    # model (seed 1) differs by far more
    other = token_log_probs(name, tiny(name, seed=1).cuda()).detach()
    assert (other - ref).abs().mean() > 0.5
    assert abs(float(lp.mean() - ref.mean())) < 0.03 * float(ref.abs().mean())
    assert (lp.detach() - ref).abs().max() < 0.25
    (-lp.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


RECIPE_RUNS = {
    # recipe, overrides, the figure the run reports and its bound (those of the CPU recipe tests: trained
    # below or near the uniform guess over the vocabulary, or a dev accuracy), data it needs
    "xlnet": ("xlnet/debug.yaml", {}, "valid_loss", math.log(1000) + 1.5, "wikitext-2"),
    "bert": ("bert/debug.yaml", {"data.valid_examples": 16}, "valid_loss", math.log(2000) + 1.5, "wikitext-2"),
    "gpt": ("gpt/debug.yaml", {}, "valid_loss", math.log(1000) + 1.0, "wikitext-2"),
    "elmo": ("elmo/debug.yaml", {}, "valid_forward_loss", math.log(10000) + 0.5, "ptb"),
    "finetune": ("finetune/debug.yaml", {}, "dev_accuracy", None, "glue"),
}


@cuda
@pytest.mark.parametrize("method", sorted(RECIPE_RUNS))
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_debug_recipe_trains_on_cuda(method, precision, tmp_path):
    recipe, overrides, figure, bound, data = RECIPE_RUNS[method]
    if not (DATA / data).is_dir():
        pytest.skip(f"needs GENFEAT_DATA with {data}/")
    torch.cuda.reset_peak_memory_stats()
    result = run_recipe(ROOT / "recipes" / recipe, {**overrides, "train.device": "cuda", "train.precision": precision},
                        out_dir=tmp_path, progress=False)
    result = result.get("runs", [result])[0]
    assert torch.cuda.max_memory_allocated() > 0               # the run's tensors lived on the GPU
    value = result[figure]
    assert math.isfinite(value), result
    if bound is None:        # SST-2 dev accuracy: the majority class scores 0.540, CPU seeds 0-2 reached 0.64-0.685
        assert value > 0.6, result
    else:
        assert 0 < value < bound, result


@cuda
@pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="needs GENFEAT_DATA with squad/")
def test_gdan_debug_recipe_trains_on_cuda(tmp_path):
    torch.cuda.reset_peak_memory_stats()
    result = run_recipe(ROOT / "recipes" / "gdan" / "debug.yaml", {"train.device": "cuda"}, out_dir=tmp_path,
                        progress=False)
    result = result.get("runs", [result])[0]
    assert torch.cuda.max_memory_allocated() > 0
    assert 0.0 <= result["test_f1"] <= 1.0 and math.isfinite(result["dev_f1"]), result
