"""`method: tfidf`, the TF-IDF + linear-model floor, on real GLUE data: above the majority class where the
majority scores zero (CoLA's Matthews correlation), pair features for MRPC, and a refusal for tasks it does not serve."""

import os
from pathlib import Path

import pytest

from genfeat.errors import ConfigError
from genfeat.runner import run_recipe

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()


@pytest.mark.skipif(not (DATA / "glue" / "CoLA" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
def test_cola_floor_beats_the_majority_class(tmp_path):
    result = run_recipe("recipes/finetune/tfidf_cola.yaml", {}, [0], out_dir=tmp_path, progress=False)
    # the majority class ("acceptable") has Matthews correlation 0; measured 0.116 with these settings
    assert result["dev_matthews"] > 0.05 and result["dev_examples"] == 1043
    assert (tmp_path / "results.json").is_file()


def test_multiple_choice_and_resume_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="multiple_choice"):
        run_recipe("recipes/finetune/tfidf_sst2.yaml", {"task": "race"}, [0], out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="resume"):
        run_recipe("recipes/finetune/tfidf_sst2.yaml", {}, [0], out_dir=tmp_path, progress=False, resume=True)
