"""Pretraining text as documents of sentences, and the sentence pairs built from it (XLNet, BERT).

**Documents.** :func:`read_documents` reads a corpus into documents, each a list of sentences:

- ``imdb:train`` / ``imdb:valid``: IMDB reviews (Maas et al. 2011) as unlabelled text, read straight
  from the archives (``imdb/aclImdb_v1_unsup.tar.gz`` and ``imdb/aclImdb_v1_labeled.tar.gz``, or the
  official ``aclImdb_v1.tar.gz``, which holds both). ``train`` is the 50,000 unlabelled reviews
  ``train/unsup/N_0.txt`` with N < 49,000 (archive order) followed by the 25,000 labelled training
  reviews ``train/{neg,pos}``; ``valid`` is the 1,000 unlabelled reviews with N >= 49,000. The test
  reviews are never read (the fine-tuning tasks score them). ``<br />`` tags end paragraphs. An
  archive read to its end must hold all 50,000 unlabelled reviews, and 12,500 of each label in
  ``train`` (a partial copy is a DataError); reading only the first ``max_documents`` checks nothing.
- ``wikitext2:valid`` / ``wikitext2:test`` (and ``train`` where the file is present): one document
  per article (a top-level `` = Title = `` line between blank lines starts one and is dropped; section
  headings `` = = Section = = `` stay as lines of text; 60 articles in valid and in test).
- ``ptb:train`` / ``ptb:valid`` / ``ptb:test``: one sentence per line and no document boundaries,
  so each split is one document.
- a text file: documents separated by blank lines; a folder: every file one document.

Each non-blank line is split into sentences after ``.``, ``!`` or ``?`` followed by white space
and an upper-case letter, digit or opening quote/bracket (:func:`split_sentences`): a heuristic,
enough to give the pair builders sentence boundaries to cut at. A line that is not UTF-8 is one
:class:`~genfeat.errors.DataError` naming the file and line; blank lines only separate documents.

**Token stream.** :func:`encode_documents` tokenises every sentence (no special tokens) into one
stream of ids with a sentence index per token; with ``eod_id`` (XLNet's ``<eod>``) each document
ends with that token, as in XLNet's pipeline.

**Pairs.** :func:`split_pair` cuts the stream at ``begin`` into segments A and B of ``total``
tokens together, A ending at a sentence boundary: with probability 1/2 (or when A reaches the
end of the text without one) B is a stretch of whole sentences taken from a random place of the
stream ("not next", label 1), otherwise the sentences that follow A (label 0, as BERT's
``next_sentence_label``); the longer segment is then cut from its end until the pair fits.

- :class:`XLNetPairStream` (XLNet's pipeline, Yang et al. 2019): the stream is cut into
  ``batch_size`` contiguous rows; each segment of a row is ``reuse_len`` tokens that continue the
  row, then a pair ``A <sep> B <sep> <cls>`` (``<cls>`` last), segment ids 0 for the reused part,
  A and its ``<sep>``, 1 for B and its ``<sep>``, 2 for ``<cls>``. The row advances by
  ``reuse_len``, so the memory of a segment's first ``reuse_len`` positions (``model.reuse_len``)
  is exactly the context of the next segment's first positions: long documents feed consecutive
  batches. With ``bi_data`` the second half of the rows reads the stream reversed (the
  bidirectional pipeline, thesis §2.2).
- :func:`bert_examples`: ``[CLS] A [SEP] B [SEP]`` examples (or ``[CLS] text [SEP]`` without NSP)
  read once through the stream, each starting where the previous pair's text ended.

Randomness: every example of :class:`XLNetPairStream` carries ``seed``, a number fixed by the
stream's seed, the step and the example's row *in the global batch*; the pair cut is drawn from it,
and the objectives draw their masks and orders from it too. So a run split over torchrun ranks
sees exactly the examples and masks of one process with the same global batch, and a resumed run
those of the uninterrupted one.

Axes: b batch (rows), t segment length, N tokens of the stream.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor

from ..config import Config
from ..errors import ConfigError, DataError
from .registry import DatasetSpec, FileSpec, register, resolve

register(DatasetSpec("imdb_unsup", {
    # shared/data's file is a repack of the official train/unsup review files (imdb/PROVENANCE.md,
    # sha256 b917449c766d2a75573ef4cb9fbf9f5fe43d0710c7b5a6b8da33a3e3791f0238); the official archive,
    # which also holds them, has another digest, so a downloaded copy is not checked
    "unsup": FileSpec("imdb/aclImdb_v1_unsup.tar.gz", "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
                      None),
}, citation="Maas et al., ACL 2011", note="the 50,000 unlabelled reviews of train/unsup"))

IMDB_VALID_FROM = 49_000
"""Unlabelled IMDB reviews numbered at least this are the held-out split (1,000 reviews)."""
_IMDB_REVIEW = re.compile(r"(?:^|/)aclImdb/train/(unsup|neg|pos)/(\d+)_\d+\.txt$")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s+[\"'(\[]?[A-Z0-9])")
_WIKI_TITLE = re.compile(r"^ = [^=].* = $")
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)

Document = list[str]


@dataclass
class PretrainingTextConfig(Config):
    """The pretraining text of a run and its tokenizer (the data section of the XLNet and BERT recipes)."""

    train_text: str = "imdb:train"
    """Training text: a registered text corpus NAME:SPLIT (imdb:train, wikitext2:valid, ptb:train, ...),
    a text file (documents separated by blank lines) or a folder of text files (one document each)."""
    valid_text: str = "imdb:valid"
    """Held-out text, in the same forms."""
    max_documents: int = 0
    """Train on the first this many documents of ``train_text`` (0: all)."""
    valid_documents: int = 0
    """Hold out the first this many documents of ``valid_text`` (0: all)."""
    tokenizer: str | None = None
    """A tokenizer folder (``genfeat tokenizer train`` or Hugging Face's tokenizer.json / vocab.txt /
    spiece.model); None: train one of the method's kind on the training text (written to OUT/tokenizer)."""
    vocab_size: int = 8000
    """Size of the tokenizer trained when ``tokenizer`` is None."""
    lowercase: bool = False
    """Lower-case the text in the tokenizer trained when ``tokenizer`` is None."""
    seq_len: int = 128
    """Tokens per example or segment, special tokens included."""
    batch_size: int = 8
    """Examples (rows) per step: the global batch."""

    def __post_init__(self):
        if self.seq_len < 5 or self.batch_size < 1 or min(self.max_documents, self.valid_documents) < 0 \
                or self.vocab_size < 10:
            raise ValueError(f"seq_len ({self.seq_len}) must be >= 5, batch_size ({self.batch_size}) >= 1, "
                             f"max_documents and valid_documents >= 0 and vocab_size ({self.vocab_size}) >= 10")


def split_sentences(line: str) -> list[str]:
    """The sentences of one line of text (module doc), stripped, without empty ones."""
    ends = [m.end() for m in _SENTENCE_END.finditer(line)]
    pieces = (line[a:b].strip() for a, b in zip([0, *ends], [*ends, len(line)]))
    return [s for s in pieces if s]


def _text_lines(path: Path) -> Iterator[str]:
    """Every line of a text file, stripped, blank ones included; a line that is not UTF-8 is a DataError."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise DataError(f"'{path}' line {number} is not UTF-8 text ({e.reason} at byte {e.start})",
                                "convert the file to UTF-8 (e.g. iconv -t UTF-8) or remove the line") from None


def _paragraphs(lines: Iterator[str]) -> Iterator[Document]:
    """Documents separated by blank lines, each the sentences of its lines."""
    doc: Document = []
    for line in lines:
        if line:
            doc.extend(split_sentences(line))
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _wiki_articles(lines: Iterator[str]) -> Iterator[Document]:
    """WikiText articles from the file's stripped lines: a title `` = Title = `` stands between blank lines
    (or first in the file) and starts an article; it is dropped. A line of that shape right after a line
    of text is text: a formula such as `` = 1 <unk> / s and a nominal <unk> k = `` in "Constant k filter"."""
    doc: Document = []
    before, line = "", None                   # the start of the file counts as a blank line before the first
    for after in chain(lines, [""]):          # and the end of the file as one after the last
        if line is not None:
            if not before and not after and _WIKI_TITLE.match(f" {line} "):
                if doc:
                    yield doc
                doc = []
            elif line:
                doc.extend(split_sentences(line))
            before = line
        line = after
    if doc:
        yield doc


def _imdb_reviews(path: Path, parts: tuple[str, ...], keep) -> Iterator[tuple[str, Document]]:
    """(member name, review) for the reviews ``train/{parts}`` of the registry's archive whose number passes
    ``keep``. Having read the archive to its end, it checks that each of ``parts`` held all its reviews, kept
    or not (:func:`~genfeat.tasks.catalog.check_imdb_reviews`: a partial copy is a DataError)."""
    from ..tasks.catalog import check_imdb_reviews

    found = dict.fromkeys(parts, 0)
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                m = _IMDB_REVIEW.search(member.name)
                if m is None or m.group(1) not in parts or not member.isfile():
                    continue
                found[m.group(1)] += 1
                if not keep(int(m.group(2))):
                    continue
                try:
                    text = tar.extractfile(member).read().decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"'{path}' member {member.name} is not UTF-8 ({e.reason})",
                                    "fetch the canonical archive") from None
                doc = [s for para in _BR.split(text) for s in split_sentences(para.strip())]
                if doc:
                    yield member.name, doc
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"'{path}' is not a readable tar.gz archive ({e})", "fetch the canonical archive") from None
    check_imdb_reviews(path, "train", found)


def _imdb(split: str) -> Iterator[Document]:
    from ..tasks import catalog  # noqa: F401  (declares the labelled archive, dataset "imdb")

    if split not in ("train", "valid"):
        raise DataError(f"IMDB has no unlabelled split '{split}' (its test reviews are kept for fine-tuning)",
                        "use imdb:train or imdb:valid")
    unsup = resolve("imdb_unsup", "unsup")
    if split == "valid":
        yield from (doc for _, doc in _imdb_reviews(unsup, ("unsup",), lambda n: n >= IMDB_VALID_FROM))
        return
    yield from (doc for _, doc in _imdb_reviews(unsup, ("unsup",), lambda n: n < IMDB_VALID_FROM))
    yield from (doc for _, doc in _imdb_reviews(resolve("imdb", "labeled"), ("neg", "pos"), lambda n: True))


def _iter_documents(spec: str) -> Iterator[Document]:
    from .corpora import CORPORA, _split_name

    name, sep, split = spec.partition(":")
    if sep and name == "imdb":
        return _imdb(split)
    if sep and name in CORPORA:
        split = _split_name(name, split)
        path = resolve(name, CORPORA[name].split_files.get(split, split))
        if name.startswith("wikitext"):
            return _wiki_articles(_text_lines(path))
        if name == "ptb":
            return iter([[line for line in _text_lines(path) if line]])
        raise DataError(f"corpus '{name}' is not text of documents", "use imdb, wikitext2, wikitext103 or ptb")
    path = Path(spec)
    if path.is_file():
        return _paragraphs(_text_lines(path))
    if path.is_dir():
        from .tokenizers import corpus_files

        return (doc for f in corpus_files(path) for doc in [[s for line in _text_lines(f) if line
                                                              for s in split_sentences(line)]] if doc)
    raise DataError(f"'{spec}' is neither a registered text corpus nor an existing file or folder",
                    "use imdb:train, imdb:valid, wikitext2:SPLIT, ptb:SPLIT, a text file or a folder of documents")


def read_documents(spec: str, max_documents: int = 0) -> list[Document]:
    """The documents of ``spec`` (module doc), the first ``max_documents`` of them (0: all).

    Raises:
        DataError: unknown corpus or missing file, a line that is not UTF-8, no text at all.
    """
    docs = []
    for doc in _iter_documents(spec):
        docs.append(doc)
        if max_documents and len(docs) >= max_documents:
            break
    if not docs:
        raise DataError(f"'{spec}' holds no text (every line is blank)", "pass a corpus with text in it")
    return docs


def encode_documents(docs: list[Document], vocab, eod_id: int | None = None) -> tuple[Tensor, Tensor]:
    """One token stream of the documents: ids [N] and the index of each token's sentence [N]
    (an ``eod_id`` that ends a document counts as a sentence of its own). Sentences that encode to
    no token are dropped."""
    ids: list[int] = []
    sent: list[int] = []
    n = 0
    for doc in docs:
        for sentence in doc:
            piece = vocab.encode(sentence)
            if piece:
                ids.extend(piece)
                sent.extend([n] * len(piece))
                n += 1
        if eod_id is not None:
            ids.append(eod_id)
            sent.append(n)
            n += 1
    return torch.tensor(ids, dtype=torch.long), torch.tensor(sent, dtype=torch.long)


def split_pair(sent: list[int], begin: int, total: int, generator: torch.Generator
               ) -> tuple[tuple[int, int], tuple[int, int], int, int] | None:
    """Cut segments A and B with ``total`` tokens together from the stream at ``begin`` (module doc).

    Args:
        sent: the sentence index of every token of the stream (N of them).
        begin: where A starts.
        total: len(A) + len(B), at least 2.
        generator: draws the cut, whether B is the next text, and where a random B comes from.
    Returns:
        ((a_begin, a_end), (b_begin, b_end), label, end) with label 0 when B follows A and 1 when
        it was taken from elsewhere, and ``end`` where the text of the pair ends in the stream
        (the end of B when it follows A, else of A); None when fewer than ``total`` + 1 tokens remain.
    """
    n = len(sent)
    if begin + total >= n:
        return None
    # sentence boundaries after A's first token and before total tokens
    cuts = [i for i in range(begin + 1, begin + total) if sent[i] != sent[i - 1]]
    is_next = bool(cuts) and float(torch.rand((), generator=generator)) >= 0.5
    a_end = cuts[int(torch.randint(len(cuts), (), generator=generator))] if cuts else begin + total
    if is_next:
        b_begin, b_end = a_end, begin + total
        while b_end < n and sent[b_end] == sent[b_end - 1]:   # B ends with a whole sentence when it can
            b_end += 1
    else:
        b_len = max(1, total - (a_end - begin))
        b_begin = int(torch.randint(n - b_len, (), generator=generator))
        b_end = b_begin + b_len
        while b_begin > 0 and sent[b_begin - 1] == sent[b_begin]:
            b_begin -= 1
        while b_end < n and sent[b_end - 1] == sent[b_end]:
            b_end += 1
    while (a_end - begin) + (b_end - b_begin) > total:       # cut the longer one from its end
        if a_end - begin > b_end - b_begin:
            a_end -= 1
        else:
            b_end -= 1
    return (begin, a_end), (b_begin, b_end), 0 if is_next else 1, b_end if is_next else a_end


def example_seed(seed: int, epoch: int, step: int, row: int) -> int:
    """A number fixed by these four, different for different ones (for per-example generators)."""
    return (((seed * 1_000_003 + epoch) * 1_000_003 + step) * 65_537 + row) % (2 ** 62)


@dataclass
class PairLayout:
    """Special-token ids of the pair layouts."""

    sep: int
    cls: int


class XLNetPairStream:
    """XLNet's two-segment input over consecutive segments of ``batch_size`` rows (module doc; the Stream protocol).

    Args:
        ids, sent: the token stream (:func:`encode_documents`).
        batch_size: global number of rows b (even with ``bi_data``).
        seq_len: tokens per segment t (reused part, A, B and the three special tokens).
        reuse_len: tokens at the start of every segment that continue the row (and enter the memory).
        layout: the ``<sep>`` and ``<cls>`` ids.
        bi_data: the second half of the rows reads the stream reversed.
        seed: base of the per-example seeds.
    Yields:
        dict with ``input_ids``, ``token_type_ids`` [b', t], ``next_sentence_label`` [b'] (0: B
        follows A), ``seed`` [b'] (module doc) and ``new_epoch`` (a bool: the rows start again,
        memory must not carry over), b' = b / world under torchrun.
    """

    def __init__(self, ids: Tensor, sent: Tensor, batch_size: int, seq_len: int, reuse_len: int, layout: PairLayout,
                 bi_data: bool = False, seed: int = 0):
        if reuse_len < 1 or seq_len - reuse_len < 5:
            raise ConfigError(f"seq_len {seq_len} and reuse_len {reuse_len}: a segment needs at least 1 reused "
                              "token and 2 for A and B", "use 1 <= model.reuse_len <= data.seq_len - 5")
        if bi_data and batch_size % 2:
            raise ConfigError(f"data.batch_size {batch_size} is odd but model.bi_data splits it into forward and "
                              "reversed halves", "use an even data.batch_size")
        directions = [(ids, sent), (ids.flip(0), sent.flip(0))] if bi_data else [(ids, sent)]
        per = batch_size // len(directions)
        self.rows: list[tuple[Tensor, list[int]]] = []
        for x, s in directions:
            length = x.numel() // per
            if length < seq_len + 1:
                raise DataError(f"the text has {ids.numel()} tokens, too few for {batch_size} rows of at least "
                                f"{seq_len + 1}", "use more text, a smaller data.batch_size or data.seq_len")
            self.rows += [(x[r * length:(r + 1) * length], s[r * length:(r + 1) * length].tolist())
                          for r in range(per)]
        self.batch_size, self.seq_len, self.reuse_len, self.layout, self.seed = (batch_size, seq_len, reuse_len,
                                                                                 layout, seed)
        self.bi_data = bi_data
        # segments per row: the pair of segment i starts at i * reuse_len + reuse_len and needs total + 1 tokens
        total = seq_len - reuse_len - 3
        self.n_batches = 1 + (length - reuse_len - total - 1) // reuse_len
        self.epoch, self.index = 0, 0
        self.mine = range(batch_size)

    def __iter__(self) -> XLNetPairStream:
        return self

    def example(self, row: int, index: int, seed: int) -> tuple[Tensor, Tensor, int]:
        """(input_ids [t], token_type_ids [t], label) of segment ``index`` of ``row``."""
        x, s = self.rows[row]
        reuse, total = self.reuse_len, self.seq_len - self.reuse_len - 3
        start = index * reuse
        g = torch.Generator().manual_seed(seed)
        (a0, a1), (b0, b1), label, _ = split_pair(s, start + reuse, total, g)
        sep, cls = torch.tensor([self.layout.sep]), torch.tensor([self.layout.cls])
        ids = torch.cat([x[start:a1], sep, x[b0:b1], sep, cls])
        types = torch.tensor([0] * (a1 - start + 1) + [1] * (b1 - b0 + 1) + [2])
        return ids, types, label

    def __next__(self) -> dict[str, Any]:
        if self.index >= self.n_batches:
            self.epoch += 1
            self.index = 0
        seeds = [example_seed(self.seed, self.epoch, self.index, r) for r in self.mine]
        parts = [self.example(r, self.index, sd) for r, sd in zip(self.mine, seeds)]
        batch = {"input_ids": torch.stack([p[0] for p in parts]), "token_type_ids": torch.stack([p[1] for p in parts]),
                 "next_sentence_label": torch.tensor([p[2] for p in parts]), "seed": torch.tensor(seeds),
                 "new_epoch": self.index == 0}
        self.index += 1
        return batch

    def epoch_batches(self) -> Iterator[dict[str, Any]]:
        """Every segment of one pass over the rows, in order (for held-out scoring), from a fresh position."""
        self.epoch, self.index = 0, 0
        for _ in range(self.n_batches):
            yield next(self)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    def shard(self, rank: int, world: int) -> None:
        """Keep the rows of this rank: with ``bi_data`` each rank takes as many forward as reversed rows,
        so every rank's batch is itself a forward half and a reversed half, as the model expects."""
        halves = 2 if self.bi_data else 1
        per = self.batch_size // halves
        if per % world:
            raise ConfigError(f"data.batch_size {self.batch_size} does not split into {world} processes"
                              + (" with equal forward and reversed halves" if halves == 2 else ""),
                              f"use a batch size divisible by {world * halves}")
        share = per // world
        self.mine = [h * per + rank * share + i for h in range(halves) for i in range(share)]


def bert_examples(ids: Tensor, sent: Tensor, seq_len: int, layout: PairLayout, nsp: bool,
                  generator: torch.Generator) -> dict[str, Tensor]:
    """``[CLS] A [SEP] B [SEP]`` pairs with NSP labels (or ``[CLS] text [SEP]``) read once through the stream.

    Args:
        ids, sent: the token stream (:func:`encode_documents`).
        seq_len: tokens per example, special tokens included.
        layout: the ``[SEP]`` and ``[CLS]`` ids.
        nsp: build pairs (else each example is the next seq_len - 2 tokens).
        generator: draws the pairs.
    Returns:
        ``input_ids`` and ``token_type_ids`` [n, seq_len]; with ``nsp`` also ``next_sentence_label`` [n].
    """
    rows, types, labels = [], [], []
    sent = sent.tolist()
    cls, sep = torch.tensor([layout.cls]), torch.tensor([layout.sep])
    begin = 0
    total = seq_len - (3 if nsp else 2)
    while True:
        if not nsp:
            if begin + total > ids.numel():
                break
            rows.append(torch.cat([cls, ids[begin:begin + total], sep]))
            types.append(torch.zeros(seq_len, dtype=torch.long))
            begin += total
            continue
        pair = split_pair(sent, begin, total, generator)
        if pair is None:
            break
        (a0, a1), (b0, b1), label, begin = pair
        rows.append(torch.cat([cls, ids[a0:a1], sep, ids[b0:b1], sep]))
        types.append(torch.tensor([0] * (a1 - a0 + 2) + [1] * (b1 - b0 + 1)))
        labels.append(label)
    if not rows:
        raise DataError(f"the text has {ids.numel()} tokens, fewer than one example of {seq_len}",
                        "use a longer text or a smaller data.seq_len")
    out = {"input_ids": torch.stack(rows), "token_type_ids": torch.stack(types)}
    if nsp:
        out["next_sentence_label"] = torch.tensor(labels)
    return out


def document_tokenizer(docs: list[Document], kind: str, vocab_size: int, lowercase: bool, tokenizer: str | None,
                       out_dir: Path | None, resume: bool, train_device: str = "auto"):
    """The tokenizer of a pretraining run: the folder ``tokenizer`` when given; else the one trained into
    OUT/tokenizer (read back when resuming), or one trained on the sentences of ``docs`` (kind
    ``wordpiece`` or ``sentencepiece``) into OUT/tokenizer (a temporary folder without OUT, or when resuming
    a run that has no OUT/tokenizer: that one is compared with the checkpoint's vocabulary before anything
    is written into OUT).

    Under torchrun only rank 0 trains (training is deterministic, but one writer of OUT/tokenizer spares the
    other ranks the work and any race on the folder); the others wait for it and read OUT/tokenizer, or, where
    it failed, raise a GenfeatError saying so (:func:`~genfeat.framework.distributed.on_rank_0`). This joins
    the process group early, with the backend of ``train_device`` (the recipe's train.device).
    """
    from ..framework.distributed import init_distributed, on_rank_0
    from ..framework.trainer import resolve_device
    from .tokenizers import TokenizerConfig, load_tokenizer

    if tokenizer is not None:
        return load_tokenizer(tokenizer)
    if resume and out_dir is not None and (Path(out_dir) / "tokenizer").is_dir():
        return load_tokenizer(Path(out_dir) / "tokenizer")
    cfg = TokenizerConfig(kind, vocab_size, lowercase)
    dist = init_distributed(resolve_device(train_device))
    if dist.enabled:
        if out_dir is None:
            raise ConfigError("a tokenizer trained under torchrun must be shared through OUT/tokenizer, and no "
                              "--out is given", "pass --out DIR, or data.tokenizer (a trained tokenizer folder)")
        where = Path(out_dir) / "tokenizer"
        on_rank_0(lambda: _train_on(docs, cfg, out_dir), f"failed to train the tokenizer into '{where}'", dist)
        return load_tokenizer(where)
    return _train_on(docs, cfg, None if resume else out_dir)


def _train_on(docs: list[Document], cfg, out_dir: Path | None):
    """Train the tokenizer ``cfg`` on the sentences of ``docs`` into OUT/tokenizer (a temporary folder without OUT)."""
    import tempfile

    from .tokenizers import train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "sentences.txt"
        text.write_text("".join(f"{s}\n" for doc in docs for s in doc), encoding="utf-8")
        return train_tokenizer(cfg, text, Path(out_dir or tmp) / "tokenizer", "data.vocab_size")
