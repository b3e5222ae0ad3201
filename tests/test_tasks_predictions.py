"""Prediction files (genfeat.tasks.predictions): GLUE submission TSV, SQuAD JSON, bad predictions."""

import json

import pytest
import torch

from genfeat.errors import DataError
from genfeat.tasks import Example, get_task
from genfeat.tasks.predictions import write_predictions


def test_glue_submission_tsv(tmp_path):
    examples = [Example(f"test.tsv:{i}", ("a", "b")) for i in range(3)]
    write_predictions(get_task("rte"), examples, [0, 1, 0], tmp_path / "RTE.tsv")
    assert (tmp_path / "RTE.tsv").read_text() == "index\tprediction\n0\tentailment\n1\tnot_entailment\n2\tentailment\n"
    write_predictions(get_task("stsb"), examples, [4.2, 0.12345, 5], tmp_path / "STS-B.tsv")
    assert (tmp_path / "STS-B.tsv").read_text().splitlines()[1:] == ["0\t4.200", "1\t0.123", "2\t5.000"]
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".*.tmp"))  # no temporary left


def test_squad_json_and_other_tasks(tmp_path):
    examples = [Example("q1", ("Who?", "ctx")), Example("q2", ("When?", "ctx"))]
    write_predictions(get_task("squad_v1.1"), examples, ["Denver Broncos", ""], tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text()) == {"q1": "Denver Broncos", "q2": ""}
    write_predictions(get_task("race"), [Example("dev/high/1.txt#0", ("z", "q"))], [3], tmp_path / "race.tsv")
    assert (tmp_path / "race.tsv").read_text() == "uid\tprediction\ndev/high/1.txt#0\tD\n"


def test_bad_predictions(tmp_path):
    examples = [Example("a", ("x",)), Example("b", ("y",))]
    with pytest.raises(DataError, match="1 predictions for 2 examples of task 'sst2'"):
        write_predictions(get_task("sst2"), examples, [1], tmp_path / "p.tsv")
    with pytest.raises(DataError, match=r"prediction 2 is not a class id of task 'sst2' \(0..1\)"):
        write_predictions(get_task("sst2"), examples, [1, 2], tmp_path / "p.tsv")
    with pytest.raises(DataError, match="prediction 0.7 is not a class id"):
        write_predictions(get_task("sst2"), examples, [1, 0.7], tmp_path / "p.tsv")
    assert not (tmp_path / "p.tsv").exists()
    write_predictions(get_task("sst2"), examples, torch.tensor([1, 0]), tmp_path / "p.tsv")  # tensor ids work
    assert (tmp_path / "p.tsv").read_text() == "index\tprediction\n0\t1\n1\t0\n"
