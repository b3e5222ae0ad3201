"""MLE pretraining of GDAN's question generator G on the labelled data (thesis §3.2; Algorithm 1 starts
from a G pretrained this way), and question generation with a trained G.

Recipe: ``method: question_gen`` + the fields of :class:`QuestionGenRecipe` (recipes/gdan/question_gen_mle.yaml).
The run trains G by teacher-forced maximum likelihood on the labelled questions of the GDAN split
(:mod:`genfeat.data.gdan`), evaluates the per-word negative log-likelihood on dev questions, writes
``OUT/final`` (G with the shared vocabulary; architecture ``question_gen``) and ``OUT/dev_questions.jsonl``
(beam-search questions for the first dev answers beside the human ones).

What genfeat.methods.gdan calls (Algorithm 1):

- :func:`new_generator` builds G over the GDAN vocabulary (special ids taken from it);
- :func:`mle_phase` is G's pretraining phase, to run before the alternating phase (``generator_attr``
  names G inside a container model);
- :func:`generated_examples` turns unlabelled (paragraph, answer) examples
  (:func:`genfeat.data.question_gen.answer_examples`) into U_G, examples with G's questions, for D's
  J(U_G, d_gen) steps and for display;
- :class:`genfeat.objectives.question_gen.QuestionGenReinforce` is the G step's objective on a
  ``CollatedStream`` of those unlabelled examples with :func:`genfeat.data.question_gen.collate_qg`;
  its reward callable reads G's questions through :func:`genfeat.data.question_gen.reader_questions`.

:func:`load_generator` reads G back from either method's checkpoint (``genfeat generate-questions`` and
scripts/gdan_figures.py use it).
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Sequence

import torch

from ..config import Config, from_dict, to_dict
from ..data.answer_chunks import ChunkConfig
from ..data.gdan import BOS, EOS, PAD, GDANDataConfig, Paragraph, QAExample, CollatedStream, build_vocab, load_gdan_data
from ..data.question_gen import answer_examples, answer_uid, collate_qg, question_words
from ..data.vocab import SymbolVocab, load_vocab
from ..errors import CheckpointError, DataError
from ..eval.held_out import evaluate_objective
from ..framework import OptimConfig, TrainConfig, Trainer
from ..framework.checkpoint import load_weights, read_config, resume_dir, save_checkpoint
from ..framework.schedule import OptimSpec, Phase, Stage, Term
from ..hub import VOCAB_FILE
from ..io import atomic_path, write_results
from ..models.question_gen import QuestionGenConfig, QuestionGenerator
from ..objectives.question_gen import QuestionGenMLE, question_mask, shift_right
from ..runner import recipe_record, register_method

ARCHITECTURE = "question_gen"


@dataclass
class QuestionGenRecipe(Config):
    """MLE pretraining of G on the labelled part of the GDAN split."""

    data: GDANDataConfig = field(default_factory=GDANDataConfig)
    """Which questions are labelled (labelling_rate, split seeds, paragraph cut)."""
    model: QuestionGenConfig = field(default_factory=QuestionGenConfig)
    """G's sizes (n_token and the special ids are set from the vocabulary)."""
    vocab_min_freq: int = 2
    """Training-side words rarer than this are <unk> (copied when they occur in the paragraph)."""
    vocab_max_size: int = 20000
    """Keep at most this many word types, specials included (0: all)."""
    batch_size: int = 32
    """Questions per step."""
    steps: int = 3000
    """Optimizer steps."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3))
    """Optimizer (train.clip_norm clips the gradient)."""
    max_question_words: int = 30
    """Longest question (training targets are cut to it; generation stops there)."""
    eval_questions: int = 500
    """Dev questions whose per-word NLL is the evaluation figure (0: all)."""
    show_questions: int = 20
    """Dev answers whose beam-search questions go to OUT/dev_questions.jsonl."""
    beam: int = 5
    """Beam size of the displayed questions."""
    train: TrainConfig = field(default_factory=lambda: TrainConfig(device="cpu", threads=1, clip_norm=5.0,
                                                                   log_every=50, eval_every=500))
    """The loop."""

    def __post_init__(self):
        for name in ("batch_size", "max_question_words", "beam"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if min(self.steps, self.eval_questions, self.show_questions, self.vocab_max_size) < 0 or self.vocab_min_freq < 1:
            raise ValueError("steps, eval_questions, show_questions, vocab_max_size must be >= 0 and vocab_min_freq >= 1")


def new_generator(cfg: QuestionGenConfig, vocab: SymbolVocab) -> QuestionGenerator:
    """G over ``vocab`` (a :func:`genfeat.data.gdan.build_vocab` vocabulary): n_token and the ids of
    <pad>, <unk>, <s>, </s> come from it, the other sizes from ``cfg``."""
    return QuestionGenerator(replace(cfg, n_token=len(vocab), pad_id=vocab.index[PAD], unk_id=vocab.unk_id,
                                     bos_id=vocab.index[BOS], eos_id=vocab.index[EOS]))


def mle_phase(examples: Sequence[QAExample], vocab: SymbolVocab, steps: int, optim: OptimConfig, batch_size: int = 32,
              seed: int = 0, max_question_words: int = 30, generator_attr: str = "", name: str = "g_mle") -> Phase:
    """G's MLE pretraining phase on labelled ``examples``: ``steps`` steps of :class:`QuestionGenMLE` with
    its own optimizer over G's parameters (all of ``generator_attr``'s module in a container model)."""
    collate = functools.partial(collate_qg, vocab=vocab, max_question_words=max_question_words)
    stream = CollatedStream(examples, collate, batch_size, seed)
    params = (lambda m: getattr(m, generator_attr).parameters()) if generator_attr else None
    return Phase(name, steps, [Stage([Term(QuestionGenMLE(generator_attr), stream)])],
                 {"main": OptimSpec(optim, params)})


@torch.no_grad()
def generated_examples(model: QuestionGenerator, examples: Sequence[QAExample], vocab: SymbolVocab,
                       mode: Literal["sample", "beam", "greedy"] = "sample", max_len: int = 30, beam: int = 5,
                       batch_size: int = 64, generator: torch.Generator | None = None) -> list[tuple[QAExample, float]]:
    """G's questions for (paragraph, answer) ``examples``: each example with ``question`` replaced by the
    generated words (copied out-of-vocabulary words as themselves), and the question's log-probability.

    Args:
        mode: ``sample`` (ancestral sampling, U_G of Algorithm 1), ``beam`` (beam search, for display) or
            ``greedy``.
        max_len: longest question, </s> included.
    Returns:
        [(example with the generated question, log p_G(question | paragraph, answer)), ...] in input order.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(examples), batch_size):
        batch = collate_qg(examples[i:i + batch_size], vocab).to(device)
        inputs = batch.model_inputs()
        if mode == "beam":
            ids, scores = model.beam_search(*inputs, max_len=max_len, beam=beam)
        else:
            ids = model.sample(*inputs, max_len=max_len, greedy=mode == "greedy", generator=generator)
            lp = model(*inputs, shift_right(ids, model.config.bos_id)).target_log_probs(ids)
            scores = (lp * question_mask(ids, model.config.eos_id)).sum(1)
        for ex, row, oov, score in zip(batch.examples, ids.tolist(), batch.oov, scores.tolist()):
            out.append((replace(ex, question=tuple(question_words(row, oov, vocab))), score))
    model.train(was_training)
    return out


def _dev_nll(model: QuestionGenerator, examples: Sequence[QAExample], vocab: SymbolVocab, max_words: int,
             batch_size: int = 64) -> dict[str, float]:
    """Per-word negative log-likelihood (</s> included) and perplexity (capped at exp(50)) of G on ``examples``."""
    batches = (collate_qg(examples[i:i + batch_size], vocab, max_words) for i in range(0, len(examples), batch_size))
    lm = evaluate_objective(model, QuestionGenMLE(), batches).lm()
    return {"dev_nll": lm["loss"], "dev_ppl": lm["ppl"]}


def _write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def question_records(pairs: Sequence[tuple[QAExample, float]], human: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """JSON records of generated questions: id, paragraph id, answer (text and character offset),
    question, its log-probability, and the human question when ``human`` has the id."""
    records = []
    for ex, score in pairs:
        p = ex.paragraph
        rec = {"id": ex.uid, "paragraph_id": p.uid, "answer": p.span_text(ex.start, ex.end),
               "answer_start": p.offsets[ex.start][0], "question": " ".join(ex.question), "log_prob": score}
        if human is not None and ex.uid in human:
            rec["human_question"] = human[ex.uid]
        records.append(rec)
    return records


@register_method("question_gen", QuestionGenRecipe)
def run(cfg: QuestionGenRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    data = load_gdan_data(cfg.data, seed)
    vocab = build_vocab(data, cfg.vocab_min_freq, cfg.vocab_max_size)
    torch.manual_seed(seed)
    model = new_generator(cfg.model, vocab)
    phase = mle_phase(data.labelled, vocab, cfg.steps, cfg.optim, cfg.batch_size, seed, cfg.max_question_words)
    dev = data.dev[:cfg.eval_questions] if cfg.eval_questions else data.dev
    evaluate = lambda m: _dev_nll(m, dev, vocab, cfg.max_question_words)  # noqa: E731
    tcfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    ckpt = {"architecture": ARCHITECTURE, "model": to_dict(model.config), **recipe_record(cfg)}
    save_vocab = lambda d: vocab.save(d / VOCAB_FILE)  # noqa: E731
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    trainer = Trainer(model, [phase], tcfg, evaluate, out_dir, ckpt, save_vocab, resume_from)
    result = trainer.fit()
    seconds = result.seconds     # over every invocation of a resumed run
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": seconds, "interrupted": 1.0}
    figures = {**evaluate(model), "steps": result.steps, "train_seconds": seconds, "vocab_size": len(vocab),
               "labelled_questions": len(data.labelled)}
    if out_dir is not None:
        out = Path(out_dir)
        save_checkpoint(out / "final", model, None, ckpt, save_vocab)
        shown = data.dev[:cfg.show_questions]
        human = {ex.uid: " ".join(ex.question) for ex in shown}
        pairs = generated_examples(model, shown, vocab, "beam", cfg.max_question_words + 1, cfg.beam)
        _write_jsonl(out / "dev_questions.jsonl", question_records(pairs, human))
        write_results(out, figures)
    return figures


def read_paragraphs(path: str | Path, chunks: ChunkConfig, per_paragraph: int = 0, seed: int = 0) -> list[QAExample]:
    """(paragraph, answer) examples of a file for ``genfeat generate-questions``.

    ``*.jsonl``: one object per line with ``context`` (the paragraph), optional ``id`` and optional
    ``answers`` (a list of ``{"text", "answer_start"}``, SQuAD's form); a paragraph without answers gets
    answer chunks extracted (:mod:`genfeat.data.answer_chunks`). Any other file: one paragraph per non-blank
    line, answers extracted. A paragraph's id is its ``id``, else ``line<n>``; an example's is
    :func:`genfeat.data.question_gen.answer_uid`'s, ``<paragraph id>#<answer_start>+<length>``, and an answer
    span given or found twice is one example.

    Raises:
        DataError: a missing or empty file, a line that is not a JSON object with a non-empty ``context``,
            an answer not at its stated offset, two paragraphs with one id, naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"paragraphs file '{path}' does not exist", "pass a text file (one paragraph per line) or a JSONL file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"'{path}' is not UTF-8 text ({e.reason})", "save the file as UTF-8") from None
    given: list[QAExample] = []
    to_chunk: list[Paragraph] = []
    lines_of: dict[str, int] = {}                         # paragraph id -> its line, for unique example ids
    uids: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"'{path}' line {n}"
        if path.suffix != ".jsonl":
            to_chunk.append(Paragraph.of(f"line{n}", line))
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where} is not valid JSON ({e.msg})", "write one JSON object per line") from None
        context = record.get("context") if isinstance(record, dict) else None
        if not isinstance(context, str) or not context.strip():
            raise DataError(f"{where} has no non-empty 'context' string", 'write {"context": "paragraph text", ...}')
        p = Paragraph.of(str(record.get("id", f"line{n}")), context)
        if lines_of.setdefault(p.uid, n) != n:
            raise DataError(f"{where} has paragraph id {p.uid!r}, as line {lines_of[p.uid]} has",
                            "give every paragraph its own id (or none: line<n> is used)")
        answers = record.get("answers") or []
        if not answers:
            to_chunk.append(p)
        for k, a in enumerate(answers):
            try:
                text, start = a["text"], int(a["answer_start"])
            except (TypeError, KeyError, ValueError):
                raise DataError(f"{where} answer {k} is not {{'text': ..., 'answer_start': ...}}",
                                "give each answer its text and character offset") from None
            span = p.word_span(start, start + len(text)) if context[start:start + len(text)] == text else None
            if span is None:
                raise DataError(f"{where}: answer {text!r} is not at offset {start} of the context",
                                "fix answer_start or the answer text")
            uid = answer_uid(p.uid, start, text)
            if uid not in uids:
                uids.add(uid)
                given.append(QAExample(uid, p, (), span[0], span[1], (text,)))
    if not given and not to_chunk:
        raise DataError(f"'{path}' holds no paragraphs", "write one paragraph per line")
    found = answer_examples(to_chunk, chunks, per_paragraph, seed) if to_chunk else []
    examples = given
    for ex in found:                                  # a span two chunkers' rules both found: once
        if ex.uid not in uids:
            uids.add(ex.uid)
            examples.append(ex)
    if not examples:
        raise DataError(f"no answer chunk was found in the paragraphs of '{path}'",
                        "give answers in a JSONL file ({'context': ..., 'answers': [...]}) or longer paragraphs")
    return examples


def load_generator(path: str | Path) -> tuple[QuestionGenerator, SymbolVocab]:
    """G (in evaluation mode) and its vocabulary from a checkpoint directory: a ``question_gen`` checkpoint
    (``OUT/final`` of this method, ``OUT/final/g`` of method ``gdan``) or a GDAN run's checkpoint of the
    (D, G) pair (``OUT/last`` or ``OUT/g_mle/last`` of method ``gdan`` with a generator setting), where G is its
    ``g``; the pair's D is rebuilt as the run built it (the GA reader, or with ``d_init`` the span reader) so
    that the weights load strictly.

    Raises:
        CheckpointError: the directory is neither, or its weights or vocabulary do not fit.
    """
    from ..hub import build_model, load_checkpoint
    from .gdan import GENERATOR_SETTINGS

    config = read_config(path)
    if config.get("architecture") != "gdan":
        return load_checkpoint(path, ARCHITECTURE, require_vocab=True)
    recipe = config.get("recipe", {})
    if recipe.get("setting") not in GENERATOR_SETTINGS:
        raise CheckpointError(f"GDAN checkpoint '{path}' is of setting {recipe.get('setting')!r}, which has no "
                              "question generator", f"pass the checkpoint of a run with setting in {GENERATOR_SETTINGS}")
    if not (Path(path) / VOCAB_FILE).is_file():
        raise CheckpointError(f"GDAN checkpoint '{path}' has no {VOCAB_FILE}",
                              "pass OUT/last or OUT/final/g of a gdan run")
    vocab = load_vocab(Path(path) / VOCAB_FILE)
    d_arch = "span_reader" if recipe.get("d_init") else "ga_reader"
    pair = torch.nn.ModuleDict({"d": build_model(d_arch, config.get("reader")),
                                "g": new_generator(from_dict(QuestionGenConfig, recipe.get("generator"), "generator"),
                                                   vocab)})
    load_weights(path, pair)
    return pair.g.eval(), vocab


def generate_questions(checkpoint: str | Path, paragraphs: str | Path, out: str | Path, *, beam: int = 5,
                       max_len: int = 30, chunks: ChunkConfig | None = None, per_paragraph: int = 0,
                       seed: int = 0) -> dict[str, Any]:
    """``genfeat generate-questions``: beam-search questions of the G of ``checkpoint`` (:func:`load_generator`)
    for the answers of ``paragraphs`` (:func:`read_paragraphs`), written to ``out`` as JSONL
    (:func:`question_records`)."""
    model, vocab = load_generator(checkpoint)
    examples = read_paragraphs(paragraphs, chunks or ChunkConfig(), per_paragraph, seed)
    t0 = time.time()
    records = question_records(generated_examples(model, examples, vocab, "beam", max_len, beam))
    _write_jsonl(Path(out), records)
    return {"out": str(out), "questions": len(records), "paragraphs": len({r["paragraph_id"] for r in records}),
            "seconds": time.time() - t0}
