"""scripts/elmo_polysemy.py: contextual neighbours of a word across sentences, beside its static neighbours."""

import importlib.util
from pathlib import Path

import pytest
import torch

from genfeat.runner import run_recipe

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("elmo_polysemy", ROOT / "scripts" / "elmo_polysemy.py")
polysemy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(polysemy)

LINES = ["the bank raised its rates", "he sat on the river bank", "a fire broke out at the bank",
         "they will fire the manager", "the present rates are low", "we present the plan", "the bank will present it"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elmo")
    (tmp / "text.txt").write_text("\n".join(LINES * 3) + "\n")
    run_recipe(ROOT / "recipes" / "elmo" / "debug.yaml",
               overrides={"steps": 2, "data.train_text": str(tmp / "text.txt"), "data.valid_text": str(tmp / "text.txt"),
                          "data.batch_size": 4, "data.seq_len": 6}, out_dir=tmp / "run", progress=False)
    return tmp


def test_demo_prints_contextual_and_static_neighbours(checkpoint, capsys):
    w2v = checkpoint / "vectors.txt"
    w2v.write_text("3 2\nbank 1.0 0.0\nriver 0.9 0.1\nfire -1.0 0.0\n")
    code = polysemy.main(["--checkpoint", str(checkpoint / "run" / "final"), "--corpus", str(checkpoint / "text.txt"),
                          "--words", "bank", "fire", "--queries", "2", "--k", "2", "--word2vec", str(w2v)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("query: ") == 4 and "=== 'bank': 4 sentences" in out and "=== 'fire': 2 sentences" in out
    # each query has k neighbours, other sentences holding the same word in brackets
    bank_block = out.split("=== 'fire'")[0]
    assert bank_block.count("[bank]") == 2 * (1 + 2)
    assert "static, word2vec: river (0.99), fire (-1.00)" in bank_block   # centred: minus the mean vector
    assert "static, the context-free token vector (layer 0): " in bank_block


def test_contextual_vectors_pick_the_word_in_each_sentence(checkpoint):
    from genfeat.methods.elmo import load_elmo

    model, _, chars = load_elmo(checkpoint / "run" / "final")
    sents = [s.split() for s in ("the bank raised its rates", "a fire broke out at the bank")]
    vecs = polysemy.contextual_vectors(model, chars, sents, "bank", layer=1)
    full = model(chars.spell_batch(sents)).layers[1]
    torch.testing.assert_close(vecs, torch.stack([full[0, 1], full[1, 6]]))


def test_a_word_the_corpus_lacks_is_one_error_line(checkpoint, capsys):
    code = polysemy.main(["--checkpoint", str(checkpoint / "run" / "final"), "--corpus",
                          str(checkpoint / "text.txt"), "--words", "zebra"])
    assert code == 2 and "no sentence of the corpus holds 'zebra'" in capsys.readouterr().err


def test_binary_word_vectors_read_and_a_layer_out_of_range_is_one_error_line(checkpoint, capsys):
    """A genfeat word2vec run's vectors.bin (binary, its default export) gives the same static neighbours as the
    text file; a --layer the biLM lacks is refused (was an IndexError traceback)."""
    import numpy as np

    from genfeat.models.word2vec import save_word2vec_format

    save_word2vec_format(checkpoint / "vectors.bin", ["bank", "river", "fire"],
                         torch.tensor(np.array([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0]], dtype=np.float32)), True)
    code = polysemy.main(["--checkpoint", str(checkpoint / "run" / "final"), "--corpus", str(checkpoint / "text.txt"),
                          "--words", "bank", "--queries", "1", "--k", "1", "--word2vec", str(checkpoint / "vectors.bin")])
    assert code == 0 and "static, word2vec: river (0.99), fire (-1.00)" in capsys.readouterr().out
    code = polysemy.main(["--checkpoint", str(checkpoint / "run" / "final"), "--corpus", str(checkpoint / "text.txt"),
                          "--words", "bank", "--layer", "9"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--layer is 9, but the biLM has layers 0 (tokens) to" in err
