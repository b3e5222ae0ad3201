"""Fine-tuning resumes exactly (`--resume` after `train.stop_after_steps`), and a malformed task file ends the run
in one error line naming the file and line."""

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genfeat import cli
from genfeat.framework.checkpoint import load_trainer_state
from genfeat.data.registry import DatasetSpec, FileSpec, register
from genfeat.runner import run_recipe
from genfeat.tasks import TASKS, TaskSpec
from genfeat.tasks.spec import SplitSpec

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
SMALL = {"steps": 6, "data.task": "rte", "data.max_train_examples": 48, "data.max_eval_examples": 24,
         "data.batch_size": 8, "vocab_size": 300, "model.n_layer": 1, "train.eval_every": 2}


@pytest.mark.skipif(not (DATA / "glue" / "RTE" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
def test_resume_after_a_stop_gives_the_uninterrupted_run(tmp_path):
    whole = run_recipe("recipes/finetune/debug.yaml", SMALL, [0], out_dir=tmp_path / "whole", progress=False)
    part = run_recipe("recipes/finetune/debug.yaml", {**SMALL, "train.stop_after_steps": 3}, [0],
                      out_dir=tmp_path / "part", progress=False)
    assert part["interrupted"] == 1.0 and part["steps"] == 3
    state = load_trainer_state(tmp_path / "part" / "last")
    assert state["seconds"] > 0
    state["seconds"] = 1000.0      # as if the first invocation had trained for 1,000 s: the total must hold them
    torch.save(state, tmp_path / "part" / "last" / "trainer_state.pt")
    resumed = run_recipe("recipes/finetune/debug.yaml", SMALL, [0], out_dir=tmp_path / "part", progress=False, resume=True)
    assert resumed["dev_accuracy"] == whole["dev_accuracy"]
    assert 1000.0 < resumed["train_seconds"] < 1100.0   # had been the last invocation's alone
    a = load_file(str(tmp_path / "whole" / "final" / "model.safetensors"))
    b = load_file(str(tmp_path / "part" / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_label_outside_the_label_set_is_one_error_line_with_file_and_line(tmp_path, monkeypatch, capsys):
    rows = ["sentence\tlabel", "a fine film\t1", "a dull film\t0", "an odd row\t7"]
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "train.tsv").write_text("\n".join(rows) + "\n")
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    register(DatasetSpec("test_tiny_glue", {"train": FileSpec("tiny/train.tsv", "http://127.0.0.1:9/none", None)}))
    spec = TaskSpec("tiny_bad", "test_tiny_glue", "tsv", "single",
                    {"train": SplitSpec("train", True, [0], 1), "dev": SplitSpec("train", True, [0], 1)}, ["accuracy"],
                    ["0", "1"])
    monkeypatch.setitem(TASKS, spec.name, spec)
    code = cli.main(["run", "recipes/finetune/debug.yaml", "--out", str(tmp_path / "run"), "--data.task", "tiny_bad",
                     "--data.max_train_examples", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "train.tsv' line 4" in err[0] and "'7'" in err[0]
    assert not (tmp_path / "run" / "final").exists()


@pytest.mark.skipif(not (DATA / "glue" / "RTE" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
def test_resume_refuses_an_init_checkpoint_whose_contents_changed(tmp_path):
    """The init path is part of the recipe; its contents are too: a resume whose init directory now holds another
    model would train the rest of the steps against another backbone than the first invocation's."""
    import shutil

    from genfeat.errors import ConfigError

    for seed in (0, 1):
        run_recipe("recipes/finetune/debug.yaml", {**SMALL, "steps": 1}, [seed], out_dir=tmp_path / f"init{seed}",
                   progress=False)
    shutil.copytree(tmp_path / "init0" / "final", tmp_path / "init")
    over = {"init": str(tmp_path / "init"), "steps": 4, "data": {"task": "rte", "max_train_examples": 32, "max_len": 64,
            "max_eval_examples": 8, "batch_size": 8}, "train": {"eval_every": 0, "stop_after_steps": 2}}
    part = run_recipe("recipes/finetune/sst2_bert.yaml", over, [0], out_dir=tmp_path / "ft", progress=False)
    assert part["interrupted"] == 1.0
    shutil.rmtree(tmp_path / "init")
    shutil.copytree(tmp_path / "init1" / "final", tmp_path / "init")
    with pytest.raises(ConfigError, match=r"--resume: init '.*init' holds other contents than when the run in .* "
                                          r"started \(sha256 [0-9a-f]{12} then, [0-9a-f]{12} now\)"):
        run_recipe("recipes/finetune/sst2_bert.yaml", over, [0], out_dir=tmp_path / "ft", progress=False, resume=True)
    shutil.rmtree(tmp_path / "init")
    shutil.copytree(tmp_path / "init0" / "final", tmp_path / "init")     # the same contents again: resumes
    done = run_recipe("recipes/finetune/sst2_bert.yaml", {**over, "train": {"eval_every": 0}}, [0],
                      out_dir=tmp_path / "ft", progress=False, resume=True)
    assert done["steps"] == 4
