"""Data of Generative Domain-Adaptive Nets (thesis §3.2; Yang et al., ACL 2017): SQuAD questions split
into labelled / unlabelled / dev / test parts, unlabelled paragraphs, a word vocabulary and batches.

Split (only SQuAD v1.1's dev file is in ``shared/data``, so every part is a set of its 48 articles):

- dev and test are the ``dev`` and ``test`` articles of the seeded split of
  :func:`genfeat.tasks.loaders.squad_articles` (8 + 8 articles; with ``split_seed`` 0 that is 1,477
  dev and 1,390 test questions, about 14 % and 13 % of the file: the thesis held out 10 % of its
  training instances as test and used SQuAD's dev set as dev);
- the other 32 articles are shuffled again with ``split_seed`` and the last ``unlabelled_share`` of
  them (8 of 32 by default) become unlabelled: their paragraphs are kept, their questions never read;
  the rest (24 articles) are the labelled part: 5,928 questions with split_seed 0 (those whose answer
  lies within the first ``max_paragraph_words`` words);
- ``labelling_rate`` r keeps round(r · n) of the n labelled questions, drawn with the run's seed
  (Table 3.4's labelling rates are fractions of the labelled training questions);
- unlabelled paragraphs also come from WikiText-2 valid and test (Wikipedia text, like SQuAD's; the
  thesis used Wikipedia paragraphs): each non-heading line of at least ``min_paragraph_words`` words,
  with WikiText's ``@-@``, ``@,@`` and ``@.@`` joined back. With the defaults the unlabelled part is
  354 SQuAD + 3,203 WikiText-2 paragraphs.

Tokenisation is word level with character offsets (:func:`words`): runs of word characters (with
inner hyphens and apostrophes), each other non-space character alone, lower-cased. A predicted word
span maps back to the paragraph's own characters, so EM/F1 are scored on the original text. The word
vocabulary (:func:`build_vocab`) holds the training-side words (labelled questions and paragraphs,
unlabelled paragraphs; never dev or test). The model starts its embeddings at random unless the recipe's
``d_vectors`` names word vectors (the thesis used GloVe; genfeat's own word2vec vectors fit), so absolute F1
is lower than the thesis's.

Bad input raises :class:`~genfeat.errors.DataError` naming the file and record (the SQuAD reader of
:mod:`genfeat.tasks.loaders`: an answer not at its offset, an empty context or question) or
:class:`~genfeat.errors.ConfigError` naming the field (a labelling rate outside (0, 1]).
"""

from __future__ import annotations

import bisect
import json
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..config import Config
from ..errors import ConfigError, DataError
from ..framework.stream import TensorStream
from ..tasks.loaders import read_squad, squad_articles
from . import corpora  # noqa: F401  (registers wikitext2)
from .registry import resolve
from .vocab import SymbolVocab

PAD, UNK, D_TRUE, D_GEN, BOS, EOS = "<pad>", "<unk>", "<d_true>", "<d_gen>", "<s>", "</s>"
SPECIALS = (PAD, UNK, D_TRUE, D_GEN, BOS, EOS)
"""Special words, ids 0-5: padding, unknown word, the domain tags d_true / d_gen (§3.2.3), and the
start / end of a generated question."""

_WORD = re.compile(r"<unk>|\w+(?:[-'’]\w+)*|[^\w\s]")
_WIKITEXT_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))


def words(text: str) -> list[tuple[str, int, int]]:
    """Word-level tokens of ``text`` with character offsets: (lower-cased word, start, end), end exclusive."""
    return [(m.group().lower(), m.start(), m.end()) for m in _WORD.finditer(text)]


@dataclass(frozen=True)
class Paragraph:
    """A paragraph and its words. ``offsets[i]`` is the (start, end) character range of ``tokens[i]``."""

    uid: str
    text: str
    tokens: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, uid: str, text: str) -> "Paragraph":
        w = words(text)
        return cls(uid, text, tuple(t for t, _, _ in w), tuple((s, e) for _, s, e in w))

    def span_text(self, start: int, end: int) -> str:
        """The paragraph's characters from word ``start`` to word ``end`` (inclusive)."""
        return self.text[self.offsets[start][0]:self.offsets[end][1]]

    def word_span(self, char_start: int, char_end: int) -> tuple[int, int] | None:
        """The words (first, last) overlapping characters [char_start, char_end); None when none does."""
        hit = [i for i, (s, e) in enumerate(self.offsets) if s < char_end and e > char_start]
        return (hit[0], hit[-1]) if hit else None


@dataclass(frozen=True)
class QAExample:
    """A question on a paragraph with its answer span in words (start <= end, inclusive) and every gold
    answer text (what EM/F1 score against)."""

    uid: str
    paragraph: Paragraph
    question: tuple[str, ...]
    start: int
    end: int
    answers: tuple[str, ...]


@dataclass
class GDANDataConfig(Config):
    """Which data a GDAN run reads (see the module docstring for the split)."""

    labelling_rate: float = 1.0
    """Fraction in (0, 1] of the labelled part's questions that are used as labelled data."""
    split_seed: int = 0
    """Seed of the article split (dev/test articles and the labelled/unlabelled training articles)."""
    unlabelled_share: float = 0.25
    """Share of the 32 training articles whose paragraphs are unlabelled data (their questions unused)."""
    wikitext: list[str] = field(default_factory=lambda: ["valid", "test"])
    """WikiText-2 splits whose paragraphs are further unlabelled data (empty: SQuAD's only)."""
    min_paragraph_words: int = 40
    """WikiText-2 lines with fewer words (headings, captions) are not taken as paragraphs."""
    max_paragraph_words: int = 300
    """Training paragraphs are cut to this many words; a labelled question whose answer ends later is
    dropped (0: no cut). Dev and test paragraphs are never cut."""
    squad_file: str = ""
    """A SQuAD v1.1 JSON file to read instead of the registry's dev file (empty: the registry's)."""

    def __post_init__(self):
        if not 0.0 < self.labelling_rate <= 1.0:
            raise ConfigError(f"data.labelling_rate is {self.labelling_rate}, outside (0, 1]",
                              "set data.labelling_rate to a fraction such as 0.1, 0.2, 0.5 or 1")
        if not 0.0 <= self.unlabelled_share < 1.0:
            raise ConfigError(f"data.unlabelled_share is {self.unlabelled_share}, outside [0, 1)",
                              "set data.unlabelled_share to a fraction below 1, e.g. 0.25")
        bad = [s for s in self.wikitext if s not in ("train", "valid", "test")]
        if bad:
            raise ConfigError(f"data.wikitext names {bad}", "use WikiText-2 splits train, valid or test")
        if self.min_paragraph_words < 1 or self.max_paragraph_words < 0:
            raise ConfigError("data.min_paragraph_words must be >= 1 and data.max_paragraph_words >= 0",
                              "set min_paragraph_words >= 1, max_paragraph_words >= 0 (0: no cut)")


@dataclass
class GDANData:
    """The four parts: labelled and evaluation questions, and unlabelled paragraphs (SQuAD's unlabelled
    articles first, then WikiText-2's)."""

    labelled: list[QAExample]
    unlabelled: list[Paragraph]
    dev: list[QAExample]
    test: list[QAExample]

    def sizes(self) -> dict[str, int]:
        return {"labelled": len(self.labelled), "unlabelled": len(self.unlabelled), "dev": len(self.dev),
                "test": len(self.test)}


def _cut(p: Paragraph, n: int) -> Paragraph:
    return p if not n or len(p.tokens) <= n else Paragraph(p.uid, p.text, p.tokens[:n], p.offsets[:n])


def _questions(path: Path, part: str, seed: int, uid_of: dict[str, str]) -> list[QAExample]:
    """The questions of ``part`` of the seeded article split, as word spans (answer 0 is the training target)."""
    out = []
    paragraphs: dict[str, Paragraph] = {}
    for ex in read_squad(path, part, seed):
        question, context = ex.texts
        if context not in paragraphs:
            paragraphs[context] = Paragraph.of(uid_of[context], context)
        p = paragraphs[context]
        text, start = ex.answers[0]
        span = p.word_span(start, start + len(text))
        if span is None:
            raise DataError(f"'{path}' question {ex.uid}: answer {text!r} at offset {start} covers no word",
                            "fix the answer text or answer_start")
        out.append(QAExample(ex.uid, p, tuple(t for t, _, _ in words(question)), span[0], span[1],
                             tuple(a for a, _ in ex.answers)))
    return out


def wikitext_paragraphs(split: str, min_words: int) -> list[Paragraph]:
    """Non-heading lines of WikiText-2 ``split`` with at least ``min_words`` words, WikiText's split
    numbers and hyphens (``@-@``, ``@,@``, ``@.@``) joined back; uid ``wikitext2:<split>:<line>``."""
    path = resolve("wikitext2", split)
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("="):
            continue
        for old, new in _WIKITEXT_JOINS:
            text = text.replace(old, new)
        p = Paragraph.of(f"wikitext2:{split}:{i}", text)
        if len(p.tokens) >= min_words:
            out.append(p)
    return out


def _squad_file(cfg: GDANDataConfig) -> tuple[Path, list[dict[str, Any]], dict[str, str]]:
    """The SQuAD file of ``cfg``, its articles, and each paragraph's uid ``<article>:<paragraph>`` by its text.

    Raises:
        DataError: a missing file or one that is not SQuAD's JSON.
    """
    path = Path(cfg.squad_file) if cfg.squad_file else resolve("squad_v1.1", "dev")
    if not path.is_file():
        raise DataError(f"SQuAD file '{path}' does not exist", "set data.squad_file to a SQuAD v1.1 JSON file")
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
        uid_of = {p["context"]: f"{a}:{i}" for a, art in enumerate(articles) for i, p in enumerate(art["paragraphs"])}
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"'{path}' is not a SQuAD file ({type(e).__name__}: {e})",
                        "pass a SQuAD v1.1 JSON file") from None
    return path, articles, uid_of


def evaluation_questions(cfg: GDANDataConfig, part: str) -> list[QAExample]:
    """The ``dev`` or ``test`` questions of the split (as :func:`load_gdan_data` gives them), without reading
    the training side (``genfeat evaluate`` of a saved D).

    Raises:
        DataError: a missing or malformed SQuAD file (naming the file and record).
    """
    path, _, uid_of = _squad_file(cfg)
    return _questions(path, part, cfg.split_seed, uid_of)


def load_gdan_data(cfg: GDANDataConfig, seed: int = 0) -> GDANData:
    """The split of the module docstring; ``seed`` draws the labelled subset at ``cfg.labelling_rate``.

    Raises:
        DataError: a missing or malformed SQuAD file (naming the file and record), or one too small to give every
            part of the split.
    """
    path, articles, uid_of = _squad_file(cfg)
    train = squad_articles(len(articles), "train", cfg.split_seed)
    random.Random(cfg.split_seed).shuffle(train)
    n_unl = round(len(train) * cfg.unlabelled_share)
    unl_articles = set(train[len(train) - n_unl:])
    labelled, unlabelled = [], []
    for ex in _questions(path, "train", cfg.split_seed, uid_of):
        if int(ex.paragraph.uid.split(":")[0]) in unl_articles:
            continue
        p = _cut(ex.paragraph, cfg.max_paragraph_words)
        if ex.end < len(p.tokens):
            labelled.append(QAExample(ex.uid, p, ex.question, ex.start, ex.end, ex.answers))
    for a in sorted(unl_articles):
        for i, par in enumerate(articles[a]["paragraphs"]):  # contexts checked by _questions' reader
            unlabelled.append(_cut(Paragraph.of(f"{a}:{i}", par["context"]), cfg.max_paragraph_words))
    for split in cfg.wikitext:
        unlabelled += [_cut(p, cfg.max_paragraph_words) for p in wikitext_paragraphs(split, cfg.min_paragraph_words)]
    dev, test = _questions(path, "dev", cfg.split_seed, uid_of), _questions(path, "test", cfg.split_seed, uid_of)
    parts = {"labelled training questions": labelled, "unlabelled paragraphs": unlabelled, "dev questions": dev,
             "test questions": test}
    empty = [name for name, part in parts.items() if not part]
    if empty:   # a small file: sampling or batching would fail later, naming neither the file nor the cause
        raise DataError(f"SQuAD file '{path}' ({len(articles)} articles) leaves no {' and no '.join(empty)} on the "
                        f"article split (split_seed {cfg.split_seed}, unlabelled_share {cfg.unlabelled_share})",
                        "use a full SQuAD v1.1 file (the split is by article, so it needs several dozen)")
    keep = max(1, round(cfg.labelling_rate * len(labelled)))
    chosen = sorted(random.Random(seed).sample(range(len(labelled)), keep))
    return GDANData([labelled[i] for i in chosen], unlabelled, dev, test)


def build_vocab(data: GDANData, min_freq: int = 2, max_size: int = 0) -> SymbolVocab:
    """Word vocabulary of the training side (labelled questions and paragraphs, unlabelled paragraphs),
    ``SPECIALS`` first, then by frequency; rarer words than ``min_freq`` map to ``<unk>``."""
    seen: set[str] = set()

    def tokens():
        for ex in data.labelled:
            yield from ex.question
            if ex.paragraph.uid not in seen:
                seen.add(ex.paragraph.uid)
                yield from ex.paragraph.tokens
        for p in data.unlabelled:
            yield from p.tokens

    return SymbolVocab.build(tokens(), "word", min_freq, max_size, specials=SPECIALS, unk=UNK, add_eos=False)


def pad_ids(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (b, max length) with PAD = 0 and the mask of real positions (b, max length)."""
    n = max(1, max(len(r) for r in rows))
    ids = torch.zeros(len(rows), n, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return ids, ids != 0


def collate_qa(examples: Sequence[QAExample], vocab: SymbolVocab) -> dict[str, torch.Tensor]:
    """A batch of questions: ``paragraph`` (b, n) and ``question`` (b, m) word ids (right-padded with 0),
    their boolean masks ``paragraph_mask`` / ``question_mask``, and the answer words ``start`` / ``end`` (b,)."""
    paragraph, paragraph_mask = pad_ids([[vocab.lookup(t) for t in ex.paragraph.tokens] for ex in examples])
    question, question_mask = pad_ids([[vocab.lookup(t) for t in ex.question] or [vocab.unk_id] for ex in examples])
    return {"paragraph": paragraph, "paragraph_mask": paragraph_mask, "question": question,
            "question_mask": question_mask, "start": torch.tensor([ex.start for ex in examples]),
            "end": torch.tensor([ex.end for ex in examples])}


class CollatedStream:
    """Endless, resumable minibatches of ``items`` (a list of records) made by ``collate(records)``: a
    :class:`TensorStream` over the item indices gives the order (reshuffled each epoch from ``seed``).

    With ``length`` (a record's size, e.g. its paragraph's words) and ``bucket`` > 1, batches are made of
    records of similar length, so they carry little padding (a GRU over padded rows runs as many steps as
    the batch's longest row): the shuffled order is taken ``bucket`` batches at a time (a pool), each pool is
    sorted by length and cut into batches of ``batch_size``, and the pool's batches come in a seeded random
    order. Every record still appears once per epoch, but for fewer than ``batch_size`` left at the end of it
    (as without buckets); which records share a batch is what changes.
    """

    def __init__(self, items: Sequence[Any], collate: Callable[[list[Any]], Any], batch_size: int, seed: int = 0,
                 length: Callable[[Any], int] | None = None, bucket: int = 1):
        if not items:
            raise DataError("a GDAN batch stream has no examples", "check the data split (labelling_rate, files)")
        if bucket < 1:
            raise ValueError(f"bucket must be >= 1, got {bucket}")
        self.items, self.collate = items, collate
        self.batch_size = min(batch_size, len(items))
        self.bucketed = length is not None and bucket > 1
        indices = {"index": torch.arange(len(items))}
        if not self.bucketed:
            self.order = TensorStream(indices, self.batch_size, seed=seed)
            return
        self.lengths = torch.tensor([length(item) for item in items])
        self.order = TensorStream(indices, bucket * self.batch_size, seed=seed, drop_last=False)
        self.seed, self.rank, self.world = seed, 0, 1
        self.pool_state = self.order.state_dict()       # the order's position before the current pool
        self.pools = 0                                   # pools drawn so far (seeds the batch order in a pool)
        self.batches: list[torch.Tensor] = []
        self.next = 0

    def _draw_pool(self) -> None:
        """The next pool's batches: its indices sorted by length (stable), cut into full batches, shuffled."""
        self.pool_state = self.order.state_dict()
        ids = next(self.order)["index"]
        ids = ids[torch.sort(self.lengths[ids], stable=True).indices]
        full = len(ids) // self.batch_size
        batches = list(ids[:full * self.batch_size].split(self.batch_size))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.pools)
        self.batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        self.pools += 1
        self.next = 0

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        if not self.bucketed:
            return self.collate([self.items[i] for i in next(self.order)["index"].tolist()])
        while self.next >= len(self.batches):     # a pool at an epoch's end may hold no full batch
            self._draw_pool()
        ids = self.batches[self.next].tensor_split(self.world)[self.rank]
        self.next += 1
        return self.collate([self.items[i] for i in ids.tolist()])

    def state_dict(self) -> dict[str, Any]:
        if not self.bucketed:
            return self.order.state_dict()
        return {"pool": self.pool_state, "pools": self.pools, "next": self.next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self.bucketed:
            self.order.load_state_dict(state)
            return
        self.order.load_state_dict(state["pool"])
        self.pools = int(state["pools"])
        if self.pools:
            self.pools -= 1
            self._draw_pool()
        self.next = int(state["next"])

    def shard(self, rank: int, world: int) -> None:
        if not self.bucketed:
            self.order.shard(rank, world)
            return
        if self.batch_size % world:
            raise ConfigError(f"batch_size {self.batch_size} is not divisible by the {world} processes",
                              "make the batch size a multiple of the number of processes")
        self.rank, self.world = rank, world


def context_questions(answers: Sequence[QAExample], window: int) -> list[QAExample]:
    """The Context baseline's pseudo-questions (thesis Table 3.4, "Context"): for each answer chunk of an
    unlabelled paragraph (``answers``, e.g. :func:`genfeat.data.question_gen.answer_examples`), the question
    is the ``window`` words before the chunk followed by the ``window`` words after it (our reading of "a
    window of size W around the answer chunk"). A chunk with no word around it gives no question."""
    out = []
    for ex in answers:
        tokens = ex.paragraph.tokens
        question = tokens[max(0, ex.start - window):ex.start] + tokens[ex.end + 1:ex.end + 1 + window]
        if question:
            out.append(replace(ex, question=question))
    return out


class WindowEncoder:
    """GDAN questions as a pretrained span reader D reads them (:class:`genfeat.models.span_reader.SpanReader`):
    the backbone's pair input of the question and the paragraph, in windows.

    A paragraph's words are tokenized with the backbone's tokenizer on the paragraph's own text (each word's
    subwords found by character offsets); the question is its words joined by spaces, cut to ``max_query``
    subwords, with the tokenizer's mask token appended when ``tagged`` (the slot of D's domain tag). A paragraph
    longer than the room a window leaves is read in windows of that room whose starts are ``doc_stride``
    subwords apart (at most the room, so every subword is in a window); each word is scored in the window
    where min(subwords before it, subwords after it) is largest (the first such window on ties).

    Args:
        vocab: the backbone's tokenizer (WordPiece or sentencepiece, :func:`genfeat.hub.load_checkpoint`).
        fmt: the backbone's :class:`~genfeat.tasks.transforms.InputFormat`.
        max_len: tokens per window, special tokens included; doc_stride: subwords between window starts.
    """

    def __init__(self, vocab: Any, fmt: Any, max_len: int, doc_stride: int, max_query: int = 64, tagged: bool = False):
        from .tokenizers import special_ids

        self.vocab, self.fmt, self.max_len, self.doc_stride, self.max_query = vocab, fmt, max_len, doc_stride, max_query
        self.tag_id = special_ids(vocab).get("mask") if tagged else None
        if tagged and self.tag_id is None:
            raise ConfigError("the backbone's tokenizer has no mask token to carry D's domain tag",
                              "initialise D from a genfeat bert or xlnet checkpoint")
        self._paragraphs: dict[tuple[str, int], tuple[list[int], list[int], list[int]]] = {}

    def paragraph(self, p: Paragraph) -> tuple[list[int], list[int], list[int]]:
        """Subword ids of the paragraph's words, and each word's first and last subword index (cached)."""
        key = (p.uid, len(p.tokens))
        if key not in self._paragraphs:
            from ..tasks.transforms import tokenize_with_offsets

            ids, offsets = tokenize_with_offsets(self.vocab, p.text[:p.offsets[-1][1]])
            starts = [s for s, _ in offsets]
            # a word's first subword is the first one starting at its first character (or else the one covering
            # it), its last the last one starting before its end
            first = []
            for s, _ in p.offsets:
                i = bisect.bisect_left(starts, s)
                first.append(i if i < len(starts) and starts[i] == s else max(i - 1, 0))
            last = [max(bisect.bisect_left(starts, e) - 1, f) for (_, e), f in zip(p.offsets, first)]
            self._paragraphs[key] = (ids, first, last)
        return self._paragraphs[key]

    def question(self, words: Sequence[str]) -> list[int]:
        from ..tasks.transforms import tokenize_with_offsets

        ids = tokenize_with_offsets(self.vocab, " ".join(words))[0][:self.max_query] if words else []
        return ids + ([self.tag_id] if self.tag_id is not None else [])

    def collate(self, examples: Sequence[QAExample]) -> dict[str, torch.Tensor]:
        """A batch: the windows ``input_ids``, ``attention_mask`` (1 at tokens), ``token_type_ids`` (w, L),
        ``summary_index`` (w,) and ``context_mask`` (w, L, True at paragraph subwords); ``window_of`` (w,); per word
        ``word_window``, ``word_first``, ``word_last`` and ``paragraph_mask`` (b, n); ``tag_position`` (w,) when
        tagged; the answer words ``start``, ``end`` (b,)."""
        fmt = self.fmt
        packed, window_of, tag_pos, ctx_pos, ctx_len = [], [], [], [], []
        n = max(len(ex.paragraph.tokens) for ex in examples)
        word_window = torch.zeros(len(examples), n, dtype=torch.long)
        word_first, word_last = torch.zeros_like(word_window), torch.zeros_like(word_window)
        for b, ex in enumerate(examples):
            ids, first, last = self.paragraph(ex.paragraph)
            q = self.question(ex.question)
            room = self.max_len - len(q) - fmt.n_special(2)
            if room < 1:
                raise ConfigError(f"windows of {self.max_len} tokens leave no room for the paragraph after a question "
                                  f"of {len(q)} subwords", "raise d_max_len or lower d_max_query")
            starts = [0]
            while starts[-1] + room < len(ids):
                starts.append(starts[-1] + min(self.doc_stride, room))
            best = [None] * len(first)
            for s in starts:
                w = len(packed)
                segs = [ids[s:s + room], q] if fmt.context_first else [q, ids[s:s + room]]
                p = fmt.pack(segs)
                c, qi = (0, 1) if fmt.context_first else (1, 0)
                packed.append(p)
                window_of.append(b)
                tag_pos.append(p.starts[qi] + len(q) - 1)
                ctx_pos.append(p.starts[c])
                ctx_len.append(len(segs[c]))
                for i, (f, l) in enumerate(zip(first, last)):
                    if s <= f < s + room:        # a word longer than a window keeps the subwords that fit
                        ctx = min(f - s, s + room - 1 - l)
                        if best[i] is None or ctx > best[i]:
                            best[i] = ctx
                            word_window[b, i], word_first[b, i], word_last[b, i] = w, f - s, min(l, s + room - 1) - s
        t = max(len(p.ids) for p in packed)
        shift = [t - len(p.ids) if fmt.pad_left else 0 for p in packed]

        def pad(values: list, fill) -> list:
            extra = [fill] * (t - len(values))
            return extra + values if fmt.pad_left else values + extra

        offset = torch.tensor([shift[w] + ctx_pos[w] for w in range(len(packed))])
        lengths = torch.tensor([len(ex.paragraph.tokens) for ex in examples])
        positions = torch.arange(t)[None, :]
        word_first += offset[word_window]
        word_last += offset[word_window]
        out = {"input_ids": torch.tensor([pad(p.ids, fmt.pad_id) for p in packed]),
               "attention_mask": torch.tensor([pad([1] * len(p.ids), 0) for p in packed]),
               "token_type_ids": torch.tensor([pad(p.types, fmt.pad_type) for p in packed]),
               "summary_index": torch.tensor([p.summary + s for p, s in zip(packed, shift)]),
               "context_mask": (positions >= offset[:, None]) & (positions < (offset + torch.tensor(ctx_len))[:, None]),
               "window_of": torch.tensor(window_of), "word_window": word_window, "word_first": word_first,
               "word_last": word_last,
               "paragraph_mask": torch.arange(n)[None, :] < lengths[:, None],
               "start": torch.tensor([ex.start for ex in examples]), "end": torch.tensor([ex.end for ex in examples])}
        if self.tag_id is not None:
            out["tag_position"] = torch.tensor([p + s for p, s in zip(tag_pos, shift)])
        return out
