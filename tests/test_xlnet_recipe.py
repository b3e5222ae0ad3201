"""End to end on real WikiText-2: the XLNet debug recipe trains a sentencepiece tokenizer, pretrains,
checkpoints, evaluates, exports to HF; the NSP and DAE + Transformer-XL variants run."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import genfeat
from genfeat.data.vocab import SentencePieceVocab
from genfeat.hub import load_checkpoint
from genfeat.methods.xlnet import held_out_loss, pretraining_text
from genfeat.models.xlnet import XLNetLMHeadModel
from genfeat.objectives.permutation_lm import PermutationLMConfig, PermutationLMObjective
from genfeat.runner import load_recipe, run_recipe

ROOT = Path(__file__).resolve().parents[1]
DEBUG = ROOT / "recipes" / "xlnet" / "debug.yaml"

pytestmark = pytest.mark.skipif(not os.environ.get("GENFEAT_DATA") or not (
    Path(os.environ.get("GENFEAT_DATA", "")) / "wikitext-2" / "wiki.test.tokens").is_file(),
    reason="needs GENFEAT_DATA with wikitext-2")


def genfeat_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "genfeat.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("xlnet")
    return out, genfeat_cli("run", str(DEBUG), "--out", str(out), "--no-progress", "--json")


def test_debug_recipe_pretrains_and_reports(trained):
    out, result = trained
    assert result["steps"] == 20 and result["seconds"] > 0
    # 20 steps of a tiny model already beat the uniform distribution over the 1,000 pieces
    assert result["valid_loss"] < math.log(1000) - 0.05
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("plm" in r for r in records) and any(r.get("event") == "eval" for r in records)
    # the sentencepiece model trained on the text is in OUT/tokenizer and beside the checkpoint
    assert (out / "tokenizer" / "spiece.model").is_file()
    model, vocab = load_checkpoint(out / "final", architecture="xlnet")
    assert isinstance(model, XLNetLMHeadModel) and isinstance(vocab, SentencePieceVocab) and len(vocab) == 1000
    # the checkpoint holds the trained weights: on the held-out batches evaluated during training,
    # its loss is the one logged at the last step
    _, cfg = load_recipe(DEBUG)
    text = pretraining_text(cfg.data, cfg.model, 0, out, resume=True)
    scorer = PermutationLMObjective(cfg.objective, special_ids=[text.special["sep"], text.special["cls"]])
    again = held_out_loss(model, scorer, text.valid, cfg.data.valid_batches)
    last = [r for r in records if r.get("event") == "eval"][-1]
    assert last["step"] == 20 and abs(again["valid_loss"] - last["valid_loss"]) < 1e-5


@pytest.mark.parametrize("variant", ["nsp", "dae_txl"])
def test_nsp_and_dae_variants_train(tmp_path, variant):
    recipe = (ROOT / "recipes" / "xlnet" / "debug.yaml").read_text()
    if variant == "nsp":
        recipe = recipe.replace("span: true}", "span: true, nsp: true}")
    else:
        recipe = recipe.replace("method: xlnet", "method: dae_txl").replace(
            "objective: {k: 6, num_predict: 5, span: true}", "objective: {mask_rate: 0.15, nsp: true, whole_word: true}")
    (tmp_path / "r.yaml").write_text(recipe)
    result = run_recipe(tmp_path / "r.yaml", overrides={"steps": 3, "data.valid_batches": 2, "train.eval_every": 0},
                        out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 3 and 0 < result["valid_loss"] < math.log(1000) + 1.5
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    key = "plm/nsp_loss" if variant == "nsp" else "mlm/nsp_loss"
    assert any(key in r for r in records)
    model = genfeat.from_pretrained(tmp_path / "run" / "final")
    assert model.config.nsp


@pytest.mark.hf_interop
def test_export_to_hugging_face_loads_there(trained, tmp_path):
    transformers = pytest.importorskip("transformers")
    out, _ = trained
    genfeat_cli("export", "--checkpoint", str(out / "final"), "--out", str(tmp_path / "hf"), "--format", "hf", "--json")
    hf = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ours = genfeat.from_pretrained(out / "final")
    x = torch.randint(0, 1000, (2, 24), generator=torch.Generator().manual_seed(0))
    sampler = PermutationLMObjective(PermutationLMConfig(num_predict=4), torch.Generator().manual_seed(1))
    perm, mapping, _ = sampler.sample(x)
    with torch.no_grad():
        want = hf(x, perm_mask=perm.float(), target_mapping=mapping).logits
        got = ours(x, perm_mask=perm, target_mapping=mapping).logits
    assert (want - got).abs().max() <= 1e-4


def test_resume_continues_exactly(tmp_path):
    # dropout on, memory carried across the interruption, orders drawn from the examples' seeds
    quick = {"steps": 4, "data.valid_batches": 2, "train.eval_every": 0, "train.save_every": 1}
    whole = run_recipe(DEBUG, overrides=quick, out_dir=tmp_path / "whole", progress=False)
    run_recipe(DEBUG, overrides={**quick, "train.stop_after_steps": 2}, out_dir=tmp_path / "part", progress=False)
    resumed = run_recipe(DEBUG, overrides=quick, out_dir=tmp_path / "part", progress=False, resume=True)
    assert resumed["valid_loss"] == whole["valid_loss"]
    a, b = (genfeat.from_pretrained(tmp_path / d / "final") for d in ("whole", "part"))
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_model_without_reuse_len_keeps_the_streams_reuse_in_memory(tmp_path):
    # the stream's segments continue their rows by seq_len / 2 tokens; a model that kept all of a segment in memory
    # would show the next segment the tokens it predicts, so the model takes the same reuse_len
    recipe = DEBUG.read_text().replace(" reuse_len: 16,", "")
    assert "reuse_len" not in recipe
    (tmp_path / "r.yaml").write_text(recipe)
    run_recipe(tmp_path / "r.yaml", overrides={"steps": 1, "data.valid_batches": 1, "train.eval_every": 0},
               out_dir=tmp_path / "run", progress=False)
    assert genfeat.from_pretrained(tmp_path / "run" / "final").config.reuse_len == 32 // 2


def test_a_wordpiece_tokenizer_for_xlnet_is_one_config_error(tmp_path):
    from genfeat.data.tokenizers import TokenizerConfig, train_tokenizer
    from genfeat.errors import ConfigError

    corpus = Path(os.environ["GENFEAT_DATA"]) / "wikitext-2" / "wiki.valid.tokens"
    train_tokenizer(TokenizerConfig("wordpiece", 300, lowercase=True), corpus, tmp_path / "wp")
    with pytest.raises(ConfigError, match=r"tokenizer '.*wp' has no .*token") as err:   # [CLS]/[SEP] differ by name
        run_recipe(DEBUG, {"data.tokenizer": str(tmp_path / "wp"), "steps": 1}, out_dir=tmp_path / "run", progress=False)
    assert "genfeat tokenizer train --kind sentencepiece" in err.value.fix


def test_a_hugging_face_directory_of_an_unsupported_type_is_one_error(tmp_path):
    from genfeat.errors import CheckpointError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta", "architectures": ["RobertaForMaskedLM"]}))
    with pytest.raises(CheckpointError, match=r"neither a genfeat architecture nor a supported Hugging Face "
                                              r"model_type \(got 'roberta'\)") as err:
        load_checkpoint(tmp_path)
    assert "xlnet" in str(err.value) and "bert" in str(err.value)   # the supported types are named
