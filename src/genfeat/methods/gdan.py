"""Generative Domain-Adaptive Nets runner (thesis §3.2; Yang et al., ACL 2017): semi-supervised SQuAD with a
gated-attention reader D trained on labelled questions L and on questions U_G made for unlabelled
paragraphs, and the baselines of Table 3.4 as ``setting``.

Recipe: ``method: gdan`` + the fields of :class:`GDANRecipe`; ``recipes/gdan/*.yaml`` hold one per row.

Settings (Table 3.4's rows):

- ``sl``: D on L alone, J(L).
- ``context``: D on L and on Context pseudo-questions of the unlabelled paragraphs (the ``context_window``
  words on each side of an extracted answer chunk, :func:`genfeat.data.gdan.context_questions`),
  J(L) + J(U_C), no domain tags.
- ``context_domain``: the same with domain tags, J(L, d_true) + J(U_C, d_gen) (§3.2.3).
- ``gen``: G (GDAN_G's :class:`~genfeat.models.question_gen.QuestionGenerator`) is trained by MLE on L
  (``g_pretrain_steps``), then fixed; D on J(L) + J(U_G) where U_G are questions G samples for the
  answer chunks of the unlabelled paragraphs, drawn afresh for every D batch.
- ``gen_domain``: the same with domain tags, J(L, d_true) + J(U_G, d_gen).
- ``gdan`` (Gen + domain + adv, Algorithm 1): after the MLE pretraining, T_D steps of D on
  J(L, d_true) + J(U_G, d_gen) alternate with T_G steps of G maximising J(U_G, d_true, D), the
  log-likelihood D assigns to the chunk when it reads G's question as a human one, by REINFORCE with an
  average-reward baseline (:class:`~genfeat.objectives.question_gen.QuestionGenReinforce`).
- ``gen_dual`` (dual learning): as gdan without tags; G's reward is log P_D(a | p, q).
- ``gen_gan`` (our reading of "Gen + GAN", the gradient-reversal schedule): with tags, G's reward is
  −log P_D(a | p, q, d_gen), the negative of D's own objective on the generated data, so G plays against D
  as a GAN generator does, where gdan has G cooperate with D's true-domain model.

Each D step minimises the sum of the terms' mean losses with one Adam optimizer (``steps`` D steps; the
adversarial settings add T_G G steps, with G's own optimizer, after every T_D D steps); an evaluation every
``train.eval_every`` steps of the phase (D's and G's together) scores dev F1 (D reads dev questions with d_true when
tags are on), and the parameters of the best dev F1 are kept (model selection on dev only). The figures of a run: ``test_f1``,
``test_em``, ``dev_f1``, ``dev_em`` (SQuAD v1.1's official EM/F1 on the word span decoded by
:func:`~genfeat.tasks.transforms.best_spans`, as fractions), ``labelled`` questions, ``unlabelled_questions`` (Context
pseudo-questions, or the answer chunks G writes questions for), ``vocab``, ``steps`` (all steps of the training
phase, as ``train.eval_every``, ``save_every`` and ``stop_after_steps`` count them: ``d_steps`` + ``g_steps``),
``d_steps`` (D's, the recipe's ``steps`` in a run to the end), ``g_steps`` (G's REINFORCE steps; 0 but in the
adversarial settings; G's MLE pretraining steps, ``g_pretrain_steps``, are in none of the three) and
``train_seconds`` (G's pretraining included); ``genfeat run --seeds N`` adds their means
over seeds (``test_f1_mean`` ...). Output directory, each checkpoint with vocab.json and the recipe in config.json:

- ``OUT/g_mle`` (generator settings): G's MLE pretraining log and ``OUT/g_mle/last``, D (as built) and G after
  pretraining, architecture ``gdan``: :func:`genfeat.methods.question_gen.load_generator` reads G from it, and
  ``--resume`` of a run stopped before OUT/last continues the pretraining from it (saved every ``train.save_every``
  steps and at its end), then trains D and G afresh;
- ``OUT/metrics.jsonl`` and ``OUT/last``: D and G after training (the dev-selected parameters), architecture
  ``gdan``, the word vocabulary: ``--resume`` and ``load_generator``;
- ``OUT/final/d``: D, hub architecture ``ga_reader`` (or ``span_reader`` with ``d_init``, then with the backbone's
  tokenizer): ``genfeat.load_checkpoint`` and ``genfeat evaluate --task squad_split --split dev|test``
  (:func:`evaluate_reader`, the run's figures again);
- ``OUT/final/g`` (generator settings): G, architecture ``question_gen``: ``load_generator`` and
  ``genfeat generate-questions``;
- ``OUT/results.json``.

Beyond the thesis (its stated future work): with ``d_init`` naming a genfeat bert or xlnet checkpoint, D is that
encoder with a span head (:class:`~genfeat.models.span_reader.SpanReader`; recipes ``sl_bert.yaml``,
``gdan_bert.yaml``, ``sl_xlnet.yaml``, ``gdan_xlnet.yaml``), reading the backbone's subwords in windows
(:class:`~genfeat.data.gdan.WindowEncoder`), its domain tags learned embeddings on an extra token after the
question; G, the data and the schedules are the same.

The thesis's D is larger (GloVe-initialised, character features) and G's questions come from 1M
Wikipedia paragraphs; here both models start at random (D's embeddings from word vectors with ``d_vectors``:
GloVe, or a genfeat word2vec run's) and the unlabelled text is SQuAD's unlabelled
articles plus WikiText-2 valid/test (:mod:`genfeat.data.gdan`).
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Literal, NamedTuple, Sequence

import torch
from torch import Tensor, nn

from ..config import Config, from_dict, to_dict
from ..data.answer_chunks import ChunkConfig, backend_name
from ..data.gdan import (D_GEN as TAG_GEN, D_TRUE as TAG_TRUE, SPECIALS, CollatedStream, GDANData, GDANDataConfig,
                         QAExample, WindowEncoder, build_vocab, collate_qa, context_questions, evaluation_questions,
                         load_gdan_data)
from ..data.question_gen import QGBatch, answer_examples, collate_qg, question_words, reader_questions
from ..data.vocab import SymbolVocab
from ..errors import CheckpointError, ConfigError, DataError, with_article
from ..eval.metrics import squad_scores
from ..framework import OptimConfig, TrainConfig, Trainer
from ..framework.checkpoint import load_trainer_state, read_config, resume_dir, save_checkpoint
from ..framework.distributed import on_rank_0, refuse_several_processes
from ..framework.schedule import OptimSpec, Phase, Stage, Term
from ..hub import VOCAB_FILE, architecture_of, checkpoint_config, load_checkpoint
from ..io import write_results
from ..models.ga_reader import GAReader, GAReaderConfig
from ..models.heads import FineTuneConfig, HeadConfig
from ..models.word2vec import load_word2vec_format
from ..models.question_gen import QuestionGenConfig
from ..models.span_reader import SpanReader, SpanReaderConfig
from ..objectives.question_gen import QuestionGenReinforce
from ..objectives.span_qa import D_GEN, D_TRUE, SpanQAObjective, read, reader, span_nll
from ..runner import recipe_record, register_method
from ..tasks.catalog import get_task
from ..tasks.predictions import write_predictions
from ..tasks.transforms import best_spans
from .question_gen import mle_phase, new_generator

Setting = Literal["sl", "context", "context_domain", "gen", "gen_gan", "gen_dual", "gen_domain", "gdan"]
GENERATOR_SETTINGS = ("gen", "gen_gan", "gen_dual", "gen_domain", "gdan")
ADVERSARIAL_SETTINGS = ("gen_gan", "gen_dual", "gdan")
TAGGED_SETTINGS = ("context_domain", "gen_gan", "gen_domain", "gdan")
READER_ARCHITECTURES = ("ga_reader", "span_reader")
"""Hub architectures of a saved D (``OUT/final/d``): the GA reader, or a pretrained encoder's span reader (d_init)."""
EVAL_TASK = "squad_split"
"""The task ``genfeat evaluate`` scores a saved D on: its dev and test parts are the run's (the same seeded
article split, :mod:`genfeat.data.gdan`)."""

_DIVERGED_FIX = ("lower d_optim.lr, g_optim.lr or g_rl_optim.lr, or set train.clip_norm, then run again with "
                 "--overwrite")


@dataclass
class GDANRecipe(Config):
    """One row of Table 3.4 at one labelling rate. Defaults: a CPU-sized GA reader (3 layers, 64 units per
    direction), Adam lr 1e-3, batch 32, dev F1 every 250 steps with the best kept; G as GDAN_G's defaults."""

    setting: Setting = "sl"
    """Table 3.4's row (module docstring)."""
    data: GDANDataConfig = field(default_factory=GDANDataConfig)
    """Split, labelling rate and unlabelled text."""
    reader: GAReaderConfig = field(default_factory=GAReaderConfig)
    """D (vocab_size is set from the vocabulary)."""
    generator: QuestionGenConfig = field(default_factory=QuestionGenConfig)
    """G (n_token and the special ids are set from the vocabulary); generator settings only."""
    min_freq: int = 2
    """Words rarer than this on the training side map to <unk>."""
    batch_size: int = 32
    """Labelled questions per D step."""
    unlabelled_batch: int = 32
    """Pseudo-questions (Context) or generated questions per D step, and per G step."""
    bucket: int = 8
    """D's and G's training batches are drawn from pools of this many batches sorted by paragraph length
    (:class:`~genfeat.data.gdan.CollatedStream`), so little of a batch is padding; 1: plain random batches."""
    steps: int = 3000
    """D optimizer steps."""
    d_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3))
    """D's optimizer."""
    g_pretrain_steps: int = 1000
    """G's MLE steps on the labelled questions before D is trained (generator settings)."""
    g_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3))
    """G's MLE optimizer."""
    g_rl_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-4))
    """G's optimizer in the REINFORCE steps (adversarial settings)."""
    t_d: int = 1
    """T_D of Algorithm 1: D steps per round."""
    t_g: int = 1
    """T_G of Algorithm 1: G steps per round (adversarial settings)."""
    baseline_decay: float = 0.9
    """Decay of REINFORCE's average-reward baseline."""
    max_question_words: int = 30
    """Longest question G writes (and learns from)."""
    context_window: int = 5
    """W of the Context baseline: words taken on each side of the answer chunk."""
    chunks: ChunkConfig = field(default_factory=ChunkConfig)
    """Answer-chunk extraction from the unlabelled paragraphs (spaCy when installed, else rules)."""
    chunks_per_paragraph: int = 5
    """Answer chunks drawn per unlabelled paragraph (by the run's seed)."""
    max_unlabelled: int = 0
    """Use only the first this many unlabelled paragraphs (0: all; chunk extraction with spaCy took
    about 0.15 s per paragraph on the loaded 2-core VM)."""
    d_init: str = ""
    """Beyond the thesis: a genfeat bert or xlnet checkpoint (e.g. runs/bert_pretrain/final) whose encoder with a
    span head is D (:class:`~genfeat.models.span_reader.SpanReader`) instead of the GA reader (``reader`` is
    then unused, and a note names the fields set in it); empty: the GA reader."""
    d_vectors: str = ""
    """Word vectors (word2vec text or binary, e.g. a genfeat word2vec run's OUT/vectors.txt, or GloVe text) that
    initialise the GA reader's embeddings for the words of D's vocabulary they hold (the rest keep their random
    start; the table stays trainable), as the GA reader's GloVe start; their size must be ``reader.embed_dim``.
    Empty: random embeddings."""
    d_max_len: int = 128
    """Pretrained D: tokens per window (at most the backbone's positions; BERT's recipe has 128)."""
    d_doc_stride: int = 64
    """Pretrained D: subwords between the starts of a paragraph's windows."""
    d_max_query: int = 32
    """Pretrained D: questions are cut to this many subwords."""
    max_answer_words: int = 15
    """Longest predicted answer span in words."""
    eval_batch: int = 64
    """Questions per evaluation batch."""
    max_eval: int = 0
    """Score only the first this many dev and test questions (0: all; debug recipes)."""
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        device="cpu", threads=1, log_every=50, eval_every=250, early_stop_metric="dev_f1", early_stop_mode="max",
        keep_best=True))
    """The loop of the D (and G) training phase (early_stop_metric dev_f1 and keep_best select the model on
    dev); G's MLE pretraining runs before it without evaluation."""

    def __post_init__(self):
        for name in ("min_freq", "batch_size", "unlabelled_batch", "context_window", "chunks_per_paragraph",
                     "max_answer_words", "eval_batch", "t_d", "t_g", "max_question_words", "bucket", "d_max_len",
                     "d_doc_stride", "d_max_query"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if min(self.steps, self.max_unlabelled, self.max_eval, self.g_pretrain_steps) < 0:
            raise ValueError("steps, g_pretrain_steps, max_unlabelled and max_eval must be >= 0")
        if not 0.0 <= self.baseline_decay < 1.0:
            raise ValueError(f"baseline_decay must be in [0, 1), got {self.baseline_decay}")
        if not self.d_init:
            check_special_ids(self.reader)


@torch.no_grad()
def predict(model: nn.Module, examples: Sequence[QAExample], vocab: SymbolVocab | Callable, domain: int | None,
            batch: int = 64, max_words: int = 15) -> list[str]:
    """D's answer text for each question (the paragraph's characters of the best word span). ``vocab``: the
    GA reader's vocabulary (batches of :func:`~genfeat.data.gdan.collate_qa`) or D's collate function.
    Questions are read in batches of similar paragraph length (D's outputs do not depend on padding),
    answers returned in the order of ``examples``."""
    collate = vocab if callable(vocab) else functools.partial(collate_qa, vocab=vocab)
    d = reader(model)
    was = d.training
    d.eval()
    device = next(d.parameters()).device
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].paragraph.tokens))
    texts = [""] * len(examples)
    for i in range(0, len(order), batch):
        ids = order[i:i + batch]
        chunk = [examples[j] for j in ids]
        inputs = {k: v.to(device) for k, v in collate(chunk).items()}
        out = read(d, inputs, domain)
        starts, ends = best_spans(out.start_logits.float(), out.end_logits.float(), max_words)
        for j, ex, s, e in zip(ids, chunk, starts.tolist(), ends.tolist()):
            texts[j] = ex.paragraph.span_text(s, e)
    d.train(was)
    return texts


def score(model: nn.Module, examples: Sequence[QAExample], vocab: SymbolVocab | Callable, domain: int | None,
          batch: int = 64, max_words: int = 15) -> dict[str, float]:
    """SQuAD EM and F1 (fractions) of D's predictions against every gold answer."""
    s = squad_scores(predict(model, examples, vocab, domain, batch, max_words), [ex.answers for ex in examples])
    return {"em": s["exact_match"], "f1": s["squad_f1"]}


def reader_batch(batch: QGBatch, questions: Tensor, vocab: SymbolVocab, collate: Callable | None = None
                 ) -> dict[str, Tensor]:
    """What D reads for G's questions [b, T] (extended ids) on the batch's paragraphs and answer chunks:
    a :func:`genfeat.data.gdan.collate_qa` dict (G's paragraph ids are D's: OOV words as <unk>), or with
    ``collate`` (a pretrained D's), that function's batch of the questions' words (copied words included)."""
    if collate is not None:
        examples = [replace(ex, question=tuple(question_words(row, oov, vocab)))
                    for ex, row, oov in zip(batch.examples, questions.tolist(), batch.oov)]
        return {k: v.to(questions.device) for k, v in collate(examples).items()}
    question, question_mask = reader_questions(questions, vocab)
    device = questions.device
    return {"paragraph": batch.src_ids, "paragraph_mask": batch.mask, "question": question,
            "question_mask": question_mask, "start": torch.tensor([ex.start for ex in batch.examples], device=device),
            "end": torch.tensor([ex.end for ex in batch.examples], device=device)}


class GeneratedStream:
    """U_G for D's steps: endless batches of answer chunks (``chunks``, a stream of :class:`QGBatch`) with
    questions sampled from G's current parameters (Algorithm 1: D trains on what G writes now), as
    :func:`~genfeat.data.gdan.collate_qa` dicts. ``model`` is the method's container (G at ``model.g``)."""

    def __init__(self, model: nn.ModuleDict, chunks: CollatedStream, vocab: SymbolVocab, max_len: int,
                 collate: Callable | None = None):
        self.model, self.chunks, self.vocab, self.max_len, self.collate = model, chunks, vocab, max_len, collate

    def __iter__(self):
        return self

    @torch.no_grad()
    def __next__(self) -> dict[str, Tensor]:
        g = self.model.g
        batch = next(self.chunks).to(next(g.parameters()).device)
        was = g.training
        g.eval()
        questions = g.sample(*batch.model_inputs(), self.max_len)
        g.train(was)
        return reader_batch(batch, questions, self.vocab, self.collate)

    def state_dict(self) -> dict[str, Any]:
        return self.chunks.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.chunks.load_state_dict(state)

    def shard(self, rank: int, world: int) -> None:
        self.chunks.shard(rank, world)


def d_reward(model: nn.ModuleDict, vocab: SymbolVocab, setting: str, collate: Callable | None = None):
    """G's REINFORCE reward from D (in evaluation mode), per generated example: gdan log P_D(a | p, q, d_true)
    (J(U_G, d_true, D)); gen_dual log P_D(a | p, q) (no tags); gen_gan −log P_D(a | p, q, d_gen)."""
    domain, sign = {"gdan": (D_TRUE, 1.0), "gen_dual": (None, 1.0), "gen_gan": (D_GEN, -1.0)}[setting]

    def reward(batch: QGBatch, questions: Tensor) -> Tensor:
        d = model.d
        was = d.training
        d.eval()
        qa = reader_batch(batch, questions, vocab, collate)
        out = read(d, qa, domain)
        d.train(was)
        return -2.0 * sign * span_nll(out.start_logits, out.end_logits, qa["start"], qa["end"])

    return reward


def unlabelled_answers(cfg: GDANRecipe, data: GDANData, seed: int) -> list[QAExample]:
    """Answer chunks (empty questions) of the first ``max_unlabelled`` unlabelled paragraphs."""
    return answer_examples(data.unlabelled[:cfg.max_unlabelled or None], cfg.chunks, cfg.chunks_per_paragraph, seed)


def paragraph_words(example: QAExample) -> int:
    """The bucketing length of a question: its paragraph's words (the reader's GRUs run that many steps)."""
    return len(example.paragraph.tokens)


class Built(NamedTuple):
    """What :func:`build` makes."""

    model: nn.ModuleDict
    """D (``d``) and, in the generator settings, G (``g``)."""
    pretrain: Phase | None
    """G's MLE pretraining phase (generator settings)."""
    phase: Phase
    """The training phase of the setting."""
    unlabelled: int
    """Unlabelled questions (Context) or answer chunks (generator settings)."""
    collate: Callable[[list[QAExample]], dict[str, Tensor]]
    """D's batches of questions (:func:`predict`)."""
    d_vocab: Any
    """The vocabulary saved beside D: the word vocabulary, or a pretrained D's tokenizer."""


def check_special_ids(reader: GAReaderConfig) -> None:
    """The GA reader's word ids of the domain tags and of its first ordinary word must be those of the word
    vocabulary, which puts :data:`SPECIALS` first (:func:`build_vocab`); other ids would tag questions with
    ordinary words and count tags as common words."""
    want = {"d_true_id": SPECIALS.index(TAG_TRUE), "d_gen_id": SPECIALS.index(TAG_GEN), "first_word_id": len(SPECIALS)}
    wrong = [f"reader.{k} is {getattr(reader, k)}, the vocabulary's is {v}" for k, v in want.items()
             if getattr(reader, k) != v]
    if wrong:
        raise ConfigError("; ".join(wrong), "leave these reader fields out of the recipe: the vocabulary fixes them")


def new_reader(cfg: GDANRecipe, vocab: SymbolVocab, tagged: bool, vectors: bool = True
               ) -> tuple[nn.Module, Callable, Any]:
    """D, its collate function and its vocabulary: the GA reader on ``vocab`` (:func:`collate_qa`), or with
    ``cfg.d_init`` that checkpoint's encoder with a span head (:class:`SpanReader`, windows of
    :class:`WindowEncoder`, the checkpoint's tokenizer). ``vectors``: start the GA reader's embeddings from
    ``cfg.d_vectors`` (false when a checkpoint's weights follow)."""
    if not cfg.d_init:
        d = GAReader(replace(cfg.reader, vocab_size=len(vocab)))
        if cfg.d_vectors and vectors:
            init_word_vectors(d.embed, vocab, cfg.d_vectors)
        return d, reader_collate(d, vocab, cfg, tagged), vocab
    if cfg.d_vectors:
        raise ConfigError("d_vectors and d_init are both set: word vectors initialise the GA reader, and d_init "
                          "replaces it with a pretrained encoder", "set one of them")
    changed = [f.name for f in fields(GAReaderConfig) if getattr(cfg.reader, f.name) != getattr(GAReaderConfig(), f.name)]
    if changed:
        print(f"note: reader.{', reader.'.join(changed)} ignored: they configure the GA reader, which d_init replaces "
              "with a pretrained encoder", file=sys.stderr)
    backbone, tokenizer = load_checkpoint(cfg.d_init)
    arch = architecture_of(backbone)
    if arch not in ("bert", "xlnet") or tokenizer is None:
        raise ConfigError(f"d_init '{cfg.d_init}' holds {with_article(arch)} model{'' if tokenizer else ' without a tokenizer'}",
                          "initialise D from a genfeat bert or xlnet checkpoint with its vocab.json "
                          "(e.g. runs/bert_pretrain/final)")
    head = HeadConfig(kind="span", d_model=backbone.config.d_model, dropout=backbone.config.dropout)
    d = SpanReader(SpanReaderConfig(FineTuneConfig(task="gdan", backbone=arch, head=head, max_len=cfg.d_max_len,
                                                   doc_stride=cfg.d_doc_stride)), backbone)
    return d, reader_collate(d, tokenizer, cfg, tagged), tokenizer


@torch.no_grad()
def init_word_vectors(embed: nn.Embedding, vocab: SymbolVocab, path: str) -> int:
    """Copy the vectors of ``path`` (:func:`~genfeat.models.word2vec.load_word2vec_format`) into the rows of
    ``embed`` of the vocabulary's words they hold (special words keep theirs), and say how many on stderr.

    Returns:
        The number of words initialised.
    Raises:
        ConfigError: the vectors' size is not the table's.
        DataError: a malformed file, or none of the vocabulary's words in it.
    """
    words, vectors = load_word2vec_format(path, {w for w in vocab.symbols if w not in SPECIALS})
    if not words:
        raise DataError(f"d_vectors '{path}' holds none of the {len(vocab) - len(SPECIALS):,} words of D's vocabulary",
                        "use vectors of lower-cased words of the same language (e.g. a genfeat word2vec run's)")
    if vectors.shape[1] != embed.embedding_dim:
        raise ConfigError(f"d_vectors '{path}' holds {vectors.shape[1]}-dimensional vectors and D's embeddings are "
                          f"{embed.embedding_dim}-dimensional", f"set reader.embed_dim to {vectors.shape[1]}")
    if words:
        rows = torch.tensor([vocab.index[w] for w in words])
        embed.weight[rows] = torch.from_numpy(vectors).to(embed.weight.dtype)
    print(f"note: D's word embeddings start from '{path}' for {len(words):,} of the "
          f"{len(vocab) - len(SPECIALS):,} words of its vocabulary", file=sys.stderr)
    return len(words)


def reader_collate(d: nn.Module, vocab: Any, cfg: GDANRecipe, tagged: bool) -> Callable[[list[QAExample]], dict]:
    """D's collate function: :func:`collate_qa` on the word vocabulary for the GA reader; for a
    :class:`SpanReader`, :class:`WindowEncoder` windows of its tokenizer ``vocab`` (``cfg.d_max_len``,
    ``d_doc_stride``, ``d_max_query``) with the tag token when ``tagged``."""
    if not isinstance(d, SpanReader):
        return functools.partial(collate_qa, vocab=vocab)
    return WindowEncoder(vocab, d.model.input_format(vocab), cfg.d_max_len, cfg.d_doc_stride, cfg.d_max_query,
                         tagged).collate


def build(cfg: GDANRecipe, data: GDANData, vocab: SymbolVocab, seed: int, resume: bool = False) -> Built:
    """D (and G) in a ModuleDict (``d``, ``g``) and the schedule of ``cfg.setting`` (:class:`Built`); ``resume``:
    the weights come from a checkpoint next, so ``d_vectors`` is not read."""
    torch.manual_seed(seed)
    tagged = cfg.setting in TAGGED_SETTINGS
    d, collate, d_vocab = new_reader(cfg, vocab, tagged, vectors=not resume)
    modules = {"d": d}
    if cfg.setting in GENERATOR_SETTINGS:
        modules["g"] = new_generator(cfg.generator, vocab)
    model = nn.ModuleDict(modules)
    g_collate = None if not cfg.d_init else collate
    stream = functools.partial(CollatedStream, length=paragraph_words, bucket=cfg.bucket)
    terms = [Term(SpanQAObjective(D_TRUE if tagged else None), stream(data.labelled, collate, cfg.batch_size, seed=seed))]
    unl_name, n_unl, pretrain, stages = "qa_unl", 0, None, []
    optimizers = {"d": OptimSpec(cfg.d_optim, lambda m: reader(m).parameters())}
    if cfg.setting in ("context", "context_domain"):
        pseudo = context_questions(unlabelled_answers(cfg, data, seed), cfg.context_window)
        n_unl = len(pseudo)
        unl_stream = stream(pseudo, collate, cfg.unlabelled_batch, seed=seed + 1)
    elif cfg.setting in GENERATOR_SETTINGS:
        chunks = unlabelled_answers(cfg, data, seed)
        n_unl, unl_name = len(chunks), "qa_gen"
        collate_g = functools.partial(collate_qg, vocab=vocab, max_question_words=cfg.max_question_words)
        unl_stream = GeneratedStream(model, stream(chunks, collate_g, cfg.unlabelled_batch, seed=seed + 1),
                                     vocab, cfg.max_question_words + 1, g_collate)
        pretrain = mle_phase(data.labelled, vocab, cfg.g_pretrain_steps, cfg.g_optim, cfg.batch_size, seed,
                             cfg.max_question_words, generator_attr="g")
        if cfg.setting in ADVERSARIAL_SETTINGS:
            rl = QuestionGenReinforce(d_reward(model, vocab, cfg.setting, g_collate), cfg.max_question_words + 1,
                                      decay=cfg.baseline_decay, generator_attr="g")
            stages.append(Stage([Term(rl, stream(chunks, collate_g, cfg.unlabelled_batch, seed=seed + 2))],
                                "g", cfg.t_g))
            optimizers["g"] = OptimSpec(cfg.g_rl_optim, lambda m: m.g.parameters())
    if cfg.setting != "sl":
        terms.append(Term(SpanQAObjective(D_GEN if tagged else None, unl_name), unl_stream))
    stages.insert(0, Stage(terms, "d", cfg.t_d))
    steps = cfg.steps + (cfg.steps // cfg.t_d) * cfg.t_g * (len(stages) - 1)
    return Built(model, pretrain, Phase("train", steps, stages, optimizers), n_unl, collate, d_vocab)


@register_method("gdan", GDANRecipe, inputs=("d_init", "d_vectors"))
def run(cfg: GDANRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    if cfg.setting in GENERATOR_SETTINGS:
        refuse_several_processes(f"GDAN's {cfg.setting} setting", "its objectives reach D and G inside the model "
                                 "container, past the forward that DistributedDataParallel wraps")
    if cfg.data.squad_file:   # absolute in the saved recipe, which `genfeat evaluate` reads from any directory
        cfg = replace(cfg, data=replace(cfg.data, squad_file=str(Path(cfg.data.squad_file).resolve())))
    data = load_gdan_data(cfg.data, seed)
    vocab = build_vocab(data, cfg.min_freq)
    model, pretrain, phase, n_unl, collate, d_vocab = build(cfg, data, vocab, seed, resume)
    domain = D_TRUE if cfg.setting in TAGGED_SETTINGS else None
    dev, test = data.dev[:cfg.max_eval or None], data.test[:cfg.max_eval or None]
    evaluate = lambda m: {f"dev_{k}": v for k, v in score(m, dev, collate, domain, cfg.eval_batch,  # noqa: E731
                                                           cfg.max_answer_words).items()}
    tcfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    out = Path(out_dir) if out_dir is not None else None
    resume_from = g_from = None
    if resume:
        try:
            resume_from = resume_dir(out / "last")
        except CheckpointError:
            if pretrain is None or not (out / "g_mle").is_dir():
                raise
            g_from = resume_dir(out / "g_mle" / "last")  # stopped in G's MLE pretraining (or before D's first save)
    # which extractor made the answer chunks (spaCy and its versions, or the rules) goes into every checkpoint
    chunker = {} if cfg.setting == "sl" else {"answer_chunks": backend_name(cfg.chunks)}
    if chunker:
        print(f"note: answer chunks extracted by {chunker['answer_chunks']}", file=sys.stderr)
    ckpt = {"architecture": "gdan", "reader": to_dict(model.d.config), **recipe_record(cfg), **chunker}
    save_vocab = lambda d: vocab.save(Path(d) / VOCAB_FILE)  # noqa: E731
    g_seconds = 0.0
    if pretrain is not None and resume_from is None:
        # G's MLE pretraining has no dev figure of D to select on, so it runs in a trainer of its own
        g_cfg = replace(tcfg, eval_every=0, early_stop_metric=None, keep_best=False, patience=0, stop_after_steps=0)
        g_seconds = Trainer(model, [pretrain], g_cfg, None, None if out is None else out / "g_mle",
                            checkpoint_config=ckpt, save_extra=save_vocab, resume_from=g_from,
                            diverged_fix=_DIVERGED_FIX).fit().seconds
    elif pretrain is not None and (out / "g_mle" / "last").is_dir():   # done by an earlier invocation: its time
        g_seconds = float(load_trainer_state(out / "g_mle" / "last").get("seconds", 0.0))
    trainer = Trainer(model, [phase], tcfg, evaluate, out, checkpoint_config=ckpt, save_extra=save_vocab,
                      resume_from=resume_from, diverged_fix=_DIVERGED_FIX)
    result = trainer.fit()
    seconds = g_seconds + result.seconds     # over every invocation of a resumed run
    done = phase.optimizer_steps(result.steps)
    steps = {"steps": result.steps, "d_steps": done["d"], "g_steps": done.get("g", 0)}
    if result.interrupted:
        return {**steps, "train_seconds": seconds, "interrupted": 1.0}
    dev_scores = score(model, dev, collate, domain, cfg.eval_batch, cfg.max_answer_words)
    test_scores = score(model, test, collate, domain, cfg.eval_batch, cfg.max_answer_words)
    figures = {"test_f1": test_scores["f1"], "test_em": test_scores["em"], "dev_f1": dev_scores["f1"],
               "dev_em": dev_scores["em"], "labelled": len(data.labelled), "unlabelled_questions": n_unl,
               "vocab": len(vocab), **steps, "train_seconds": seconds}

    def save() -> None:
        for name, module in model.items():
            module_vocab = d_vocab if name == "d" else vocab
            save_checkpoint(out / "final" / name, module, None, checkpoint_config(module, **recipe_record(cfg), **chunker),
                            lambda folder, v=module_vocab: v.save(Path(folder) / VOCAB_FILE))
        write_results(out, figures)

    if out is not None:   # under torchrun rank 0 writes, and every rank returns once it has
        on_rank_0(save, f"failed to write the final models and figures into '{out}'", trainer.dist)
    return figures


def saved_recipe(path: str | Path) -> GDANRecipe:
    """The recipe a gdan run saved in a checkpoint's config.json (``OUT/final/d``, ``OUT/final/g``, ``OUT/last``,
    ``OUT/g_mle/last``).

    Raises:
        CheckpointError: the checkpoint holds no gdan recipe, or one this genfeat cannot read.
    """
    config = read_config(path)
    if not isinstance(config.get("recipe"), dict) or "setting" not in config["recipe"]:
        raise CheckpointError(f"checkpoint '{path}' has no gdan recipe in its config.json",
                              "pass a directory written by a gdan run (OUT/final/d, OUT/final/g or OUT/last)")
    try:
        return from_dict(GDANRecipe, config["recipe"], "recipe")
    except ConfigError as e:
        raise CheckpointError(f"the recipe in checkpoint '{path}' is not a valid gdan recipe: {e.cause}",
                              "evaluate it with the genfeat version that wrote it") from None


def evaluate_reader(checkpoint: str | Path, task: str = EVAL_TASK, split: str = "dev",
                    predictions_file: str | Path | None = None, batch_size: int = 64, device: str = "cpu",
                    max_examples: int = 0) -> dict[str, Any]:
    """``genfeat evaluate --checkpoint OUT/final/d --task squad_split --split {dev,test}``: SQuAD v1.1 EM and F1
    of a saved D (GA reader or d_init span reader) on its run's dev or test questions, scored as the run scored
    them (:func:`score`): the split is the one of the recipe saved in the checkpoint (``data.split_seed``,
    ``data.squad_file``), spans are at most its ``max_answer_words`` long, a span reader reads its recipe's
    windows, and every question carries the domain tag d_true when the run trained with tags (dev and test
    questions are human questions; d_gen marks G's), none when it did not. With the run's own ``max_eval`` as
    ``max_examples`` and its ``eval_batch`` as ``batch_size`` (64 by default in both) the figures are the run's
    ``dev_f1`` / ``dev_em`` or ``test_f1`` / ``test_em``.

    Args:
        task: must be ``squad_split`` (the run's dev and test articles).
        split: ``dev`` or ``test``.
        predictions_file: write ``{question id: answer text}`` there (the official SQuAD evaluation's input).
        max_examples: score the first N questions of the split, as the run's ``max_eval`` (0: all).
    Returns:
        ``exact_match`` and ``squad_f1`` (fractions), ``task``, ``split``, ``checkpoint``, ``examples``, ``seconds``.
    Raises:
        ConfigError: another task or split. CheckpointError: not a D written by a gdan run.
    """
    from ..framework.trainer import resolve_device
    from ..hub import load_checkpoint

    if task != EVAL_TASK or split not in ("dev", "test"):
        raise ConfigError(f"a GDAN discriminator is scored on task {EVAL_TASK} split dev or test, not {task} {split}",
                          f"pass --task {EVAL_TASK} --split dev (or test): its articles are the run's")
    t0 = time.time()
    cfg = saved_recipe(checkpoint)
    d, vocab = load_checkpoint(checkpoint)
    if architecture_of(d) not in READER_ARCHITECTURES or vocab is None:
        raise CheckpointError(f"checkpoint '{checkpoint}' holds {with_article(architecture_of(d))} model"
                              f"{'' if vocab is not None else ' without its vocabulary'}, not a GDAN discriminator",
                              "pass OUT/final/d of a gdan run")
    tagged = cfg.setting in TAGGED_SETTINGS
    examples = evaluation_questions(cfg.data, split)[:max_examples or None]
    answers = predict(d.to(resolve_device(device, "--device")), examples, reader_collate(d, vocab, cfg, tagged),
                      D_TRUE if tagged else None, batch_size, cfg.max_answer_words)
    if predictions_file is not None:
        write_predictions(get_task(task), examples, answers, predictions_file)
    result: dict[str, Any] = dict(squad_scores(answers, [ex.answers for ex in examples]))
    result.update({"task": task, "split": split, "checkpoint": str(checkpoint), "examples": len(examples),
                   "seconds": time.time() - t0})
    return result
