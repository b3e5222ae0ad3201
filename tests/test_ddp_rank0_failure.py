"""What rank 0 alone writes while the other ranks wait for it (the tokenizer a pretraining run trains into
OUT/tokenizer, the final model and figures, the trainer's checkpoints): when it fails, every rank ends with one
error line, not the waiting ranks with a gloo traceback (connection closed). The two ranks are started as torchrun starts them, each on its own,
so that each one's exit status and stderr are its own."""

import os
import sys

import pytest
from torchrun_launch import launch_ranks

# `genfeat` with rank 0's writing of OUT/final refused, as a full disk would refuse it
REFUSED_FINAL = """import os, sys
from genfeat import cli
from genfeat.errors import DataError
from genfeat.methods import pretraining

def refused(*args, **kwargs):
    raise DataError("no room for the final model (simulated)", "free some")

if os.environ["RANK"] == "0":
    pretraining.save_pretrained = refused
sys.exit(cli.main(sys.argv[1:]))
"""

# a one-step Transformer-XL run on a character corpus (``corpus``: its path)
TINY_TXL = """method: transformer_xl
data: {{corpus: {corpus}, vocab: {{kind: char}}, holdout: 0.1, test_split: null, batch_size: 4, tgt_len: 8}}
model: {{d_model: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 1, mem_len: 8, dropout: 0.0}}
optim: {{name: adam, lr: 1.0e-2}}
train: {{progress: false, ddp_find_unused_parameters: false}}
eval: {{batch_size: 2}}
steps: 1
"""


def run_two_ranks(args: list[str]) -> list[str]:
    """``python args`` as 2 ranks, each expected to end with status 2 and one error line: those lines."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    lines = []
    for rank, proc in enumerate(launch_ranks(args, 2, env, timeout=120)):
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (rank, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: "), (rank, proc.stderr)
        lines.append(proc.stderr.strip())
    return lines


def test_a_tokenizer_rank_0_fails_to_train_ends_every_rank_with_one_line(tmp_path):
    (tmp_path / "text.txt").write_text("The cat sat on the mat. A dog ran after it.\n\nThe mat was red.\n" * 20)
    recipe = tmp_path / "bert.yaml"
    # a WordPiece vocabulary far larger than the few words of the text can fill
    recipe.write_text(f"""method: bert
data: {{train_text: {tmp_path / 'text.txt'}, valid_text: {tmp_path / 'text.txt'}, vocab_size: 5000, seq_len: 16,
       batch_size: 2, valid_examples: 2}}
model: {{d_model: 8, n_layer: 1, n_head: 2, d_inner: 16, max_position: 16}}
train: {{progress: false}}
steps: 1
""")
    out = tmp_path / "out"
    rank0, rank1 = run_two_ranks(["-m", "genfeat.cli", "run", str(recipe), "--out", str(out)])
    assert "fewer than data.vocab_size 5000" in rank0
    assert rank1.startswith(f"error: rank 0 of 2 failed to train the tokenizer into '{out / 'tokenizer'}', which "
                            "rank 1 waits for. fix: "), rank1
    assert not (out / "tokenizer").exists()


# `genfeat` with rank 0's writing of a training checkpoint refused (OUT/last, here at the end of the phase)
REFUSED_CHECKPOINT = REFUSED_FINAL.replace("from genfeat.methods import pretraining", "from genfeat.framework import trainer") \
    .replace("pretraining.save_pretrained = refused", "trainer.save_checkpoint = refused") \
    .replace("the final model (simulated)", "a checkpoint (simulated)")


@pytest.mark.parametrize("program, what, written", [
    (REFUSED_FINAL, "the final model and figures into '{out}'", "results.json"),
    # the trainer's checkpoints are rank 0's too: the other ranks went on to their next collective and ended in a
    # gloo traceback once rank 0 had exited
    (REFUSED_CHECKPOINT, "the checkpoint '{out}/last'", "last")], ids=["final", "checkpoint"])
def test_rank_0_failing_to_write_ends_every_rank_with_one_line(tmp_path, program, what, written):
    (tmp_path / "corpus.txt").write_text("abc defg hij klmno pq rst " * 60 + "\n")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY_TXL.format(corpus=tmp_path / "corpus.txt"))
    out = tmp_path / "out"
    rank0, rank1 = run_two_ranks(["-c", program, "run", str(recipe), "--out", str(out)])
    assert "(simulated)" in rank0 and "no room for" in rank0
    assert rank1.startswith(f"error: rank 0 of 2 failed to write {what.format(out=out)}, which rank 1 waits for. "
                            "fix: "), rank1
    assert not (out / written).exists()
