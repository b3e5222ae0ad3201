import pytest
import torch

from genfeat.generation import generate
from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel


def model(mem_len=64):
    torch.manual_seed(0)
    m = TransformerXLLMHeadModel(TransformerXLConfig(n_token=50, cutoffs=[10], d_model=32, n_head=2, d_head=16,
                                                     d_inner=64, n_layer=2, mem_len=mem_len, dropout=0.0))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.eval()


def test_top1_equals_greedy_decoding_with_full_recomputation():
    m = model()
    context = torch.tensor([3, 7, 1, 4])
    sampled = generate(m, context, 12, top_k=1)
    seq = context.clone()
    with torch.no_grad():
        for _ in range(12):
            lp = m(seq[None], return_log_probs=True).log_probs[0, -1]
            seq = torch.cat([seq, lp.argmax()[None]])
    assert sampled.tolist() == seq[4:].tolist()


def test_samples_stay_in_top_k_and_are_reproducible():
    m = model()
    context = torch.tensor([[5, 2], [9, 9]])
    a = generate(m, context, 6, top_k=3, generator=torch.Generator().manual_seed(0))
    b = generate(m, context, 6, top_k=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (2, 6)
    seq = context
    with torch.no_grad():
        for step in range(6):
            lp = m(seq, return_log_probs=True).log_probs[:, -1]
            top = lp.topk(3, dim=-1).indices
            assert all(a[i, step] in top[i] for i in range(2))
            seq = torch.cat([seq, a[:, step:step + 1]], 1)


def test_bad_arguments():
    with pytest.raises(ValueError):
        generate(model(), torch.tensor([], dtype=torch.long), 3)
    with pytest.raises(ValueError):
        generate(model(), torch.tensor([1]), 3, top_k=0)
