"""The feed-forward block's recomputing path computes the same function and gradients as the stored one."""

import pytest
import torch

from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel
from genfeat.nn.feedforward import PositionwiseFeedForward


def run(block, x, seed):
    """Output and gradients (x, then parameters) of one forward/backward with a fixed random state."""
    x = x.clone().requires_grad_(True)
    torch.manual_seed(seed)
    out = block(x)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return [out.detach(), x.grad] + [p.grad for p in block.parameters()]


def pair(p_drop, dtype=torch.float64, activation="relu"):
    torch.manual_seed(0)
    stored = PositionwiseFeedForward(6, 20, p_drop, activation=activation).to(dtype)
    recomputed = PositionwiseFeedForward(6, 20, p_drop, recompute=True, activation=activation).to(dtype)
    recomputed.load_state_dict(stored.state_dict())
    return stored.train(), recomputed.train()


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("p_drop", [0.0, 0.5])
def test_recompute_matches_stored_path(p_drop, activation):
    stored, recomputed = pair(p_drop, activation=activation)
    x = torch.randn(2, 7, 6, dtype=torch.float64)
    want, got = run(stored, x, seed=3), run(recomputed, x, seed=3)
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    if p_drop:  # dropout really acts: another random state gives another output
        assert not torch.allclose(run(recomputed, x, seed=4)[0], got[0])


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_recompute_keeps_no_inner_activation(activation):
    def saved_bytes(block):
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        params = {p.untyped_storage().data_ptr() for p in block.parameters()}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            block(torch.randn(64, 6, dtype=torch.float64, requires_grad=True))
        return sum(n for ptr, n in seen.items() if ptr not in params)

    stored, recomputed = pair(0.0, activation=activation)
    x_bytes, inner_bytes = 64 * 6 * 8, 64 * 20 * 8
    # autograd keeps ReLU's output, or GELU's input and output
    assert saved_bytes(stored) >= x_bytes + inner_bytes * (1 if activation == "relu" else 2)
    assert saved_bytes(recomputed) == x_bytes  # the input only


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_recompute_under_bf16_autocast(activation):
    stored, recomputed = pair(0.0, torch.float32, activation)
    x = torch.randn(4, 16, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = run(stored, x, seed=0), run(recomputed, x, seed=0)
    assert got[0].dtype == want[0].dtype == torch.bfloat16
    for a, b in zip(want, got):
        assert b.dtype == a.dtype
        torch.testing.assert_close(b.float(), a.float(), rtol=2e-2, atol=2e-2)


def test_model_with_recompute_ff_trains_identically():
    kw = dict(n_token=50, cutoffs=[10], d_model=16, n_head=2, d_head=8, d_inner=40, n_layer=2, mem_len=8,
              dropout=0.3, dropatt=0.1)
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        model = TransformerXLLMHeadModel(TransformerXLConfig(recompute_ff=recompute, **kw)).double().train()
        x = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
        torch.manual_seed(5)
        mems, total = None, 0.0
        for seg in (x[:, :6], x[:, 6:]):
            out = model(seg, mems=mems, labels=seg)
            mems = out.mems
            total = total - out.target_log_probs.sum()
        total.backward()
        grads.append((total.detach(), [p.grad for p in model.parameters()]))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-12, atol=1e-12)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
