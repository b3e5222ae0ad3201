"""Task-aware input transformations (GPT-1, Radford et al. 2018, Fig. 1), one API for every backbone.

A task's example becomes one or more token sequences, each ending (or starting) with a token whose
final state summarises the sequence for the head:

- ``single``: the text A alone;
- ``pair`` (entailment): A and B in one sequence, with a delimiter between them;
- ``similarity``: both orders, A;B and B;A, whose summary states the head adds (no inherent order);
- ``multiple_choice``: context z, question q and each answer a_k, one sequence per answer (the head
  takes a softmax over the k sequences' scores): ``z`` then ``q a_k`` for BERT and XLNet (as their
  RACE code), ``z q`` then ``a_k`` for GPT (GPT-1 Fig. 1: [z; q; $; a_k]); a RACE cloze question
  (with ``_``) has the answer put in its blank and stays one segment, after z;
- ``span`` (extraction): question and context, the context cut into windows of at most
  ``max_len`` tokens that start ``doc_stride`` tokens apart, the answer's character span mapped to
  the window's token positions (to the summary token when the answer is outside the window) and,
  for predictions, token positions mapped back to the context's characters.

Each backbone packs one or two segments with its own special tokens (:class:`InputFormat`):

- BERT (:class:`BertFormat`): ``[CLS] A [SEP] B [SEP]``, token types 0 for ``[CLS] A [SEP]`` and 1
  for ``B [SEP]``, summary ``[CLS]`` at position 0, padding on the right;
- XLNet (:class:`XLNetFormat`): ``A <sep> B <sep> <cls>``, segment ids 0 (A and its <sep>), 1 (B
  and its <sep>), 2 for ``<cls>`` and 4 for padding (XLNet's classifier_utils; only equality of
  segment ids matters to the model), summary ``<cls>`` last, padding on the
  left so that ``<cls>`` is the last position of every row; for span extraction the context comes first;
- GPT (:class:`GPTFormat`): ``<start> A <delim> B <extract>`` with three new token ids (the model's
  ``add_special_tokens``), no token types, summary ``<extract>`` last, padding on the right.

Texts longer than ``max_len`` are cut, longest segment first (BERT's rule), and the encoding says so
(``truncated``); reading long texts in segments with memory (XLNet, Transformer-XL) is not done here.
:func:`collate` pads a batch into tensors; :func:`best_span` reads a span prediction back as text, through
:func:`best_spans`, the batched search for the best answer span that GDAN's reader uses as well (end scores
per position, or, from a start-conditioned head, given each start: :func:`end_band`).

Shapes (collate): b batch, k sequences per example (1 for single, pair and span, 2 for similarity,
the number of answers for multiple choice), t the longest sequence of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from ..data.tokenizers import special_ids
from ..data.vocab import BPEVocab, SentencePieceVocab, Vocab
from ..errors import ConfigError, DataError
from .spec import Example, Transform

Offsets = list[tuple[int, int]]


@dataclass(frozen=True)
class Packed:
    """One token sequence.

    Attributes:
        ids: token ids with the format's special tokens.
        types: token type (segment) ids, same length; None for a format without them (GPT).
        summary: position of the token whose final state the head reads ([CLS], <cls>, <extract>).
        starts: position of the first token of each segment.
    """

    ids: list[int]
    types: list[int] | None
    summary: int
    starts: tuple[int, ...]


class InputFormat:
    """How a backbone packs one or two token segments (see the module docstring)."""

    pad_id: int = 0
    pad_type: int = 0
    pad_left: bool = False
    context_first: bool = False
    """Span extraction puts the context before the question (XLNet) instead of after it."""
    question_with_context: bool = False
    """Multiple choice puts the question in the context's segment, the answer alone after the
    delimiter (GPT-1), instead of the question before the answer in the second segment."""

    def n_special(self, n_segments: int) -> int:
        """Special tokens that :meth:`pack` adds to ``n_segments`` (1 or 2) segments."""
        return len(self.pack([[]] * n_segments).ids)

    def pack(self, segments: Sequence[list[int]]) -> Packed:
        raise NotImplementedError


@dataclass
class BertFormat(InputFormat):
    """``[CLS] A [SEP] (B [SEP])``, token types 0 then 1."""

    cls_id: int
    sep_id: int
    pad_id: int = 0

    def pack(self, segments: Sequence[list[int]]) -> Packed:
        ids, types, starts = [self.cls_id], [0], []
        for n, seg in enumerate(segments):
            starts.append(len(ids))
            ids += [*seg, self.sep_id]
            types += [n] * (len(seg) + 1)
        return Packed(ids, types, 0, tuple(starts))


@dataclass
class XLNetFormat(InputFormat):
    """``A <sep> (B <sep>) <cls>``, segment ids 0, 1, and 2 for <cls>; left padding with segment id 4."""

    cls_id: int
    sep_id: int
    pad_id: int = 0
    pad_type: int = 4
    pad_left: bool = True
    context_first: bool = True

    def pack(self, segments: Sequence[list[int]]) -> Packed:
        ids, types, starts = [], [], []
        for n, seg in enumerate(segments):
            starts.append(len(ids))
            ids += [*seg, self.sep_id]
            types += [n] * (len(seg) + 1)
        return Packed([*ids, self.cls_id], [*types, 2], len(ids), tuple(starts))


@dataclass
class GPTFormat(InputFormat):
    """``<start> A (<delim> B) <extract>`` with new token ids; no token types."""

    start_id: int
    delim_id: int
    extract_id: int
    pad_id: int = 0
    question_with_context: bool = True

    def pack(self, segments: Sequence[list[int]]) -> Packed:
        ids, starts = [self.start_id], []
        for n, seg in enumerate(segments):
            if n:
                ids.append(self.delim_id)
            starts.append(len(ids))
            ids += seg
        return Packed([*ids, self.extract_id], None, len(ids), tuple(starts))


def input_format(backbone: str, vocab: Vocab, gpt_ids: Sequence[int] = ()) -> InputFormat:
    """The format of ``backbone`` (bert, xlnet, gpt) with the special-token ids of ``vocab``.

    Args:
        gpt_ids: GPT's <start>, <delim>, <extract> ids (``GPTLMHeadModel.add_special_tokens(3)``).

    Raises:
        ConfigError: an unknown backbone, or a vocabulary without the tokens the format needs.
    """
    if backbone == "gpt":
        if len(gpt_ids) != 3:
            raise ConfigError(f"GPT's input format needs 3 new token ids (start, delimiter, extract), got {len(gpt_ids)}",
                              "pass the ids model.add_special_tokens(3) returns")
        return GPTFormat(*gpt_ids)
    if backbone not in ("bert", "xlnet"):
        raise ConfigError(f"backbone {backbone!r} has no input format", "use bert, xlnet or gpt")
    special = special_ids(vocab)
    missing = [role for role in ("cls", "sep", "pad") if role not in special]
    if missing:
        raise ConfigError(f"the tokenizer has no {', '.join(missing)} token, which the {backbone} input format needs",
                          f"use a tokenizer written by 'genfeat tokenizer train --kind "
                          f"{'wordpiece' if backbone == 'bert' else 'sentencepiece'}'")
    cls = BertFormat if backbone == "bert" else XLNetFormat
    return cls(cls_id=special["cls"], sep_id=special["sep"], pad_id=special["pad"])


def tokenize_with_offsets(vocab: Vocab, text: str) -> tuple[list[int], Offsets]:
    """Token ids of ``text`` and each token's character span [start, end) in ``text`` (a
    ``tokenizers`` tokenizer such as WordPiece, or sentencepiece, whose byte offsets are turned into
    character offsets and whose word-initial pieces do not count the whitespace before the word, so
    that an answer's tokens give back the answer, not the space before it)."""
    def trimmed(start: int, end: int) -> tuple[int, int]:
        while start < end and text[start].isspace():  # '▁word' spans the space before the word
            start += 1
        return start, end

    if isinstance(vocab, BPEVocab):  # a Unigram tokenizer.json (XLNet's, converted) also spans the space
        enc = vocab.tokenizer.encode(text, add_special_tokens=False)
        return list(enc.ids), [trimmed(*o) for o in enc.offsets]
    if isinstance(vocab, SentencePieceVocab):
        ids, spans = vocab.encode_with_offsets(text)
        return ids, [trimmed(*span) for span in spans]
    raise ConfigError(f"a {vocab.kind} vocabulary gives no character offsets", "use a wordpiece or sentencepiece tokenizer")


@dataclass
class Encoded:
    """An example as the sequences of one backbone.

    Attributes:
        sequences: k packed sequences (see the module docstring).
        label: class id, float, or None (span: see ``start``/``end``).
        truncated: a text was cut to fit ``max_len`` (span: the question was cut to ``max_query_len``; a context
            spread over several windows loses nothing).
        example: index of the example in the list given to :meth:`TaskEncoder.encode_all`.
        start, end: span windows: the answer's first and last token positions in the sequence
            (the summary position when the answer lies outside this window, or the question has none).
        offsets: span windows: per sequence position, the character span in the context of a
            context token, else None.
        max_context: span windows: per position, whether this window is the context token's best among the
            windows holding it by BERT's score, min(left, right context) + 0.01 · window length (so mostly the
            largest context on both sides; with a doc_stride above 100 tokens the length term can prefer a longer
            window with a little less), for choosing predictions (:func:`_is_max_context`).
    """

    sequences: list[Packed]
    label: int | float | None = None
    truncated: bool = False
    example: int = 0
    start: int | None = None
    end: int | None = None
    offsets: list[tuple[int, int] | None] = field(default_factory=list)
    max_context: list[bool] = field(default_factory=list)


def _fit(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int], bool]:
    """Cut tokens from the end of the longer of a and b until both fit in ``budget`` (BERT's rule)."""
    la, lb = len(a), len(b)
    while la + lb > budget:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return a[:la], b[:lb], (la, lb) != (len(a), len(b))


class TaskEncoder:
    """Turns examples into packed sequences of one format.

    Args:
        fmt: the backbone's input format.
        vocab: the tokenizer (``tokenize_with_offsets`` for span tasks, ``encode`` otherwise).
        max_len: longest sequence, special tokens included.
        doc_stride: span extraction: tokens between the starts of consecutive windows (default 128).
        max_query_len: span extraction: longest question in tokens (default 64).
    """

    def __init__(self, fmt: InputFormat, vocab: Vocab, max_len: int, doc_stride: int = 128, max_query_len: int = 64):
        if max_len <= fmt.n_special(2) + 1:
            raise ConfigError(f"max_len {max_len} leaves no room for text beside the {fmt.n_special(2)} special tokens",
                              "raise max_len")
        if doc_stride < 1 or max_query_len < 1:
            raise ConfigError(f"doc_stride {doc_stride} and max_query_len {max_query_len} must be >= 1",
                              "set both to positive token counts")
        self.fmt, self.vocab, self.max_len = fmt, vocab, max_len
        self.doc_stride, self.max_query_len = doc_stride, max_query_len

    def _one(self, a: str, b: str | None = None) -> tuple[Packed, bool]:
        if b is None:
            ids = self.vocab.encode(a)
            budget = self.max_len - self.fmt.n_special(1)
            return self.fmt.pack([ids[:budget]]), len(ids) > budget
        ta, tb, cut = _fit(self.vocab.encode(a), self.vocab.encode(b), self.max_len - self.fmt.n_special(2))
        return self.fmt.pack([ta, tb]), cut

    def encode(self, example: Example, transform: Transform, index: int = 0) -> list[Encoded]:
        """The encodings of one example: one, except for span extraction (one per window)."""
        if transform == "span":
            return self.span(example, index)
        texts = example.texts
        if transform == "single":
            packed = [self._one(texts[0])]
        elif transform == "pair":
            packed = [self._one(texts[0], texts[1])]
        elif transform == "similarity":
            packed = [self._one(texts[0], texts[1]), self._one(texts[1], texts[0])]
        elif transform == "multiple_choice":
            context, question = texts
            if "_" in question:
                packed = [self._one(context, question.replace("_", answer)) for answer in example.choices]
            elif self.fmt.question_with_context:
                packed = [self._question_with_context(context, question, answer) for answer in example.choices]
            else:
                packed = [self._one(context, f"{question} {answer}") for answer in example.choices]
        else:
            raise ConfigError(f"unknown input transformation {transform!r}", "use single, pair, similarity, "
                              "multiple_choice or span")
        return [Encoded([p for p, _ in packed], example.label, any(cut for _, cut in packed), index)]

    def _question_with_context(self, context: str, question: str, answer: str) -> tuple[Packed, bool]:
        """GPT-1's ``[z; q; $; a_k]``: the question ends the first segment, the answer is the second. The cut is
        BERT's longest-first rule between the passage and question + answer (as the other formats cut ``z`` and
        ``q a_k``), so a long passage is cut before the question (cutting the first segment from its end would
        drop the question first)."""
        z, q = self.vocab.encode(context), self.vocab.encode(question)
        tz, tqa, cut = _fit(z, q + self.vocab.encode(answer), self.max_len - self.fmt.n_special(2))
        return self.fmt.pack([tz + tqa[:len(q)], tqa[len(q):]]), cut

    def encode_all(self, examples: Sequence[Example], transform: Transform) -> list[Encoded]:
        return [e for i, ex in enumerate(examples) for e in self.encode(ex, transform, i)]

    def span(self, example: Example, index: int = 0) -> list[Encoded]:
        """Windows over the context of a span example (texts = (question, context)); the first gold
        answer gives ``start``/``end``."""
        question, context = example.texts
        query = self.vocab.encode(question)
        cut_query = len(query) > self.max_query_len
        query = query[:self.max_query_len]
        ids, offsets = tokenize_with_offsets(self.vocab, context)
        budget = self.max_len - len(query) - self.fmt.n_special(2)
        if budget < 1:
            raise ConfigError(f"max_len {self.max_len} leaves no room for the context beside a question of "
                              f"{len(query)} tokens", "raise max_len or lower max_query_len")
        windows = []  # (first context token, number of tokens)
        start = 0
        while True:
            length = min(budget, len(ids) - start)
            windows.append((start, length))
            if start + length >= len(ids):
                break
            start += min(length, self.doc_stride)
        answer = None
        if example.answers:
            text, char_start = example.answers[0]
            answer = char_to_token_span(offsets, char_start, char_start + len(text))
        out = []
        for w_start, length in windows:
            doc = ids[w_start:w_start + length]
            packed = self.fmt.pack([doc, query] if self.fmt.context_first else [query, doc])
            first = packed.starts[0 if self.fmt.context_first else 1]
            where: list[tuple[int, int] | None] = [None] * len(packed.ids)
            best = [False] * len(packed.ids)
            for i in range(length):
                where[first + i] = offsets[w_start + i]
                best[first + i] = _is_max_context(windows, (w_start, length), w_start + i)
            s = e = packed.summary
            if answer is not None and w_start <= answer[0] and answer[1] < w_start + length:
                s, e = first + answer[0] - w_start, first + answer[1] - w_start
            out.append(Encoded([packed], None, cut_query, index, s, e, where, best))
        return out


def char_to_token_span(offsets: Offsets, char_start: int, char_end: int) -> tuple[int, int]:
    """First and last token whose character span overlaps [char_start, char_end).

    Raises:
        DataError: no token overlaps the span (an answer of only whitespace, or outside the text).
    """
    tokens = [i for i, (s, e) in enumerate(offsets) if s < char_end and e > char_start]
    if not tokens:
        raise DataError(f"no token covers characters {char_start}..{char_end} of the context",
                        "check the answer's text and answer_start")
    return tokens[0], tokens[-1]


def token_span_text(context: str, enc: Encoded, start: int, end: int) -> str:
    """The context text from sequence position ``start`` to ``end`` (inclusive) of a span window;
    positions outside the context (question, special tokens) give ""."""
    if not (0 <= start <= end < len(enc.offsets)) or enc.offsets[start] is None or enc.offsets[end] is None:
        return ""
    return context[enc.offsets[start][0]:enc.offsets[end][1]]


def _is_max_context(windows: list[tuple[int, int]], window: tuple[int, int], token: int) -> bool:
    """Whether ``window`` has the best score min(left, right context) + 0.01 * length for ``token``
    among the windows holding it (BERT's run_squad rule; the earlier window wins a tie)."""
    def score(w):
        return min(token - w[0], w[0] + w[1] - 1 - token) + 0.01 * w[1]

    holding = [w for w in windows if w[0] <= token < w[0] + w[1]]
    return max(holding, key=score) == window


def collate(batch: Sequence[Encoded], fmt: InputFormat) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest sequence.

    Returns:
        ``input_ids`` [b, k, t], ``attention_mask`` [b, k, t] (1 token, 0 padding), ``token_type_ids``
        [b, k, t] (not for GPT), ``summary_index`` [b, k] (position of the summary token after
        padding), ``labels`` [b] (long, or float for regression) when every item has one; span
        windows also ``start_positions`` and ``end_positions`` [b] and ``context_mask`` [b, t]
        (True at context tokens). Padding goes on the format's side (left for XLNet), and every
        position is shifted with it.

    Raises:
        DataError: items with different numbers of sequences (e.g. 4 and 5 answers) in one batch.
    """
    ks = {len(item.sequences) for item in batch}
    if len(ks) != 1:
        raise DataError(f"a batch mixes examples of {sorted(ks)} sequences each",
                        "give every multiple-choice example the same number of answers")
    t = max(len(p.ids) for item in batch for p in item.sequences)

    def pad(values: list, fill) -> list:
        extra = [fill] * (t - len(values))
        return extra + values if fmt.pad_left else values + extra

    def shift(item: Encoded, pos: int) -> int:
        return pos + (t - len(item.sequences[0].ids) if fmt.pad_left else 0)

    out = {
        "input_ids": torch.tensor([[pad(p.ids, fmt.pad_id) for p in item.sequences] for item in batch]),
        "attention_mask": torch.tensor([[pad([1] * len(p.ids), 0) for p in item.sequences] for item in batch]),
        "summary_index": torch.tensor([[p.summary + (t - len(p.ids) if fmt.pad_left else 0) for p in item.sequences]
                                       for item in batch]),
    }
    if batch[0].sequences[0].types is not None:
        out["token_type_ids"] = torch.tensor([[pad(p.types, fmt.pad_type) for p in item.sequences] for item in batch])
    labels = [item.label for item in batch]
    if all(label is not None for label in labels):
        out["labels"] = torch.tensor(labels, dtype=torch.float if isinstance(labels[0], float) else torch.long)
    if batch[0].start is not None:
        out["start_positions"] = torch.tensor([shift(item, item.start) for item in batch])
        out["end_positions"] = torch.tensor([shift(item, item.end) for item in batch])
        out["context_mask"] = torch.tensor([pad([o is not None for o in item.offsets], False) for item in batch])
    return out


MAX_ANSWER_LEN = 30
"""Longest answer span :func:`best_span` reads, in tokens (BERT's and XLNet's run_squad max_answer_length)."""


def _band(x: Tensor, width: int, fill) -> Tensor:
    """x [..., n] -> [..., n, width], entry (s, j) = x[s + j] (``fill`` past the end)."""
    return F.pad(x, (0, width - 1), value=fill).unfold(-1, width, 1)


def end_band(end_scores: Tensor, width: int) -> Tensor:
    """The end scores of a start-conditioned span head that a span search reads: [..., n, n], row s the scores of
    every end given start s, -> [..., n, width], entry (s, j) the score of end s + j given s (-inf past n)."""
    n = end_scores.shape[-1]
    index = torch.arange(n, device=end_scores.device)[:, None] + torch.arange(width, device=end_scores.device)
    padded = F.pad(end_scores, (0, width), value=float("-inf"))                     # [..., n, n + width]
    return padded.gather(-1, index.expand(*end_scores.shape[:-1], width))


def best_spans(start_logits: Tensor, end_logits: Tensor, max_answer_len: int) -> tuple[Tensor, Tensor]:
    """Per row, the (s, e) with s <= e < s + ``max_answer_len`` maximising start_logits[s] + the score of end e
    (given s).

    End scores are per position, end_logits[e], or, where they depend on the start (a start-conditioned head),
    a band (:func:`end_band`): end_logits[s, j] scores end s + j given start s; a band narrower than
    ``max_answer_len`` scores only the spans it holds. Only the band of allowed pairs is scored,
    [b, n, max_answer_len], not all [b, n, n] pairs (GDAN's dev paragraphs run to hundreds of words).
    Positions that may not start (or end) a span are given -inf start (end) scores by the caller; a row
    without any finite pair returns (0, 0). Ties go to the first pair in (s, e) order.

    Args:
        start_logits: [b, n] scores of each position as the answer's first token.
        end_logits: [b, n] scores of each position as its last token, or a band [b, n, m].
        max_answer_len: longest span in positions, at least 1.
    Shapes:
        [b, n], [b, n] or [b, n, m] -> start [b], end [b].
    """
    if max_answer_len < 1:
        raise ValueError(f"max_answer_len must be >= 1, got {max_answer_len}")
    k = min(max_answer_len, start_logits.shape[1])
    ends = _band(end_logits, k, float("-inf")) if end_logits.dim() == 2 else end_logits[:, :, :k]   # [b, n, k]
    k = ends.shape[2]
    top = (start_logits[:, :, None] + ends).flatten(1).argmax(1)
    return top // k, top // k + top % k


def best_span(context: str, windows: Sequence[Encoded], start_logits: Sequence[Tensor], end_logits: Sequence[Tensor],
              fmt: InputFormat, max_answer_len: int = MAX_ANSWER_LEN) -> str:
    """The answer text of the highest-scoring span over all windows of one example (BERT's run_squad
    rule): start s and end e are context tokens of one window, s <= e < s + ``max_answer_len``, the
    window gives s its maximum context, and the score is start_logits[s] + end_logits[e] (a band of end
    scores given the start: + end_logits[s, e - s]); the first window wins a tie. The windows are searched
    together by :func:`best_spans`, with -inf start scores outside the window's max-context tokens and -inf
    end scores outside the context.

    Args:
        windows: the example's span windows (:meth:`TaskEncoder.span`).
        start_logits, end_logits: per window a [t] row of scores (a [w, t] tensor or a list), at least
            the window's own positions, padded as :func:`collate` pads (with ``fmt``'s padding side); end
            scores given the start as a [t, m] band (:func:`end_band`) of those positions.
        max_answer_len: longest answer in tokens (default :data:`MAX_ANSWER_LEN`).

    Returns:
        The context text of the best span, "" when no window has a valid span.
    """
    starts, ends = [], []
    for enc, start, end in zip(windows, start_logits, end_logits):
        n = len(enc.offsets)
        start, end = (start[start.shape[0] - n:], end[end.shape[0] - n:]) if fmt.pad_left else (start[:n], end[:n])
        in_context = torch.tensor([o is not None for o in enc.offsets])
        starts.append(start.masked_fill(~(in_context & torch.tensor(enc.max_context)), float("-inf")))
        ends.append(end.masked_fill(~(in_context if end.dim() == 1 else _band(in_context, end.shape[1], False)),
                                    float("-inf")))
    start = pad_sequence(starts, batch_first=True, padding_value=float("-inf"))     # [w, n]: windows' own positions
    end = pad_sequence(ends, batch_first=True, padding_value=float("-inf"))
    s, e = best_spans(start, end, max_answer_len)
    rows = torch.arange(len(windows))
    score = start[rows, s] + (end[rows, e] if end.dim() == 2 else end[rows, s, e - s])     # [w]
    w = int(score.argmax())
    if score[w] == float("-inf"):
        return ""
    return token_span_text(context, windows[w], int(s[w]), int(e[w]))
