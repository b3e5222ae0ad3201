"""Fine-tuning inputs (genfeat.methods.finetune): bad data settings are one error line before any data work."""

import pytest

from genfeat import cli


def _main(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(code, err, *needles):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("field, value, least", [
    ("doc_stride", 0, 1), ("max_len", 3, 5), ("batch_size", -2, 1), ("eval_batch_size", 0, 1),
    ("max_query_len", 0, 1), ("max_segments", 0, 1), ("max_train_examples", -1, 0), ("max_eval_examples", -5, 0)])
def test_bad_data_settings_are_one_error_line_before_any_data_work(field, value, least, capsys, monkeypatch, tmp_path):
    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the settings were checked")

    monkeypatch.setattr("genfeat.methods.finetune.load_task", no_data)
    code, _, err = _main(["run", "recipes/finetune/debug.yaml", "--out", str(tmp_path / "out"), f"--data.{field}",
                          str(value)], capsys)
    _one_error_line(code, err, "section 'data'", f"{field} is {value}, but must be >= {least}")
    assert not (tmp_path / "out").exists()
