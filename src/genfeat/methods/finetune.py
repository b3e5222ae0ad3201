"""Fine-tuning a pretrained backbone on a target task (thesis §1.4, the L_t half; GPT-1 §3.2; Table 2.19).

Recipe: ``method: finetune`` plus the fields of :class:`FineTuneRecipe`:

- ``init``: a genfeat checkpoint directory (``runs/<pretraining recipe>/final``, as ``genfeat run``
  writes it) or a Hugging Face model directory with its tokenizer files; or none, for the
  no-pretraining row: a randomly initialised ``backbone`` of the ``model`` section's size, with a
  tokenizer trained on the task's training texts (or ``tokenizer``). A fine-tuned checkpoint may be
  the init too (its backbone is taken, the head replaced).
- ``data``: the task (genfeat.tasks.TASKS), its splits, max_len/doc_stride and, for backbones with
  memory (XLNet, Transformer-XL), ``max_segments`` > 1 to read texts longer than max_len in segments.
- ``aux_lm_weight`` λ: GPT-1's L3 = L2 + λ·L1 (Eq. 5), the LM loss on the task inputs through the
  backbone's own LM head, taken with the task loss from one forward pass of each batch
  (genfeat.objectives.task.TaskObjective; causal backbones: gpt, lstm_lm, transformer_xl).
- ``optim``, ``train``, ``steps`` or ``epochs``; evaluation on the dev split every ``train.eval_every``
  steps, keeping the parameters of the best ``dev_<main metric>`` (``keep_best``).

Two phases (pretraining then fine-tuning) are one recipe or two:

- one: a ``pretrain`` section (:class:`PretrainStage`) names the pretraining recipe and overrides of its
  fields, instead of ``init``: ``genfeat run`` runs it with the run's seed into OUT/pretrain, then
  fine-tunes from OUT/pretrain/final (recipes/finetune/chain_bert_mrpc_debug.yaml). The result holds the
  pretraining's figures as ``pretrain_<key>`` (``pretrain_valid_loss``...) beside the task's. With
  ``--seeds N`` each seed is a whole chain (OUT/seed<k>/pretrain, then OUT/seed<k>), so the spread over
  seeds counts the pretraining's too. With ``--resume`` a finished pretraining (OUT/pretrain/final and its
  results.json exist) is not run again; an interrupted one continues from OUT/pretrain/last (every
  pretraining method resumes exactly), and the fine-tuning then starts, or continues from OUT/last once it
  has written one. Setting both ``init`` and ``pretrain``, a recipe file that does not exist, or one that
  is not a pretraining method's (runner.register_method ``pretraining``; a fine-tuning recipe, say) is
  one ConfigError before any work.
- two: ``genfeat run recipes/bert/pretrain.yaml --out runs/bert_pretrain`` writes
  ``runs/bert_pretrain/final``, and a fine-tuning recipe with ``init: runs/bert_pretrain/final`` continues
  from it (recipes/finetune/*_bert.yaml; *_xlnet.yaml name runs/pretrain_k6/final, the default OUT of
  recipes/xlnet/pretrain_k6.yaml; *_gpt.yaml runs/gpt_pretrain/final), so one pretraining serves many
  tasks and seeds.

The chain is two runs, not the framework's ``two_phase`` schedule (one model trained in two phases by one
Trainer): the phases differ in model (the pretraining LM with its LM head; the backbone with a new task
head), data and streams, the tokenizer (trained by the pretraining, then read by the task's encoder),
optimizer, training settings and evaluation, and the pretraining's OUT/final is a checkpoint of its own
that other fine-tuning recipes can name as init. Each phase is the method's own runner, unchanged.

Long inputs: BERT and GPT cut a text to max_len (longest segment first, GPT-1/BERT's rule) and the
result counts the examples cut (``train_truncated``, ``dev_truncated``; a note on stderr for every split that
is cut, ``genfeat evaluate``'s too). XLNet and Transformer-XL with
``max_segments`` > 1 read the first ⌊n/u⌋ (at most max_segments - 1) full segments of u tokens of the
long text (the single text; a RACE passage) into memory, then the final segment as usual with the
text's last tokens (from the first word start that fits) and its summary token, whose state is
classified; the final segment may repeat tokens the memory holds. When the final segment's text starts
after the memory ends (its room is less than u: a RACE question and longest option take part of it; or
the first word start that fits comes later), one more segment, the u tokens before it, joins the memory
if max_segments allows, repeating tokens of the one before it. Tokens between the memory and the final
segment (when max_segments caps the memory, or a text shorter than u is longer than the final
segment's room) are left out, and such examples count as truncated. The memory is read once per example,
without gradients (Transformer-XL's stop-gradient), and handed to each of a multiple-choice example's k
sequences, which in training share its one dropout draw (docs/BENCHMARKS.md, "Long inputs": the RACE step's
time this saves). Behind a memory the final segment's padding goes after its tokens (XLNet pads on the left
otherwise), so its distance to the memory, and its scores, do not depend on its batch or on its options' lengths.

Span tasks that admit unanswerable questions (``TaskSpec.unanswerable``: SQuAD 2.0) get XLNet's answerability
head; an example is answered "" when no window's answerability logit is positive. Other tasks answer every
question, whatever an answerability head a loaded model carries says; a training split with unanswerable
questions in a task not marked so is refused.

Span heads score ends per token (``span_end: linear``, BERT) or, with ``span_end: start_conditioned``,
from each token's state and the start's (XLNet's SQuAD head; a Hugging Face XLNetForQuestionAnswering
loads with it). That head is trained on the end given the gold start (the mean of the start and end
cross-entropies, as XLNet's run_squad and Hugging Face train it) and decoded as every span head is:
:func:`best_span` searches every valid span (context tokens, the window's max-context starts, at most
MAX_ANSWER_LEN tokens), scored start_logits[s] + log p(e | s) (:func:`predict`), not by the beam of XLNet's
and Hugging Face's SQuAD scripts, which scores only the top-k starts and the top-k ends of each and drops the
pairs that are no valid span (an end before its start, too long, a start outside its maximum context), so it
can miss the best valid span or find none. Its answerability head reads the start-probability-weighted
states in training as at inference (XLNet's run_squad; Hugging Face trains its answer class on the gold
start's state instead) and enters the loss with weight 1, as with the linear head (XLNet and Hugging Face
weigh it 0.5). As ``init``, an XLNetForQuestionAnswering directory gives its backbone like any fine-tuned
checkpoint; the head is new, of the recipe's ``span_end``.

Result: ``dev_<metric>`` for every metric of the task (the first is the main one), ``test_<metric>``
when the task's test split is labelled (IMDB, RACE, the SQuAD article split), example and
truncation counts, ``steps``, ``train_seconds``, ``new_params`` (the head's and special tokens'
parameters), and ``pretrain_<key>`` for a chained recipe. ``genfeat run RECIPE --seeds 3 --json`` adds
``<key>_mean`` / ``<key>_std``.
The fine-tuned model is saved to OUT/final (architecture ``finetune``: backbone, head, task name,
max_len, doc_stride, max_segments, both_orders) with its tokenizer; ``genfeat evaluate --checkpoint OUT/final --task NAME``
scores it again (:func:`evaluate_task`).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import Config, check_least, dotted, to_dict
from ..errors import CheckpointError, ConfigError, with_article
from ..eval.metrics import CORRELATION_METRICS
from ..framework import OptimConfig, Term, TrainConfig, Trainer, joint, seed_everything
from ..framework.checkpoint import has_checkpoint, resume_dir
from ..framework.distributed import on_rank_0
from ..framework.stream import derived_seed
from ..framework.trainer import to_device
from ..hub import (ARCHITECTURES, VOCAB_FILE, VOCAB_FINGERPRINT, architecture_of, build_model, check_model_fields,
                   checkpoint_config, load_checkpoint, model_config, save_pretrained, vocab_fingerprint)
from ..io import write_json_atomic, write_results
from ..models.heads import (MIN_MAX_LEN, FineTuneConfig, FineTuneModel, HeadConfig, SpanEnd, check_backbone,
                            check_max_len, fine_tunable, get_adapter)
from ..objectives.task import TaskObjective, model_inputs
from ..runner import check_resume_method, load_recipe, read_figures, recipe_record, register_method
from ..tasks import TASKS, Example, TaskEncoder, TaskSpec, best_span, collate, get_task, load_task
from ..tasks.transforms import MAX_ANSWER_LEN, Encoded, InputFormat, end_band, tokenize_with_offsets


@dataclass
class FineTuneDataConfig(Config):
    """The task, its splits and how examples become model inputs."""

    task: str = "sst2"
    """Task name (genfeat.tasks.TASKS: sst2, mrpc, stsb, cola, rte, imdb, race, squad_split, ...)."""
    train_split: str = "train"
    dev_split: str = "dev"
    """Split evaluated during training (the keep_best metric) and reported as ``dev_*``."""
    test_split: str | None = None
    """Split reported as ``test_*`` at the end when it is labelled (None: none)."""
    max_train_examples: int = 0
    """Train on a seeded random subset of this many examples (the same for every run seed; 0: all)."""
    max_eval_examples: int = 0
    """Score a seeded random subset of this many dev/test examples, the same for every run and for
    ``genfeat evaluate --max-examples`` (0: all; IMDB's and RACE's files are sorted by label or level)."""
    batch_size: int = 32
    """Examples per step."""
    eval_batch_size: int = 64
    """Examples (span tasks: windows) per evaluation batch."""
    max_len: int = 128
    """Longest input sequence in tokens, special tokens included."""
    doc_stride: int = 128
    """Span tasks: tokens between the starts of consecutive context windows."""
    max_query_len: int = 64
    """Span tasks: longest question in tokens."""
    max_segments: int = 1
    """Backbones with memory: read long texts as up to this many segments (module docstring; 1: truncate)."""
    squad_seed: int = 0
    """Seed of the SQuAD article split (squad_split)."""
    both_orders: bool = True
    """Similarity tasks (MRPC, STS-B, QQP): both orders with their states added (GPT-1); false: one order."""

    def __post_init__(self):
        # checked when the recipe is read, before any data or tokenizer work
        check_least(self, max_train_examples=0, max_eval_examples=0, batch_size=1, eval_batch_size=1,
                    max_len=MIN_MAX_LEN, doc_stride=1, max_query_len=1, max_segments=1)


@dataclass
class PretrainStage(Config):
    """A pretraining recipe run first, in the same ``genfeat run``, whose OUT/final is the init (module
    docstring, "Two phases")."""

    recipe: str = ""
    """Path of the pretraining recipe (a method that writes a backbone: bert, gpt, xlnet, dae_txl,
    transformer_xl, elmo), relative to the working directory like ``genfeat run``'s RECIPE."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Fields of the pretraining recipe to change, as ``genfeat run``'s ``--field.path value`` do: nested
    (``{steps: 3, data: {vocab_size: 900}}``, merged into the recipe's sections) or dotted
    (``{data.vocab_size: 900}``)."""

    def __post_init__(self):
        if not self.recipe:
            raise ConfigError("pretrain.recipe is not set",
                              "name the pretraining recipe, e.g. pretrain: {recipe: recipes/bert/debug.yaml}")


@dataclass
class FineTuneRecipe(Config):
    """Fine-tuning of a backbone with a task head."""

    init: str | None = None
    """Checkpoint to start from (genfeat or Hugging Face directory); None: ``pretrain``'s, or a random
    ``backbone``."""
    pretrain: PretrainStage | None = None
    """Pretrain first and start from that run's final checkpoint (module docstring, "Two phases"); only
    without ``init``."""
    backbone: str = "bert"
    """Architecture of the random backbone when ``init`` is None (bert, xlnet, gpt)."""
    model: dict[str, Any] = field(default_factory=dict)
    """Config fields of the random backbone when ``init`` is None (n_token comes from the tokenizer)."""
    tokenizer: str | None = None
    """Tokenizer folder when ``init`` is None; None: train one on the task's training texts."""
    finetune_bilm: bool | None = None
    """ELMo backbones: train the biLM's weights too (Peters et al. 2018's fine-tuned use) instead of reading
    frozen features (its §3.3 default); None keeps the checkpoint's own setting (frozen for a pretrained
    biLM). Other backbones are always fine-tuned whole, so the field must stay None for them."""
    vocab_size: int = 4000
    """Size of the tokenizer trained when ``init`` and ``tokenizer`` are None."""
    data: FineTuneDataConfig = field(default_factory=FineTuneDataConfig)
    head_dropout: float = 0.1
    """Dropout before the head's output layer."""
    span_end: SpanEnd = "linear"
    """Span tasks: the head's end scores (module docstring): ``linear`` per token (BERT), or
    ``start_conditioned`` on the start's state (XLNet's SQuAD head)."""
    aux_lm_weight: float = 0.0
    """λ of GPT-1's auxiliary LM loss L1 on the task inputs (0: off; causal backbones only)."""
    keep_best: bool = True
    """Restore the parameters of the best dev evaluation at the end (on the task's main metric)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=5e-5, weight_decay=0.01, warmup_steps=0,
                                                                   decay="linear"))
    train: TrainConfig = field(default_factory=TrainConfig)
    steps: int = 0
    """Optimizer steps (0: from ``epochs``)."""
    epochs: float = 3.0
    """Passes over the training examples when ``steps`` is 0."""

    def __post_init__(self):
        if self.steps < 0 or self.epochs < 0 or (self.steps == 0 and self.epochs == 0):
            raise ValueError(f"give steps ({self.steps}) or epochs ({self.epochs}) > 0, neither negative")
        if self.aux_lm_weight < 0:
            raise ValueError(f"aux_lm_weight must be >= 0, got {self.aux_lm_weight}")
        if not 0.0 <= self.head_dropout < 1.0:
            raise ValueError(f"head_dropout must be in [0, 1), got {self.head_dropout}")
        if self.init is not None and self.pretrain is not None:
            raise ConfigError("the recipe sets both init and pretrain",
                              "keep one: init starts from an existing checkpoint, pretrain trains one first "
                              "(on the command line --init null drops a recipe's init)")
        if self.finetune_bilm is not None and self.init is None and self.pretrain is None:
            raise ConfigError("finetune_bilm is set without an init checkpoint",
                              "name a pretrained ELMo biLM as init (recipes/elmo/pretrain.yaml writes one)")
        if (self.init is not None or self.pretrain is not None) and (self.model or self.tokenizer):
            raise ConfigError(f"the recipe sets {'init' if self.init is not None else 'pretrain'} and also "
                              "model/tokenizer", "drop model and tokenizer: the pretrained checkpoint brings its own")
        if self.backbone in ARCHITECTURES:
            check_model_fields(self.backbone, self.model)


# ------------------------------------------------------------------------------------------- inputs
@dataclass
class Item:
    """An encoded example (or span window) with the earlier segments its sequences read first."""

    encoded: Encoded
    memory: list[list[int]] = field(default_factory=list)
    """The s earlier segments of u tokens each, shared by the example's k sequences (text A's head)."""


def _head_kind(spec: TaskSpec) -> str:
    if spec.transform == "span":
        return "span"
    if spec.transform == "multiple_choice":
        return "multiple_choice"
    return "regression" if spec.regression else "classification"


def _split_long(encoder: TaskEncoder, example: Example, transform: str, max_segments: int
                ) -> tuple[Example, list[list[int]], bool]:
    """Text A of ``example`` as memory segments and a tail (module docstring): the example with A
    replaced by its tail, the segments, and whether tokens were left out."""
    fmt, vocab = encoder.fmt, encoder.vocab
    n_texts = 1 if transform == "single" else 2
    u = encoder.max_len - fmt.n_special(n_texts)
    room = u
    if transform == "multiple_choice":
        room -= len(vocab.encode(example.texts[1])) + max(len(vocab.encode(c)) for c in example.choices)
    room = max(room, 1)
    if hasattr(vocab, "index"):                        # word-level: tokens are whitespace-separated words
        words = example.texts[0].split()
        ids = vocab.encode(" ".join(words))
        if len(ids) != len(words):
            return example, [], False
        starts = [0]
        for w in words[:-1]:
            starts.append(starts[-1] + len(w) + 1)
        text = " ".join(words)
    else:
        ids, offsets = tokenize_with_offsets(vocab, example.texts[0])
        starts, text = [o[0] for o in offsets], example.texts[0]
    n = len(ids)
    if n <= room:
        return example, [], False
    s = min(max_segments - 1, n // u)
    memory = [ids[i * u:(i + 1) * u] for i in range(s)]
    # the tail starts at a word, so that it is tokenized as in the whole text (subword tokenizers split
    # words independently) and fits the final segment's room; a word's first token is the first to start
    # where it does (sentencepiece may give a word's '▁' a piece of its own, which starts where the next does)
    cut = next((j for j in range(n - room, n) if (j == 0 or starts[j - 1] < starts[j])
                and (starts[j] == 0 or text[starts[j] - 1].isspace())), n - 1)
    read = s * u
    if read < cut and u <= cut and s < max_segments - 1:
        # the final segment's room is less than u (a RACE question and option take part of it) or the tail
        # starts at a later word: one more segment, the u tokens before the tail, closes the gap
        memory.append(ids[cut - u:cut])
        read = cut
    return replace(example, texts=(text[starts[cut]:], *example.texts[1:])), memory, read < cut


def encode_items(examples: Sequence[Example], spec: TaskSpec, encoder: TaskEncoder, cfg: FineTuneConfig, split: str
                 ) -> tuple[list[Item], int]:
    """The items of ``examples`` (span tasks: one per window) for a model of ``cfg`` (its max_segments and
    both_orders), and the number of examples cut short, which is also noted on stderr naming ``split``."""
    items, cut = [], set()
    long_ok = cfg.max_segments > 1 and spec.transform in ("single", "multiple_choice")
    transform = "pair" if spec.transform == "similarity" and not cfg.both_orders else spec.transform
    for i, ex in enumerate(examples):
        memory: list[list[int]] = []
        if long_ok:
            ex, memory, lost = _split_long(encoder, ex, spec.transform, cfg.max_segments)
            if lost:
                cut.add(i)
        for enc in encoder.encode(ex, transform, i):
            if enc.truncated:
                cut.add(i)
            items.append(Item(enc, memory))
    if cut and spec.transform == "span":
        print(f"note: {len(cut)} of {len(examples)} {split} questions were cut to max_query_len {cfg.max_query_len} "
              "tokens", file=sys.stderr)
    elif cut:
        print(f"note: {len(cut)} of {len(examples)} {split} examples were cut to fit max_len {cfg.max_len}"
              + (f" and max_segments {cfg.max_segments}" if long_ok else ""), file=sys.stderr)
    return items, len(cut)


def collate_items(items: Sequence[Item], fmt: InputFormat) -> dict[str, torch.Tensor]:
    """:func:`genfeat.tasks.collate` plus ``memory_ids`` [b, s, u] when the items have earlier segments, which
    each item's k sequences share (a batch holds items of one segment count: :class:`ItemStream`, :func:`predict`)."""
    batch = collate([it.encoded for it in items], fmt)
    if items[0].memory:
        batch["memory_ids"] = torch.tensor([it.memory for it in items])
    return batch


class ItemStream:
    """Endless, resumable, shuffled batches of items, each batch from items with the same number of
    earlier segments (so their memory needs no padding). Epoch e's order is drawn from derived_seed(seed, e), so
    (epoch, index) restores the stream exactly; the last batch of each group may be short.

    Under DDP every batch is split into contiguous per-rank parts (batches smaller than the number of
    processes are refused by :meth:`shard`)."""

    def __init__(self, items: Sequence[Item], fmt: InputFormat, batch_size: int, seed: int = 0):
        self.items, self.fmt, self.batch_size, self.seed = items, fmt, batch_size, seed
        self.epoch, self.index, self.rank, self.world = 0, 0, 0, 1
        self.groups: dict[int, list[int]] = {}
        for i, it in enumerate(items):
            self.groups.setdefault(len(it.memory), []).append(i)
        self._batches = self._plan(0)

    def _plan(self, epoch: int) -> list[list[int]]:
        rng = random.Random(derived_seed(self.seed, epoch))
        batches = []
        for key in sorted(self.groups):
            order = list(self.groups[key])
            rng.shuffle(order)
            batches += [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        rng.shuffle(batches)
        return batches

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        if self.index >= len(self._batches):
            self.epoch, self.index = self.epoch + 1, 0
            self._batches = self._plan(self.epoch)
        ids = self._batches[self.index]
        self.index += 1
        part = torch.tensor(ids).tensor_split(self.world)[self.rank].tolist()
        return collate_items([self.items[i] for i in part], self.fmt)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._batches = self._plan(self.epoch)

    def shard(self, rank: int, world: int) -> None:
        smallest = min(len(b) for b in self._batches)
        if smallest < world:
            raise ConfigError(f"a batch of {smallest} examples cannot be split over {world} processes",
                              "pick data.batch_size so that every group's last batch has at least one example per process")
        self.rank, self.world = rank, world


# ---------------------------------------------------------------------------------------- prediction
@torch.no_grad()
def predict(model: FineTuneModel, items: Sequence[Item], fmt: InputFormat, batch_size: int) -> list[dict[str, Any]]:
    """The head's outputs for every item, in order, without gradients: ``score`` (class scores [c],
    a float for regression, choice scores [k]) or span ``start``/``end`` scores over the item's own
    positions and ``answer`` (answerability logit). Items are batched by length to save padding.

    A start-conditioned span head's ``end`` is the band (:func:`~genfeat.tasks.transforms.end_band`, the
    :data:`~genfeat.tasks.transforms.MAX_ANSWER_LEN` ends from each start) of log p(e | s), its end scores
    given start s normalised over the window's allowed ends: the ends of different starts are scored by
    distributions of their own, so :func:`best_span`'s start_logits[s] + log p(e | s) is, within a window,
    log p(s) p(e | s) up to the window's constant, as a linear head's start_logits[s] + end_logits[e] is
    log p(s) p(e) up to one."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    order = sorted(range(len(items)), key=lambda i: (len(items[i].memory), len(items[i].encoded.sequences[0].ids)))
    out: list[dict[str, Any]] = [{} for _ in items]
    pos = 0
    while pos < len(order):
        chunk = [order[pos]]
        while (pos + len(chunk) < len(order) and len(chunk) < batch_size
               and len(items[order[pos + len(chunk)]].memory) == len(items[chunk[0]].memory)):
            chunk.append(order[pos + len(chunk)])
        pos += len(chunk)
        batch = to_device(model_inputs(collate_items([items[i] for i in chunk], fmt)), device)
        res = model(**batch)
        for row, i in enumerate(chunk):
            if res.logits is not None:
                out[i]["score"] = res.logits[row].float().cpu()
                continue
            n = len(items[i].encoded.offsets)
            sl = slice(res.start_logits.shape[1] - n, None) if fmt.pad_left else slice(0, n)
            if res.end_logits.dim() == 3:
                end = end_band(torch.log_softmax(res.end_logits[row], -1)[sl, sl], MAX_ANSWER_LEN)
            else:
                end = res.end_logits[row, sl]
            out[i]["start"], out[i]["end"] = res.start_logits[row, sl].cpu(), end.cpu()
            if res.answer_logits is not None:
                out[i]["answer"] = float(res.answer_logits[row])
    model.train(was_training)
    return out


def predictions(spec: TaskSpec, examples: Sequence[Example], items: Sequence[Item], outputs: Sequence[dict],
                fmt: InputFormat) -> list:
    """One prediction per example: a class id, a score, or (span) the answer text ("" when the task admits
    unanswerable questions and the answerability head says the question has none in any window)."""
    if spec.transform != "span":
        preds = [None] * len(examples)
        for it, o in zip(items, outputs):
            preds[it.encoded.example] = float(o["score"]) if spec.regression else int(o["score"].argmax())
        return preds
    windows: list[list[int]] = [[] for _ in examples]
    for j, it in enumerate(items):
        windows[it.encoded.example].append(j)
    preds = []
    for ex, js in zip(examples, windows):
        if spec.unanswerable and "answer" in outputs[js[0]] and max(outputs[j]["answer"] for j in js) <= 0:
            preds.append("")
            continue
        preds.append(best_span(ex.texts[1], [items[j].encoded for j in js], [outputs[j]["start"] for j in js],
                               [outputs[j]["end"] for j in js], fmt))
    return preds


def scores(spec: TaskSpec, examples: Sequence[Example], preds: Sequence) -> dict[str, float]:
    """The task's metrics of ``preds`` (empty when the split has no labels)."""
    from ..eval.metrics import squad_scores, task_scores

    if spec.transform == "span":
        return squad_scores(preds, [[text for text, _ in ex.answers] for ex in examples])
    if any(ex.label is None for ex in examples):
        return {}
    return task_scores(spec.metrics, preds, [ex.label for ex in examples])


# --------------------------------------------------------------------------------------------- model
def check_head(model: FineTuneModel, spec: TaskSpec, path: str | Path, native: bool = True) -> None:
    """Refuse a fine-tuned checkpoint whose head cannot serve ``spec``.

    A classification or regression head genfeat trained (``native``: a genfeat checkpoint) serves the task
    it was trained for only (``config.task``): its label ids and score scale are that task's, so a head of
    the same shape would score another task silently wrong (SST-2's 0/1 are not CoLA's), and so would one
    trained for a task registered in another program (a name not in TASKS here). Span and multiple-choice
    heads point into their input, so they serve any task of their kind. A Hugging Face task model (not
    ``native``; its task ``hf:<finetuning_task>`` or ``hf:<architecture>`` unless its ``finetuning_task`` is a
    genfeat task, also once exported to genfeat's format) is checked by its head's kind and label count."""
    head = model.config.head
    kind = _head_kind(spec)
    trained = model.config.task
    if head.kind != kind or (kind == "classification" and head.n_labels != spec.n_labels):
        have = f"{head.kind} head" + (f" with {head.n_labels} labels" if head.kind == "classification" else "")
        need = f"{kind} head" + (f" with {spec.n_labels} labels" if kind == "classification" else "")
        where = f"'{trained}'" if trained in TASKS else f"a task that takes a {have}"
        raise CheckpointError(f"checkpoint '{path}' has a {have} (trained for task '{trained}'), task "
                              f"'{spec.name}' needs a {need}",
                              f"evaluate it on {where}, or fine-tune for '{spec.name}' (init: {path})")
    if head.kind in ("classification", "regression") and (native or trained in TASKS) and trained != spec.name:
        outputs = "labels" if head.kind == "classification" else "scores"
        where = f"'{trained}'" if trained in TASKS else (f"'{trained}' (a task this genfeat does not know: add its "
                                                            "TaskSpec to genfeat.tasks.TASKS)")
        raise CheckpointError(f"checkpoint '{path}' was fine-tuned for task '{trained}' and predicts its {outputs}, "
                              f"not those of task '{spec.name}'",
                              f"evaluate it on {where}, or fine-tune for '{spec.name}' (init: {path})")


def align_labels(model: FineTuneModel, spec: TaskSpec, path: str | Path) -> None:
    """Put a classification head's classes into ``spec``'s label order, in place.

    A head from elsewhere (a Hugging Face task model) names its classes (``config.label_names``, its
    ``id2label``) in an order of its own: MNLI models trained with transformers' run_glue score entailment,
    neutral, contradiction where genfeat's MNLI reads contradiction, entailment, neutral. Each name is matched
    to the task label it spells (the label as the files write it, or its ``label_names`` entry, case and
    ``-`` / ``_`` / space aside) and the head's output rows are permuted to the task's order. A head whose names
    are not the task's labels is refused; one that names no classes (transformers' ``LABEL_0``..., as run_glue
    leaves them even for MNLI) is read in the task's order, as a note on stderr says. A head genfeat trained has
    no ``label_names``: its classes are its task's, in order."""
    head = model.config.head
    names = model.config.label_names
    if head.kind != "classification" or not names:
        return
    if all(name.upper() == f"LABEL_{i}" for i, name in enumerate(names)):
        print(f"note: checkpoint '{path}' does not name its classes (id2label {', '.join(names)}); they are read as "
              f"task '{spec.name}''s labels in its order ({', '.join(spec.class_names)}); if the "
              "model's order differs, set id2label in its config.json", file=sys.stderr)
        return
    order = [spec.class_of(name) for name in names]
    if None in order or sorted(order) != list(range(spec.n_labels)):
        known = ", ".join(f"{label} ({name})" for label, name in zip(spec.labels, spec.label_names)) \
            if spec.label_names else ", ".join(spec.labels)
        raise CheckpointError(f"checkpoint '{path}' names its classes {names}, which are not task '{spec.name}''s "
                              f"labels {known}", "set id2label in its config.json to the task's labels in the order "
                              "of the model's classes, or evaluate it on the task it was trained for")
    rows = [order.index(j) for j in range(spec.n_labels)]  # task class j <- the head's output row
    with torch.no_grad():
        for p in (model.head.out.weight, model.head.out.bias):
            p.copy_(p[rows].clone())
    model.config.label_names = spec.class_names


def check_vocab(backbone: nn.Module, vocab, where: str) -> None:
    """Refuse a missing tokenizer, or one whose size is not the backbone's vocabulary.

    The tokenizer's content is checked when it is loaded: genfeat writes the sha256 of the ordered
    vocabulary into every checkpoint it saves with one (``vocab_sha256`` in config.json, by
    genfeat.hub.save_pretrained and the fine-tuning checkpoints here), and genfeat.hub.load_checkpoint
    refuses a tokenizer of the same size with other tokens. A Hugging Face directory has no fingerprint,
    nor has a genfeat checkpoint written before it: there only the size is compared, so another model's
    tokenizer of the same size passes."""
    cfg = backbone.config
    sizes = {cfg.n_token, cfg.n_token + getattr(cfg, "n_special", 0)}
    if vocab is None:
        raise CheckpointError(f"'{where}' has no tokenizer (vocab.json, tokenizer.json, vocab.txt or spiece.model)",
                              "use a checkpoint saved with its tokenizer (genfeat writes it beside every checkpoint)")
    if len(vocab) not in sizes:
        raise CheckpointError(f"the tokenizer of '{where}' has {len(vocab)} types but the model's vocabulary has "
                              f"{cfg.n_token}", "use the tokenizer the model was pretrained with")


def _train_vocab(cfg: FineTuneRecipe, texts: list[str], out_dir: Path | None, resume: bool):
    """``cfg.tokenizer``; else one trained on ``texts`` into OUT/tokenizer (read back when resuming; a resumed
    run without one trains it in a temporary folder, for the checkpoint's vocabulary to be compared with, and
    writes nothing into OUT)."""
    from ..data.tokenizers import load_tokenizer

    if cfg.tokenizer is not None:
        return load_tokenizer(cfg.tokenizer)
    if resume and out_dir is not None and (Path(out_dir) / "tokenizer").is_dir():
        return load_tokenizer(Path(out_dir) / "tokenizer")
    kind = {"bert": "wordpiece", "xlnet": "sentencepiece", "gpt": "bpe"}.get(cfg.backbone)
    if kind is None:
        raise ConfigError(f"init is none and backbone is {cfg.backbone}, which needs a pretrained vocabulary",
                          "use backbone bert, xlnet or gpt for a run without pretraining, or name a tokenizer")
    # under torchrun rank 0 alone writes OUT/tokenizer (one writer per path); the others train the same tokenizer
    # (its training is deterministic) in a temporary folder, so that an error ends every rank alike
    if out_dir is not None and not resume and os.environ.get("RANK", "0") == "0":
        return _train_vocab_into(cfg, kind, texts, Path(out_dir) / "tokenizer")
    with tempfile.TemporaryDirectory() as tmp:
        return _train_vocab_into(cfg, kind, texts, Path(tmp) / "tokenizer")


def _train_vocab_into(cfg: FineTuneRecipe, kind: str, texts: list[str], where: Path):
    """A ``kind`` tokenizer of ``cfg.vocab_size`` trained on ``texts`` (one per line), written to ``where``."""
    from ..data.tokenizers import TokenizerConfig, train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(" ".join(t.split()) for t in texts) + "\n", encoding="utf-8")
        return train_tokenizer(TokenizerConfig(kind, cfg.vocab_size, lowercase=False), corpus, where, "vocab_size")


def build_model_and_vocab(cfg: FineTuneRecipe, spec: TaskSpec, train_examples: Sequence[Example],
                          out_dir: Path | None, resume: bool = False) -> tuple[FineTuneModel, Any]:
    """The backbone of ``cfg.init`` (or a random one with a tokenizer trained on the task) with a new head."""
    if cfg.init is not None:
        if not Path(cfg.init).is_dir():
            state = "is a file, not a model directory" if Path(cfg.init).exists() else "does not exist"
            raise CheckpointError(f"init '{cfg.init}' {state}",
                                  "train the pretraining recipe the fine-tuning recipe names first (its comment gives "
                                  "the command and --out), or point init at a genfeat or Hugging Face model directory")
        backbone, vocab = load_checkpoint(cfg.init)
        if isinstance(backbone, FineTuneModel):
            backbone = backbone.backbone
        arch = architecture_of(backbone)
        check_backbone(arch, cfg.init)
        check_vocab(backbone, vocab, cfg.init)
        if cfg.finetune_bilm is not None:
            if arch != "elmo":
                raise ConfigError(f"finetune_bilm is set but the init checkpoint is {with_article(arch)} model, not ELMo",
                                  "drop finetune_bilm: every other backbone is fine-tuned whole")
            backbone.config = replace(backbone.config, finetune_bilm=cfg.finetune_bilm)
    else:
        vocab = _train_vocab(cfg, [t for ex in train_examples for t in (*ex.texts, *ex.choices)], out_dir,
                             resume)
        arch = cfg.backbone
        get_adapter(arch)
        fields = {**cfg.model, "n_token": len(vocab)}
        if arch == "bert":
            from ..data.tokenizers import special_ids

            fields["pad_id"] = special_ids(vocab).get("pad")
        backbone = build_model(arch, fields)
    check_fit(cfg, arch, backbone.config)
    head = HeadConfig(kind=_head_kind(spec), n_labels=spec.n_labels,
                      d_model=backbone.config.d_model, pool=get_adapter(arch).pool, dropout=cfg.head_dropout,
                      answerability=spec.unanswerable,
                      span_end=cfg.span_end,
                      layer_norm_epsilon=getattr(backbone.config, "layer_norm_epsilon", HeadConfig.layer_norm_epsilon))
    d = cfg.data
    ft = FineTuneConfig(task=spec.name, backbone=arch, backbone_config=to_dict(backbone.config), head=head,
                        max_len=d.max_len, doc_stride=d.doc_stride, max_query_len=d.max_query_len,
                        max_segments=d.max_segments,
                        both_orders=d.both_orders, squad_seed=d.squad_seed if spec.article_split else None)
    return FineTuneModel(ft, backbone), vocab


def check_fit(cfg: FineTuneRecipe, architecture: str, backbone_config: Any) -> None:
    """Refuse a recipe whose settings the backbone cannot serve: the auxiliary LM without a left-to-right LM head,
    max_segments > 1 without memory, max_len beyond the backbone's positions.

    Raises:
        ConfigError: naming the setting and the fix.
    """
    adapter, d = get_adapter(architecture), cfg.data
    if cfg.aux_lm_weight and not adapter.causal:
        raise ConfigError(f"aux_lm_weight is {cfg.aux_lm_weight} but the {architecture} backbone has no "
                          "left-to-right LM head", "set aux_lm_weight 0 (GPT-1's auxiliary LM is for gpt, "
                          "lstm_lm and transformer_xl)")
    if d.max_segments > 1 and not adapter.memory:
        raise ConfigError(f"data.max_segments is {d.max_segments} but the {architecture} backbone reads no earlier "
                          "segments", "set data.max_segments 1 (it cuts long texts to max_len), or fine-tune an "
                          "XLNet or Transformer-XL backbone")
    check_max_len(d.max_len, architecture, backbone_config, "data.max_len")


def encoder_for(model: FineTuneModel, vocab) -> TaskEncoder:
    """The task inputs as ``model`` reads them (its max_len, doc_stride and max_query_len)."""
    cfg = model.config
    return TaskEncoder(model.input_format(vocab), vocab, cfg.max_len, cfg.doc_stride, cfg.max_query_len)


def subset(examples: list[Example], n: int, seed: int = 0) -> list[Example]:
    """``n`` examples drawn with a fixed seed, in file order (all when ``n`` is 0 or too large)."""
    if not n or n >= len(examples):
        return examples
    return [examples[i] for i in sorted(random.Random(seed).sample(range(len(examples)), n))]


def _stage_error(e: ConfigError, stage: PretrainStage) -> ConfigError:
    """``e``, raised reading the pretraining recipe with ``stage.overrides``, as one of the fine-tuning recipe:
    when the overrides caused it, the fields it names get their full dotted path (``model.d_modl`` ->
    ``pretrain.overrides.model.d_modl``, its did-you-mean too); else it is the recipe file's, as it says."""
    if str(stage.recipe) in e.cause:    # runner.load_recipe names the file in an error the file itself gives
        return ConfigError(f"pretrain stage: {e.cause}", e.fix)
    sections = "|".join(sorted({re.escape(key.split(".")[0]) for key in dotted(stage.overrides)}))
    field_name = re.compile(rf"'(?:--)?((?:{sections})(?:\.[\w.]+)?)'")
    cause, fix = (field_name.sub(r"'pretrain.overrides.\1'", text) for text in (e.cause, e.fix))
    return ConfigError(f"pretrain stage: {cause}", fix)


def pretrain_first(cfg: FineTuneRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
                   resume: bool = False) -> tuple[FineTuneRecipe, dict[str, float]]:
    """Run ``cfg.pretrain`` with ``seed`` into OUT/pretrain (module docstring, "Two phases").

    With ``resume``, a stage that finished (OUT/pretrain/final and its results.json exist) is not run again
    (its figures are read back); one that did not continues from OUT/pretrain/last. Either way only when
    OUT/pretrain/stage.json (the stage's method and recipe, its train section aside, written when it starts)
    matches what ``cfg.pretrain`` asks for now.

    Returns:
        ``cfg`` with ``init`` = OUT/pretrain/final and no ``pretrain``, and the pretraining figures as
        ``pretrain_<key>`` (with ``interrupted`` = 1 kept as it is when the pretraining was interrupted).
    Raises:
        ConfigError: no output directory, a recipe file that does not exist, one that is not of a
            pretraining method, or a field of it (or of ``pretrain.overrides``) its config refuses.
        CheckpointError: a resume of OUT/pretrain with another pretraining recipe or overrides.
    """
    stage = cfg.pretrain
    if out_dir is None:
        raise ConfigError("a fine-tuning recipe with a pretrain stage was run without an output directory",
                          "pass out_dir (genfeat run always gives one: --out, or runs/<recipe name>)")
    if not Path(stage.recipe).is_file():
        raise ConfigError(f"pretrain.recipe '{stage.recipe}' does not exist",
                          "give the path of a pretraining recipe relative to the working directory, "
                          "e.g. recipes/bert/debug.yaml")
    try:
        method, pre_cfg = load_recipe(stage.recipe, dotted(stage.overrides), pretraining=True)
    except ConfigError as e:
        raise _stage_error(e, stage) from None
    where = Path(out_dir) / "pretrain"
    done = where / "results.json"
    # what this stage trains (its recipe but the loop settings of its train section, which a resume may change),
    # kept beside its output: a resume continues, or reuses, only the same pretraining
    stage_file = where / "stage.json"
    wanted = json.loads(json.dumps({"method": method.name,
                                    **{k: v for k, v in to_dict(pre_cfg).items() if k != "train"}}))
    saved = json.loads(stage_file.read_text()) if resume and stage_file.is_file() else wanted
    changed = sorted(k for k in saved.keys() | wanted.keys() if saved.get(k) != wanted.get(k))
    if changed:
        raise CheckpointError(f"'{where}' holds a pretraining whose {', '.join(changed)} differ from what "
                              f"pretrain: {stage.recipe} asks for now",
                              "resume with the pretrain section the run started with, or start a new --out")
    if resume and done.is_file() and (where / "final").is_dir():
        figures = read_figures(done, "the figures of the finished pretraining stage",
                               f"delete it to finish the stage again from '{where / 'last'}'")
    else:
        if resume:
            check_resume_method(method, where)
        if os.environ.get("RANK", "0") == "0":     # under torchrun rank 0 alone writes OUT (runner._check_run_dir)
            write_json_atomic(stage_file, wanted)
        # every rank returns once rank 0 has written OUT/pretrain/final, which they read next (train_and_save)
        figures = method.run(pre_cfg, seed=seed, out_dir=where, progress=progress, resume=resume)
    figures = {k if k == "interrupted" else f"pretrain_{k}": v for k, v in figures.items()}
    return replace(cfg, init=str(where / "final"), pretrain=None), figures


@register_method("finetune", FineTuneRecipe, inputs=("init",))
def run(cfg: FineTuneRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    pretrained: dict[str, float] = {}
    if cfg.pretrain is not None:
        cfg, pretrained = pretrain_first(cfg, seed=seed, out_dir=out_dir, progress=progress, resume=resume)
        if "interrupted" in pretrained:
            return pretrained
        # the fine-tuning continues only where it wrote a checkpoint; before that it starts from the pretraining
        resume = resume and has_checkpoint(Path(out_dir) / "last")
    d = cfg.data
    spec = get_task(d.task)
    if cfg.span_end != "linear" and spec.transform != "span":
        raise ConfigError(f"span_end is {cfg.span_end} but task '{spec.name}' is not a span task",
                          "drop span_end: it chooses how a span head scores answer ends")
    spec.check_run_splits(d.train_split, d.dev_split, d.test_split, "data.")
    if cfg.init is None:   # the backbone the recipe builds, checked before a tokenizer is trained into OUT
        get_adapter(cfg.backbone)
        check_fit(cfg, cfg.backbone, model_config(cfg.backbone, {**cfg.model, "n_token": cfg.vocab_size}))
    train_ex = subset(load_task(spec, d.train_split, seed=d.squad_seed), d.max_train_examples)
    if spec.transform == "span" and not spec.unanswerable and any(not ex.answers for ex in train_ex):
        raise ConfigError(f"task '{spec.name}' split '{d.train_split}' holds questions without an answer, but the "
                          "task is not marked unanswerable (its models answer every question)",
                          "set unanswerable: true in the task's TaskSpec (SQuAD 2.0-style data), or use SQuAD "
                          "1.1-style data")
    dev_ex = load_task(spec, d.dev_split, seed=d.squad_seed)
    dev_ex = subset(dev_ex, d.max_eval_examples)
    # the test split is read now, so that a missing or malformed file is refused before the training, not after it
    test_ex = None if d.test_split is None else subset(load_task(spec, d.test_split, seed=d.squad_seed),
                                                       d.max_eval_examples)
    correlations = [m for m in spec.metrics if m in CORRELATION_METRICS]
    if correlations and len(dev_ex) < 2 and any(ex.label is not None for ex in dev_ex):
        raise ConfigError(f"task '{spec.name}' is scored by {correlations[0]} correlation, which needs 2 or more examples, "
                          f"and the dev split gives {len(dev_ex)}", "set data.max_eval_examples to 0 (all) or 2 or more")
    # OUT is created by the first file written into it (a tokenizer, the log, a checkpoint), so a run refused
    # before that leaves no empty folder
    seed_everything(seed)
    model, vocab = build_model_and_vocab(cfg, spec, train_ex, out_dir, resume)
    encoder = encoder_for(model, vocab)
    fmt = encoder.fmt
    train_items, train_cut = encode_items(train_ex, spec, encoder, model.config, d.train_split)
    dev_items, dev_cut = encode_items(dev_ex, spec, encoder, model.config, d.dev_split)
    steps = cfg.steps or max(1, math.ceil(cfg.epochs * len(train_items) / d.batch_size))
    terms = [Term(TaskObjective(model.config.head.kind, cfg.aux_lm_weight),
                  ItemStream(train_items, fmt, d.batch_size, seed))]
    main = spec.metrics[0]

    def evaluate(m, examples=dev_ex, items=dev_items, prefix="dev"):
        outs = predict(m, items, fmt, d.eval_batch_size)
        return {f"{prefix}_{k}": v for k, v in scores(spec, examples, predictions(spec, examples, items, outs, fmt)).items()}

    train_cfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    if cfg.keep_best and train_cfg.early_stop_metric is None:
        train_cfg = replace(train_cfg, early_stop_metric=f"dev_{main}", early_stop_mode="max", keep_best=True)
    new_params = sum(p.numel() for p in model.head.parameters())
    if model.adapter.causal and getattr(model.backbone, "special_emb", None) is not None:
        new_params += model.backbone.special_emb.weight[-3:].numel()     # GPT-1's start, delimiter, extract
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    record = recipe_record(cfg)
    trainer = Trainer(model, joint(terms, steps, cfg.optim, name="finetune"), train_cfg, evaluate=evaluate,
                      out_dir=out_dir,
                      checkpoint_config=checkpoint_config(model, **record,
                                                          **{VOCAB_FINGERPRINT: vocab_fingerprint(vocab)}),
                      save_extra=lambda p: vocab.save(p / VOCAB_FILE), resume_from=resume_from)
    result = trainer.fit()
    train_seconds = result.seconds     # over every invocation of a resumed run
    if result.interrupted:
        return {**pretrained, "steps": result.steps, "train_seconds": train_seconds, "interrupted": 1.0}
    figures: dict[str, float] = {**pretrained, "steps": result.steps, "train_seconds": train_seconds,
                                 "train_examples": len(train_ex), "train_truncated": train_cut,
                                 "dev_examples": len(dev_ex), "dev_truncated": dev_cut, "new_params": new_params,
                                 **evaluate(model)}
    if test_ex is not None:
        test_items, test_cut = encode_items(test_ex, spec, encoder, model.config, d.test_split)
        figures.update({"test_examples": len(test_ex), "test_truncated": test_cut,
                        **evaluate(model, test_ex, test_items, "test")})

    def save() -> None:
        save_pretrained(model, Path(out_dir) / "final", vocab, record=record)
        write_results(out_dir, figures)

    if out_dir is not None:   # under torchrun rank 0 writes, and every rank returns once it has
        on_rank_0(save, f"failed to write the fine-tuned model and figures into '{out_dir}'", trainer.dist)
    return figures


# ------------------------------------------------------------------------------------ genfeat evaluate
def _article_seed(model: FineTuneModel, spec: TaskSpec, checkpoint: str | Path, requested: int | None) -> int:
    """The seed of the article split to score (TaskSpec.article_split): the one the model was trained on, as its
    config (or, for checkpoints saved before it did, its run's recipe) records it; ``requested`` (--squad-seed) must
    agree with it. A head from elsewhere or for another task reads ``requested`` or 0.

    Raises:
        ConfigError: ``requested`` differs from the recorded seed (the other split's dev and test articles
            hold questions the model was trained on), or a head trained on this task records none and none
            is requested.
    """
    from ..framework.checkpoint import CONFIG_FILE, read_config

    if not spec.article_split:
        return 0 if requested is None else requested
    recorded = model.config.squad_seed
    if recorded is None and model.config.task == spec.name and (Path(checkpoint) / CONFIG_FILE).is_file():
        recipe = read_config(checkpoint).get("recipe")
        data = recipe.get("data") if isinstance(recipe, dict) else None
        recorded = data.get("squad_seed", 0) if isinstance(data, dict) else None
    if recorded is not None and requested is not None and requested != recorded:
        raise ConfigError(f"--squad-seed is {requested}, but '{checkpoint}' was trained on the article split of seed "
                          f"{recorded}: the dev and test articles of seed {requested} hold questions it was trained "
                          "on", f"drop --squad-seed (or pass {recorded})")
    if recorded is None and requested is None and model.config.task == spec.name:
        raise ConfigError(f"'{checkpoint}' was fine-tuned on {spec.name} but does not record the seed of its article "
                          "split, so its own dev and test articles are not known", "pass --squad-seed S, the "
                          "data.squad_seed of the run that trained it (0 unless the recipe set it)")
    return recorded if recorded is not None else (0 if requested is None else requested)


def evaluate_task(checkpoint: str | Path, task: str, split: str = "dev", predictions_file: str | Path | None = None,
                  batch_size: int = 64, device: str = "cpu", max_examples: int = 0,
                  squad_seed: int | None = None) -> dict[str, Any]:
    """Score a fine-tuned checkpoint on a task split (``genfeat evaluate --task``). A GDAN discriminator
    (``OUT/final/d`` of method gdan) is scored by :func:`genfeat.methods.gdan.evaluate_reader` instead.
    ``squad_seed``: the seed of the SQuAD article split (None: the one the checkpoint records; see
    :func:`_article_seed`), so that the run's own dev and test articles are scored.

    Returns:
        The task's metrics (none for an unlabelled split), ``examples``, ``truncated`` and ``seconds``.
    Raises:
        CheckpointError: not a fine-tuned checkpoint, a head that cannot serve the task, a tokenizer that
            does not match the backbone.
        ConfigError: a ``squad_seed`` the checkpoint contradicts (:func:`_article_seed`).
    """
    from ..framework.checkpoint import CONFIG_FILE, read_config
    from ..framework.trainer import resolve_device
    from ..tasks.predictions import write_predictions
    from .gdan import READER_ARCHITECTURES, evaluate_reader

    if (Path(checkpoint) / CONFIG_FILE).is_file() and read_config(checkpoint).get("architecture") in READER_ARCHITECTURES:
        return evaluate_reader(checkpoint, task, split, predictions_file, batch_size, device, max_examples)
    t0 = time.time()
    target = resolve_device(device, "--device")
    model, vocab = load_checkpoint(checkpoint)
    if getattr(model.config, "mc_head", False):
        from ..interop.hf_finetune import from_double_heads

        model = from_double_heads(model, f"checkpoint '{checkpoint}'", checkpoint)
    if not isinstance(model, FineTuneModel):
        arch = architecture_of(model)
        raise CheckpointError(f"checkpoint '{checkpoint}' holds {with_article(arch)} model without a task head",
                              f"fine-tune it first (method: finetune, init: {checkpoint}) and evaluate the fine-tuned "
                              "OUT/final" if arch in fine_tunable() else f"{with_article(arch)} model cannot be fine-tuned: "
                              "its figures are those of the run that trained it (OUT/results.json)")
    spec = get_task(task)
    # a head genfeat trained; a Hugging Face task model stays one (task "hf:...") through a genfeat export
    native = "architecture" in read_config(checkpoint) and not model.config.task.startswith("hf:")
    check_head(model, spec, checkpoint, native=native)
    broken = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if broken:   # argmax over NaN scores is class 0: a figure, silently wrong
        raise CheckpointError(f"checkpoint '{checkpoint}' holds NaN or infinite weights in {len(broken)} tensors "
                              f"(first: {broken[0]})", "use a checkpoint saved before the training diverged, or "
                              "export or copy it again if the file was damaged")
    align_labels(model, spec, checkpoint)
    check_vocab(model.backbone, vocab, str(checkpoint))
    examples = load_task(spec, split, seed=_article_seed(model, spec, checkpoint, squad_seed))
    if max_examples and predictions_file is not None and spec.reader == "tsv":
        raise ConfigError("--predictions writes a GLUE submission file, which numbers every example of the split, "
                          "but --max-examples scores a subset", "drop --max-examples to write predictions")
    examples = subset(examples, max_examples)
    encoder = encoder_for(model, vocab)
    items, cut = encode_items(examples, spec, encoder, model.config, split)
    outs = predict(model.to(target), items, encoder.fmt, batch_size)
    preds = predictions(spec, examples, items, outs, encoder.fmt)
    result: dict[str, Any] = dict(scores(spec, examples, preds))
    if not result:   # an unlabelled split (GLUE's test files): the predictions are all there is
        print(f"note: split '{split}' of task '{spec.name}' has no labels, so no metric is computed"
              f"{'' if predictions_file else '; --predictions FILE writes the predictions'}", file=sys.stderr)
    if predictions_file is not None:
        write_predictions(spec, examples, preds, predictions_file)
    result.update({"task": task, "split": split, "checkpoint": str(checkpoint), "examples": len(examples),
                   "truncated": cut, "seconds": time.time() - t0})
    return result
