"""Vocabularies: word level, character level, byte level and subword (tokenizers BPE, sentencepiece).

A vocabulary maps text to token ids and back and is saved beside a checkpoint as JSON (subword
models embed their serialised tokenizer), so a checkpoint always carries the vocabulary it was
trained with. Subword vocabularies are trained on the training split, or loaded from an existing
tokenizer file (``VocabConfig.tokenizer_file``: a ``tokenizers`` tokenizer.json or a sentencepiece
.model).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from ..config import Config
from ..errors import CheckpointError, ConfigError
from ..io import write_json_atomic

EOS, UNK = "<eos>", "<unk>"


@dataclass
class VocabConfig(Config):
    """How a corpus is tokenised."""

    kind: Literal["word", "char", "byte", "bpe", "sentencepiece"] = "word"
    """word: whitespace tokens; char: characters; byte: the 256 byte values; bpe / sentencepiece: subwords."""
    add_eos: bool = True
    """Append <eos> at every line end (word and subword level, as in the Mikolov PTB setup)."""
    min_freq: int = 1
    """Word level: types rarer than this in the training split become <unk>."""
    max_size: int = 0
    """Word level: keep at most this many types, most frequent first (0: all)."""
    vocab_size: int = 8000
    """Subword vocabulary size (unused with tokenizer_file)."""
    tokenizer_file: str | None = None
    """Load the subword vocabulary from this file instead of training one: with kind bpe a
    ``tokenizers`` JSON file (``Tokenizer.save``, a Hugging Face tokenizer.json), with kind
    sentencepiece a trained .model file. The checkpoint stores a copy, so it is not needed later."""

    def __post_init__(self):
        if self.min_freq < 1 or self.max_size < 0 or self.vocab_size < 1:
            raise ConfigError(f"vocab min_freq={self.min_freq}, max_size={self.max_size}, "
                              f"vocab_size={self.vocab_size} are out of range",
                              "min_freq and vocab_size must be >= 1 and max_size >= 0 (0: no limit)")
        if self.tokenizer_file is not None and self.kind not in ("bpe", "sentencepiece"):
            raise ConfigError(f"vocab tokenizer_file is set but vocab kind is {self.kind!r}",
                              "set kind to bpe (for a tokenizer.json) or sentencepiece (for a .model), "
                              "or drop tokenizer_file")


class Vocab:
    """Base class: ``encode(text) -> ids``, ``decode(ids) -> text``, ``len``, ``save``/``load_vocab``."""

    kind = "base"

    def __len__(self) -> int:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def payload(self) -> dict:
        raise NotImplementedError

    @property
    def unk_id(self) -> int | None:
        """The id text outside the vocabulary is encoded as (None: every text is covered, e.g. bytes)."""
        return None

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, {"kind": self.kind, **self.payload()})


class SymbolVocab(Vocab):
    """A list of symbols (words or characters), ordered by training frequency (most frequent first).

    Frequency order lets adaptive-softmax cutoffs put frequent types in the head cluster.
    """

    def __init__(self, symbols: list[str], kind: str, unk: str | None = None, add_eos: bool = True):
        self.kind = kind
        self.symbols = symbols
        self.index = {s: i for i, s in enumerate(symbols)}
        self.unk = unk
        self.add_eos = add_eos

    def __len__(self) -> int:
        return len(self.symbols)

    def lookup(self, symbol: str) -> int:
        i = self.index.get(symbol)
        if i is None:
            if self.unk is None:
                raise ConfigError(f"symbol {symbol!r} is not in the {len(self)}-type {self.kind} vocabulary",
                                  "use text from the training corpus's alphabet, or build the vocabulary with unk")
            return self.index[self.unk]
        return i

    @property
    def unk_id(self) -> int | None:
        return None if self.unk is None else self.index[self.unk]

    def split(self, text: str) -> list[str]:
        if self.kind == "char":
            return list(text)
        out = []
        for line in text.splitlines():
            out.extend(line.split())
            if self.add_eos:
                out.append(EOS)
        if text and not text.endswith("\n") and self.add_eos:
            out.pop()  # a prompt without a final newline is not a finished line
        return out

    def encode(self, text: str) -> list[int]:
        return [self.lookup(s) for s in self.split(text)]

    def decode(self, ids: Iterable[int]) -> str:
        syms = [self.symbols[i] for i in ids]
        if self.kind == "char":
            return "".join(syms)
        return " ".join(syms).replace(f" {EOS} ", "\n").replace(EOS, "\n")

    def payload(self) -> dict:
        return {"symbols": self.symbols, "unk": self.unk, "add_eos": self.add_eos}

    @classmethod
    def build(cls, tokens: Iterable[str], kind: str, min_freq: int = 1, max_size: int = 0,
              specials: tuple[str, ...] = (), unk: str | None = None, add_eos: bool = True) -> "SymbolVocab":
        counts = Counter(tokens)
        for s in specials:
            counts.pop(s, None)
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        kept = [s for s, c in ordered if c >= min_freq]
        symbols = list(specials) + kept
        if max_size:
            # max_size counts <unk> too, so the output layer has exactly max_size rows.
            symbols = symbols[:max_size - 1 if unk is not None and unk not in symbols[:max_size] else max_size]
        if unk is not None and unk not in symbols:
            symbols.append(unk)
        return cls(symbols, kind, unk, add_eos)


class ByteVocab(Vocab):
    """The 256 byte values (enwik8)."""

    kind = "byte"

    def __len__(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def payload(self) -> dict:
        return {}


class IdVocab(Vocab):
    """Bare token ids 0 .. size-1 (a corpus given as a .npy file): text is the ids in decimal, space-separated."""

    kind = "ids"

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        try:
            ids = [int(word) for word in text.split()]
        except ValueError:
            raise ConfigError(f"{text!r} is not a list of token ids", "write the prompt as ids, e.g. '12 7 431'") from None
        if any(not 0 <= i < self.size for i in ids):
            raise ConfigError(f"prompt ids {ids} are outside [0, {self.size})", f"use ids below {self.size}")
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(str(int(i)) for i in ids)

    def payload(self) -> dict:
        return {"size": self.size}


def _read_tokenizer_file(path: str | Path, what: str) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"vocab tokenizer_file '{path}' does not exist", f"point tokenizer_file at {what}")
    return path.read_bytes()


class TokenizerVersionError(ValueError):
    """A tokenizer.json of the ``tokenizers`` layout that the installed ``tokenizers`` cannot read: most often one
    a newer release wrote (transformers 5 saves XLNet's tokenizer so), whose pre-tokenizer or model fields the
    older release does not know; a corrupt file of that layout reads the same (tokenizers' error does not tell them
    apart), so the message names both."""


NEWER_TOKENIZERS_FIX = ("install the tokenizers release that wrote the file, or a newer one (pip install -U tokenizers; "
                        "transformers 4.37.2, the parity tests' pin, needs tokenizers < 0.19: keep it in another venv, "
                        "as scripts/setup_hf5.sh does), or save the tokenizer with the tokenizers release installed here; "
                        "a corrupt file: restore it")


def _tokenizer_from_json(text: str):
    import tokenizers

    try:
        return tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises plain Exception for malformed JSON and unknown models
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and {"model", "pre_tokenizer", "normalizer"} <= data.keys():
            raise TokenizerVersionError(f"the installed tokenizers {tokenizers.__version__} cannot read it, though it "
                                        f"has a tokenizers JSON file's layout: another tokenizers release wrote it, or "
                                        f"it is corrupt: {e}") from None
        raise ValueError(f"not a tokenizers JSON file: {e}") from None


class BPEVocab(Vocab):
    """Subwords of the ``tokenizers`` library: byte-level BPE trained on the training split, or any
    tokenizer loaded from its JSON file."""

    kind = "bpe"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | Path) -> "BPEVocab":
        """Load a tokenizer saved by ``tokenizers`` (``Tokenizer.save``; a Hugging Face tokenizer.json)."""
        data = _read_tokenizer_file(path, "a tokenizers JSON file (tokenizer.json)")
        try:
            return cls(_tokenizer_from_json(data.decode("utf-8")))
        except TokenizerVersionError as e:
            raise ConfigError(f"vocab tokenizer_file '{path}' cannot be read ({e})", NEWER_TOKENIZERS_FIX) from None
        except ValueError as e:  # UnicodeDecodeError is a ValueError too
            raise ConfigError(f"vocab tokenizer_file '{path}' cannot be read ({e})",
                              "pass a file written by tokenizers' Tokenizer.save (tokenizer.json), or use "
                              "kind sentencepiece for a .model file") from None

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> "BPEVocab":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts, trainer)
        return cls(tok)

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids  # a corpus stream: no [CLS]/[SEP] template

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids))

    @property
    def unk_id(self) -> int | None:
        unk = getattr(self.tokenizer.model, "unk_token", None)  # byte-level BPE has none; WordPiece has one
        return None if unk is None else self.tokenizer.token_to_id(unk)

    def payload(self) -> dict:
        return {"tokenizer": self.tokenizer.to_str()}


@dataclass(frozen=True)
class XLNetText:
    """How XLNet's own tokenizer (XLNet's prepro_utils; transformers' ``XLNetTokenizer``) prepares text for its
    sentencepiece model, as a Hugging Face directory's tokenizer_config.json sets it: whitespace runs become one
    space and the ends are stripped (``remove_space``), the quote pairs `````` and ``''`` become ``"``, accents
    are dropped (NFKD, combining marks removed) unless ``keep_accents``, lower-casing with ``lower``; after
    sentencepiece, a piece that ends in a comma after a digit ("1,000,") is split before the comma and its
    number encoded again (so "000" and "," are pieces of their own). Lower-casing goes one character at a time, as
    transformers' ``tokenize`` does (a final Σ gives σ).

    genfeat's own sentencepiece models read text as it is (they were trained on it as it is)."""

    lower: bool = False
    remove_space: bool = True
    keep_accents: bool = False

    def prepare(self, text: str) -> tuple[str, list[tuple[int, int]] | None]:
        """The prepared text and, per character of it, the [start, end) characters of ``text`` it comes from (None:
        character i comes from character i, as for ASCII text that none of the rules but lower-casing changes)."""
        import unicodedata

        if text.isascii() and "``" not in text and "''" not in text and \
                (not self.remove_space or text == " ".join(text.split())):
            return (text.lower() if self.lower else text), None
        chars: list[tuple[str, int, int]] = []
        i, n = 0, len(text)
        while i < n:
            if self.remove_space and text[i].isspace():
                j = i
                while j < n and text[j].isspace():
                    j += 1
                if chars and j < n:                      # inner runs become one space; the ends go
                    chars.append((" ", i, j))
                i = j
                continue
            chars.append((text[i], i, i + 1))
            i += 1
        for pair in ("``", "''"):
            merged, k = [], 0
            while k < len(chars):
                if k + 1 < len(chars) and chars[k][0] + chars[k + 1][0] == pair:
                    merged.append(('"', chars[k][1], chars[k + 1][2]))
                    k += 2
                else:
                    merged.append(chars[k])
                    k += 1
            chars = merged
        if not self.keep_accents:                        # per character: the marks NFKD would reorder are dropped
            kept: list[tuple[str, int, int]] = []
            for c, a, b in chars:
                for d in unicodedata.normalize("NFKD", c):
                    if not unicodedata.combining(d):
                        kept.append((d, a, b))
                    elif kept:                           # a dropped mark's characters go to the one before it
                        kept[-1] = (kept[-1][0], kept[-1][1], b)
            chars = kept
        if self.lower:   # one character at a time, as transformers' tokenize() does: a final Σ gives σ, not ς
            chars = [(d, a, b) for c, a, b in chars for d in c.lower()]
        return "".join(c for c, _, _ in chars), [(a, b) for _, a, b in chars]


class SentencePieceVocab(Vocab):
    """A sentencepiece model (unigram by default), trained on the training split or loaded; ``text``: the text
    preparation of a Hugging Face XLNet tokenizer (:class:`XLNetText`), None for genfeat's own models."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, text: XLNetText | None = None):
        import sentencepiece as spm

        self.proto, self.text = model_proto, text
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)  # RuntimeError when not a model
        if self.sp.get_piece_size() == 0:
            raise ValueError("the sentencepiece model holds no pieces")

    @classmethod
    def from_file(cls, path: str | Path) -> "SentencePieceVocab":
        """Load a trained sentencepiece model (the .model file ``SentencePieceTrainer`` writes)."""
        data = _read_tokenizer_file(path, "a sentencepiece .model file")
        try:
            return cls(data)
        except (RuntimeError, ValueError) as e:
            raise ConfigError(f"vocab tokenizer_file '{path}' is not a sentencepiece model "
                              f"({str(e).strip().splitlines()[0]})",
                              "pass the .model file written by SentencePieceTrainer, or use kind bpe for a "
                              "tokenizer.json") from None

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> "SentencePieceVocab":
        import io

        import sentencepiece as spm

        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=buf, vocab_size=vocab_size,
                                       hard_vocab_limit=False, minloglevel=2)
        return cls(buf.getvalue())

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text) if self.text is None else self.encode_with_offsets(text)[0]

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of ``text`` and each token's [start, end) characters of ``text`` (a word-initial piece's
        span includes the whitespace before the word; a piece the digit-comma rule of :class:`XLNetText` makes
        gets its own characters of the piece it splits)."""
        prepared, source = self.text.prepare(text) if self.text is not None else (text, None)
        if prepared.isascii():                           # byte offsets are character offsets
            char_at: list[int] | range = range(len(prepared) + 1)
        else:
            char_at = [i for i, c in enumerate(prepared) for _ in c.encode("utf-8")] + [len(prepared)]
        ids, spans = [], []
        for piece in self.sp.encode(prepared, return_type="proto").pieces:
            begin, end = char_at[piece.begin], char_at[piece.end]
            if self.text is not None and len(piece.piece) > 1 and piece.piece[-1] == "," and piece.piece[-2].isdigit():
                parts = self.sp.encode(piece.piece[:-1].replace("\u2581", ""), out_type=str)
                if piece.piece[0] != "\u2581" and parts and parts[0][0] == "\u2581":
                    parts = parts[1:] if len(parts[0]) == 1 else [parts[0][1:], *parts[1:]]
                stop, part_spans = end - 1, []           # the parts end where the comma starts, right to left
                for part in reversed(parts):
                    start = max(begin, stop - len(part.replace("\u2581", "")))
                    part_spans.append((start, stop))
                    stop = start
                ids += [self.sp.piece_to_id(part) for part in parts] + [self.sp.piece_to_id(",")]
                spans += [*reversed(part_spans), (end - 1, end)]
            else:
                ids.append(piece.id)
                spans.append((begin, end))
        if source is not None:                           # prepared characters -> the text's characters
            spans = [(source[b][0], source[e - 1][1]) if e > b else (source[min(b, len(source) - 1)][0],) * 2
                     for b, e in spans]
        return ids, spans

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode(list(ids))

    @property
    def unk_id(self) -> int | None:
        return self.sp.unk_id()

    def payload(self) -> dict:
        text = {} if self.text is None else {"text": dataclasses.asdict(self.text)}
        return {"model": base64.b64encode(self.proto).decode("ascii"), **text}


def load_vocab(path: str | Path) -> Vocab:
    """Read a vocabulary saved by :meth:`Vocab.save`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        kind = data["kind"]
        if kind in ("word", "char"):
            symbols, unk, add_eos = data["symbols"], data.get("unk"), data.get("add_eos", True)
            # a hand-edited file: each problem below read ids as other tokens, or failed later with a KeyError
            if not isinstance(symbols, list) or not all(isinstance(x, str) for x in symbols):
                raise ValueError("'symbols' is not a list of strings")
            if len(set(symbols)) != len(symbols):
                raise ValueError(f"'symbols' holds {len(symbols) - len(set(symbols))} repeated entries")
            if not isinstance(add_eos, bool) or (unk is not None and unk not in symbols):
                raise ValueError(f"'add_eos' ({add_eos!r}) is not true/false, or 'unk' ({unk!r}) is not a symbol")
            return SymbolVocab(symbols, kind, unk, add_eos)
        if kind == "byte":
            return ByteVocab()
        if kind == "ids":
            if not isinstance(data["size"], int) or data["size"] < 1:
                raise ValueError(f"'size' is {data['size']!r}, not a positive integer")
            return IdVocab(data["size"])
        if kind == "bpe":
            return BPEVocab(_tokenizer_from_json(data["tokenizer"]))
        if kind == "sentencepiece":
            text = data.get("text")
            return SentencePieceVocab(base64.b64decode(data["model"]), None if text is None else XLNetText(**text))
    except TokenizerVersionError as e:
        raise CheckpointError(f"cannot read vocabulary '{path}': its tokenizer ({e})", NEWER_TOKENIZERS_FIX) from None
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"cannot read vocabulary '{path}' ({type(e).__name__}: {e})",
                              "the file is corrupt or not a genfeat vocabulary; restore it from the checkpoint") from None
    raise CheckpointError(f"vocabulary '{path}' has unknown kind {kind!r}", "it was written by another program")
