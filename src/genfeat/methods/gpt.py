"""GPT-1 pretraining (seed paper §3.1): one phase of causal LM (L1, Eq. 1) on contiguous text.

Recipe: ``method: gpt`` plus the fields of :class:`GPTRecipe`. ``architecture`` picks the network:
``gpt`` (genfeat.models.gpt, the Transformer decoder) or ``lstm_lm`` (genfeat.models.lstm_lm, the
"LSTM instead of Transformer" row of the seed paper's Table 5); the model section takes the fields
of its config, ``n_token`` coming from the tokenizer.

Data: the text is read as documents (genfeat.data.documents: ``imdb:train``, ``wikitext2:SPLIT``,
``ptb:SPLIT``, a text file or a folder; the data section is that of the BERT and XLNet recipes),
tokenised with a BPE tokenizer (GPT-1's, genfeat.data.tokenizers; trained on the training text into
OUT/tokenizer when none is given), joined into one stream (documents follow each other without a
separator token: GPT-1's vocabulary has none), and cut into ``batch_size`` contiguous rows and those
into blocks of ``seq_len`` tokens; a step reads one block of every row, blocks in a seeded random
order (:class:`~genfeat.data.lm.LMShuffledStream`), each block on its own: the model sees at most
``seq_len`` tokens of context, as GPT-1 (no memory across blocks).

Result: ``valid_loss`` is the causal-LM cross-entropy (nats per BPE token) of the held-out text
read as consecutive blocks of ``seq_len`` tokens, each without earlier context; ``valid_ppl`` its
exponential. Both models of one tokenizer compare directly; pass the same ``data.tokenizer`` (e.g.
the OUT/tokenizer of a first run) to compare runs exactly (BPE training breaks ties between equally
frequent merges in hash order). With ``zero_shot.task`` every evaluation also scores GPT-1's
zero-shot heuristic (genfeat.eval.zero_shot, seed paper Fig. 2 right) and logs it to metrics.jsonl.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from torch import Tensor, nn

from ..config import Config, from_dict
from ..data.documents import PretrainingTextConfig
from ..data.lm import LMShuffledStream, iter_lm_segments
from ..errors import ConfigError
from ..eval.held_out import evaluate_objective
from ..framework import OptimConfig, TrainConfig, seed_everything
from ..framework.checkpoint import resume_dir
from ..hub import ARCHITECTURES, check_model_fields, check_resume_vocabulary
from ..objectives.causal_lm import CausalLMObjective
from ..runner import register_method
from .pretraining import train_and_save


@dataclass
class GPTDataConfig(PretrainingTextConfig):
    """The pretraining text, its BPE tokenizer and the blocks cut from it (``seq_len`` tokens a block, at
    most the model's max_position; ``batch_size`` blocks a step)."""

    lowercase: bool = True
    """Lower-case the text in the tokenizer trained when ``tokenizer`` is None (as GPT-1's)."""
    valid_tokens: int = 0
    """Evaluate on the first this many held-out tokens during training (0: all); the final figures use all."""

    def __post_init__(self):
        super().__post_init__()
        if self.valid_tokens < 0:
            raise ValueError(f"valid_tokens must be >= 0, got {self.valid_tokens}")


@dataclass
class ZeroShotConfig(Config):
    """GPT-1's zero-shot heuristic scored at every evaluation (genfeat.eval.zero_shot)."""

    task: str | None = None
    """A task of genfeat.eval.zero_shot.ZERO_SHOT_TASKS (sst2); None: off."""
    split: str = "dev"
    """Split of the task scored."""
    examples: int = 0
    """Score the first this many examples (0: all)."""
    batch_size: int = 32
    """Sequences per forward pass."""

    def __post_init__(self):
        from ..eval.zero_shot import ZERO_SHOT_TASKS

        if self.task is not None and self.task not in ZERO_SHOT_TASKS:
            raise ConfigError(f"zero_shot.task '{self.task}' has no zero-shot heuristic",
                              f"use one of {sorted(ZERO_SHOT_TASKS)} or null")
        if self.examples < 0 or self.batch_size < 1:
            raise ValueError(f"zero_shot.examples ({self.examples}) must be >= 0 and batch_size ({self.batch_size}) >= 1")


@dataclass
class GPTRecipe(Config):
    """Causal-LM pretraining of a GPT-1 decoder or an LSTM LM of the same size."""

    architecture: Literal["gpt", "lstm_lm"] = "gpt"
    """gpt: the Transformer decoder; lstm_lm: the LSTM language model (Table 5's LSTM row)."""
    data: GPTDataConfig = field(default_factory=GPTDataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    """Fields of the architecture's config (GPTConfig or LSTMLMConfig), without n_token."""
    zero_shot: ZeroShotConfig = field(default_factory=ZeroShotConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=2.5e-4, weight_decay=0.01, warmup_steps=100,
                                                                   decay="cosine"))
    train: TrainConfig = field(default_factory=TrainConfig)
    steps: int = 1000
    """Optimizer steps."""

    def __post_init__(self):
        for key in ("n_token", "n_special"):
            if key in self.model:
                raise ConfigError(f"model.{key} is set in the recipe",
                                  f"drop model.{key}: the tokenizer sets n_token, fine-tuning adds special tokens")
        check_model_fields(self.architecture, self.model)
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def build_lm(architecture: str, model: dict[str, Any], n_token: int) -> nn.Module:
    """The causal LM ``architecture`` (a genfeat.hub name) with the recipe's model fields and ``n_token``."""
    module, cfg_cls, model_cls = ARCHITECTURES[architecture]
    mod = importlib.import_module(module)
    return getattr(mod, model_cls)(from_dict(getattr(mod, cfg_cls), {**model, "n_token": n_token}, "model"))


def causal_lm_loss(model: nn.Module, tokens: Tensor, *, seq_len: int, batch_size: int) -> dict[str, float]:
    """Causal-LM cross-entropy (``valid_loss``, nats per token), its perplexity (``valid_ppl``, capped at
    exp(50) as every genfeat perplexity) and the predicted tokens of ``tokens`` cut into ``batch_size``
    contiguous rows read as consecutive blocks of ``seq_len`` tokens, each block without earlier context."""
    lm = evaluate_objective(model, CausalLMObjective(recurrence=False), iter_lm_segments(tokens, batch_size, seq_len)).lm()
    return {"valid_loss": lm["loss"], "valid_ppl": lm["ppl"], "valid_tokens": lm["tokens"]}


@register_method("gpt", GPTRecipe, pretraining=True)
def run(cfg: GPTRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.documents import document_tokenizer, encode_documents, read_documents

    data = cfg.data
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    docs = read_documents(data.train_text, data.max_documents)
    vocab = document_tokenizer(docs, "bpe", data.vocab_size, data.lowercase, data.tokenizer, out_dir, resume,
                               cfg.train.device)
    check_resume_vocabulary(vocab, resume_from)
    seed_everything(seed)
    model = build_lm(cfg.architecture, cfg.model, len(vocab))
    if data.seq_len > model.config.max_position:
        raise ConfigError(f"data.seq_len {data.seq_len} is longer than model.max_position {model.config.max_position}",
                          "lower data.seq_len or raise model.max_position")
    train = encode_documents(docs, vocab)[0]
    valid = encode_documents(read_documents(data.valid_text, data.valid_documents), vocab)[0]
    stream = LMShuffledStream(train, data.batch_size, data.seq_len, seed=seed, drop_last_partial=True)
    zero_shot = None
    if cfg.zero_shot.task is not None:
        from ..eval.zero_shot import ZeroShotEvaluator

        zero_shot = ZeroShotEvaluator(vocab, cfg.zero_shot.task, cfg.zero_shot.split, limit=cfg.zero_shot.examples,
                                      max_len=model.config.max_position, batch_size=cfg.zero_shot.batch_size)

    def evaluate(m, tokens=valid[: data.valid_tokens] if data.valid_tokens else valid):
        figures = causal_lm_loss(m, tokens, seq_len=data.seq_len, batch_size=data.batch_size)
        if zero_shot is not None:
            figures.update(zero_shot(m))
        return figures

    return train_and_save(cfg, model, CausalLMObjective(recurrence=False), stream, vocab, seed=seed, out_dir=out_dir,
                          progress=progress, resume_from=resume_from, evaluate=evaluate,
                          final=lambda m: evaluate(m, valid), train_tokens=int(train.numel()))
