"""XLNet, "DAE + Transformer-XL" and BERT pretraining under torchrun (2 processes, gloo on CPU) on real
WikiText-2, through the CLI.

Every example carries a seed fixed by the stream's seed, the step (XLNet) or epoch (BERT) and its row
in the *global* batch, and the objectives draw each row's predicted tokens, order and masks from it;
rows are independent in both models and rank r takes its contiguous share of the global batch (with
XLNet's bidirectional pipeline, one forward and one reversed row each). So with dropout off a
2-process run with global batch b takes exactly the steps of a 1-process run with batch b: same
per-step loss (rank 0 logs the all-reduced sums) and parameters. The XLNet-backbone runs train their
sentencepiece tokenizer (deterministic), under torchrun on rank 0 only; the BERT runs share one
WordPiece tokenizer trained here once, so that the two launches need not train it again.
The masked-LM runs (DAE + Transformer-XL, BERT) add NSP and mask whole words, so the masked tokens per
sequence differ between rows and ranks: the NSP loss enters scaled by the ratio of masked tokens to
sequences of the global batch, summed over ranks (a rank's own ratio would weigh its sequences
unlike one process), and the logged NSP figures compare too.
"""

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from torchrun_launch import launch_worker

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("ddp_pretrain_worker.py")
DATA = Path(os.environ.get("GENFEAT_DATA") or ROOT.parent / "shared" / "data")
COMMON = ["--steps", "3", "--train.log_every", "1", "--train.eval_every", "0", "--model.dropout", "0.0",
          "--model.dropatt", "0.0", "--data.max_documents", "6", "--data.valid_documents", "1"]

pytestmark = pytest.mark.skipif(not (DATA / "wikitext-2" / "wiki.valid.tokens").is_file(),
                                reason=f"needs WikiText-2 at {DATA / 'wikitext-2'} (set GENFEAT_DATA)")


def launch(out: Path, recipe: str, overrides: list[str], nproc: int) -> None:
    launch_worker(WORKER, [str(out), str(ROOT / "recipes" / recipe), *COMMON, *overrides], nproc, DATA, timeout=300)


def compare(tmp_path: Path, *keys: str) -> None:
    ref, ranks = (torch.load(tmp_path / "single" / "rank0.pt", weights_only=True)["params"],
                  [torch.load(tmp_path / "ddp" / f"rank{r}.pt", weights_only=True)["params"] for r in range(2)])
    for k in ref:
        assert torch.equal(ranks[0][k], ranks[1][k]), f"ranks differ in {k}"
        torch.testing.assert_close(ranks[0][k], ref[k], rtol=1e-4, atol=1e-5)
    for key in keys:
        single, ddp = ([r[key] for r in map(json.loads, (tmp_path / d / "metrics.jsonl").read_text().splitlines())
                        if key in r] for d in ("single", "ddp"))
        assert len(single) == 3, key
        torch.testing.assert_close(torch.tensor(ddp), torch.tensor(single), rtol=0, atol=1e-5,
                                   msg=lambda m, key=key: f"{key}: {m}")
    results = [json.loads((tmp_path / d / "results.json").read_text()) for d in ("single", "ddp")]
    assert results[1]["valid_loss"] == pytest.approx(results[0]["valid_loss"], abs=1e-5)
    assert (tmp_path / "ddp" / "final" / "model.safetensors").is_file()


def test_xlnet_two_processes_follow_one_process(tmp_path):
    for name, nproc in (("single", 1), ("ddp", 2)):
        launch(tmp_path / name, "xlnet/debug.yaml", ["--data.valid_batches", "3"], nproc)
    assert (tmp_path / "ddp" / "tokenizer" / "spiece.model").read_bytes() == \
        (tmp_path / "single" / "tokenizer" / "spiece.model").read_bytes()
    compare(tmp_path, "plm")


def test_dae_txl_with_nsp_two_processes_follow_one_process(tmp_path):
    recipe = yaml.safe_load((ROOT / "recipes" / "xlnet" / "debug.yaml").read_text())
    recipe.update(method="dae_txl", objective={"nsp": True, "whole_word": True})
    (tmp_path / "dae_txl.yaml").write_text(yaml.safe_dump(recipe))
    for name, nproc in (("single", 1), ("ddp", 2)):
        launch(tmp_path / name, str(tmp_path / "dae_txl.yaml"), ["--data.valid_batches", "3"], nproc)
    compare(tmp_path, "mlm", "mlm/nsp_loss", "mlm/nsp_correct")


def test_bert_two_processes_follow_one_process(tmp_path, monkeypatch):
    from genfeat.data.documents import document_tokenizer, read_documents

    monkeypatch.setenv("GENFEAT_DATA", str(DATA))
    document_tokenizer(read_documents("wikitext2:valid", 6), "wordpiece", 2000, False, None, tmp_path, False)
    shared = ["--data.tokenizer", str(tmp_path / "tokenizer"), "--objective.nsp", "true", "--objective.whole_word",
              "true", "--data.valid_examples", "16"]
    for name, nproc in (("single", 1), ("ddp", 2)):
        launch(tmp_path / name, "bert/debug.yaml", shared, nproc)
    compare(tmp_path, "mlm", "mlm/nsp_loss", "mlm/nsp_correct")
