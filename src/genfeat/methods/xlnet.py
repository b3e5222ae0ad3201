"""XLNet pretraining (thesis §2.2) and its "DAE + Transformer-XL" baseline (Table 2.19 row 2).

Recipes: ``method: xlnet`` (permutation LM, :class:`XLNetRecipe`) and ``method: dae_txl`` (masked
LM on the same backbone and data, :class:`DAERecipe`; with ``model.mem_len`` > 0 it carries the memory
of the previous, corrupted segment as the permutation LM does). The model section takes the fields of
:class:`genfeat.models.xlnet.XLNetConfig`; ``n_token`` comes from the tokenizer and ``nsp`` from
the objective section.

Data (genfeat.data.documents): the training text (``imdb:train``, ``wikitext2:valid``, ``ptb:train``,
a text file or a folder of documents) is read as documents of sentences and tokenised with a
sentencepiece unigram model (``data.tokenizer``, or one trained on the training text, written to
OUT/tokenizer and saved beside every checkpoint as vocab.json), documents ending in ``<eod>``.
The token stream is cut into ``batch_size`` rows; every segment is ``reuse_len`` tokens that continue
its row followed by ``A <sep> B <sep> <cls>`` (B the next sentences or, half the time, sentences from
elsewhere; segment ids 0, 1 and 2 for ``<cls>``), and rows advance by ``reuse_len``, so with
``model.mem_len`` > 0 the memory of the reused positions is the context of the next segment.
``reuse_len`` is the model's (``model.reuse_len``, default seq_len / 2 as XLNet's 256 of 512).
With ``model.bi_data`` half of the rows read the stream reversed (the bidirectional pipeline).
``<sep>`` and ``<cls>`` are never predicted. Examples carry seeds, so masks and orders do not depend
on the number of torchrun processes.

Bad input: a line that is not UTF-8 is one DataError naming the file and line; blank lines only
separate documents and text of blank lines only is an error; text of any length is read as
consecutive segments with memory (XLNet has no position limit), and a sentence longer than a
segment's A/B part is cut where the segment ends. Resuming with a tokenizer other than the one the
checkpoint was trained with is a CheckpointError, as is loading a checkpoint whose vocab.json does
not match its model (genfeat.hub.load_checkpoint).

Result: ``valid_loss`` is the recipe's own objective on the held-out text (nats per predicted /
masked token, NSP left out), read as the segments of the same pipeline with memory, predicted
tokens, orders and masks drawn from fixed seeds, so it compares across steps, runs and the recipes
of one objective.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from torch import nn

from ..config import Config, from_dict
from ..data.documents import PretrainingTextConfig
from ..errors import ConfigError
from ..eval.held_out import evaluate_objective
from ..framework import OptimConfig, TrainConfig, seed_everything
from ..framework.checkpoint import resume_dir
from ..hub import check_model_fields, check_resume_vocabulary
from ..objectives.masked_lm import MaskedLMConfig, MaskedLMObjective
from ..objectives.permutation_lm import PermutationLMConfig, PermutationLMObjective
from ..runner import register_method
from .pretraining import train_and_save

EVAL_SEED = 1234
"""Seed of the held-out pairs, orders, predicted tokens and masks (the same at every evaluation)."""


@dataclass
class XLNetDataConfig(PretrainingTextConfig):
    """The pretraining text, its sentencepiece tokenizer and the segments cut from it (``seq_len``:
    reused part, A, B and the three special tokens)."""

    valid_batches: int = 0
    """Evaluate on the first this many held-out batches during training (0: all); the final figures use all."""

    def __post_init__(self):
        super().__post_init__()
        if self.valid_batches < 0:
            raise ValueError(f"valid_batches must be >= 0, got {self.valid_batches}")


@dataclass
class _PretrainingRecipe(Config):
    """What the XLNet-backbone recipes share; each adds its ``objective``."""

    data: XLNetDataConfig = field(default_factory=XLNetDataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    """Fields of genfeat.models.xlnet.XLNetConfig (without n_token and nsp)."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    steps: int = 1000
    """Optimizer steps."""

    def __post_init__(self):
        for key in ("n_token", "nsp"):
            if key in self.model:
                raise ConfigError(f"model.{key} is set in the recipe",
                                  f"drop model.{key}: it comes from the tokenizer (n_token) or objective.nsp")
        check_model_fields("xlnet", self.model)
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


@dataclass
class XLNetRecipe(_PretrainingRecipe):
    """Permutation-LM pretraining of an XLNet backbone."""

    objective: PermutationLMConfig = field(default_factory=PermutationLMConfig)

    def __post_init__(self):
        super().__post_init__()
        tokens = self.data.seq_len - 3     # a segment's tokens besides its <sep>, <sep> and <cls>
        if self.objective.num_predict is not None and self.objective.num_predict > tokens:
            # the sampler had cut it to the segment's tokens, silently
            raise ConfigError(f"objective.num_predict {self.objective.num_predict} is more than the {tokens} tokens "
                              f"a segment of data.seq_len {self.data.seq_len} holds besides its special tokens, so it "
                              f"would be cut to {tokens}", f"set objective.num_predict to {tokens} or less (the paper "
                              "predicts about 1/K of them: objective.k), or null")


@dataclass
class DAERecipe(_PretrainingRecipe):
    """Masked-LM (denoising) pretraining of the XLNet backbone: "DAE + Transformer-XL"."""

    objective: MaskedLMConfig = field(default_factory=MaskedLMConfig)


@dataclass
class PretrainingText:
    """The tokenizer and the training / held-out segment streams of a run."""

    vocab: Any
    special: dict[str, int]
    train: Any
    valid: Any


def reuse_len(model_cfg: dict[str, Any], data: XLNetDataConfig) -> int:
    """The tokens of a segment that continue its row and enter the memory: the model section's ``reuse_len``, or
    half the segment (XLNet's 256 of 512). The stream and the model must agree on it: a model keeping all of a
    segment in memory would show the next segment the very tokens it predicts."""
    return model_cfg.get("reuse_len") or data.seq_len // 2


def pretraining_text(data: XLNetDataConfig, model_cfg: dict[str, Any], seed: int, out_dir: Path | None,
                     resume: bool, train_device: str = "auto") -> PretrainingText:
    """Read, tokenise and cut the text of ``data`` (module doc) for a model section ``model_cfg``
    (``train_device``: the recipe's train.device, for the process group under torchrun)."""
    from ..data.documents import PairLayout, XLNetPairStream, document_tokenizer, encode_documents, read_documents
    from ..data.tokenizers import special_ids

    docs = read_documents(data.train_text, data.max_documents)
    vocab = document_tokenizer(docs, "sentencepiece", data.vocab_size, data.lowercase, data.tokenizer, out_dir, resume,
                               train_device)
    special = special_ids(vocab)
    absent = [role for role in ("cls", "sep", "mask", "eod") if role not in special]
    if absent:
        raise ConfigError(f"tokenizer '{data.tokenizer}' has no {'/'.join(absent)} token",
                          "use an XLNet (sentencepiece) tokenizer from 'genfeat tokenizer train --kind sentencepiece'")
    reuse = reuse_len(model_cfg, data)
    layout = PairLayout(special["sep"], special["cls"])
    bi = bool(model_cfg.get("bi_data", False))

    def stream(spec_docs, stream_seed):
        ids, sent = encode_documents(spec_docs, vocab, special["eod"])
        return XLNetPairStream(ids, sent, data.batch_size, data.seq_len, reuse, layout, bi, stream_seed)

    return PretrainingText(vocab, special, stream(docs, seed),
                           stream(read_documents(data.valid_text, data.valid_documents), EVAL_SEED))


def held_out_loss(model: nn.Module, objective, valid, limit: int = 0) -> dict[str, float]:
    """The objective's loss (per item, ``valid_loss``) and item count over the first ``limit`` (0: all)
    batches of one pass of the held-out stream, in order (memory carried by the objective); the masked
    LM adds ``valid_accuracy``."""
    totals = evaluate_objective(model, objective, valid.epoch_batches(), limit)
    figures = {"valid_loss": totals.lm()["loss"], "valid_items": int(totals.count)}
    if isinstance(objective, MaskedLMObjective):
        figures["valid_accuracy"] = totals.accuracy()
    return figures


def _pretrain(cfg: XLNetRecipe | DAERecipe, make_objective: Callable[[PretrainingText, bool], Any], *, seed: int,
              out_dir: Path | None, progress: bool, resume: bool) -> dict[str, float]:
    """Build the model and text, train one phase of ``make_objective(text, for_eval)``, evaluate, save."""
    from ..models.xlnet import XLNetConfig, XLNetLMHeadModel

    data = cfg.data
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    text = pretraining_text(data, cfg.model, seed, out_dir, resume, cfg.train.device)
    check_resume_vocabulary(text.vocab, resume_from)
    model_cfg = from_dict(XLNetConfig, {**cfg.model, "n_token": len(text.vocab), "nsp": cfg.objective.nsp,
                                        "reuse_len": reuse_len(cfg.model, data)}, "model")
    seed_everything(seed)
    model = XLNetLMHeadModel(model_cfg)

    def evaluate(m, limit=data.valid_batches):
        return held_out_loss(m, make_objective(text, True), text.valid, limit)

    return train_and_save(cfg, model, make_objective(text, False), text.train, text.vocab, seed=seed,
                          out_dir=out_dir, progress=progress, resume_from=resume_from, evaluate=evaluate,
                          final=lambda m: evaluate(m, 0))


@register_method("xlnet", XLNetRecipe, pretraining=True)
def run(cfg: XLNetRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    recurrence = cfg.objective.recurrence and cfg.model.get("mem_len", 0) > 0

    def objective(text: PretrainingText, for_eval: bool) -> PermutationLMObjective:
        ocfg = replace(cfg.objective, recurrence=recurrence, nsp=cfg.objective.nsp and not for_eval)
        return PermutationLMObjective(ocfg, special_ids=[text.special["sep"], text.special["cls"]])

    return _pretrain(cfg, objective, seed=seed, out_dir=out_dir, progress=progress, resume=resume)


@register_method("dae_txl", DAERecipe, pretraining=True)
def run_dae(cfg: DAERecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
            resume: bool = False) -> dict[str, float]:
    from ..data.tokenizers import word_start

    recurrence = cfg.model.get("mem_len", 0) > 0

    def objective(text: PretrainingText, for_eval: bool) -> MaskedLMObjective:
        return MaskedLMObjective(replace(cfg.objective, nsp=cfg.objective.nsp and not for_eval), text.special["mask"],
                                 len(text.vocab), list(text.special.values()),
                                 word_start(text.vocab) if cfg.objective.whole_word else None, recurrence=recurrence)

    return _pretrain(cfg, objective, seed=seed, out_dir=out_dir, progress=progress, resume=resume)
