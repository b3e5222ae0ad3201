"""scripts/plot_pretraining.py: curves read from metrics.jsonl (resumed steps: the last record) and drawn."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
from plot_pretraining import main, read_curves  # noqa: E402

from genfeat.errors import DataError  # noqa: E402


def write_run(path, records):
    path.mkdir()
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_curves_are_read_and_drawn(tmp_path, capsys):
    plm = write_run(tmp_path / "plm", [
        {"step": 50, "phase": "train", "phase_step": 50, "lr": 1e-4, "plm": 9.5, "items_per_s": 40.0},
        {"step": 100, "phase": "train", "phase_step": 100, "lr": 1e-4, "plm": 8.0, "items_per_s": 40.0},
        {"step": 100, "phase": "train", "event": "eval", "valid_loss": 8.4, "valid_items": 10.0},
        {"step": 100, "phase": "train", "phase_step": 100, "lr": 1e-4, "plm": 7.9, "items_per_s": 41.0},  # resumed
        {"step": 150, "phase": "train", "phase_step": 150, "lr": 1e-4, "plm": 7.5, "items_per_s": 40.0}])
    mlm = write_run(tmp_path / "mlm", [
        {"step": 100, "phase": "train", "lr": 1e-4, "mlm": 7.0, "mlm/correct": 0.1, "items_per_s": 200.0},
        {"step": 100, "phase": "train", "event": "eval", "valid_loss": 6.8, "valid_accuracy": 0.1}])
    assert read_curves(plm) == {"train": [(50, 9.5), (100, 7.9), (150, 7.5)], "valid": [(100, 8.4)],
                                "train_key": "plm"}
    assert read_curves(mlm)["train"] == [(100, 7.0)] and read_curves(mlm)["train_key"] == "mlm"
    out = tmp_path / "fig" / "curves.png"
    assert main([f"XLNet K=6={plm}", f"BERT={mlm}", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = json.loads(capsys.readouterr().out)
    assert list(printed["curves"]) == ["XLNet K=6", "BERT"]


def test_bad_input_is_one_clear_error(tmp_path, capsys):
    assert main([str(tmp_path), "--out", str(tmp_path / "x.png")]) == 2
    assert "is not NAME=RUN_DIR" in capsys.readouterr().err
    assert main([f"a={tmp_path / 'none'}", "--out", str(tmp_path / "x.png")]) == 2
    assert "metrics.jsonl does not exist" in capsys.readouterr().err
    two = write_run(tmp_path / "two", [{"step": 1, "lm": 2.0, "nsp": 0.7}])
    with pytest.raises(DataError, match="cannot tell the training loss"):
        read_curves(two)
    assert read_curves(two, train_key="lm")["train"] == [(1, 2.0)]
    with pytest.raises(DataError, match="no training record of .* holds 'nope'"):      # drew an empty panel
        read_curves(two, train_key="nope")
    assert not (tmp_path / "x.png").exists()
