"""word2vec end to end on real text (PTB's validation split): the debug recipe's results, the exported
vectors, the neighbours command, and bad input ending in one clear error line."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from genfeat.cli import main
from genfeat.runner import run_recipe

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data"))
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "word2vec" / "debug.yaml"
pytestmark = pytest.mark.skipif(not (DATA / "ptb" / "ptb.valid.txt").is_file(), reason="needs GENFEAT_DATA with PTB")


def genfeat(capsys, *args):
    """(exit status, stdout, stderr) of the command line, run in this process (no interpreter start-up)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(result, needle):
    code, _, err = result
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "fix:" in lines[0], err
    assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def debug_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("w2v")
    result = run_recipe(RECIPE, {"export": "text", "similarity_file": "", "analogy_file": ""}, out_dir=out,
                        progress=False)
    return out, result


def test_debug_recipe(debug_run):
    out, result = debug_run
    saved = json.loads((out / "results.json").read_text())
    # PTB valid: 73,760 words with <unk>, no <eos>; the words seen 3+ times
    assert saved["corpus_words"] == result["corpus_words"] and 60000 < saved["corpus_words"] < 73760
    assert saved["words_per_s"] > 0 and saved["steps"] >= 1
    rows = (out / "vectors.txt").read_text().splitlines()
    assert rows[0] == f"{saved['vocab_size']} 32" and len(rows) == saved["vocab_size"] + 1
    assert rows[1].split()[0] == "the"
    # the loss per pair (the log's sgns is per center word, sgns/pairs the pairs per center word)
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    per_pair = [r["sgns"] / r["sgns/pairs"] for r in logs]
    assert per_pair[0] == pytest.approx(4 * np.log(2), abs=0.05)  # u = 0 at the start: 1 + K terms of log 2
    assert per_pair[-1] < per_pair[0] - 0.3


def test_neighbours_command(debug_run, capsys):
    out, _ = debug_run
    code, stdout, err = genfeat(capsys, "neighbours", "--checkpoint", str(out / "final"), "--word", "the", "--top", "4",
                                "--json")
    assert code == 0, err
    found = json.loads(stdout.splitlines()[-1])["neighbours"]
    assert len(found) == 4 and "the" not in [f["word"] for f in found]
    cos = [f["cosine"] for f in found]
    assert cos == sorted(cos, reverse=True) and all(-1 <= c <= 1 for c in cos)
    one_error_line(genfeat(capsys, "neighbours", "--checkpoint", str(out / "final"), "--word", "zyzzyva"),
                   "'zyzzyva' is not in the")


def test_neighbours_refuses_a_vocabulary_that_is_not_the_vectors(debug_run, capsys, tmp_path):
    import shutil

    out, _ = debug_run
    shutil.copytree(out / "final", tmp_path / "final")
    vocab = json.loads((tmp_path / "final" / "vocab.json").read_text())
    vocab["symbols"] = vocab["symbols"][:-2]                 # two words fewer: each word would read a wrong vector
    (tmp_path / "final" / "vocab.json").write_text(json.dumps(vocab))
    one_error_line(genfeat(capsys, "neighbours", "--checkpoint", str(tmp_path / "final"), "--word", "the"),
                   f"has a vocabulary of {len(vocab['symbols'])} words but {len(vocab['symbols']) + 2} vectors")


def test_gensim_reads_our_checkpoint_vectors(debug_run):
    gensim = pytest.importorskip("gensim")
    from genfeat.hub import load_checkpoint

    out, _ = debug_run
    model, vocab = load_checkpoint(out / "final", "word2vec")
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(out / "vectors.txt"))
    assert list(kv.index_to_key) == vocab.symbols
    np.testing.assert_allclose(kv.vectors, model.vectors.numpy(), rtol=1e-6)


@pytest.mark.parametrize("text, override, needle", [
    ("\n\n  \n", [], "holds no text"),
    ("a b c\nd e\n", [], "no word of the corpus occurs min_count=3 times"),
    ("a b c\n", ["--window", "0"], "window is 0"),
])
def test_bad_input_is_one_line(tmp_path, capsys, text, override, needle):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text)
    one_error_line(genfeat(capsys, "run", str(RECIPE), "--out", str(tmp_path / "out"), "--corpus", f"[{corpus}]",
                           "--no-progress", *override), needle)


def test_hierarchical_softmax_recipe(tmp_path):
    """The debug recipe with ``loss: hierarchical``: the log's loss is the "hs" one and falls per pair. At the
    start (u = 0) every path node costs log 2, so the loss per pair is log 2 times a mean code length, which
    for a Huffman code is within a bit of the unigram entropy (7.2 nats here): what is left to learn is what the
    context says beyond the word frequencies (0.21 nats in 2 epochs, measured)."""
    result = run_recipe(RECIPE, {"loss": "hierarchical", "epochs": 2, "export": "none", "similarity_file": "",
                                 "analogy_file": ""}, out_dir=tmp_path, progress=False)
    logs = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    per_pair = [r["hs"] / r["hs/pairs"] for r in logs]
    assert 1.0 < per_pair[0] / np.log(2) < 20
    assert per_pair[-1] < per_pair[0] - 0.1 and result["steps"] >= 1


@pytest.mark.parametrize("line, needle", [("the\tof\tnotanumber", "line 1 ('the\\tof\\tnotanumber') is not word1<TAB>word2<TAB>score"),
                                          ("the\tof\tnan", "with a finite score"), ("the\tof", "is not word1")])
def test_a_malformed_similarity_file_is_refused_before_training(tmp_path, capsys, line, needle):
    """The evaluation files are read before the training (a bad one used to surface after it, as a traceback for a
    score that is not a number, leaving OUT without final/ or vectors)."""
    bad = tmp_path / "sim.tsv"
    bad.write_text(line + "\n")
    one_error_line(genfeat(capsys, "run", str(RECIPE), "--out", str(tmp_path / "out"), "--similarity_file", str(bad),
                           "--no-progress"), needle)
    assert not (tmp_path / "out").exists()
    one_error_line(genfeat(capsys, "run", str(RECIPE), "--out", str(tmp_path / "out"), "--analogy_file",
                           str(tmp_path / "none.txt"), "--no-progress"), "cannot read evaluation file")
    assert not (tmp_path / "out").exists()


def test_figures_that_cannot_be_computed_are_null_and_seeds_still_summarise(tmp_path, capsys):
    """A corpus sharing too few words with wordsim353 / questions-words gives no Spearman or analogy figure: results.json
    writes null (standard JSON, not NaN), the seeds' summary of it is null, and --resume reads such a file back
    (the summary had raised a traceback, at the run and again at every resume)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("zeta eta theta iota\n" * 20)
    args = ["run", str(RECIPE), "--out", str(tmp_path / "out"), "--corpus", f"[{corpus}]", "--min_count", "1",
            "--epochs", "1", "--seeds", "2", "--json", "--no-progress"]
    code, out, err = genfeat(capsys, *args)
    assert code == 0, err
    summary = json.loads(out.splitlines()[-1])
    assert summary["spearman_mean"] is None and summary["analogy_median"] is None
    assert summary["vocab_size_mean"] == 4.0
    for seed in (0, 1):
        text = (tmp_path / "out" / f"seed{seed}" / "results.json").read_text()
        assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))["spearman"] is None
    code, out, err = genfeat(capsys, *args, "--resume")
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["spearman_std"] is None
