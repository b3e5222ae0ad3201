"""Data: published corpus statistics, registry errors, vocabularies, LM batching."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from genfeat.data import registry
from genfeat.data.corpora import load_corpus, load_split
from genfeat.data.lm import LMOrderedStream, LMShuffledStream, iter_lm_segments
from genfeat.data.vocab import BPEVocab, SentencePieceVocab, SymbolVocab, load_vocab
from genfeat.errors import ConfigError, DataError

from _data_fixtures import unverified

DATA = os.environ.get("GENFEAT_DATA")
needs_data = pytest.mark.skipif(not DATA or not (Path(DATA) / "ptb" / "ptb.train.txt").is_file(),
                                reason="needs GENFEAT_DATA with the shared corpora")


@needs_data
def test_ptb_published_counts():
    corpus = load_corpus("ptb")
    assert {k: v.numel() for k, v in corpus.splits.items()} == {"train": 929589, "valid": 73760, "test": 82430}
    assert len(corpus.vocab) == 10000


@needs_data
def test_wikitext2_and_shakespeare_counts():
    # No WikiText-2 train file here: encode valid/test with a vocabulary of their own types.
    words = (Path(DATA) / "wikitext-2" / "wiki.valid.tokens").read_text().split()
    words += (Path(DATA) / "wikitext-2" / "wiki.test.tokens").read_text().split()
    vocab = SymbolVocab.build(words + ["<eos>"], "word", specials=("<eos>",))
    assert load_split("wikitext2:valid", vocab)[0].numel() == 217646
    assert load_split("wikitext2:test", vocab)[0].numel() == 245569
    shakespeare = load_corpus("tinyshakespeare")
    assert len(shakespeare.vocab) == 65
    assert shakespeare.splits["train"].numel() == 1003854 and shakespeare.splits["val"].numel() == 111540
    text = (Path(DATA) / "tinyshakespeare" / "input.txt").read_text()
    assert shakespeare.vocab.decode(shakespeare.splits["val"][:50].tolist()) == text[1003854:1003904]


@needs_data
def test_checksum_mismatch_and_missing_file(tmp_path, monkeypatch):
    bad = tmp_path / "ptb"
    bad.mkdir()
    (bad / "ptb.test.txt").write_text("corrupted\n")
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"checksum mismatch for '.*ptb.test.txt'"):
        registry.resolve("ptb", "test")

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(registry.urllib.request, "urlopen", offline)
    with pytest.raises(DataError, match=r"ptb.valid.txt' is missing and downloading it from https://.*fix: "):
        registry.resolve("ptb", "valid")
    assert not (bad / "ptb.valid.txt").exists(), "a failed download must not leave a partial file"

    class WrongBytes:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            import io
            return io.BytesIO(b"not the real file\n")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(registry.urllib.request, "urlopen", WrongBytes)
    with pytest.raises(DataError, match=r"'.*ptb.valid.txt' downloaded from https://\S+ has sha256 [0-9a-f]{64}, expected"):
        registry.resolve("ptb", "valid")
    assert not (bad / "ptb.valid.txt").exists(), "a download that fails verification must not be kept"


def test_sha1_is_checked_where_no_sha256_is_published(tmp_path, monkeypatch):
    # WikiText-103 declares SHA-1s only: a wrong file must still be caught, naming the algorithm.
    (tmp_path / "wikitext-103").mkdir()
    (tmp_path / "wikitext-103" / "wiki.valid.tokens").write_text(" = Not WikiText = \n")
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"checksum mismatch for '.*wiki.valid.tokens': expected sha1 c326ac59"):
        registry.resolve("wikitext103", "valid")


def test_git_blob_id_is_checked_for_ptb_char_train(tmp_path, monkeypatch):
    (tmp_path / "hello").write_bytes(b"hello\n")
    assert registry.digest_of(tmp_path / "hello", "git-blob") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    (tmp_path / "ptb" / "char").mkdir(parents=True)
    (tmp_path / "ptb" / "char" / "ptb.char.train.txt").write_text("a b c _ d e\n")
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    with pytest.raises(DataError, match=r"ptb.char.train.txt': expected git-blob 250edea8"):
        registry.resolve("ptb_char", "train")


def test_npy_and_text_files(tmp_path):
    ids = np.array([3, 1, 4, 1, 5], dtype=np.int32)
    np.save(tmp_path / "ids.npy", ids)
    tokens, ids_vocab = load_split(str(tmp_path / "ids.npy"))
    assert tokens.tolist() == [3, 1, 4, 1, 5] and tokens.dtype == torch.long
    # without a vocabulary the ids are their own: size = largest id + 1, saved and read back like any other
    assert len(ids_vocab) == 6 and ids_vocab.decode([5, 0]) == "5 0" and ids_vocab.encode("4 2") == [4, 2]
    ids_vocab.save(tmp_path / "ids_vocab.json")
    assert len(load_vocab(tmp_path / "ids_vocab.json")) == 6
    with pytest.raises(ConfigError, match="outside"):
        ids_vocab.encode("6")
    np.save(tmp_path / "bad.npy", np.zeros((2, 2)))
    with pytest.raises(DataError, match="not 1-D token ids"):
        load_split(str(tmp_path / "bad.npy"))
    (tmp_path / "t.txt").write_text("a b a\nc a\n")
    tokens, vocab = load_split(str(tmp_path / "t.txt"))
    assert vocab.decode(tokens.tolist()).split() == ["a", "b", "a", "c", "a"]
    with pytest.raises(DataError, match="neither a registered corpus nor an existing file"):
        load_split(str(tmp_path / "nope.txt"))


def test_ordered_stream_is_contiguous_resumable_and_shardable():
    tokens = torch.arange(1000)
    s = LMOrderedStream(tokens, batch_size=4, tgt_len=7)
    first = next(s)
    assert first.new_epoch and first.input.shape == (4, 7)
    assert torch.equal(first.target, first.input + 1)
    second = next(s)
    assert torch.equal(second.input[:, 0], first.input[:, -1] + 1), "segments must be consecutive"
    for _ in range(5):
        next(s)
    state = s.state_dict()
    expected = [next(s) for _ in range(40)]  # crosses an epoch boundary
    assert any(b.new_epoch for b in expected)
    t = LMOrderedStream(tokens, batch_size=4, tgt_len=7)
    t.load_state_dict(state)
    assert all(torch.equal(a.input, next(t).input) for a in expected)
    shards = [LMOrderedStream(tokens, 4, 7) for _ in range(2)]
    for r, sh in enumerate(shards):
        sh.shard(r, 2)
    whole = LMOrderedStream(tokens, 4, 7)
    for _ in range(3):
        assert torch.equal(torch.cat([next(sh).input for sh in shards]), next(whole).input)
    with pytest.raises(ConfigError, match="not divisible"):
        LMOrderedStream(tokens, 3, 7).shard(0, 2)
    # 1000 tokens in 4 streams of 250: 249 targets per row, 35 full segments of 7 and one of 4.
    assert LMOrderedStream(tokens, 4, 7).n_batches == 36
    full = LMOrderedStream(tokens, 4, 7, drop_last_partial=True)
    assert full.n_batches == 35 and all(next(full).input.shape == (4, 7) for _ in range(80))


def test_shuffled_stream_covers_segments_and_resumes():
    tokens = torch.arange(401)
    s = LMShuffledStream(tokens, batch_size=2, tgt_len=10, seed=3)
    n = s.n_batches
    starts = sorted(int(next(s).input[0, 0]) for _ in range(n))
    assert starts == list(range(0, 200, 10))
    state = s.state_dict()
    a = [next(s).input for _ in range(5)]
    t = LMShuffledStream(tokens, batch_size=2, tgt_len=10, seed=3)
    t.load_state_dict(state)
    assert all(torch.equal(x, next(t).input) for x in a)


@pytest.mark.parametrize("b, t", [(1, 7), (3, 5)])
def test_eval_segments_predict_every_token_once(b, t):
    tokens = torch.arange(100)
    targets = torch.cat([batch.target for batch in iter_lm_segments(tokens, b, t)], 1)
    if b == 1:
        assert targets.flatten().tolist() == list(range(1, 100))
    else:
        per = 100 // b
        assert targets.tolist() == [list(range(r * per + 1, (r + 1) * per)) for r in range(b)]


def test_vocab_round_trips(tmp_path):
    v = SymbolVocab.build("the cat the dog <eos>".split(), "word", specials=("<eos>",), unk="<unk>")
    v.save(tmp_path / "v.json")
    w = load_vocab(tmp_path / "v.json")
    assert w.symbols == v.symbols and w.encode("the bird\n") == v.encode("the bird\n")
    text = ["low lower lowest", "new newer newest", "wide wider widest"] * 20
    for vocab in (BPEVocab.train(text, 60), SentencePieceVocab.train(text, 30)):
        vocab.save(tmp_path / f"{vocab.kind}.json")
        again = load_vocab(tmp_path / f"{vocab.kind}.json")
        assert again.decode(again.encode("lower newest")) == "lower newest"
        assert again.encode("wider") == vocab.encode("wider")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(Exception, match="cannot read vocabulary"):
        load_vocab(tmp_path / "broken.json")


@needs_data
def test_name_split_spec_and_unknown_split():
    corpus = load_corpus("ptb:valid")
    assert list(corpus.splits) == ["valid"] and corpus.splits["valid"].numel() == 73760
    assert len(corpus.vocab) == 10000, "the vocabulary must still come from the training split"
    from genfeat.data.vocab import VocabConfig

    small = load_corpus("ptb:valid", vocab_cfg=VocabConfig(max_size=100))
    assert len(small.vocab) == 100, "vocab_cfg applies to NAME:SPLIT too"
    # the words beyond the 100 kept are out of the vocabulary; the <unk>s written in PTB are not
    written = (Path(DATA) / "ptb" / "ptb.valid.txt").read_text().split().count("<unk>")
    assert small.oov["valid"] == int((small.splits["valid"] == small.vocab.unk_id).sum()) - written > 0
    assert load_corpus("tinyshakespeare:valid").splits["val"].numel() == 111540
    with pytest.raises(DataError, match="has no split 'dev'"):
        load_split("ptb:dev")


def test_vocab_config_and_max_size_counts_unk():
    from genfeat.data.vocab import VocabConfig

    with pytest.raises(ConfigError, match="min_freq"):
        VocabConfig(min_freq=0)
    v = SymbolVocab.build("a a a b b c d".split(), "word", max_size=3, unk="<unk>", add_eos=False)
    assert v.symbols == ["a", "b", "<unk>"] and v.encode("d a\n") == [2, 0]


@pytest.mark.parametrize("n, batch_size, world", [(11, 4, 2), (16, 6, 3), (10, 4, 2), (7, 8, 1)])
def test_tensor_stream_without_drop_last_shows_every_example_once_per_epoch_across_ranks(n, batch_size, world):
    from genfeat.framework.stream import TensorStream

    data = {"x": torch.arange(n) * 10, "y": torch.arange(n)}
    ranks = [TensorStream(data, batch_size, seed=5, drop_last=False) for _ in range(world)]
    for rank, stream in enumerate(ranks):
        stream.shard(rank, world)
    steps = -(-n // min(batch_size, n))
    for epoch in range(2):
        seen = []
        for _ in range(steps):
            parts = [next(stream) for stream in ranks]
            assert all(torch.equal(p["x"], p["y"] * 10) for p in parts), "tensors must stay aligned"
            sizes = [len(p["y"]) for p in parts]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
            seen += [i for p in parts for i in p["y"].tolist()]
        assert sorted(seen) == list(range(n)), f"epoch {epoch}: every example exactly once"
        assert all(stream.epoch == epoch for stream in ranks)


def test_tensor_stream_refuses_a_short_batch_a_rank_would_get_nothing_of():
    from genfeat.framework.stream import TensorStream

    data = {"x": torch.arange(9)}
    with pytest.raises(ConfigError, match="holds 1 of the 9 examples, fewer than the 2 processes"):
        TensorStream(data, 4, drop_last=False).shard(0, 2)
    TensorStream(data, 4).shard(1, 2)  # with drop_last the short batch is never drawn
    with pytest.raises(ConfigError, match="not divisible by the 2 processes"):
        TensorStream(data, 3).shard(0, 2)


def test_byte_vocab():
    from genfeat.data.vocab import ByteVocab

    v = ByteVocab()
    assert len(v) == 256 and v.encode("aé€\n") == [97, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 10]
    assert v.decode(v.encode("aé€\n")) == "aé€\n"
    assert v.decode([0xC3]) == "\ufffd", "a cut multi-byte character decodes to U+FFFD instead of failing"


@pytest.mark.parametrize("name", ["enwik8", "text8"])
def test_enwik8_and_text8_are_cut_at_90m_and_95m(tmp_path, monkeypatch, name):
    # The published splits (Mahoney's files as used by Chung et al. 2015 and Transformer-XL): the first
    # 90M bytes / characters train, the next 5M valid, the last 5M test. A 100M-byte stand-in, sparse
    # (NULs but for markers around the cuts); enwik8 is byte level, so a character cut at a boundary stays cut.
    from genfeat.data.vocab import ByteVocab

    unverified(monkeypatch, tmp_path, name, {}, keep_size=True)
    path = tmp_path / registry.get_dataset(name).files["all"].relpath
    path.parent.mkdir(parents=True)
    cut = b"x\xc3\xa9y" if name == "enwik8" else b"xeey"
    with open(path, "wb") as f:
        f.truncate(100_000_000)
        for at, marker in ((0, b"ab"), (89_999_998, cut), (94_999_998, b"pq rs"), (99_999_998, b"zz")):
            f.seek(at)
            f.write(marker)
    # text8 is 27 characters, lower case a-z and space; the stand-in has NULs between the markers
    vocab = ByteVocab() if name == "enwik8" else \
        SymbolVocab(["\x00", " "] + [chr(c) for c in range(ord("a"), ord("z") + 1)], "char")
    corpus = load_corpus(name, vocab, splits={"valid", "test"})
    valid, test = corpus.splits["valid"], corpus.splits["test"]
    assert valid.numel() == test.numel() == 5_000_000
    decode = (lambda ids: bytes(ids).decode("latin-1")) if name == "enwik8" else vocab.decode
    expected_start = "\xa9y" if name == "enwik8" else "ey"
    assert decode(valid[:2].tolist()) == expected_start and decode(valid[-2:].tolist()) == "pq"
    assert decode(test[:3].tolist()) == " rs" and decode(test[-2:].tolist()) == "zz"


def char_ptb(line: str) -> str:
    """A word-level PTB line in the character-level format (Mikolov et al. 2012; awd-lstm-lm's pennchar):
    each word's characters joined by spaces, words by " _ ", and " \\n" at the end of the line."""
    return " _ ".join(" ".join(word) for word in line.split()) + " \n"


def test_ptb_char_and_text8_formats(tmp_path, monkeypatch):
    lines = ["the <unk> cat sat", "on N mats", "a cat 's hat"]
    files = {split: "".join(char_ptb(line) for line in part).encode()
             for split, part in (("train", lines), ("valid", lines[1:]), ("test", lines[:1]))}
    unverified(monkeypatch, tmp_path, "ptb_char", files)
    corpus = load_corpus("ptb_char")
    vocab = corpus.vocab
    # one token per character, "_" between words, <eos> per line; <unk> is spelt out in this version
    assert set(vocab.symbols) == set("".join(lines).replace(" ", "")) | {"_", "<eos>"}
    assert len(corpus.splits["valid"]) == sum(len(line.replace(" ", "")) + len(line.split()) for line in lines[1:])
    text = vocab.decode(corpus.splits["valid"].tolist())
    assert [row.replace(" ", "").replace("_", " ") for row in text.splitlines()] == lines[1:]

    alphabet = "the quick brown fox jumps over a lazy dog"
    unverified(monkeypatch, tmp_path, "text8", {"all": (alphabet * 3).encode()})
    text8 = load_corpus("text8")
    # 27 types: the letters a-z and space (one line, no newline); a file this short is all training text
    assert len(text8.vocab) == 27 and text8.vocab.symbols[0] == " "
    assert text8.vocab.decode(text8.splits["train"].tolist()) == alphabet * 3
    assert text8.splits["valid"].numel() == text8.splits["test"].numel() == 0


@needs_data
def test_ptb_char_valid_and_test_follow_the_word_level_files():
    words = {split: (Path(DATA) / "ptb" / f"ptb.{split}.txt").read_text().splitlines() for split in ("valid", "test")}
    symbols = [s for split in words for s in (Path(DATA) / "ptb" / "char" / f"ptb.char.{split}.txt").read_text().split()]
    vocab = SymbolVocab.build(symbols + ["<eos>"], "word", specials=("<eos>",))
    assert len(vocab) == 50, "49 symbols and <eos>: the alphabet size usually reported for character-level PTB"
    for split, count in (("valid", 393042), ("test", 442423)):
        tokens, _ = load_split(f"ptb_char:{split}", vocab)
        assert tokens.numel() == count == sum(len(line.replace(" ", "")) + len(line.split()) for line in words[split])
        text = vocab.decode(tokens.tolist())
        assert [row.replace(" ", "").replace("_", " ") for row in text.splitlines()] == \
            [" ".join(line.split()) for line in words[split]]


def test_tokens_outside_the_vocabulary_are_counted_per_split(tmp_path):
    from genfeat.data.vocab import ByteVocab

    (tmp_path / "w.txt").write_text("a b <unk> c\nb d\n")
    words = SymbolVocab.build("a b <eos> <unk>".split(), "word", specials=("<eos>",), unk="<unk>")
    corpus = load_corpus(str(tmp_path / "w.txt"), words)
    assert corpus.oov == {"all": 2}, "c and d; the text's own <unk> is a word of the vocabulary"
    assert corpus.splits["all"].tolist() == words.encode("a b <unk> <unk>\nb <unk>\n")
    chars = SymbolVocab(list("ab?"), "char", unk="?")
    corpus = load_corpus(str(tmp_path / "w.txt"), chars)
    assert corpus.splits["all"].numel() == 16 and corpus.oov == {"all": 13}
    assert chars.decode(corpus.splits["all"].tolist()) == "a?b?????????b???"
    assert load_corpus(str(tmp_path / "w.txt"), ByteVocab()).oov == {"all": 0}
    text = ["low lower lowest", "new newer newest"] * 20
    pieces = SentencePieceVocab.train(text, 30)
    (tmp_path / "s.txt").write_text("lower Ωnew\n")
    assert load_corpus(str(tmp_path / "s.txt"), pieces).oov == {"all": 1}, "Ω was never seen"
    from tokenizers import Tokenizer, models, pre_tokenizers

    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "b": 2, "##b": 3}, unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "p.txt").write_text("ab b zz a\n")
    corpus = load_corpus(str(tmp_path / "p.txt"), BPEVocab(wordpiece))
    assert corpus.splits["all"].tolist() == [1, 3, 2, 0, 1] and corpus.oov == {"all": 1}
    with pytest.raises(DataError, match="'enwik8' is byte level but the vocabulary given is of kind 'word'"):
        load_split("enwik8:valid", words)


@pytest.mark.parametrize("edit, needle", [
    ({"symbols": ["a", "b", "a", "<unk>"]}, "1 repeated entries"),
    ({"symbols": "abc"}, "not a list of strings"),
    ({"unk": "<UNK>"}, "is not a symbol"),
    ({"add_eos": "false"}, r"'add_eos' \('false'\) is not true/false"),
])
def test_a_hand_edited_vocabulary_is_refused_when_it_cannot_mean_what_it_says(tmp_path, edit, needle):
    """A repeated symbol encoded a word with another id (silently); an unk that is not a symbol was a KeyError at the
    first unknown word; a string add_eos counted as true."""
    import json

    from genfeat.errors import CheckpointError

    SymbolVocab(["a", "b", "c", "<unk>"], "word", unk="<unk>").save(tmp_path / "v.json")
    data = {**json.loads((tmp_path / "v.json").read_text()), **edit}
    (tmp_path / "v.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=needle):
        load_vocab(tmp_path / "v.json")
    (tmp_path / "ids.json").write_text(json.dumps({"kind": "ids", "size": -5}))
    with pytest.raises(CheckpointError, match="'size' is -5, not a positive integer"):
        load_vocab(tmp_path / "ids.json")
