"""ELMo pretraining through the Trainer: the biLM objective, a recipe run, its checkpoint, exact resume, bad input."""

import math
import os
from pathlib import Path

import pytest
import torch

from genfeat.data.chars import CharVocab
from genfeat.errors import ConfigError, DataError
from genfeat.methods.elmo import load_elmo
from genfeat.models.elmo import ElmoBiLM, ElmoConfig
from genfeat.objectives.bilm import BiLMObjective
from genfeat.runner import run_recipe

PTB = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "ptb" / "ptb.train.txt"
WORDS = ("the bank raised its rates while the river bank flooded and the fire spread to the present "
         "building near the old mill").split()
MODEL = "{max_chars: 12, char_dim: 4, filters: [[1, 4], [2, 4], [3, 8]], n_highway: 1, d_proj: 8, d_lstm: 16, n_layer: 2}"


def test_objective_is_the_sum_of_both_directions_over_real_pairs():
    chars = CharVocab.from_words(WORDS, 12)
    vocab = sorted(set(WORDS))
    torch.manual_seed(0)
    model = ElmoBiLM(ElmoConfig(n_token=len(vocab), n_char=len(chars), max_chars=12, char_dim=4, filters=[(2, 4)],
                                d_proj=8, d_lstm=8, dropout=0.0)).eval()
    spelling = chars.spell_table(vocab)
    model.set_spelling(spelling)
    ids = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    char_ids = spelling[ids]
    char_ids[1, 3] = 0   # the second window ends with a padding token: 3 + 2 pairs
    out = BiLMObjective()(model, {"word_ids": ids, "char_ids": char_ids})
    ref = model(char_ids, ids, score_words=True)
    assert int(out.count) == 5
    torch.testing.assert_close(out.loss_sum, -(ref.forward_log_probs.sum() + ref.backward_log_probs.sum()))
    assert out.logs["forward"] == pytest.approx(float(-ref.forward_log_probs.detach().sum()), rel=1e-6)
    # without char_ids the model spells the words from its table
    plain = BiLMObjective()(model, {"word_ids": ids})
    assert int(plain.count) == 6


def recipe(tmp_path, steps=3, **data):
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(WORDS[j] for j in torch.randint(len(WORDS), (10,), generator=g).tolist()) for _ in range(60)]
    (tmp_path / "train.txt").write_text("\n".join(lines[:50]) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(lines[50:]) + "\n")
    fields = {"train_text": str(tmp_path / "train.txt"), "valid_text": str(tmp_path / "valid.txt"), "seq_len": 8,
              "batch_size": 4, **data}
    path = tmp_path / "r.yaml"
    path.write_text("method: elmo\n"
                    f"data: {fields}\n"
                    f"model: {MODEL}\n"
                    "optim: {lr: 1.0e-2, warmup_steps: 1}\n"
                    "train: {progress: false, save_every: 2, log_every: 1}\n"
                    f"steps: {steps}\n")
    return path


def test_recipe_trains_saves_and_the_checkpoint_loads(tmp_path):
    result = run_recipe(recipe(tmp_path), out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 3 and result["valid_pairs"] == 13 * 7   # 10 lines of 10 words + <eos>: 13 windows of 8, 7 pairs each
    assert result["valid_loss"] == pytest.approx(result["valid_forward_loss"] + result["valid_backward_loss"])
    assert math.isfinite(result["valid_loss"])
    model, vocab, chars = load_elmo(tmp_path / "run" / "final")
    assert model.config.n_token == len(vocab) and model.config.n_char == len(chars)
    assert not model.training
    x = chars.spell_batch([["the", "bank"]])
    assert model(x).layers.shape == (3, 1, 2, 16)


def test_resume_continues_exactly(tmp_path):
    whole = run_recipe(recipe(tmp_path, steps=4), out_dir=tmp_path / "whole", progress=False)
    run_recipe(recipe(tmp_path, steps=4), overrides={"train.stop_after_steps": 2}, out_dir=tmp_path / "part",
               progress=False)
    resumed = run_recipe(recipe(tmp_path, steps=4), out_dir=tmp_path / "part", progress=False, resume=True)
    assert resumed["valid_loss"] == whole["valid_loss"]
    a, _, _ = load_elmo(tmp_path / "whole" / "final")
    b, _, _ = load_elmo(tmp_path / "part" / "final")
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_bad_input_is_one_clear_error(tmp_path):
    path = recipe(tmp_path)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="has 0 tokens"):
        run_recipe(path, overrides={"data.train_text": str(tmp_path / "empty.txt")}, out_dir=tmp_path / "r",
                   progress=False)
    with pytest.raises(ConfigError, match="drop model.n_token"):
        run_recipe(path, overrides={"model.n_token": 5}, out_dir=tmp_path / "r", progress=False)
    for key in ("task_mix", "finetune_bilm"):     # task_mix had kept the biLM in eval mode: no dropout
        with pytest.raises(ConfigError, match=f"model.{key} is set in an ELMo pretraining recipe"):
            run_recipe(path, overrides={f"model.{key}": True}, out_dir=tmp_path / "r", progress=False)
    with pytest.raises(ConfigError, match="widest filter"):
        run_recipe(path, overrides={"model.max_chars": 3, "model.filters": [[4, 2]]}, out_dir=tmp_path / "r",
                   progress=False)
    with pytest.raises(ConfigError, match="kind"):
        run_recipe(path, overrides={"data.vocab": {"kind": "bpe"}}, out_dir=tmp_path / "r", progress=False)


@pytest.mark.skipif(not PTB.is_file(), reason="needs GENFEAT_DATA with PTB")
def test_debug_recipe_runs_on_ptb(tmp_path):
    # the first 300 lines of PTB's test split keep the final evaluation short
    lines = (PTB.parent / "ptb.test.txt").read_text().splitlines(keepends=True)[:300]
    (tmp_path / "held_out.txt").write_text("".join(lines))
    result = run_recipe(Path(__file__).parents[1] / "recipes" / "elmo" / "debug.yaml",
                        overrides={"steps": 4, "data.valid_text": str(tmp_path / "held_out.txt"),
                                   "data.valid_windows": 8}, out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 4 and result["valid_pairs"] > 6000
    # barely trained: each direction a little better than a uniform guess over PTB's 10,000 words
    assert 5.0 < result["valid_forward_loss"] < math.log(10000) + 0.5
    assert 5.0 < result["valid_backward_loss"] < math.log(10000) + 0.5
