"""GPT-1 pretraining (method: gpt): the causal LM protocol of the decoder, block scoring, a recipe run of
both architectures, the checkpoint and its tokenizer, exact resume, clear errors, the debug recipe on WikiText-2."""

import math
import os
from pathlib import Path

import pytest
import torch

from genfeat.data.lm import LMBatch
from genfeat.errors import ConfigError
from genfeat.hub import load_checkpoint
from genfeat.methods.gpt import causal_lm_loss
from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
from genfeat.objectives.causal_lm import CausalLMObjective
from genfeat.runner import run_recipe

WIKI = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "wikitext-2" / "wiki.test.tokens"
WORDS = ("the model learns features from unlabelled text and the classifier uses them while margins widen "
         "quickly over many steps").split()


def tiny_gpt(**kw):
    torch.manual_seed(0)
    return GPTLMHeadModel(GPTConfig(**{"n_token": 40, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 32,
                                       "max_position": 16, **kw})).eval()


def test_gpt_labels_are_the_causal_lm_protocol():
    model = tiny_gpt()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 40, (3, 10), generator=g), torch.randint(0, 40, (3, 10), generator=g)
    out = model(x, labels=y)
    assert out.logits is None and out.target_log_probs.shape == (3, 10)
    ref = torch.log_softmax(model(x).logits, -1).gather(-1, y[..., None])[..., 0]
    torch.testing.assert_close(out.target_log_probs, ref)
    assert model(x, labels=y, return_logits=True).logits.shape == (3, 10, 40)
    loss = CausalLMObjective(recurrence=False)(model, LMBatch(x, y))  # no mems passed to a model without memory
    torch.testing.assert_close(loss.loss_sum, -ref.sum())
    assert loss.count == 30


def test_held_out_blocks_are_scored_each_on_its_own():
    model = tiny_gpt()
    tokens = torch.randint(0, 40, (2 * 8 + 1,), generator=torch.Generator().manual_seed(2))
    figures = causal_lm_loss(model, tokens, seq_len=8, batch_size=1)
    with torch.no_grad():
        blocks = [model(tokens[None, s:s + 8], labels=tokens[None, s + 1:s + 9]).target_log_probs for s in (0, 8)]
    nll = -torch.cat(blocks, 1)
    assert figures["valid_tokens"] == 16
    assert figures["valid_loss"] == pytest.approx(float(nll.mean()), rel=1e-5)
    assert figures["valid_ppl"] == pytest.approx(math.exp(figures["valid_loss"]))


def recipe(tmp_path, steps=3, architecture="gpt", **data):
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(WORDS[j] for j in torch.randint(len(WORDS), (12,), generator=g).tolist()) for _ in range(200)]
    (tmp_path / "train.txt").write_text("\n".join(lines[:160]) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(lines[160:]) + "\n")
    fields = {"train_text": str(tmp_path / "train.txt"), "valid_text": str(tmp_path / "valid.txt"), "vocab_size": 60,
              "seq_len": 16, "batch_size": 4, **data}
    model = ("{d_model: 16, n_layer: 1, n_head: 2, d_inner: 32, max_position: 16}" if architecture == "gpt"
             else "{d_model: 16, d_hidden: 24, max_position: 16}")
    path = tmp_path / "r.yaml"
    path.write_text("method: gpt\n"
                    f"architecture: {architecture}\n"
                    f"data: {fields}\n"
                    f"model: {model}\n"
                    "optim: {lr: 1.0e-3, warmup_steps: 1}\n"
                    "train: {progress: false, save_every: 2, log_every: 1}\n"
                    f"steps: {steps}\n")
    return path


@pytest.mark.parametrize("architecture", ["gpt", "lstm_lm"])
def test_recipe_trains_saves_and_the_checkpoint_loads(tmp_path, architecture):
    result = run_recipe(recipe(tmp_path, architecture=architecture), out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 3 and result["valid_tokens"] > 0 and "seconds" in result
    assert math.log(60) - 1.0 < result["valid_loss"] < math.log(60) + 1.0  # barely trained: near uniform
    model, vocab = load_checkpoint(tmp_path / "run" / "final", architecture=architecture)
    assert model.config.n_token == len(vocab) == 60
    tokenizer = tmp_path / "run" / "tokenizer"
    assert sorted(p.name for p in tokenizer.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    text = "the classifier learns quickly"
    assert vocab.encode(text) == load_checkpoint(tmp_path / "run" / "final")[1].encode(text)
    tokens = vocab.tokenizer.encode(text).tokens  # GPT-1's BPE, trained on the text: word ends marked
    assert "".join(tokens).replace("</w>", " ").split() == text.split() and len(tokens) > 4
    if architecture == "gpt":   # an --overwrite refused after training its tokenizer (a bad model field) keeps the run
        before = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
        with pytest.raises(ConfigError, match="n_head"):
            run_recipe(recipe(tmp_path, architecture=architecture), {"model.n_head": 0}, out_dir=tmp_path / "run",
                       progress=False, overwrite=True)
        assert {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before


@pytest.mark.hf_interop
def test_a_pretrained_checkpoint_exports_to_hugging_face_with_its_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    run_recipe(recipe(tmp_path, steps=2), overrides={"model.d_inner": 64}, out_dir=tmp_path / "run",
               progress=False)  # OpenAI GPT's inner width is 4 d_model
    model, vocab = load_checkpoint(tmp_path / "run" / "final")
    from genfeat import save_pretrained

    save_pretrained(model, tmp_path / "hf", vocab, hf=True)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    hf = transformers.OpenAIGPTLMHeadModel.from_pretrained(tmp_path / "hf").eval()
    text = "The model learns"  # lower-cased by the tokenizer, as in GPT-1
    ids = tok(text).input_ids
    assert isinstance(tok, transformers.OpenAIGPTTokenizerFast) and ids == vocab.encode(text) and len(ids) <= 16
    with torch.no_grad():
        torch.testing.assert_close(hf(torch.tensor([ids])).logits, model(torch.tensor([ids])).logits,
                                   atol=1e-4, rtol=1e-4)


def test_resume_continues_exactly(tmp_path):
    whole = run_recipe(recipe(tmp_path, steps=4), out_dir=tmp_path / "whole", progress=False)
    run_recipe(recipe(tmp_path, steps=4), overrides={"train.stop_after_steps": 2}, out_dir=tmp_path / "part",
               progress=False)
    resumed = run_recipe(recipe(tmp_path, steps=4), out_dir=tmp_path / "part", progress=False, resume=True)
    assert resumed["valid_loss"] == whole["valid_loss"]
    a, _ = load_checkpoint(tmp_path / "whole" / "final")
    b, _ = load_checkpoint(tmp_path / "part" / "final")
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_given_tokenizer_is_used_and_mistakes_are_one_clear_error(tmp_path):
    run_recipe(recipe(tmp_path, steps=1), out_dir=tmp_path / "first", progress=False)
    again = run_recipe(recipe(tmp_path, steps=1, tokenizer=str(tmp_path / "first" / "tokenizer"), vocab_size=99),
                       out_dir=tmp_path / "second", progress=False)
    assert again["params"] == run_recipe(recipe(tmp_path, steps=1), out_dir=tmp_path / "third", progress=False)["params"]
    assert not (tmp_path / "second" / "tokenizer").exists()
    with pytest.raises(ConfigError, match="drop model.n_token"):
        run_recipe(recipe(tmp_path), overrides={"model.n_token": 60}, out_dir=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match="longer than model.max_position 16"):
        run_recipe(recipe(tmp_path, seq_len=32), out_dir=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match="zero_shot.task 'mrpc' has no zero-shot heuristic"):
        run_recipe(recipe(tmp_path), overrides={"zero_shot.task": "mrpc"}, out_dir=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match="architecture"):
        run_recipe(recipe(tmp_path), overrides={"architecture": "bert"}, out_dir=tmp_path / "run", progress=False)


@pytest.mark.skipif(not WIKI.is_file(), reason="needs GENFEAT_DATA with wikitext-2")
def test_debug_recipe_runs_on_wikitext2_and_logs_zero_shot(tmp_path):
    import json

    result = run_recipe(Path(__file__).parents[1] / "recipes" / "gpt" / "debug.yaml",
                        overrides={"steps": 4, "train.eval_every": 2, "zero_shot.examples": 16},
                        out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 4 and result["zero_shot_examples"] == 16
    assert 0.0 <= result["zero_shot_accuracy"] <= 1.0
    # barely trained, so close to a uniform guess over the 1,000 types, scored on both held-out articles
    assert math.log(1000) - 1.0 < result["valid_loss"] < math.log(1000) + 1.0 and result["valid_tokens"] > 8000
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if r.get("event") == "eval"]
    assert [r["step"] for r in evals] == [2, 4] and all("zero_shot_accuracy" in r for r in evals)
