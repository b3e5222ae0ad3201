"""The document pipeline (genfeat.data.documents): reading documents, pairs, XLNet's segments, BERT's examples."""

import io
import os
import tarfile
from pathlib import Path

import pytest
import torch

from genfeat.data.documents import (IMDB_VALID_FROM, PairLayout, XLNetPairStream, _IMDB_REVIEW, _text_lines,
                                    _wiki_articles, bert_examples, encode_documents, read_documents, split_pair,
                                    split_sentences)
from genfeat.errors import ConfigError, DataError
from genfeat.tasks import catalog

DATA = Path(os.environ.get("GENFEAT_DATA", ""))
LAYOUT = PairLayout(sep=1, cls=2)


class Words:
    """A word vocabulary that grows as it encodes (ids from 3 on; 0-2 are special)."""

    def __init__(self):
        self.index = {}

    def encode(self, text):
        return [self.index.setdefault(w, len(self.index) + 3) for w in text.split()]


def stream(n_sent=60, words=7):
    """A token stream of n_sent sentences of ``words`` tokens: token id = 100 * sentence + position + 3."""
    ids = torch.tensor([100 * s + i + 3 for s in range(n_sent) for i in range(words)])
    sent = torch.arange(n_sent).repeat_interleave(words)
    return ids, sent


def test_sentences_documents_and_bad_lines(tmp_path):
    assert split_sentences('It works. "Really?" Yes! 3 more. e.g. this') == ["It works.", '"Really?"', "Yes!",
                                                                              "3 more. e.g. this"]
    text = tmp_path / "docs.txt"
    text.write_text("One. Two.\nThree.\n\n\nFour.\n")
    assert read_documents(str(text)) == [["One.", "Two.", "Three."], ["Four."]]
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("A one.\n\nA two.")
    (folder / "b.txt").write_text("B.")
    assert read_documents(str(folder)) == [["A one.", "A two."], ["B."]]
    assert read_documents(str(folder), max_documents=1) == [["A one.", "A two."]]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine.\n\xff\xfe broken\n")
    with pytest.raises(DataError, match="line 2 is not UTF-8"):
        read_documents(str(bad))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n")
    with pytest.raises(DataError, match="holds no text"):
        read_documents(str(blank))
    with pytest.raises(DataError, match="neither a registered text corpus"):
        read_documents(str(tmp_path / "missing"))


@pytest.mark.skipif(not (DATA / "imdb" / "aclImdb_v1_unsup.tar.gz").is_file(), reason="needs GENFEAT_DATA with imdb")
def test_imdb_unlabelled_reviews_never_the_test_reviews():
    docs = read_documents("imdb:train", max_documents=3)
    assert len(docs) == 3 and all(len(d) > 1 for d in docs)
    assert not any("<br" in s for d in docs for s in d)
    assert _IMDB_REVIEW.search("aclImdb/test/pos/1_10.txt") is None
    assert _IMDB_REVIEW.search("aclImdb/train/pos/1_10.txt").group(1) == "pos"
    assert int(_IMDB_REVIEW.search("aclImdb/train/unsup/49000_0.txt").group(2)) == IMDB_VALID_FROM
    with pytest.raises(DataError, match="kept for fine-tuning"):
        read_documents("imdb:test")


def _tar(path: Path, members: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))


def test_a_partial_copy_of_an_imdb_archive_is_refused_once_read_to_its_end(tmp_path, monkeypatch):
    """imdb:train / imdb:valid loaded a partial copy of the archives silently. Every unlabelled review is
    counted, the held-out ones (N >= 49,000) too, in the one pass that reads them."""
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    unsup = tmp_path / "imdb" / "aclImdb_v1_unsup.tar.gz"
    _tar(unsup, {"aclImdb/train/unsup/1_0.txt": "One. Two.", "aclImdb/train/unsup/49000_0.txt": "Held out.",
                 "aclImdb/train/unsup/49001_0.txt": "Also held out."})
    labelled = tmp_path / "imdb" / "aclImdb_v1_labeled.tar.gz"
    _tar(labelled, {"aclImdb/train/pos/1_9.txt": "Good.", "aclImdb/test/neg/2_1.txt": "Bad."})
    with pytest.raises(DataError, match=rf"'{unsup}' is a partial copy of the IMDB archive: aclImdb/train/unsup holds 3 "
                                        r"of its 50,000 reviews\. fix: replace it"):
        read_documents("imdb:valid")
    assert read_documents("imdb:valid", max_documents=1) == [["Held out."]], "a part read checks nothing"
    monkeypatch.setitem(catalog.IMDB_REVIEWS, "unsup", 3)
    assert read_documents("imdb:valid") == [["Held out."], ["Also held out."]]
    with pytest.raises(DataError, match=rf"'{labelled}' is a partial copy of the IMDB archive: aclImdb/train/neg holds 0 "
                                        "of its 12,500 reviews; aclImdb/train/pos holds 1 of its 12,500 reviews"):
        read_documents("imdb:train")


@pytest.mark.skipif(not (DATA / "wikitext-2" / "wiki.valid.tokens").is_file(), reason="needs GENFEAT_DATA")
def test_wikitext_articles_and_ptb_lines():
    docs = read_documents("wikitext2:valid")
    assert len(docs) == 60                      # the articles of WikiText-2's validation split
    assert docs[0][0].startswith("Homarus gammarus , known as")
    # test: 60 articles, not 62: two formula lines of "Constant k filter" have a title's shape after a line of text
    test = read_documents("wikitext2:test")
    assert len(test) == 60 and test[0][0].startswith("Robert <unk> is an English film")
    assert any(s == "= 1 <unk> / s and a nominal <unk> k =" for doc in test for s in doc)
    (ptb,) = read_documents("ptb:valid")
    assert len(ptb) == 3370                     # one sentence per line


def test_wikitext_titles_stand_between_blank_lines(tmp_path):
    text = tmp_path / "wiki.tokens"
    text.write_text(" = First = \n \n A filter of <unk> \n = 1 <unk> and C = \n 2 more . \n \n = = Part = = \n \n"
                    " Text . \n \n = Second = \n \n Two . \n \n = Last = \n")
    assert list(_wiki_articles(_text_lines(text))) == [
        ["A filter of <unk>", "= 1 <unk> and C =", "2 more .", "= = Part = =", "Text ."], ["Two ."]]


def test_encode_documents_ends_documents_with_eod():
    ids, sent = encode_documents([["a b.", "c."], ["d e f."]], Words(), eod_id=0)
    assert ids.tolist() == [3, 4, 5, 0, 6, 7, 8, 0]
    assert sent.tolist() == [0, 0, 1, 2, 3, 3, 3, 4]


def test_pairs_cut_at_sentences_and_half_are_next():
    _, sent = stream()
    sent = sent.tolist()
    g = torch.Generator().manual_seed(0)
    labels = []
    for begin in range(0, 300, 7):
        (a0, a1), (b0, b1), label, end = split_pair(sent, begin, 20, g)
        assert a0 == begin and (a1 - a0) + (b1 - b0) == 20 and a1 > a0 and b1 > b0
        # A ends at a sentence boundary unless it was the longer one and was cut to fit
        assert sent[a1] != sent[a1 - 1] or a1 - a0 >= b1 - b0
        if label == 0:
            # B starts at the sentence where A was cut (A may have lost its last tokens to fit)
            assert a1 <= b0 < a1 + 7 and sent[b0] != sent[b0 - 1] and end == b1
        else:
            assert end == a1 and (b0 == 0 or sent[b0] != sent[b0 - 1])
        labels.append(label)
    assert 0.3 < sum(labels) / len(labels) < 0.7
    assert split_pair(sent, len(sent) - 20, 20, g) is None


def test_xlnet_segments_continue_their_rows_and_shard_exactly():
    ids, sent = stream()
    full = XLNetPairStream(ids, sent, 4, 16, 6, LAYOUT, bi_data=True, seed=3)
    b0, b1 = next(full), next(full)
    x = b0["input_ids"]
    assert x.shape == (4, 16) and (x[:, -1] == 2).all() and ((x == 1).sum(1) == 2).all()
    types = b0["token_type_ids"]
    assert (types[:, -1] == 2).all() and (types[:, :6] == 0).all() and (types[:, -2] == 1).all()
    # the reused part of segment 2 is the text right after the reused part of segment 1, in every row
    for r in range(2):
        row = full.rows[r][0]
        assert torch.equal(b0["input_ids"][r, :6], row[:6]) and torch.equal(b1["input_ids"][r, :6], row[6:12])
    assert b0["input_ids"][2, 0] == ids[-1], "the second half reads the stream reversed"
    assert b0["new_epoch"] and not b1["new_epoch"]
    # two ranks each get a forward and a reversed row; together they are the global batch
    parts = []
    for rank in range(2):
        s = XLNetPairStream(ids, sent, 4, 16, 6, LAYOUT, bi_data=True, seed=3)
        s.shard(rank, 2)
        parts.append(next(s))
    for key in ("input_ids", "token_type_ids", "next_sentence_label", "seed"):
        joined = torch.cat([parts[0][key][:1], parts[1][key][:1], parts[0][key][1:], parts[1][key][1:]])
        assert torch.equal(joined, b0[key]), key
    again = XLNetPairStream(ids, sent, 4, 16, 6, LAYOUT, bi_data=True, seed=3)
    again.load_state_dict(full.state_dict())
    assert torch.equal(next(again)["input_ids"], next(full)["input_ids"])
    with pytest.raises(ConfigError, match="divisible by 8"):
        XLNetPairStream(ids, sent, 4, 16, 6, LAYOUT, bi_data=True).shard(0, 4)
    with pytest.raises(ConfigError, match="reuse_len"):
        XLNetPairStream(ids, sent, 4, 16, 12, LAYOUT)


def test_bert_examples_layout():
    ids, sent = stream()
    ex = bert_examples(ids, sent, 16, LAYOUT, True, torch.Generator().manual_seed(0))
    x, types = ex["input_ids"], ex["token_type_ids"]
    assert x.shape[1] == 16 and (x[:, 0] == 2).all() and (x[:, -1] == 1).all() and ((x == 1).sum(1) == 2).all()
    first_sep = (x == 1).long().argmax(1)
    assert torch.equal(types.sum(1), 15 - first_sep)
    assert set(ex["next_sentence_label"].tolist()) == {0, 1}
    plain = bert_examples(ids, sent, 16, LAYOUT, False, torch.Generator())
    assert plain["input_ids"].shape == (ids.numel() // 14, 16)
    assert torch.equal(plain["input_ids"][1, 1:-1], ids[14:28])
