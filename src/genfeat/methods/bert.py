"""BERT pretraining (the masked-LM baseline of thesis Table 2.19): one phase of masked LM (+ optional NSP).

Recipe: ``method: bert`` plus the fields of :class:`BertRecipe`. The model section takes the fields
of :class:`genfeat.models.bert.BertConfig`; ``n_token`` and ``pad_id`` come from the tokenizer and
``nsp`` from the objective section.

Data (genfeat.data.documents): the text (``imdb:train``, ``wikitext2:valid``, ``ptb:train``, a text
file or a folder of documents) is read as documents of sentences, tokenised without special tokens
by WordPiece (``data.tokenizer``, or one trained on the training text into OUT/tokenizer) into one
stream and read once into examples of ``seq_len`` tokens, [CLS] and [SEP] included, so no example
is padded. With NSP an example is ``[CLS] A [SEP] B [SEP]``, A ending at a sentence boundary and B
the sentences that follow (label 0) or, half the time, sentences from a random place (label 1).
Which tokens are masked is drawn anew at every step
(:class:`~genfeat.objectives.masked_lm.MaskedLMObjective`) from a seed fixed by the example and the
epoch, so a torchrun run masks as one process with the same global batch.

Bad input: as for XLNet (genfeat.methods.xlnet): non-UTF-8 lines and text-less corpora are one
DataError, resuming with another tokenizer a CheckpointError. Text longer than an example is read
on into the next examples; a pair that does not fit is cut from the end of its longer segment;
``seq_len`` above the model's ``max_position`` is refused before training.

Result: ``valid_loss`` is the masked-LM cross-entropy (nats per masked token, NSP left out) of the
held-out text under a masking drawn from a fixed seed, so it compares across steps, runs and recipes;
``valid_accuracy`` the fraction of masked tokens predicted exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..config import Config, from_dict
from ..data.documents import PretrainingTextConfig
from ..errors import ConfigError
from ..eval.held_out import evaluate_objective, row_batches
from ..framework import OptimConfig, TrainConfig, seed_everything
from ..framework.checkpoint import resume_dir
from ..framework.stream import TensorStream
from ..hub import check_model_fields, check_resume_vocabulary
from ..objectives.masked_lm import MaskedLMConfig, MaskedLMObjective
from ..runner import register_method
from .pretraining import train_and_save

EVAL_MASK_SEED = 1234
"""Seed of the masking of the held-out text (the same for every evaluation)."""


@dataclass
class BertDataConfig(PretrainingTextConfig):
    """The pretraining text, its WordPiece tokenizer and the examples cut from it (``seq_len`` at most
    the model's max_position)."""

    valid_examples: int = 0
    """Evaluate on the first this many held-out examples during training (0: all); the final figures use all."""

    def __post_init__(self):
        super().__post_init__()
        if self.valid_examples < 0:
            raise ValueError(f"valid_examples must be >= 0, got {self.valid_examples}")


@dataclass
class BertRecipe(Config):
    """Masked-LM pretraining of a BERT encoder."""

    data: BertDataConfig = field(default_factory=BertDataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    """Fields of genfeat.models.bert.BertConfig (without n_token, pad_id and nsp)."""
    objective: MaskedLMConfig = field(default_factory=MaskedLMConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4, weight_decay=0.01, warmup_steps=100,
                                                                   decay="linear"))
    train: TrainConfig = field(default_factory=TrainConfig)
    steps: int = 1000
    """Optimizer steps."""

    def __post_init__(self):
        for key in ("n_token", "pad_id", "nsp"):
            if key in self.model:
                raise ConfigError(f"model.{key} is set in the recipe",
                                  f"drop model.{key}: it comes from the tokenizer (n_token, pad_id) or objective.nsp")
        check_model_fields("bert", self.model)
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def text_path(spec: str) -> Path:
    """The file or folder ``spec`` names: NAME:SPLIT of a registered corpus (found or downloaded), or a path."""
    from ..data.corpora import CORPORA
    from ..data.registry import resolve

    name, sep, split = spec.partition(":")
    if sep and name in CORPORA:
        return resolve(name, split)
    return Path(spec)


class SeededExamples:
    """A :class:`~genfeat.framework.stream.TensorStream` over examples with an ``index`` entry whose
    batches carry ``seed`` (fixed by the stream's seed, the epoch and the example) in its place, so
    the masking of an example does not depend on the rank it lands on (the Stream protocol)."""

    def __init__(self, stream: TensorStream, seed: int):
        self.stream, self.seed = stream, seed

    def __iter__(self) -> SeededExamples:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        from ..data.documents import example_seed

        batch = next(self.stream)
        index = batch.pop("index").tolist()
        batch["seed"] = torch.tensor([example_seed(self.seed, self.stream.epoch, 0, i) for i in index])
        return batch

    def state_dict(self) -> dict:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.stream.load_state_dict(state)

    def shard(self, rank: int, world: int) -> None:
        self.stream.shard(rank, world)


def masked_lm_figures(model, objective: MaskedLMObjective, examples: dict[str, torch.Tensor], batch_size: int,
                      limit: int = 0) -> dict[str, float]:
    """Masked-LM loss and accuracy of ``examples`` (the first ``limit``; 0: all), in batches, without gradients.

    Shapes:
        examples {name: [n, t]} -> ``valid_loss`` and ``valid_accuracy`` per masked token, ``valid_masked``.
    """
    totals = evaluate_objective(model, objective, row_batches(examples, batch_size, limit))
    return {"valid_loss": totals.lm()["loss"], "valid_accuracy": totals.accuracy(), "valid_masked": int(totals.count)}


@register_method("bert", BertRecipe, pretraining=True)
def run(cfg: BertRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.tokenizers import special_ids, word_start
    from ..models.bert import BertConfig, BertForMaskedLM

    from ..data.documents import PairLayout, bert_examples, document_tokenizer, encode_documents, read_documents

    data = cfg.data
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    docs = read_documents(data.train_text, data.max_documents)
    vocab = document_tokenizer(docs, "wordpiece", data.vocab_size, data.lowercase, data.tokenizer, out_dir, resume,
                               cfg.train.device)
    check_resume_vocabulary(vocab, resume_from)
    special = special_ids(vocab)
    absent = [role for role in ("cls", "sep", "mask") if role not in special]
    if absent:
        raise ConfigError(f"tokenizer '{data.tokenizer}' has no {'/'.join(absent)} token",
                          "use a BERT (WordPiece) or XLNet (sentencepiece) tokenizer from 'genfeat tokenizer train'")
    model_cfg = from_dict(BertConfig, {**cfg.model, "n_token": len(vocab), "pad_id": special.get("pad"),
                                       "nsp": cfg.objective.nsp}, "model")
    if data.seq_len > model_cfg.max_position:
        raise ConfigError(f"data.seq_len {data.seq_len} is longer than model.max_position {model_cfg.max_position}",
                          "lower data.seq_len or raise model.max_position")
    nsp, layout = cfg.objective.nsp, PairLayout(special["sep"], special["cls"])
    train = bert_examples(*encode_documents(docs, vocab), data.seq_len, layout, nsp, torch.Generator().manual_seed(seed))
    valid = bert_examples(*encode_documents(read_documents(data.valid_text, data.valid_documents), vocab), data.seq_len,
                          layout, nsp, torch.Generator().manual_seed(EVAL_MASK_SEED))
    starts = word_start(vocab) if cfg.objective.whole_word else None
    seed_everything(seed)
    model = BertForMaskedLM(model_cfg)
    objective = MaskedLMObjective(cfg.objective, special["mask"], len(vocab), list(special.values()), starts)

    def evaluate(m, limit=data.valid_examples):
        # the same masking at every evaluation; NSP left out of valid_loss
        dev = next(m.parameters()).device
        scorer = MaskedLMObjective(replace(cfg.objective, nsp=False), special["mask"], len(vocab),
                                   list(special.values()), starts,
                                   generator=torch.Generator(device=dev).manual_seed(EVAL_MASK_SEED))
        return masked_lm_figures(m, scorer, valid, data.batch_size, limit)

    examples = SeededExamples(TensorStream({**train, "index": torch.arange(len(train["input_ids"]))}, data.batch_size,
                                           seed=seed, field="data.batch_size"), seed)
    return train_and_save(cfg, model, objective, examples, vocab, seed=seed, out_dir=out_dir, progress=progress,
                          resume_from=resume_from, evaluate=evaluate, final=lambda m: evaluate(m, 0),
                          train_examples=int(train["input_ids"].shape[0]))
