"""Transformer-XL under torchrun (2 processes, gloo on CPU) on real PTB, end to end through the CLI.

The LM stream cuts the corpus into ``data.batch_size`` contiguous rows and rank r of w trains on
rows [r*b/w, (r+1)*b/w), carrying the memory of its own rows. Every row is independent in the model
(attention, layer norm and adaptive softmax act within a row), and each rank scores the same
number of tokens, so with dropout off a 2-process run with global batch 4 takes exactly the steps of
a 1-process run with batch 4: same per-step loss (rank 0 logs the all-reduced sums) and parameters.
"""

import json
import os
from pathlib import Path

import pytest
import torch
from torchrun_launch import launch_worker

WORKER = Path(__file__).with_name("ddp_worker.py")
DATA = Path(os.environ.get("GENFEAT_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
TINY = ["--steps", "4", "--train.log_every", "1", "--train.eval_every", "0", "--eval.valid_tokens", "300",
        "--data.test_split", "null", "--data.batch_size", "4", "--train.clip_norm", "0.25", "--eval.batch_size", "64"]

# Without the data the workers would try to download PTB.
pytestmark = pytest.mark.skipif(not (DATA / "ptb" / "ptb.train.txt").is_file(),
                                reason=f"needs PTB at {DATA / 'ptb' / 'ptb.train.txt'} (set GENFEAT_DATA)")


def launch(out: Path, overrides: list[str], nproc: int, mode: str = "--transformer-xl") -> None:
    launch_worker(WORKER, [str(out), mode, *TINY, *overrides], nproc, DATA, timeout=240)


def train_losses(out: Path) -> list[float]:
    return [r["lm"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "lm" in r]


def params(out: Path, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(out / f"rank{rank}.pt", weights_only=True)["params"]


def test_two_processes_follow_one_process_with_the_same_global_batch(tmp_path):
    no_dropout = ["--model.dropout", "0.0"]
    launch(tmp_path / "single", no_dropout, nproc=1)
    launch(tmp_path / "ddp", no_dropout, nproc=2)
    ref, ranks = params(tmp_path / "single", 0), [params(tmp_path / "ddp", r) for r in range(2)]
    for k in ref:
        assert torch.equal(ranks[0][k], ranks[1][k]), f"ranks differ in {k}"
        torch.testing.assert_close(ranks[0][k], ref[k], rtol=1e-4, atol=1e-5)
    single, ddp = train_losses(tmp_path / "single"), train_losses(tmp_path / "ddp")
    assert len(single) == 4 and single[-1] < single[0]
    torch.testing.assert_close(torch.tensor(ddp), torch.tensor(single), rtol=0, atol=1e-5)
    results = [json.loads((tmp_path / d / "results.json").read_text()) for d in ("single", "ddp")]
    assert results[1]["valid_loss"] == pytest.approx(results[0]["valid_loss"], abs=1e-5)
    assert (tmp_path / "ddp" / "final" / "model.safetensors").is_file()


def test_resume_under_torchrun_continues_exactly(tmp_path):
    # Dropout on: each rank draws its own masks, so every rank's RNG state must come back on resume.
    launch(tmp_path, ["--model.dropout", "0.1"], nproc=2, mode="--transformer-xl-resume")
    full, chunked = tmp_path / "full", tmp_path / "chunked"
    assert train_losses(chunked) == train_losses(full)
    for rank in range(2):
        ref, got = params(full, rank), params(chunked, rank)
        for k in ref:
            assert torch.equal(got[k], ref[k]), f"rank {rank} differs in {k} after resume"
