"""XLNet's bidirectional pipeline (genfeat.methods.xlnet): half of each batch reads the text backwards."""

import pytest
import torch

from genfeat.data.lm import LMOrderedStream
from genfeat.errors import ConfigError
from genfeat.methods.xlnet import BidirectionalStream, permutation_lm_loss
from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel
from genfeat.objectives.permutation_lm import PermutationLMConfig


def test_half_the_batch_reads_the_text_reversed_and_resumes():
    tokens = torch.arange(100)
    stream = BidirectionalStream(tokens, 4, 8)
    forward, backward = LMOrderedStream(tokens, 2, 8), LMOrderedStream(tokens.flip(0), 2, 8)
    batches = [next(stream) for _ in range(3)]
    for batch in batches:
        f, b = next(forward), next(backward)
        assert torch.equal(batch.input, torch.cat([f.input, b.input]))
        assert torch.equal(batch.target, torch.cat([f.target, b.target]))
        assert batch.new_epoch == f.new_epoch
    assert batches[0].input[2, 0] == 99 and batches[0].input[2, 1] == 98   # the text backwards
    state = stream.state_dict()
    following = next(stream)
    again = BidirectionalStream(tokens, 4, 8)
    again.load_state_dict(state)
    assert torch.equal(next(again).input, following.input)
    with pytest.raises(ConfigError, match="even data.batch_size"):
        BidirectionalStream(tokens, 3, 8)


def test_held_out_loss_with_the_bidirectional_pipeline():
    torch.manual_seed(0)
    model = XLNetLMHeadModel(XLNetConfig(n_token=50, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32,
                                         mem_len=8, bi_data=True, dropout=0.0, dropatt=0.0, init_std=0.3))
    tokens = torch.randint(0, 50, (81,), generator=torch.Generator().manual_seed(1))
    cfg = PermutationLMConfig(num_predict=3)
    figures = permutation_lm_loss(model, tokens, cfg, seq_len=8, batch_size=4)
    # 2 forward and 2 backward streams of 40 tokens: segments of 8, 8, 8, 8 and 7 inputs, 3 predicted in each
    assert figures["valid_predicted"] == 4 * 5 * 3
    assert figures == permutation_lm_loss(model, tokens, cfg, seq_len=8, batch_size=4), "a fixed seed"
    # the reversed half matters: the same weights without bi_data score another loss
    model.config.bi_data = False
    assert abs(permutation_lm_loss(model, tokens, cfg, seq_len=8, batch_size=4)["valid_loss"]
               - figures["valid_loss"]) > 1e-3
