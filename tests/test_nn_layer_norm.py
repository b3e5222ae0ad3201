"""OutputSavingLayerNorm: nn.LayerNorm's values and gradients, keeping its output instead of its input."""

import pytest
import torch

from genfeat.nn.layer_norm import OutputSavingLayerNorm


def pair(gain_scale=0.3):
    torch.manual_seed(0)
    ref = torch.nn.LayerNorm(16, eps=1e-12).double()
    with torch.no_grad():
        ref.weight.normal_(1.0, gain_scale)
        ref.bias.normal_(0.0, 0.5)
    ours = OutputSavingLayerNorm(16, eps=1e-12).double()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def grads(norm, x, w):
    x = x.clone().requires_grad_(True)
    y = norm(x)
    (y * w).sum().backward()
    return [y.detach(), x.grad, norm.weight.grad, norm.bias.grad]


@pytest.mark.parametrize("zero_gain", [False, True])
def test_values_and_gradients_match_layer_norm(zero_gain):
    ref, ours = pair()
    if zero_gain:  # recovering the normalised input would divide by 0: the input is kept instead
        for m in (ref, ours):
            m.weight.data[3] = 0.0
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 16, generator=g, dtype=torch.double) * 4 + 2
    w = torch.randn(3, 5, 16, generator=g, dtype=torch.double)
    for a, b in zip(grads(ref, x, w), grads(ours, x, w)):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
        assert torch.isfinite(b).all()


def test_keeps_the_output_not_the_input():
    def saved(norm, x):
        ptrs = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: ptrs.append(t.untyped_storage().data_ptr()) or t,
                                                      lambda t: t):
            y = norm(x)
        return set(ptrs), y

    ref, ours = pair()
    x = torch.randn(4, 16, dtype=torch.double, requires_grad=True)
    ptrs, y = saved(ours, x)
    assert y.untyped_storage().data_ptr() in ptrs and x.untyped_storage().data_ptr() not in ptrs
    ptrs, _ = saved(ref, x)
    assert x.untyped_storage().data_ptr() in ptrs
    with torch.no_grad():
        ours.weight[0] = 1e-5  # below min_gain: back to keeping the input
    assert x.untyped_storage().data_ptr() in saved(ours, x)[0]
