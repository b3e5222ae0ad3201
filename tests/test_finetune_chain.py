"""Two phases as two recipes: BERT masked-LM pretraining writes OUT/final, and a fine-tuning recipe with
``init: OUT/final`` starts from exactly those weights and that tokenizer (real data: WikiText-2, MRPC)."""

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genfeat.runner import run_recipe

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()


@pytest.mark.skipif(not (DATA / "glue" / "MRPC" / "dev.tsv").is_file()
                    or not (DATA / "wikitext-2" / "wiki.valid.tokens").is_file(), reason="data not in GENFEAT_DATA")
def test_finetuning_starts_from_the_pretrained_checkpoint(tmp_path):
    lines = (DATA / "wikitext-2" / "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:1200]), encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(lines[1200:1500]), encoding="utf-8")
    run_recipe("recipes/bert/debug.yaml", {"steps": 3, "train.eval_every": 0, "data.train_text": str(tmp_path / "train.txt"),
                                           "data.valid_text": str(tmp_path / "valid.txt"), "data.vocab_size": 1000},
               [0], out_dir=tmp_path / "pre", progress=False)
    # a vanishing learning rate: after one step the backbone still holds the pretrained weights
    result = run_recipe("recipes/finetune/mrpc_bert.yaml", {
        "init": str(tmp_path / "pre" / "final"), "steps": 1, "optim.lr": 1.0e-12, "optim.warmup_steps": 0,
        "data.max_train_examples": 16, "data.max_eval_examples": 8, "data.max_len": 64, "data.batch_size": 8},
        [0], out_dir=tmp_path / "ft", progress=False)
    assert result["new_params"] == (32 * 32 + 32) + (32 * 2 + 2), "only the pooler and the output layer are new"
    pre = load_file(str(tmp_path / "pre" / "final" / "model.safetensors"))
    ft = load_file(str(tmp_path / "ft" / "final" / "model.safetensors"))
    assert {f"backbone.{k}" for k in pre} <= set(ft)
    for k, v in pre.items():
        torch.testing.assert_close(ft[f"backbone.{k}"], v, atol=1e-6, rtol=0)
    assert (tmp_path / "ft" / "final" / "vocab.json").read_text() == (tmp_path / "pre" / "final" / "vocab.json").read_text()
