"""Transformer-XL language modelling (thesis §2.1): one phase of causal LM with recurrence.

Recipe: ``method: transformer_xl`` plus the fields of :class:`TransformerXLRecipe`. The model
section takes the fields of :class:`genfeat.models.transformer_xl.TransformerXLConfig`; ``n_token``
comes from the vocabulary built on the training split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from ..config import Config, from_dict
from ..errors import ConfigError
from ..framework import OptimConfig, TrainConfig, seed_everything
from ..framework.checkpoint import resume_dir
from ..hub import check_model_fields
from ..io import write_text_atomic
from ..objectives.causal_lm import CausalLMObjective
from ..runner import register_method
from .pretraining import train_and_save


@dataclass
class LMDataConfig(Config):
    """Which corpus, vocabulary and batching the LM trains on."""

    corpus: str = "ptb"
    """A registered corpus (ptb, ptb_char, wikitext2, wikitext103, tinyshakespeare, enwik8, text8),
    a text file or a .npy of token ids (its largest id + 1 is then the vocabulary size)."""
    vocab: dict[str, Any] = field(default_factory=dict)
    """Vocabulary settings (genfeat.data.vocab.VocabConfig fields); empty: the corpus's standard vocabulary."""
    batch_size: int = 16
    """Number of contiguous streams the training split is cut into (the global batch)."""
    tgt_len: int = 70
    """Tokens predicted per segment."""
    ext_len: int = 0
    """Extended context of the original code: tokens of the previous segment re-fed without loss
    (the memory then leaves them out; evaluation feeds no token twice)."""
    shuffle_segments: bool = False
    """Draw segments in random order, without carrying memory (the no-recurrence ablation)."""
    holdout: float = 0.0
    """For a corpus given as one file (a text file or a .npy, whose one split is ``all``): keep this
    last fraction of its tokens as the split ``valid`` and train on the rest (``train``), so
    validation never scores training data. The vocabulary is still built from the whole file."""
    train_split: str = "train"
    valid_split: str = "valid"
    test_split: str | None = "test"
    """Split reported as the test figure at the end (None: none)."""

    def __post_init__(self):
        if self.batch_size < 1 or self.tgt_len < 1 or self.ext_len < 0:
            raise ValueError("data.batch_size and data.tgt_len must be >= 1 and data.ext_len >= 0")
        if not 0.0 <= self.holdout < 1.0:
            raise ValueError(f"data.holdout is a fraction in [0, 1), got {self.holdout}")
        if self.ext_len and self.shuffle_segments:
            raise ValueError("data.ext_len re-feeds the previous segment, which shuffled segments do not have: "
                             "drop data.ext_len or data.shuffle_segments")


@dataclass
class LMEvalConfig(Config):
    """Evaluation settings; attention length may differ from training (§2.1, Table 2.6)."""

    tgt_len: int | None = None
    """Segment length at evaluation (None: data.tgt_len)."""
    mem_len: int | None = None
    """Memory length at evaluation (None: model.mem_len)."""
    clamp_len: int | None = None
    """Largest relative distance at evaluation (None: model.clamp_len)."""
    batch_size: int = 10
    """Contiguous streams the evaluation split is cut into."""
    valid_tokens: int = 0
    """Score only the first N tokens of the validation split during training (0: all)."""

    def __post_init__(self):
        if self.tgt_len is not None and self.tgt_len < 1:
            raise ValueError(f"eval.tgt_len must be >= 1 (or null: data.tgt_len), got {self.tgt_len}")
        if self.mem_len is not None and self.mem_len < 0:
            raise ValueError(f"eval.mem_len must be >= 0 (or null: model.mem_len), got {self.mem_len}")
        if self.clamp_len is not None and self.clamp_len < -1:
            raise ValueError(f"eval.clamp_len must be >= -1 (-1: never clamp; null: model.clamp_len), got {self.clamp_len}")
        if self.batch_size < 1 or self.valid_tokens < 0:
            raise ValueError("eval.batch_size must be >= 1 and eval.valid_tokens >= 0")
        if 0 < self.valid_tokens < 2 * self.batch_size:
            raise ValueError(f"eval.valid_tokens {self.valid_tokens} leaves fewer than 2 tokens in each of the "
                             f"{self.batch_size} streams (eval.batch_size): nothing to score")


@dataclass
class LMObjectiveConfig(Config):
    loss_positions: Literal["full", "half"] = "full"
    """Score every position of a segment or only its second half (Table 2.6)."""


@dataclass
class GenerateConfig(Config):
    """A sample written to OUT/sample.txt after training (length 0: none)."""

    prompt: str = ""
    length: int = 0
    top_k: int = 40
    temperature: float = 1.0

    def __post_init__(self):
        if self.length < 0 or self.top_k < 1 or self.temperature <= 0:
            raise ValueError(f"generate.length must be >= 0, generate.top_k >= 1 and generate.temperature > 0, "
                             f"got {self.length}, {self.top_k}, {self.temperature}")


@dataclass
class TransformerXLRecipe(Config):
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    """TransformerXLConfig fields (n_token is set from the vocabulary)."""
    objective: LMObjectiveConfig = field(default_factory=LMObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: LMEvalConfig = field(default_factory=LMEvalConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    steps: int = 1000
    """Optimizer steps."""

    def __post_init__(self):
        check_model_fields("transformer_xl", self.model)
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def build_model_config(model: dict[str, Any], n_token: int):
    from ..models.transformer_xl import TransformerXLConfig

    if "n_token" in model and model["n_token"] != n_token:
        raise ConfigError(f"model.n_token is {model['n_token']} but the vocabulary has {n_token} types",
                          "drop model.n_token from the recipe: it is set from the vocabulary")
    if model.get("ext_len"):
        # the training stream's ext_len is what the memory must leave out; a model that always leaves
        # tokens out would skip them at every segment boundary of the evaluation, which re-feeds none
        raise ConfigError(f"model.ext_len is {model['ext_len']}: the extended context belongs to the training stream",
                          "set data.ext_len instead and drop model.ext_len")
    return from_dict(TransformerXLConfig, {**model, "n_token": n_token}, "model")


def lm_figures(prefix: str, result: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{k}": int(result[k]) if k == "tokens" else float(result[k])
            for k in ("loss", "ppl", "bpc", "tokens", "seconds")}


@register_method("transformer_xl", TransformerXLRecipe, pretraining=True)
def run(cfg: TransformerXLRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.corpora import CORPORA, load_corpus
    from ..data.lm import LMOrderedStream, LMShuffledStream
    from ..data.vocab import VocabConfig
    from ..eval.lm import evaluate_lm
    from ..models.transformer_xl import TransformerXLLMHeadModel

    vocab_cfg = from_dict(VocabConfig, cfg.data.vocab, "data.vocab") if cfg.data.vocab else None
    if cfg.data.holdout and cfg.data.corpus.partition(":")[0] in CORPORA:
        raise ConfigError(f"data.holdout is set but corpus '{cfg.data.corpus}' has its own splits",
                          "drop data.holdout, or give the corpus as one file")
    corpus = load_corpus(cfg.data.corpus, vocab_cfg=vocab_cfg)
    if cfg.data.holdout:
        tokens = corpus.splits["all"]
        held = int(len(tokens) * cfg.data.holdout)
        if held < 2 or len(tokens) - held < 2:
            raise ConfigError(f"data.holdout {cfg.data.holdout} of {len(tokens)} tokens leaves {held} for validation "
                              f"and {len(tokens) - held} for training", "pick a fraction that leaves both at least 2")
        corpus.splits = {"train": tokens[:-held], "valid": tokens[-held:]}
    for split in (cfg.data.train_split, cfg.data.valid_split, cfg.data.test_split):
        if split is not None and split not in corpus.splits:
            fix = "set data.test_split null: with data.holdout the splits are train and valid" if cfg.data.holdout \
                else "set data.train_split / data.valid_split / data.test_split to existing splits"
            raise ConfigError(f"corpus '{cfg.data.corpus}' has no split '{split}' (it has {sorted(corpus.splits)})", fix)
    vocab = corpus.vocab
    model_cfg = build_model_config(cfg.model, len(vocab))
    if model_cfg.attn_type == "absolute_learned":   # segments index the position table (ext_len re-fed tokens too)
        for name, length in (("data.tgt_len + data.ext_len", cfg.data.tgt_len + cfg.data.ext_len),
                             ("eval.tgt_len", cfg.eval.tgt_len or cfg.data.tgt_len)):
            if length > model_cfg.max_klen:
                raise ConfigError(f"{name} is {length}, but model.max_klen {model_cfg.max_klen} learned positions "
                                  "cover segments of at most that many tokens", "raise model.max_klen or shorten the "
                                  "segments")
    seed_everything(seed)
    model = TransformerXLLMHeadModel(model_cfg)

    train_tokens = corpus.splits[cfg.data.train_split]
    if cfg.data.shuffle_segments:
        stream = LMShuffledStream(train_tokens, cfg.data.batch_size, cfg.data.tgt_len, seed=seed)
    else:
        stream = LMOrderedStream(train_tokens, cfg.data.batch_size, cfg.data.tgt_len, ext_len=cfg.data.ext_len)
    recurrent = model_cfg.mem_len > 0 and not cfg.data.shuffle_segments
    objective = CausalLMObjective(cfg.objective.loss_positions, recurrence=recurrent, ext_len=cfg.data.ext_len)

    eval_tgt = cfg.eval.tgt_len or cfg.data.tgt_len
    eval_mem = cfg.eval.mem_len if cfg.eval.mem_len is not None else model_cfg.mem_len
    eval_clamp = cfg.eval.clamp_len

    def score(m, tokens):
        return evaluate_lm(m, tokens, tgt_len=eval_tgt, mem_len=eval_mem, clamp_len=eval_clamp,
                           batch_size=cfg.eval.batch_size)

    valid = corpus.splits[cfg.data.valid_split]
    valid_subset = valid[: cfg.eval.valid_tokens] if cfg.eval.valid_tokens else valid

    def evaluate(m):
        return lm_figures("valid", score(m, valid_subset))

    # checked before training starts; a kill between a checkpoint's two renames leaves its backup
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None

    def final(m):
        figures = lm_figures("valid", score(m, valid))
        if cfg.data.test_split is not None:
            figures.update(lm_figures("test", score(m, corpus.splits[cfg.data.test_split])))
        return figures

    def write_sample(out: Path) -> None:
        if cfg.generate.length > 0:
            from ..generation import generate

            context = torch.tensor(vocab.encode(cfg.generate.prompt) if cfg.generate.prompt else [0])
            g = torch.Generator().manual_seed(seed)
            ids = generate(model, context, cfg.generate.length, top_k=cfg.generate.top_k,
                           temperature=cfg.generate.temperature, generator=g)
            write_text_atomic(out / "sample.txt", vocab.decode(ids.flatten().tolist()) + "\n")

    return train_and_save(cfg, model, objective, stream, vocab, seed=seed, out_dir=out_dir, progress=progress,
                          resume_from=resume_from, evaluate=evaluate, final=final, on_saved=write_sample)
