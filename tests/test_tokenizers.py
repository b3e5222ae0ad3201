"""`genfeat tokenizer train`: WordPiece and sentencepiece files that Hugging Face loads, the loader, clear errors."""

import json
import os
from pathlib import Path

import pytest

from genfeat.cli import main
from genfeat.data.tokenizers import TokenizerConfig, load_tokenizer, special_ids, train_tokenizer, word_start
from genfeat.errors import ConfigError, DataError
from genfeat.tasks.transforms import tokenize_with_offsets

TEXT = ["The lower bound is tight, and the upper bound follows from it.",
        "A newer model is wider than the older models were last year.",
        "The widest margin wins; narrower margins lose their training runs.",
        "Bounded models generalise when margins are wide and data is plentiful.",
        "Generative features help classifiers that see few labelled examples.",
        "Quickly jumping foxes vex the lazy brown dog behind the barn.",
        "Semi-supervised learning uses unlabelled reviews, graphs, and questions.",
        "Transformers attend over every position; recurrent networks carry memory."] * 25
PROBE = "The newest wider bound, narrowly tight models!"
WIKI = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "wikitext-2"


def corpus(tmp_path, lines=TEXT, name="corpus.txt"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.hf_interop
def test_wordpiece_files_load_in_hugging_face_and_encode_alike(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = train_tokenizer(TokenizerConfig("wordpiece", 120), corpus(tmp_path), tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["tokenizer.json", "tokenizer_config.json",
                                                                    "vocab.txt"]
    assert len(vocab) == 120 and special_ids(vocab) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    ids = vocab.encode(PROBE)
    assert 2 not in ids and 3 not in ids  # no [CLS]/[SEP]: the data pipeline adds them
    for cls in (transformers.BertTokenizerFast, transformers.BertTokenizer, transformers.AutoTokenizer):
        hf = cls.from_pretrained(tmp_path / "tok")
        assert hf(PROBE, add_special_tokens=False).input_ids == ids
        assert hf("a", "b").input_ids[0] == 2 and hf("a", "b").input_ids[-1] == 3
    # ids: the special tokens, then the pieces sorted (the trainer's own numbering of tied pieces varies by run)
    listed = (tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert listed[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and listed[5:] == sorted(listed[5:])
    # the vocab.txt alone (as in many Hugging Face folders) gives the same tokenizer
    (tmp_path / "tok" / "tokenizer.json").unlink()
    assert load_tokenizer(tmp_path / "tok").encode(PROBE) == ids
    pieces = [vocab.tokenizer.id_to_token(i) for i in range(len(vocab))]
    starts = word_start(vocab)
    assert any(p.startswith("##") for p in pieces)
    assert all(bool(starts[i]) == (not p.startswith("##")) for i, p in enumerate(pieces))


@pytest.mark.hf_interop
def test_sentencepiece_files_load_in_hugging_face_and_encode_alike(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = train_tokenizer(TokenizerConfig("sentencepiece", 90), corpus(tmp_path), tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["spiece.model", "tokenizer_config.json"]
    assert len(vocab) == 90
    assert special_ids(vocab) == {"unk": 0, "bos": 1, "eos": 2, "cls": 3, "sep": 4, "pad": 5, "mask": 6, "eod": 7,
                                  "eop": 8}  # XLNet's layout
    ids = vocab.encode(PROBE)
    for cls in (transformers.XLNetTokenizer, transformers.AutoTokenizer):
        hf = cls.from_pretrained(tmp_path / "tok")
        assert hf(PROBE, add_special_tokens=False).input_ids == ids
        assert hf("a", "b").input_ids[-2:] == [4, 3]  # ... <sep> <cls>
    assert load_tokenizer(tmp_path / "tok").encode(PROBE) == ids
    starts = word_start(vocab)
    assert bool(starts[vocab.sp.piece_to_id("<mask>")])
    assert all(bool(starts[i]) == vocab.sp.id_to_piece(i).startswith("\u2581") for i in range(9, len(vocab)))
    # a Hugging Face folder saved by transformers (tokenizer.json beside spiece.model in 4.x; transformers 5 may
    # write tokenizer.json alone, a Unigram model): the same ids, special tokens and word starts
    transformers.AutoTokenizer.from_pretrained(tmp_path / "tok").save_pretrained(tmp_path / "hf")
    assert (tmp_path / "hf" / "tokenizer.json").is_file()
    for alone in (False, True):
        if alone:
            (tmp_path / "hf" / "spiece.model").unlink(missing_ok=True)
        saved = load_tokenizer(tmp_path / "hf")
        assert saved.encode(PROBE) == ids and len(saved) == len(vocab)
        assert special_ids(saved) == special_ids(vocab)
        assert word_start(saved).tolist() == starts.tolist()
        # character spans of the pieces, as span extraction maps answers: the same for every piece that covers
        # characters (a bare '▁', empty in sentencepiece, may cover the next character in tokenizers)
        spans, want = tokenize_with_offsets(saved, PROBE)[1], tokenize_with_offsets(vocab, PROBE)[1]
        covering = [i for i, (start, end) in enumerate(want) if start < end]
        assert len(covering) > len(want) // 2 and [spans[i] for i in covering] == [want[i] for i in covering]
        assert [spans[i][0] for i in range(len(want))] == [start for start, _ in want]


@pytest.mark.hf_interop
def test_lowercase_is_applied_and_saved(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = train_tokenizer(TokenizerConfig("wordpiece", 110, lowercase=True), corpus(tmp_path), tmp_path / "tok")
    assert vocab.encode("THE BOUND") == vocab.encode("the bound")
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())["do_lower_case"] is True
    assert transformers.BertTokenizer.from_pretrained(tmp_path / "tok")("THE BOUND", add_special_tokens=False) \
        .input_ids == vocab.encode("the bound")


def test_a_folder_of_documents_is_one_corpus(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    corpus(tmp_path / "docs", TEXT[:2] * 10, "a.txt")
    corpus(tmp_path / "docs" / "sub", TEXT[2:4] * 10, "b.txt")
    corpus(tmp_path / "docs", ["zzzz qqqq"] * 50, ".hidden")  # hidden files are not documents
    vocab = train_tokenizer(TokenizerConfig("wordpiece", 100), tmp_path / "docs", tmp_path / "tok")
    pieces = set(vocab.tokenizer.get_vocab())
    assert "margin" in pieces or "margins" in pieces  # from sub/b.txt
    assert "z" not in pieces and "q" not in pieces


def test_bad_corpora_and_sizes_are_one_clear_error(tmp_path):
    for kind in ("wordpiece", "sentencepiece"):
        with pytest.raises(DataError, match="holds no text"):
            train_tokenizer(TokenizerConfig(kind, 50), corpus(tmp_path, ["", "   ", ""]), tmp_path / "tok")
        with pytest.raises(DataError, match=r"supports at most \d+|yields only \d+"):
            train_tokenizer(TokenizerConfig(kind, 5000), corpus(tmp_path), tmp_path / "tok")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("good line\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"'.*latin1\.txt' line 2 is not UTF-8 text.*fix: convert"):
        train_tokenizer(TokenizerConfig("wordpiece", 50), bad, tmp_path / "tok")
    with pytest.raises(DataError, match="does not exist"):
        train_tokenizer(TokenizerConfig("wordpiece", 50), tmp_path / "nope.txt", tmp_path / "tok")
    with pytest.raises(DataError, match=r"make \d+ WordPiece types, more than --vocab-size 8"):
        train_tokenizer(TokenizerConfig("wordpiece", 8), corpus(tmp_path), tmp_path / "tok")
    with pytest.raises(ConfigError, match="no room beside the 5 special tokens"):
        TokenizerConfig("wordpiece", 5)
    assert not (tmp_path / "tok").exists()  # nothing half-written by the failures


def test_out_is_replaced_whole_and_never_a_folder_of_other_files(tmp_path):
    text = corpus(tmp_path)
    train_tokenizer(TokenizerConfig("wordpiece", 120), text, tmp_path / "tok")
    before = (tmp_path / "tok" / "vocab.txt").read_text()
    with pytest.raises(DataError):  # a failed retrain leaves the old tokenizer in place
        train_tokenizer(TokenizerConfig("wordpiece", 9000), text, tmp_path / "tok")
    assert (tmp_path / "tok" / "vocab.txt").read_text() == before
    train_tokenizer(TokenizerConfig("sentencepiece", 90), text, tmp_path / "tok")  # a tokenizer folder is replaced
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["spiece.model", "tokenizer_config.json"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.md").write_text("mine")
    with pytest.raises(ConfigError, match="holding other files"):
        train_tokenizer(TokenizerConfig("wordpiece", 120), text, tmp_path / "other")
    with pytest.raises(DataError, match="holds no tokenizer.json, vocab.txt or spiece.model"):
        load_tokenizer(tmp_path / "other")
    (tmp_path / "other" / "vocab.txt").write_text("a\nb\na\n")
    with pytest.raises(DataError, match="cannot be read"):
        load_tokenizer(tmp_path / "other")


@pytest.mark.skipif(not (WIKI / "wiki.valid.tokens").is_file(), reason="needs GENFEAT_DATA with wikitext-2")
@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_cli_trains_on_wikitext2_and_encodes_held_out_text(tmp_path, capsys, kind):
    out = tmp_path / kind
    assert main(["tokenizer", "train", "--kind", kind, "--corpus", str(WIKI / "wiki.valid.tokens"),
                 "--vocab-size", "2000", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["vocab_size"] == 2000 and result["kind"] == kind
    vocab = load_tokenizer(out)
    assert len(vocab) == 2000
    with open(WIKI / "wiki.test.tokens", encoding="utf-8") as f:
        # WikiText's own "<unk>" marker is left out: sentencepiece reserves that string for its unknown piece
        held_out = [line.replace("<unk>", "").strip() for line in f if len(line.split()) > 20][:50]
    ids = [vocab.encode(line) for line in held_out]
    unk = special_ids(vocab)["unk"]
    n = sum(len(x) for x in ids)
    assert sum(x.count(unk) for x in ids) < 0.01 * n  # the subwords cover unseen text
    assert n / sum(len(line.split()) for line in held_out) < 2.0  # and are more than characters
    # a size the corpus cannot fill is one error line (a small corpus: sentencepiece reads all of it first)
    assert main(["tokenizer", "train", "--kind", kind, "--corpus", str(corpus(tmp_path)),
                 "--vocab-size", "900000", "--out", str(out)]) == 2
    assert "fix: pass --vocab-size" in capsys.readouterr().err
    assert len(load_tokenizer(out)) == 2000  # and the tokenizer written before is untouched


def test_word_start_refuses_gpt_bpe(tmp_path):
    # a BPE piece begins a word when the piece before it ends with </w>: no per-id table can say so
    vocab = train_tokenizer(TokenizerConfig("bpe", 120), corpus(tmp_path), tmp_path / "tok")
    with pytest.raises(ConfigError, match="whole-word masking"):
        word_start(vocab)


def _naive_merges(words: dict, vocab: set, vocab_size: int, join) -> list:
    """The textbook loop: recount every pair at every step, merge the most frequent (ties: smallest pair)."""
    seqs, merges = {tuple(w): n for w, n in words.items()}, []
    while len(vocab) < vocab_size:
        counts = {}
        for seq, n in seqs.items():
            for pair in zip(seq, seq[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merged = {}
        for seq, n in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if seq[i:i + 2] == best:
                    out.append(join(*best))
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        seqs = merged
        merges.append(best)
        vocab.add(join(*best))
    return merges


def test_learn_merges_equals_the_textbook_loop_on_wikitext_words():
    from collections import Counter

    from genfeat.data.tokenizers import learn_merges

    with open(WIKI / "wiki.valid.tokens", encoding="utf-8") as f:
        counts = Counter(w for line in list(f)[:400] for w in line.split())
    words = {(*w[:-1], w[-1] + "</w>"): n for w, n in counts.items()}
    alphabet = {s for w in words for s in w} | {c for w in counts for c in w}
    size = len(alphabet) + 300
    fast, slow = set(alphabet), set(alphabet)
    assert learn_merges(words, fast, size, str.__add__) == _naive_merges(words, slow, size, str.__add__)
    assert fast == slow and len(fast) == size
    # "aaaa": a pair of one symbol twice merges left to right, and the count of ('aa', 'aa') is found
    assert learn_merges({("a", "a", "a", "a"): 3}, {"a"}, 3, str.__add__) == [("a", "a"), ("aa", "aa")]
    # a tie goes to the smaller pair; the vocabulary stops the loop
    assert learn_merges({("c", "d"): 2, ("a", "b"): 2}, {"a", "b", "c", "d"}, 5, str.__add__) == [("a", "b")]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_training_is_a_function_of_the_corpus_across_processes(tmp_path, kind):
    # tokenizers' own trainers broke count ties in a per-process hash order: two runs kept different pieces
    import subprocess
    import sys

    lines = [" ".join(f"w{i}{chr(97 + j)}" for j in range(i % 7 + 1)) for i in range(300)]  # many equal counts
    files = []
    for run in ("a", "b"):
        subprocess.run([sys.executable, "-m", "genfeat.cli", "tokenizer", "train", "--kind", kind, "--corpus",
                        str(corpus(tmp_path, TEXT + lines)), "--vocab-size", "250", "--out", str(tmp_path / run)],
                       check=True, capture_output=True)
        files.append((tmp_path / run / "tokenizer.json").read_bytes())
    assert files[0] == files[1]


def test_a_tokenizer_json_the_installed_tokenizers_cannot_read_says_to_install_the_release_that_wrote_it(tmp_path):
    """A tokenizer.json of the tokenizers layout whose parts the installed release does not know (transformers 5
    saves XLNet's with a Metaspace pre-tokenizer that tokenizers 0.15 cannot read) names the installed version and
    the fix, a release that reads it; other broken JSON stays 'not a tokenizers JSON file'."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from genfeat.data.vocab import BPEVocab

    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    layout = json.loads(tok.to_str())
    layout["pre_tokenizer"] = {"type": "PreTokenizerOfALaterRelease", "split": True}
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(layout))
    with pytest.raises(DataError, match=r"the installed tokenizers [0-9.]+ cannot read it, though it has a tokenizers "
                                        r"JSON file.s layout: another tokenizers release wrote it, or it is corrupt.*"
                                        r"fix: install the tokenizers release that wrote the file"):
        load_tokenizer(folder)
    with pytest.raises(ConfigError, match="fix: install the tokenizers release that wrote the file"):
        BPEVocab.from_file(folder / "tokenizer.json")
    (folder / "tokenizer.json").write_text(json.dumps({"model": 1}))
    with pytest.raises(DataError, match="not a tokenizers JSON file.*fix: pass a folder written by"):
        load_tokenizer(folder)
