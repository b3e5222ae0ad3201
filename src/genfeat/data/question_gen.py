"""Batches of GDAN's question generator G (thesis §3.2), on the data of :mod:`genfeat.data.gdan`.

G shares D's word vocabulary (:func:`genfeat.data.gdan.build_vocab`), so a generated question goes to D
as word ids directly. On top of it each paragraph has its own *extended vocabulary* for copying
(Eq. 3.7): the paragraph's words outside the shared vocabulary get ids V, V+1, ... in the order of
their first occurrence; a question word that is such a word is a copy target with that id, any other
unknown question word is <unk>.

Unlabelled paragraphs have no answers: :func:`answer_examples` turns each answer chunk of
:mod:`genfeat.data.answer_chunks` into a :class:`~genfeat.data.gdan.QAExample` with an empty
question, the input G writes a question for (Algorithm 1's U_G).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import torch

from .answer_chunks import ChunkConfig, extract_many
from .gdan import BOS, EOS, Paragraph, QAExample, pad_ids
from .vocab import SymbolVocab


@dataclass
class QGBatch:
    """G's input for b (paragraph, answer[, question]) examples; the tensors are what
    :class:`~genfeat.models.question_gen.QuestionGenerator` takes."""

    src_ids: torch.Tensor
    """[b, s] paragraph word ids (out-of-vocabulary words as <unk>), right-padded with <pad> = 0."""
    answer: torch.Tensor
    """[b, s] 1 at the answer's words, else 0."""
    mask: torch.Tensor
    """[b, s] bool, True at real words."""
    src_ext: torch.Tensor
    """[b, s] extended ids of the paragraph words (the copy targets)."""
    tgt_in: torch.Tensor
    """[b, t] decoder inputs: <s> then the question's extended ids (just <s> without questions)."""
    tgt_out: torch.Tensor
    """[b, t] targets: the question's extended ids then </s>, padded with 0."""
    tgt_mask: torch.Tensor
    """[b, t] bool, True at real targets."""
    n_ext: int
    """Out-of-vocabulary slots the batch needs (at least 1)."""
    oov: list[list[str]]
    """Per example, the words of its extended ids V, V+1, ... (to decode copied words)."""
    examples: list[QAExample]
    """The examples of the batch, in order (to pair generated questions with paragraphs and answers)."""

    def to(self, device: torch.device | str) -> "QGBatch":
        """The batch with its tensors on ``device`` (the examples stay as they are)."""
        moved = {k: getattr(self, k).to(device) for k in ("src_ids", "answer", "mask", "src_ext", "tgt_in", "tgt_out",
                                                           "tgt_mask")}
        return replace(self, **moved)

    def model_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """(src_ids, answer, mask, src_ext, n_ext), the paragraph arguments of the generator's methods."""
        return self.src_ids, self.answer, self.mask, self.src_ext, self.n_ext


def collate_qg(examples: Sequence[QAExample], vocab: SymbolVocab, max_question_words: int = 40) -> QGBatch:
    """A :class:`QGBatch` of ``examples`` (questions cut to ``max_question_words`` words before </s>)."""
    v, unk = len(vocab), vocab.unk_id
    src, src_ext, answer, tgt, oovs = [], [], [], [], []
    for ex in examples:
        oov: dict[str, int] = {}
        ids, ext = [], []
        for w in ex.paragraph.tokens:
            i = vocab.index.get(w)
            if i is None:
                i = v + oov.setdefault(w, len(oov))
                ids.append(unk)
            else:
                ids.append(i)
            ext.append(i)
        src.append(ids)
        src_ext.append(ext)
        answer.append([int(ex.start <= i <= ex.end) for i in range(len(ids))])
        q = [vocab.index.get(w, v + oov[w] if w in oov else unk) for w in ex.question[:max_question_words]]
        tgt.append(q)
        oovs.append(list(oov))
    eos, bos = vocab.index[EOS], vocab.index[BOS]
    src_ids, mask = pad_ids(src)
    tgt_out, _ = pad_ids([q + [eos] for q in tgt])
    tgt_in, _ = pad_ids([[bos] + q for q in tgt])
    tgt_mask = torch.zeros_like(tgt_out, dtype=torch.bool)
    for i, q in enumerate(tgt):
        tgt_mask[i, :len(q) + 1] = True
    return QGBatch(src_ids, pad_ids(answer)[0], mask, pad_ids(src_ext)[0], tgt_in, tgt_out, tgt_mask,
                   max(1, max(len(o) for o in oovs)), oovs, list(examples))


def question_words(ids: Iterable[int], oov: Sequence[str], vocab: SymbolVocab) -> list[str]:
    """The words of one generated question: extended ids up to </s> (exclusive), copied words from ``oov``."""
    eos, pad, v = vocab.index[EOS], vocab.index.get("<pad>", 0), len(vocab)
    out = []
    for i in ids:
        if i in (eos, pad):
            break
        out.append(vocab.symbols[i] if i < v else oov[i - v])
    return out


def reader_questions(questions: torch.Tensor, vocab: SymbolVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """G's questions as D reads them: ([b, T] word ids, [b, T] bool mask) from generated extended ids
    [b, T]; a copied out-of-vocabulary word becomes <unk>, </s> and what follows become <pad> (id 0). A
    question of no words keeps one <unk>, so every row has a word."""
    eos = vocab.index[EOS]
    keep = (questions == eos).long().cumsum(1) == 0
    ids = questions.masked_fill(questions >= len(vocab), vocab.unk_id).masked_fill(~keep, 0)
    empty = ~keep[:, 0]
    ids[empty, 0], keep[empty, 0] = vocab.unk_id, True
    return ids, keep


def answer_uid(paragraph_uid: str, start: int, text: str) -> str:
    """The id of the answer ``text`` at character ``start`` of a paragraph: ``<paragraph uid>#<start>+<length>``
    (``line2#13+7``), unique for every distinct answer span (two answers starting at one character, "capital"
    and "capital of France", differ in length) and the same in every run."""
    return f"{paragraph_uid}#{start}+{len(text)}"


def answer_examples(paragraphs: Sequence[Paragraph], cfg: ChunkConfig | None = None, per_paragraph: int = 0,
                    seed: int = 0) -> list[QAExample]:
    """One example with an empty question per answer chunk of each paragraph (the inputs of U_G).

    Chunks are found on the paragraph's text (:func:`genfeat.data.answer_chunks.extract_many`) and mapped
    to the paragraph's words; a chunk beyond a cut paragraph's last word is skipped. The answer is those
    words' text (a chunk starting or ending inside a word, "10" of "10th", is the whole word, as G reads it),
    and the uid is :func:`answer_uid`'s of that text.

    Args:
        per_paragraph: keep at most this many chunks per paragraph, drawn with ``seed`` (0: all).
    """
    rng = random.Random(seed)
    out = []
    for p, chunks in zip(paragraphs, extract_many([p.text for p in paragraphs], cfg)):
        found = []
        for c in chunks:
            span = p.word_span(c.start, c.end)
            if span is not None and c.end <= p.offsets[-1][1]:
                text = p.span_text(*span)
                found.append(QAExample(answer_uid(p.uid, p.offsets[span[0]][0], text), p, (), span[0], span[1],
                                       (text,)))
        if per_paragraph and len(found) > per_paragraph:
            found = [found[i] for i in sorted(rng.sample(range(len(found)), per_paragraph))]
        out.extend(found)
    return out
