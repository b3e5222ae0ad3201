"""BERT pretraining through the Trainer: seeded examples, a recipe run, its checkpoint, exact resume."""

import json
import math
import os
from pathlib import Path

import pytest
import torch

import genfeat
from genfeat.data.tokenizers import TokenizerConfig, train_tokenizer
from genfeat.errors import CheckpointError, ConfigError, DataError
from genfeat.hub import load_checkpoint
from genfeat.framework.stream import TensorStream
from genfeat.methods.bert import SeededExamples
from genfeat.runner import run_recipe

WIKI = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "wikitext-2" / "wiki.valid.tokens"
WORDS = ("the model learns features from unlabelled text and the classifier uses them while margins widen "
         "quickly over many steps").split()


def test_examples_carry_seeds_fixed_by_example_and_epoch_on_any_rank():
    tensors = {"input_ids": torch.arange(16).view(8, 2), "index": torch.arange(8)}
    whole = SeededExamples(TensorStream(tensors, 4, seed=1), seed=5)
    epoch0 = [next(whole) for _ in range(2)]
    epoch1 = next(whole)
    seed_of = {int(i): int(s) for b in epoch0 for i, s in zip(b["input_ids"][:, 0] // 2, b["seed"])}
    assert len(set(seed_of.values())) == 8 and "index" not in epoch0[0]
    assert all(seed_of[int(i)] != int(s) for i, s in zip(epoch1["input_ids"][:, 0] // 2, epoch1["seed"]))
    half = SeededExamples(TensorStream(tensors, 4, seed=1), seed=5)
    half.shard(1, 2)
    got = next(half)
    assert torch.equal(got["seed"], epoch0[0]["seed"][2:]) and torch.equal(got["input_ids"], epoch0[0]["input_ids"][2:])


def recipe(tmp_path, steps=3, **data):
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(WORDS[j] for j in torch.randint(len(WORDS), (12,), generator=g).tolist()) for _ in range(300)]
    (tmp_path / "train.txt").write_text("\n".join(lines[:250]) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(lines[250:]) + "\n")
    fields = {"train_text": str(tmp_path / "train.txt"), "valid_text": str(tmp_path / "valid.txt"), "vocab_size": 60,
              "seq_len": 16, "batch_size": 4, **data}
    path = tmp_path / "r.yaml"
    path.write_text("method: bert\n"
                    f"data: {fields}\n"
                    "model: {d_model: 16, n_layer: 1, n_head: 2, d_inner: 32, max_position: 16}\n"
                    "objective: {nsp: true, whole_word: true}\n"
                    "optim: {lr: 1.0e-3, warmup_steps: 1}\n"
                    "train: {progress: false, save_every: 2, log_every: 1}\n"
                    f"steps: {steps}\n")
    return path


@pytest.mark.hf_interop
def test_recipe_trains_saves_and_the_checkpoint_loads(tmp_path):
    result = run_recipe(recipe(tmp_path), out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 3 and math.isfinite(result["valid_loss"]) and result["valid_masked"] > 0
    model, vocab = load_checkpoint(tmp_path / "run" / "final", architecture="bert")
    assert model.config.n_token == len(vocab) == 60 and model.config.nsp
    assert (tmp_path / "run" / "tokenizer" / "vocab.txt").is_file()
    genfeat.save_pretrained(model, tmp_path / "hf", vocab, hf=True)  # exports to Hugging Face, tokenizer too
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    transformers = pytest.importorskip("transformers")
    text = "the classifier learns quickly"
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tok(text, add_special_tokens=False).input_ids == vocab.encode(text)
    assert isinstance(hf_tok, transformers.BertTokenizerFast)  # transformers 5 names it BertTokenizer, an alias


def test_resume_continues_exactly(tmp_path):
    whole = run_recipe(recipe(tmp_path, steps=4), out_dir=tmp_path / "whole", progress=False)
    run_recipe(recipe(tmp_path, steps=4), overrides={"train.stop_after_steps": 2}, out_dir=tmp_path / "part",
               progress=False)
    resumed = run_recipe(recipe(tmp_path, steps=4), out_dir=tmp_path / "part", progress=False, resume=True)
    assert resumed["valid_loss"] == whole["valid_loss"]
    a, _ = load_checkpoint(tmp_path / "whole" / "final")
    b, _ = load_checkpoint(tmp_path / "part" / "final")
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_recipe_mistakes_are_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="drop model.n_token"):
        run_recipe(recipe(tmp_path), overrides={"model.n_token": 60}, out_dir=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match="longer than model.max_position 16"):
        run_recipe(recipe(tmp_path, seq_len=32), out_dir=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match=r"seq_len \(4\) must be >= 5"):  # no room for [CLS] A [SEP] B [SEP]
        run_recipe(recipe(tmp_path, seq_len=4), out_dir=tmp_path / "run", progress=False)


@pytest.mark.skipif(not WIKI.is_file(), reason="needs GENFEAT_DATA with wikitext-2")
def test_debug_recipe_runs_on_wikitext2(tmp_path):
    result = run_recipe(Path(__file__).parents[1] / "recipes" / "bert" / "debug.yaml",
                        overrides={"steps": 4, "data.valid_examples": 16}, out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 4
    # barely trained, so close to a uniform guess over the 2,000 types, but finite and scored on many tokens
    assert 5.0 < result["valid_loss"] < math.log(2000) + 1.5 and result["valid_masked"] > 10000


def test_bad_text_and_a_resume_with_another_tokenizer_are_one_clear_error(tmp_path):
    path = recipe(tmp_path, steps=2)
    good = (tmp_path / "train.txt").read_bytes()
    (tmp_path / "train.txt").write_bytes(good + b"caf\xe9 latin-1\n")
    with pytest.raises(DataError, match=r"train.txt' line 251 is not UTF-8"):
        run_recipe(path, out_dir=tmp_path / "bad", progress=False)
    (tmp_path / "train.txt").write_bytes(good)
    run_recipe(path, overrides={"train.stop_after_steps": 1, "train.save_every": 1}, out_dir=tmp_path / "run",
               progress=False)
    # the same size, other pieces: the ids would silently mean other text. The run's record refuses the other
    # recipe; without that record (a run from before genfeat kept it) the checkpoint's vocabulary check does
    train_tokenizer(TokenizerConfig("wordpiece", 60, lowercase=True), tmp_path / "valid.txt", tmp_path / "other")
    with pytest.raises(ConfigError, match="was started with another recipe .data.tokenizer None then"):
        run_recipe(path, overrides={"data.tokenizer": str(tmp_path / "other")}, out_dir=tmp_path / "run",
                   progress=False, resume=True)
    record = json.loads((tmp_path / "run" / "provenance.json").read_text())
    (tmp_path / "run" / "provenance.json").write_text(json.dumps({"invocations": [
        {k: v for k, v in r.items() if k != "run"} for r in record["invocations"]]}))
    with pytest.raises(CheckpointError, match="differs from the one checkpoint"):
        run_recipe(path, overrides={"data.tokenizer": str(tmp_path / "other")}, out_dir=tmp_path / "run",
                   progress=False, resume=True)
