"""End to end on real PTB: the XLNet debug recipe pretrains, checkpoints, evaluates, exports to HF."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import genfeat
from genfeat.hub import load_checkpoint
from genfeat.methods.xlnet import permutation_lm_loss
from genfeat.models.xlnet import XLNetLMHeadModel
from genfeat.objectives.permutation_lm import PermutationLMConfig, PermutationLMObjective
from genfeat.runner import load_recipe

ROOT = Path(__file__).resolve().parents[1]
DEBUG = ROOT / "recipes" / "xlnet" / "debug.yaml"

pytestmark = pytest.mark.skipif(not os.environ.get("GENFEAT_DATA") or
                                not (Path(os.environ.get("GENFEAT_DATA", "")) / "ptb" / "ptb.train.txt").is_file(),
                                reason="needs GENFEAT_DATA with ptb/ptb.train.txt")


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
    # 20 steps of a tiny model already beat the uniform distribution over PTB's 10,000 words
    assert result["valid_loss"] < math.log(10000) - 0.05
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("plm" in r for r in records) and any(r.get("event") == "eval" for r in records)
    # the checkpoint holds the trained weights: on the held-out tokens evaluated during training,
    # its loss is the one logged at the last step
    model, vocab = load_checkpoint(out / "final", architecture="xlnet")
    assert isinstance(model, XLNetLMHeadModel) and len(vocab) == 10000
    _, cfg = load_recipe(DEBUG)
    from genfeat.data.corpora import load_corpus

    valid = load_corpus("ptb:valid", vocab).splits["valid"][:cfg.data.valid_tokens]
    again = permutation_lm_loss(model, valid, cfg.objective, seq_len=cfg.data.seq_len, batch_size=cfg.data.batch_size)
    last = [r for r in records if r.get("event") == "eval"][-1]
    assert last["step"] == 20 and abs(again["valid_loss"] - last["valid_loss"]) < 1e-5


def test_export_to_hugging_face_loads_there(trained, tmp_path):
    transformers = pytest.importorskip("transformers")
    out, _ = trained
    genfeat_cli("export", "--checkpoint", str(out / "final"), "--out", str(tmp_path / "hf"), "--format", "hf", "--json")
    hf = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ours = genfeat.from_pretrained(out / "final")
    x = torch.randint(0, 10000, (2, 24), generator=torch.Generator().manual_seed(0))
    sampler = PermutationLMObjective(PermutationLMConfig(num_predict=4), torch.Generator().manual_seed(1))
    perm, mapping, _ = sampler.sample(x)
    with torch.no_grad():
        want = hf(x, perm_mask=perm.float(), target_mapping=mapping).logits
        got = ours(x, perm_mask=perm, target_mapping=mapping).logits
    assert (want - got).abs().max() <= 1e-4
