"""Bad input ends in one clear error line and a non-zero exit, never a traceback."""

import subprocess
import sys

import pytest
import torch

RECIPE = """method: transformer_xl
data: {corpus: ptb, batch_size: 4, tgt_len: 8}
model: {d_model: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 1, mem_len: 8}
steps: 2
"""


def genfeat(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "genfeat.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "fix:" in lines[0]
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("yaml_text, needles", [
    (RECIPE.replace("steps: 2", "stepz: 2"), ["unknown config field 'stepz'", "did you mean 'steps'"]),
    (RECIPE.replace("tgt_len: 8", "tgt_len: eight"), ["'data.tgt_len'", "integer"]),
    (RECIPE.replace("transformer_xl", "transformer_yl"), ["unknown method 'transformer_yl'"]),
    ("method: [unclosed", ["not valid YAML"]),
])
def test_bad_recipe(tmp_path, yaml_text, needles):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml_text)
    assert_one_line_error(genfeat("run", str(recipe), "--out", str(tmp_path / "out")), *needles)
    assert not (tmp_path / "out").exists(), "nothing may be written for a rejected recipe"


def test_bad_override_and_missing_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    assert_one_line_error(genfeat("run", str(recipe), "--train.lr", "fast"), "'train.lr'")
    assert_one_line_error(genfeat("run", str(tmp_path / "nope.yaml")), "does not exist")


def test_missing_checkpoint(tmp_path):
    proc = genfeat("evaluate", "--checkpoint", str(tmp_path / "none"), "--data", "ptb:test", "--tgt-len", "8",
                   "--mem-len", "8")
    assert_one_line_error(proc, "not a model directory")


def test_bad_device(tmp_path):
    args = ["--checkpoint", str(tmp_path / "none"), "--data", "ptb:test", "--tgt-len", "8", "--mem-len", "8"]
    assert_one_line_error(genfeat("evaluate", *args, "--device", "gpu"), "--device is 'gpu', not a device")
    if not torch.cuda.is_available():
        assert_one_line_error(genfeat("evaluate", *args, "--device", "cuda"), "CUDA is not available")


def test_debug_shows_traceback(tmp_path):
    proc = genfeat("run", str(tmp_path / "nope.yaml"), "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr
