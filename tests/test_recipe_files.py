"""A Transformer-XL recipe trains on the user's own files: a .npy of ids with a held-out validation part."""

import numpy as np
import pytest

from genfeat.errors import ConfigError
from genfeat.hub import load_checkpoint
from genfeat.runner import run_recipe

RECIPE = """method: transformer_xl
data: {corpus: CORPUS, batch_size: 2, tgt_len: 8, holdout: 0.25, test_split: null}
model: {d_model: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 1, mem_len: 8}
eval: {batch_size: 1}
train: {progress: false}
steps: 3
"""


def test_npy_corpus_trains_with_a_holdout_and_saves_its_id_vocabulary(tmp_path):
    ids = np.random.RandomState(0).randint(0, 30, 400)
    np.save(tmp_path / "ids.npy", ids)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("CORPUS", str(tmp_path / "ids.npy")))
    run = run_recipe(recipe, out_dir=tmp_path / "out", progress=False)["runs"][0]
    assert run["valid_tokens"] == 100 - 1, "the last quarter, scored as one stream, is the validation split"
    assert isinstance(run["valid_tokens"], int)
    model, vocab = load_checkpoint(tmp_path / "out" / "final")
    assert model.config.n_token == len(vocab) == int(ids.max()) + 1


@pytest.mark.parametrize("holdout, test_split, match", [("0.0001", "null", "holdout 0.0001 of 400 tokens leaves 0"),
                                                       ("0.25", "test", "set data.test_split null")])
def test_holdout_errors_name_the_field(tmp_path, holdout, test_split, match):
    np.save(tmp_path / "ids.npy", np.arange(400) % 30)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("CORPUS", str(tmp_path / "ids.npy")).replace("holdout: 0.25", f"holdout: {holdout}")
                      .replace("test_split: null", f"test_split: {test_split}"))
    with pytest.raises(ConfigError, match=match):
        run_recipe(recipe, out_dir=tmp_path / "out", progress=False)


def test_holdout_is_refused_for_a_corpus_with_its_own_splits(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("CORPUS", "ptb").replace("test_split: null", "test_split: test"))
    with pytest.raises(ConfigError, match="has its own splits"):
        run_recipe(recipe, out_dir=tmp_path / "out", progress=False)
