"""Subword tokenizers for pretraining: WordPiece (BERT), sentencepiece unigram (XLNet) and BPE (GPT-1).

``genfeat tokenizer train --kind {wordpiece,sentencepiece,bpe} --corpus PATH --vocab-size N --out DIR``
trains one on a text file or a folder of text files (every non-blank line is a training sentence)
and writes the files Hugging Face loads, atomically (the directory appears complete or not at all):

- wordpiece (``tokenizers``): ``tokenizer.json`` (with BERT's [CLS] A [SEP] B [SEP] template),
  ``vocab.txt`` and ``tokenizer_config.json`` (``BertTokenizer``/``BertTokenizerFast``);
- sentencepiece (``sentencepiece``, unigram model): ``spiece.model`` and ``tokenizer_config.json``
  (``XLNetTokenizer``), with XLNet's control symbols <cls> <sep> <pad> <mask> <eod> <eop> at ids 3-8;
- bpe (``tokenizers``, GPT-1's byte-pair encoding, Sennrich et al. 2016): ``tokenizer.json`` and
  ``tokenizer_config.json`` (``OpenAIGPTTokenizerFast``; a cased one ``PreTrainedTokenizerFast``, as
  transformers 5's ``OpenAIGPTTokenizer`` lower-cases every text). As Hugging Face's conversion of the
  OpenAI GPT tokenizer: BERT's normaliser and pre-tokeniser (words and punctuation), merges inside
  a word only, the suffix ``</w>`` on a word's last piece, ``<unk>`` (id 0) for characters the
  corpus never showed. GPT-1 lower-cases (``--lowercase``); Hugging Face's slow
  ``OpenAIGPTTokenizer`` always does and cleans text with ftfy/spaCy, so only the fast one matches.

:func:`load_tokenizer` reads such a directory (or a Hugging Face one: ``tokenizer.json``,
``vocab.txt`` or ``spiece.model``) into a genfeat vocabulary (:class:`~genfeat.data.vocab.BPEVocab`
for a ``tokenizers`` tokenizer, :class:`~genfeat.data.vocab.SentencePieceVocab`), which travels
with checkpoints as vocab.json. :func:`special_ids` and :func:`word_start` give what the
pretraining objectives need of it. Texts are encoded without special tokens; the data pipeline
adds them.

Reproducibility: every kind is a function of the corpus and the size alone. sentencepiece training is
deterministic; WordPiece and BPE vocabularies are learnt by genfeat's own merge loop (:func:`learn_merges`),
whose ties between equally frequent pairs go to the smaller pair in string order. (``tokenizers``' trainers
break such ties in a per-process hash order, so two runs on one corpus kept different pieces; genfeat uses
``tokenizers`` to normalise, pre-tokenise and encode only.) Ids: the special tokens, then the sorted pieces.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from collections import Counter, defaultdict
from heapq import heapify, heappop, heappush
from typing import Callable, Iterator, Literal

import torch

from ..config import Config
from ..errors import ConfigError, DataError
from ..io import atomic_dir
from .vocab import BPEVocab, SentencePieceVocab, Vocab

# role -> token, per kind; the order is the order of the first ids
SPECIALS = {
    "wordpiece": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    "sentencepiece": {"unk": "<unk>", "bos": "<s>", "eos": "</s>", "cls": "<cls>", "sep": "<sep>", "pad": "<pad>",
                      "mask": "<mask>", "eod": "<eod>", "eop": "<eop>"},
    "bpe": {"unk": "<unk>"},
}
BPE_SUFFIX = "</w>"
"""GPT-1's end-of-word mark on a word's last BPE piece."""
# the sentencepiece pieces besides <unk>, <s>, </s> (which sentencepiece itself places at 0-2)
_SP_CONTROL = ["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]
FILES = {"wordpiece": ("tokenizer.json", "vocab.txt", "tokenizer_config.json"),
         "sentencepiece": ("spiece.model", "tokenizer_config.json"),
         "bpe": ("tokenizer.json", "tokenizer_config.json")}


@dataclass
class TokenizerConfig(Config):
    """What ``genfeat tokenizer train`` trains."""

    kind: Literal["wordpiece", "sentencepiece", "bpe"] = "wordpiece"
    """wordpiece (BERT, ``tokenizers``), sentencepiece (unigram, XLNet) or bpe (GPT-1, ``tokenizers``)."""
    vocab_size: int = 8000
    """Number of types, special tokens included."""
    lowercase: bool = False
    """Lower-case the text first (an "uncased" tokenizer); the setting is saved with it."""

    def __post_init__(self):
        if self.kind not in FILES:
            raise ConfigError(f"tokenizer kind {self.kind!r} is unknown", "use wordpiece, sentencepiece or bpe")
        if self.vocab_size < len(SPECIALS[self.kind]) + 1:
            raise ConfigError(f"vocab size {self.vocab_size} leaves no room beside the {len(SPECIALS[self.kind])} "
                              "special tokens", "pass a larger --vocab-size")


def corpus_files(corpus: str | Path) -> list[Path]:
    """The text files of ``corpus``: the file itself, or every file under the folder (sorted, hidden ones skipped)."""
    path = Path(corpus)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if files:
            return files
        raise DataError(f"corpus folder '{path}' holds no files", "put text files (one document each) in it")
    raise DataError(f"corpus '{path}' does not exist", "pass a text file or a folder of text files")


def corpus_lines(corpus: str | Path) -> Iterator[str]:
    """The non-blank lines of the corpus, stripped; a line that is not UTF-8 raises DataError naming it."""
    for path in corpus_files(corpus):
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError as e:
                    raise DataError(f"'{path}' line {number} is not UTF-8 text ({e.reason} at byte {e.start})",
                                    "convert the file to UTF-8 (e.g. iconv -t UTF-8) or remove the line") from None
                if line:
                    yield line


def _checked_lines(corpus: str | Path) -> list[str]:
    lines = list(corpus_lines(corpus))
    if not lines:
        raise DataError(f"corpus '{corpus}' holds no text (every line is blank)", "pass a corpus with text in it")
    return lines


def _wordpiece_pipeline(tok, lowercase: bool):
    """BERT's normaliser, pre-tokeniser and decoder on a WordPiece ``tokenizers.Tokenizer``, and its
    [CLS] A [SEP] B [SEP] template once the vocabulary holds [CLS] and [SEP] (after training)."""
    from tokenizers import decoders, normalizers, pre_tokenizers, processors

    sp = SPECIALS["wordpiece"]
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    cls_id, sep_id = tok.token_to_id(sp["cls"]), tok.token_to_id(sp["sep"])
    if cls_id is not None and sep_id is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{sp['cls']} $A {sp['sep']}", pair=f"{sp['cls']} $A {sp['sep']} $B:1 {sp['sep']}:1",
            special_tokens=[(sp["cls"], cls_id), (sp["sep"], sep_id)])
    return tok


def _word_counts(lines: list[str], tok) -> Counter:
    """How often each pre-tokenised word of ``lines`` occurs, after ``tok``'s normaliser and pre-tokeniser."""
    normalize, split = tok.normalizer.normalize_str, tok.pre_tokenizer.pre_tokenize_str
    counts: Counter = Counter()
    for line in lines:
        counts.update(word for word, _ in split(normalize(line)))
    return counts


def learn_merges(words: dict[tuple[str, ...], int], vocab: set[str], vocab_size: int,
                 join: Callable[[str, str], str]) -> list[tuple[str, str]]:
    """Byte-pair-encoding merges (Sennrich et al. 2016, Algorithm 1) until ``vocab`` holds ``vocab_size`` types.

    ``words`` maps each word, as its initial symbols, to its count. Each step merges the most frequent
    adjacent pair (a, b) into ``join(a, b)`` in every word and adds it to ``vocab`` (in place); a tie goes
    to the smallest pair in string order, so the merges are a function of the input alone. Stops early
    when no pair is left. Returns the merges in order. Pair counts are updated in the words that hold
    the merged pair only, and a heap with stale entries skipped on pop gives the next pair.
    """
    seqs = [list(w) for w in words]
    freq = list(words.values())
    count: defaultdict = defaultdict(int)
    holders: defaultdict = defaultdict(set)  # pair -> words that held it once (a superset)
    for i, seq in enumerate(seqs):
        for pair in zip(seq, seq[1:]):
            count[pair] += freq[i]
            holders[pair].add(i)
    heap = [(-c, pair) for pair, c in count.items()]
    heapify(heap)
    merges = []
    while len(vocab) < vocab_size and heap:
        neg, pair = heappop(heap)
        if count.get(pair) != -neg:
            continue  # stale: the count changed after this entry was pushed
        a, b = pair
        new = join(a, b)
        merges.append(pair)
        vocab.add(new)
        changed = set()
        for i in holders.pop(pair):
            seq, f = seqs[i], freq[i]
            merged, j = [], 0
            while j < len(seq):
                if j + 1 < len(seq) and seq[j] == a and seq[j + 1] == b:
                    merged.append(new)
                    j += 2
                else:
                    merged.append(seq[j])
                    j += 1
            if len(merged) == len(seq):
                continue
            for old in zip(seq, seq[1:]):
                count[old] -= f
                changed.add(old)
            for fresh in zip(merged, merged[1:]):
                count[fresh] += f
                holders[fresh].add(i)
                changed.add(fresh)
            seqs[i] = merged
        del count[pair]
        changed.discard(pair)
        for c in changed:
            if count[c] > 0:
                heappush(heap, (-count[c], c))
            else:
                del count[c]
    return merges


def _check_alphabet(size: int, cfg: TokenizerConfig, what: str, alphabet: str) -> None:
    if size > cfg.vocab_size:
        raise DataError(f"{alphabet} alone make {size} {what} types, more than --vocab-size {cfg.vocab_size}",
                        f"pass --vocab-size {size} or more")


def _check_filled(size: int, cfg: TokenizerConfig, what: str) -> None:
    if size < cfg.vocab_size:
        raise DataError(f"the corpus yields only {size} {what} types, fewer than --vocab-size {cfg.vocab_size}",
                        f"pass --vocab-size {size} or less, or a larger corpus")


def _train_wordpiece(lines: list[str], cfg: TokenizerConfig) -> BPEVocab:
    """BERT's WordPiece vocabulary, learnt as byte-pair merges: a word starts as its first character and
    ``##``-marked characters after it, and a merged piece drops its right part's ``##``."""
    from tokenizers import Tokenizer, models

    specials = list(SPECIALS["wordpiece"].values())
    counts = _word_counts(lines, _wordpiece_pipeline(Tokenizer(models.WordPiece()), cfg.lowercase))
    words = {(w[0], *(f"##{c}" for c in w[1:])): n for w, n in counts.items()}
    vocab = set(specials) | {c for w in counts for c in w} | {s for w in words for s in w}
    _check_alphabet(len(vocab), cfg, "WordPiece", "the corpus's characters and the special tokens")
    learn_merges(words, vocab, cfg.vocab_size, lambda a, b: a + b.removeprefix("##"))
    _check_filled(len(vocab), cfg, "WordPiece")
    return BPEVocab(_wordpiece_from_tokens(specials + sorted(vocab - set(specials)), cfg.lowercase))


def _wordpiece_from_tokens(tokens: list[str], lowercase: bool):
    """A BERT WordPiece tokenizer whose id i is ``tokens[i]``."""
    from tokenizers import Tokenizer, models

    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("the vocabulary lists a token twice")
    if SPECIALS["wordpiece"]["unk"] not in vocab:
        raise ValueError(f"the vocabulary has no {SPECIALS['wordpiece']['unk']}")
    return _wordpiece_pipeline(Tokenizer(models.WordPiece(vocab, unk_token=SPECIALS["wordpiece"]["unk"])), lowercase)


def _bpe_pipeline(tok, lowercase: bool):
    """GPT-1's pipeline on a BPE ``tokenizers.Tokenizer`` (module doc): BERT's normaliser and pre-tokeniser,
    the ``</w>`` decoder."""
    from tokenizers import decoders, normalizers, pre_tokenizers

    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.BPEDecoder(suffix=BPE_SUFFIX)
    return tok


def _train_bpe(lines: list[str], cfg: TokenizerConfig) -> BPEVocab:
    """GPT-1's BPE: a word starts as its characters with ``</w>`` on the last; merges concatenate."""
    from tokenizers import Tokenizer, models

    unk = SPECIALS["bpe"]["unk"]
    counts = _word_counts(lines, _bpe_pipeline(Tokenizer(models.BPE()), cfg.lowercase))
    words = {(*w[:-1], w[-1] + BPE_SUFFIX): n for w, n in counts.items()}
    vocab = {unk} | {c for w in counts for c in w} | {s for w in words for s in w}
    _check_alphabet(len(vocab), cfg, "BPE", "the corpus's characters (each alone and word-final)")
    merges = learn_merges(words, vocab, cfg.vocab_size, str.__add__)
    _check_filled(len(vocab), cfg, "BPE")
    # <unk>, then the sorted pieces: the ids are a function of the set of pieces (module doc)
    return BPEVocab(_bpe_from_tokens([unk] + sorted(vocab - {unk}), merges, cfg.lowercase))


def _bpe_from_tokens(tokens: list[str], merges: list[tuple[str, str]], lowercase: bool):
    """A GPT-1 BPE tokenizer whose id i is ``tokens[i]``, merging pairs in the order of ``merges``."""
    from tokenizers import AddedToken, Tokenizer, models

    unk = SPECIALS["bpe"]["unk"]
    tok = Tokenizer(models.BPE({token: i for i, token in enumerate(tokens)}, merges, unk_token=unk,
                               end_of_word_suffix=BPE_SUFFIX))
    # a special token: a literal <unk> in the text (PTB writes them) stays one token
    tok.add_special_tokens([AddedToken(unk, special=True)])
    return _bpe_pipeline(tok, lowercase)


def _train_sentencepiece(lines: list[str], cfg: TokenizerConfig) -> SentencePieceVocab:
    import io

    import sentencepiece as spm

    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, vocab_size=cfg.vocab_size,
                                       model_type="unigram", control_symbols=_SP_CONTROL,
                                       normalization_rule_name="nmt_nfkc_cf" if cfg.lowercase else "nmt_nfkc",
                                       num_threads=min(os.cpu_count() or 1, 16), minloglevel=2)
    except RuntimeError as e:
        too_high = re.search(r"Vocabulary size too high \((\d+)\).*<= (\d+)", str(e))
        if too_high:
            raise DataError(f"the corpus supports at most {too_high.group(2)} sentencepiece types, fewer than "
                            f"--vocab-size {cfg.vocab_size}", f"pass --vocab-size {too_high.group(2)} or less, "
                            "or a larger corpus") from None
        raise DataError(f"sentencepiece cannot train on this corpus ({str(e).strip().splitlines()[-1]})",
                        "check --vocab-size against the corpus") from None
    return SentencePieceVocab(buf.getvalue())


def save_hf_tokenizer(vocab: Vocab, out: str | Path) -> None:
    """Write ``vocab`` as the Hugging Face files of its kind into the folder ``out`` (beside an exported model).

    A WordPiece tokenizer gives tokenizer.json, vocab.txt and tokenizer_config.json (BertTokenizer,
    ``do_lower_case`` read from its normaliser); another ``tokenizers`` tokenizer its tokenizer.json;
    a sentencepiece model spiece.model and tokenizer_config.json (XLNetTokenizer; any lower-casing is
    inside the model's normaliser); a GPT-1 BPE tokenizer (``</w>`` suffix) tokenizer.json and
    tokenizer_config.json (OpenAIGPTTokenizer: transformers reads it through tokenizer.json, as AutoTokenizer or
    OpenAIGPTTokenizerFast in 4.x and every class in 5.x; 4.x's slow OpenAIGPTTokenizer wants a merges.txt and a BPE
    vocab.json, which are not written: beside a genfeat export, vocab.json is genfeat's own vocabulary). A cased
    BPE tokenizer names PreTrainedTokenizerFast instead, which reads tokenizer.json as it is: transformers 5's
    OpenAIGPTTokenizer keeps only its vocabulary and merges and lower-cases every text (4.x's fast one does not),
    and saves that lower-casing into the tokenizer.json it writes. Word,
    character and byte vocabularies have no such files: nothing is written for them.
    """
    out = Path(out)
    if isinstance(vocab, SentencePieceVocab):
        (out / "spiece.model").write_bytes(vocab.proto)
        _write_config(out, "XLNetTokenizer", False, "sentencepiece", vocab.text)
    elif isinstance(vocab, BPEVocab):
        vocab.tokenizer.save(str(out / "tokenizer.json"))
        spec = json.loads(vocab.tokenizer.to_str())
        if spec["model"]["type"] == "WordPiece":
            tokens = [vocab.tokenizer.id_to_token(i) for i in range(len(vocab))]
            (out / "vocab.txt").write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
            _write_config(out, "BertTokenizer", bool((spec.get("normalizer") or {}).get("lowercase")), "wordpiece")
        elif _kind(vocab) == "bpe":
            lowercase = bool((spec.get("normalizer") or {}).get("lowercase"))
            # transformers 5's OpenAIGPTTokenizer lower-cases whatever tokenizer.json says: a cased one is read as is
            _write_config(out, "OpenAIGPTTokenizer" if lowercase else "PreTrainedTokenizerFast", lowercase, "bpe")


TEXT_AS_IS = "genfeat_text_as_is"
"""tokenizer_config.json key genfeat writes beside a sentencepiece model of its own, which reads text as it is
(trained so): genfeat reads such an export back as the checkpoint did. transformers keeps the key but applies
XLNetTokenizer's rules all the same (quote pairs, space runs, the digit-comma split), so there ids differ on texts
those rules rewrite."""


def _write_config(out: Path, cls: str, lowercase: bool, kind: str, text=None) -> None:
    """``text``: a sentencepiece vocabulary's XLNetText (None: genfeat's own, which reads text as it is: accents
    kept, :data:`TEXT_AS_IS` set)."""
    sp = SPECIALS[kind]
    config = {"tokenizer_class": cls, "do_lower_case": lowercase, "model_max_length": 512,
              **{f"{role}_token": sp[role] for role in ("unk", "cls", "sep", "pad", "mask") if role in sp}}
    if kind == "sentencepiece":
        config.update(bos_token=sp["bos"], eos_token=sp["eos"], additional_special_tokens=[sp["eop"], sp["eod"]],
                      remove_space=True if text is None else text.remove_space,
                      keep_accents=True if text is None else text.keep_accents,
                      do_lower_case=False if text is None else text.lower, **{TEXT_AS_IS: text is None})
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def train_tokenizer(cfg: TokenizerConfig, corpus: str | Path, out: str | Path, size_setting: str = "--vocab-size"
                    ) -> Vocab:
    """Train a tokenizer on ``corpus`` and write its Hugging Face files to ``out`` (replaced as a whole).
    ``size_setting``: what errors call the vocabulary size (the command's flag; a recipe's field for a run).

    Raises:
        DataError: a missing or empty corpus, a line that is not UTF-8, a vocabulary size the
            corpus cannot fill (or that its alphabet alone exceeds).
        ConfigError: ``out`` is a file, or a folder holding anything but tokenizer files.
    """
    out = Path(out)
    known = {name for files in FILES.values() for name in files}
    if out.exists() and (not out.is_dir() or any(p.name not in known for p in out.iterdir())):
        raise ConfigError(f"--out '{out}' is a file or a folder holding other files, which writing the tokenizer "
                          "there would delete", "pass a new folder, or a tokenizer folder to replace")
    train = {"wordpiece": _train_wordpiece, "sentencepiece": _train_sentencepiece, "bpe": _train_bpe}[cfg.kind]
    try:
        vocab = train(_checked_lines(corpus), cfg)
    except DataError as e:
        raise DataError(e.cause.replace("--vocab-size", size_setting), e.fix.replace("--vocab-size", size_setting)) \
            from None
    with atomic_dir(out) as tmp:
        save_hf_tokenizer(vocab, tmp)
    return vocab


def load_tokenizer(path: str | Path, hf_model: bool = False) -> Vocab:
    """Read a tokenizer folder: ``spiece.model`` (a sentencepiece model: XLNet's, which a Hugging Face folder
    may hold beside its conversion to tokenizer.json), else ``tokenizer.json`` (any ``tokenizers`` tokenizer; a
    Unigram one, as transformers 5 saves XLNet's, counts as sentencepiece), else ``vocab.txt`` (WordPiece;
    lower-cased unless tokenizer_config.json says ``do_lower_case: false``, as transformers' BertTokenizer).

    ``hf_model``: the folder is a Hugging Face model directory, whose sentencepiece model reads text as
    transformers' XLNetTokenizer prepares it (:class:`~genfeat.data.vocab.XLNetText`, with the
    ``do_lower_case``, ``remove_space`` and ``keep_accents`` of its tokenizer_config.json, transformers' defaults
    for those it lacks), unless genfeat wrote it for a model of its own (:data:`TEXT_AS_IS`); a tokenizer folder
    genfeat trained reads text as it is."""
    from .vocab import NEWER_TOKENIZERS_FIX, TokenizerVersionError, XLNetText, _tokenizer_from_json

    path = Path(path)
    config = path / "tokenizer_config.json"
    try:
        settings = json.loads(config.read_text()) if config.is_file() else {}
        if not isinstance(settings, dict):
            raise ValueError("tokenizer_config.json is not a JSON object")
        if (path / "spiece.model").is_file():
            text = XLNetText(lower=bool(settings.get("do_lower_case", False)),
                             remove_space=bool(settings.get("remove_space", True)),
                             keep_accents=bool(settings.get("keep_accents", False))) \
                if hf_model and not settings.get(TEXT_AS_IS) else None
            return SentencePieceVocab((path / "spiece.model").read_bytes(), text)
        if (path / "tokenizer.json").is_file():
            return BPEVocab(_tokenizer_from_json((path / "tokenizer.json").read_text(encoding="utf-8")))
        if (path / "vocab.txt").is_file():
            lowercase = settings.get("do_lower_case", True)
            tokens = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
            return BPEVocab(_wordpiece_from_tokens(tokens, lowercase))
    except TokenizerVersionError as e:
        raise DataError(f"tokenizer folder '{path}': tokenizer.json cannot be read ({e})", NEWER_TOKENIZERS_FIX) from None
    except (ValueError, RuntimeError, OSError) as e:
        raise DataError(f"tokenizer folder '{path}' cannot be read ({e})",
                        "pass a folder written by 'genfeat tokenizer train' or a Hugging Face tokenizer folder") from None
    raise DataError(f"'{path}' holds no tokenizer.json, vocab.txt or spiece.model",
                    "pass a folder written by 'genfeat tokenizer train' or a Hugging Face tokenizer folder")


def _pieces(vocab: Vocab) -> list[str]:
    """Every id's token string, in id order."""
    if isinstance(vocab, SentencePieceVocab):
        return [vocab.sp.id_to_piece(i) for i in range(len(vocab))]
    if isinstance(vocab, BPEVocab):
        return [vocab.tokenizer.id_to_token(i) for i in range(len(vocab))]
    raise DataError(f"a {vocab.kind} vocabulary has no subword pieces", "use a wordpiece or sentencepiece tokenizer")


def _kind(vocab: Vocab) -> str:
    """The SPECIALS kind of a subword vocabulary: sentencepiece (a sentencepiece model, or a ``tokenizers``
    Unigram model converted from one), bpe (GPT-1's, ``</w>`` suffix) or wordpiece."""
    if isinstance(vocab, SentencePieceVocab):
        return "sentencepiece"
    model = json.loads(vocab.tokenizer.to_str())["model"] if isinstance(vocab, BPEVocab) else {}
    if model.get("type") == "Unigram":
        return "sentencepiece"
    return "bpe" if model.get("type") == "BPE" and model.get("end_of_word_suffix") == BPE_SUFFIX else "wordpiece"


def special_ids(vocab: Vocab) -> dict[str, int]:
    """role (pad, unk, cls, sep, mask, ...) -> id of the special tokens the vocabulary holds."""
    index = {piece: i for i, piece in enumerate(_pieces(vocab))}
    kind = _kind(vocab)
    return {role: index[token] for role, token in SPECIALS[kind].items() if token in index}


def word_start(vocab: Vocab) -> torch.Tensor:
    """[V] bool: True for ids that begin a word (WordPiece: not ``##``; sentencepiece: ``▁``; special tokens).

    GPT-1's BPE marks a word's last piece (``</w>``), so whether a piece begins a word depends on the piece
    before it, not on its id: such a vocabulary is refused (whole-word masking is BERT's, on WordPiece).
    """
    if _kind(vocab) == "bpe":
        raise ConfigError("whole-word masking needs a WordPiece or sentencepiece tokenizer: GPT-1's BPE marks word "
                          "ends, so a piece's id does not say whether it begins a word",
                          "use a wordpiece or sentencepiece tokenizer, or objective.whole_word: false")
    pieces = _pieces(vocab)
    specials = set(special_ids(vocab).values())
    if _kind(vocab) == "sentencepiece":
        starts = [p.startswith("\u2581") or i in specials for i, p in enumerate(pieces)]
    else:
        starts = [not p.startswith("##") for p in pieces]
    return torch.tensor(starts, dtype=torch.bool)

