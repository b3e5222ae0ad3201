"""The LSTM LM of GPT-1's Table 5: causality, the tied head, GPT-1's interface, the size of the recipe's decoder."""

from pathlib import Path

import pytest
import torch
import yaml

import genfeat
from genfeat.data.lm import LMBatch
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
from genfeat.models.lstm_lm import LSTMLMConfig, LSTMLMHeadModel, lstm_params, lstm_size_for
from genfeat.objectives.causal_lm import CausalLMObjective

RECIPES = Path(__file__).parents[1] / "recipes" / "gpt"


def tiny(**kw):
    torch.manual_seed(0)
    return LSTMLMHeadModel(LSTMLMConfig(**{"n_token": 50, "d_model": 8, "d_hidden": 12, "n_layer": 2,
                                           "max_position": 16, **kw}))


def test_shapes_backward_causality_and_the_tied_head():
    model = tiny().eval()
    x = torch.randint(0, 50, (2, 3, 7), generator=torch.Generator().manual_seed(1))
    out = model(x)
    assert out.hidden.shape == (2, 3, 7, 8) and out.logits.shape == (2, 3, 7, 50) and out.target_log_probs is None
    torch.testing.assert_close(out.logits, out.hidden @ model.word_emb.weight.T)  # tied, no bias
    changed = x.clone()
    changed[..., 4] = (changed[..., 4] + 1) % 50
    later = model(changed).hidden
    torch.testing.assert_close(later[..., :4, :], out.hidden[..., :4, :])  # earlier states never see later tokens
    assert not torch.allclose(later[..., 4:, :], out.hidden[..., 4:, :])
    model.train()
    model(x).logits.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_labels_give_the_log_softmax_of_the_logits_and_the_causal_objective_uses_them():
    model = tiny().eval()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randint(0, 50, (3, 9), generator=g), torch.randint(0, 50, (3, 9), generator=g)
    out = model(x, labels=y)
    assert out.logits is None  # the fused head needs no [b, t, V] logits
    ref = torch.log_softmax(model(x).logits, -1).gather(-1, y[..., None])[..., 0]
    torch.testing.assert_close(out.target_log_probs, ref)
    loss = CausalLMObjective(recurrence=False)(model, LMBatch(x, y))
    assert loss.count == 27
    torch.testing.assert_close(loss.loss_sum, -ref.sum())


def test_special_tokens_are_gpt1s_and_the_checkpoint_round_trips(tmp_path):
    model = tiny(n_layer=1, d_hidden=8)  # d_hidden == d_model: no output map
    assert model.out is None
    table = model.word_emb.weight.detach().clone()
    ids = model.add_special_tokens(3)
    assert ids == [50, 51, 52] and model.config.n_special == 3 and torch.equal(model.word_emb.weight, table)
    assert model(torch.tensor([[1, 50, 52]])).logits.shape == (1, 3, 53)
    genfeat.save_pretrained(model, tmp_path / "ckpt")
    again = genfeat.from_pretrained(tmp_path / "ckpt", architecture="lstm_lm")
    assert again.config == model.config
    x = torch.tensor([[3, 4, 51, 5]])
    torch.testing.assert_close(again(x).logits, model.eval()(x).logits)


def test_right_padding_is_harmless_and_left_padding_refused():
    model = tiny().eval()
    x = torch.tensor([[5, 6, 7, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    torch.testing.assert_close(model(x, attention_mask=mask).hidden[:, :3], model(x[:, :3]).hidden)
    with pytest.raises(ValueError, match="pad on the right"):
        model(x.flip(1), attention_mask=mask.flip(1))
    with pytest.raises(ValueError, match="max_position 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="must be >= d_model"):
        LSTMLMConfig(d_model=64, d_hidden=32)


def test_the_recipes_lstm_has_the_decoders_parameter_count():
    gpt_recipe = yaml.safe_load((RECIPES / "pretrain.yaml").read_text())
    lstm_recipe = yaml.safe_load((RECIPES / "pretrain_lstm.yaml").read_text())
    assert lstm_recipe["architecture"] == "lstm_lm" and gpt_recipe["data"] == lstm_recipe["data"]
    n_token = gpt_recipe["data"]["vocab_size"]
    with torch.device("meta"):  # sizes only, no memory
        gpt = GPTLMHeadModel(GPTConfig(n_token=n_token, **gpt_recipe["model"]))
        lstm = LSTMLMHeadModel(LSTMLMConfig(n_token=n_token, **lstm_recipe["model"]))
    n_gpt, n_lstm = (sum(p.numel() for p in m.parameters()) for m in (gpt, lstm))
    assert abs(n_lstm - n_gpt) < 0.01 * n_gpt
    assert lstm.out.out_features == gpt.config.d_model == lstm.config.d_model
    cfg = lstm.config
    assert n_lstm == n_token * cfg.d_model + lstm_params(cfg.d_model, cfg.d_hidden, cfg.n_layer)
    assert lstm_size_for(n_gpt - n_token * cfg.d_model, cfg.d_model, cfg.n_layer) == cfg.d_hidden
    for n_layer in (1, 2, 3):  # the closest size for any depth
        h = lstm_size_for(3_000_000, 64, n_layer)
        assert lstm_params(64, h, n_layer) <= 3_000_000 <= lstm_params(64, h + 1, n_layer) or \
            lstm_params(64, h - 1, n_layer) <= 3_000_000 <= lstm_params(64, h, n_layer)
