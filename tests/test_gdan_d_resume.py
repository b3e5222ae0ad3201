"""A gdan run (Algorithm 1 with G's REINFORCE steps) stopped part way and resumed ends exactly as an
uninterrupted one: D's and G's weights, the streams (labelled, generated, chunks), the REINFORCE baseline and
the RNG state all come back from OUT/last."""

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from genfeat.runner import run_recipe

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
# keep_best off: the final weights are those after the last step, G's last REINFORCE step (which reads the
# restored baseline) included
SMALL = {"max_eval": 40, "max_unlabelled": 10, "train.keep_best": False}


@pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="needs GENFEAT_DATA with squad/")
def test_stopped_and_resumed_gdan_run_equals_the_full_run(tmp_path, monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA))
    recipe = ROOT / "recipes/gdan/debug.yaml"
    full = run_recipe(recipe, SMALL, out_dir=tmp_path / "full", progress=False)["runs"][0]
    part = run_recipe(recipe, {**SMALL, "train.stop_after_steps": 3}, out_dir=tmp_path / "part", progress=False)
    assert part["runs"][0]["interrupted"] == 1.0
    resumed = run_recipe(recipe, SMALL, out_dir=tmp_path / "part", progress=False, resume=True)["runs"][0]
    for key in ("test_f1", "test_em", "dev_f1", "dev_em", "steps"):
        assert resumed[key] == full[key], key
    evals = [[json.loads(line)["dev_f1"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
              if '"eval"' in line] for run in ("full", "part")]
    assert evals[0] == evals[1] and len(evals[0]) == 2
    weights = [load_file(tmp_path / run / "last" / "model.safetensors") for run in ("full", "part")]
    assert weights[0].keys() == weights[1].keys() and any(k.startswith("g.") for k in weights[0])
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=0, atol=0, msg=key)


@pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="needs GENFEAT_DATA with squad/")
def test_a_run_stopped_in_gs_pretraining_resumes_it(tmp_path, monkeypatch):
    """Ctrl-C during G's MLE pretraining, after its checkpoint at step 2 of 4 (OUT/g_mle/last; no OUT/last yet):
    --resume continues the pretraining from it, then trains D and G, ending exactly as an uninterrupted run."""
    from genfeat.framework.checkpoint import load_trainer_state
    from genfeat.objectives.question_gen import QuestionGenMLE

    monkeypatch.setenv("GENFEAT_DATA", str(DATA))
    recipe = ROOT / "recipes/gdan/debug.yaml"
    small = {**SMALL, "train.save_every": 2}
    full = run_recipe(recipe, small, out_dir=tmp_path / "full", progress=False)["runs"][0]
    calls, mle = [], QuestionGenMLE.__call__

    def stop_at_the_third_step(self, model, batch):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return mle(self, model, batch)

    with monkeypatch.context() as m:
        m.setattr(QuestionGenMLE, "__call__", stop_at_the_third_step)
        with pytest.raises(KeyboardInterrupt):
            run_recipe(recipe, small, out_dir=tmp_path / "part", progress=False)
    part = tmp_path / "part"
    assert load_trainer_state(part / "g_mle" / "last")["global_step"] == 2
    assert not (part / "last").exists()
    resumed = run_recipe(recipe, small, out_dir=part, progress=False, resume=True)["runs"][0]
    for key in ("test_f1", "test_em", "dev_f1", "dev_em", "steps"):
        assert resumed[key] == full[key], key
    for ckpt in ("g_mle/last", "last"):
        weights = [load_file(tmp_path / run / ckpt / "model.safetensors") for run in ("full", "part")]
        for key, value in weights[0].items():
            torch.testing.assert_close(weights[1][key], value, rtol=0, atol=0, msg=f"{ckpt}: {key}")
