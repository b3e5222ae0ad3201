"""BERT pretraining through the Trainer: examples and NSP pairs, a recipe run, its checkpoint, exact resume."""

import math
import os
from pathlib import Path

import pytest
import torch

import genfeat
from genfeat.errors import ConfigError
from genfeat.hub import load_checkpoint
from genfeat.methods.bert import make_examples
from genfeat.runner import run_recipe

SPECIAL = {"cls": 2, "sep": 3}
WIKI = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "wikitext-2" / "wiki.valid.tokens"
WORDS = ("the model learns features from unlabelled text and the classifier uses them while margins widen "
         "quickly over many steps").split()


def test_examples_are_cls_body_sep_without_nsp():
    ids = list(range(10, 60))
    ex = make_examples(ids, 8, SPECIAL, nsp=False, generator=torch.Generator().manual_seed(0))
    assert ex["input_ids"].shape == (8, 8) and set(ex) == {"input_ids", "token_type_ids"}
    assert (ex["input_ids"][:, 0] == 2).all() and (ex["input_ids"][:, -1] == 3).all()
    assert ex["input_ids"][:, 1:-1].flatten().tolist() == ids[:48]  # the stream, in order, nothing dropped inside
    assert (ex["token_type_ids"] == 0).all()


def test_nsp_pairs_keep_or_swap_the_second_segment():
    ids = list(range(100, 100 + 13 * 400))
    ex = make_examples(ids, 16, SPECIAL, nsp=True, generator=torch.Generator().manual_seed(1))
    x, types, label = ex["input_ids"], ex["token_type_ids"], ex["next_sentence_label"]
    assert x.shape == (400, 16) and abs(label.float().mean() - 0.5) < 0.08
    chunks = torch.tensor(ids).view(400, 13)
    for i in range(400):
        row = x[i].tolist()
        assert row[0] == 2 and row[-1] == 3 and row.count(3) == 2
        cut = row.index(3)  # [CLS] A [SEP] B [SEP]
        a, b = row[1:cut], row[cut + 1:-1]
        assert len(a) >= 1 and len(b) >= 1 and a == chunks[i, :len(a)].tolist()
        assert types[i].tolist() == [0] * (cut + 1) + [1] * (16 - cut - 1)
        if label[i] == 0:
            assert b == chunks[i, len(a):].tolist()  # B is what followed A
        else:  # B is the start of another example's body
            starts = (chunks[:, 0] == b[0]).nonzero().flatten().tolist()
            assert starts and starts[0] != i and chunks[starts[0], :len(b)].tolist() == b


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
    assert type(hf_tok).__name__ == "BertTokenizerFast"


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
