"""ELMo biLM pretraining (Peters et al. 2018, §3.1): one phase of the forward + backward LM objective.

Recipe: ``method: elmo`` plus the fields of :class:`ElmoRecipe`. The model section takes the fields
of :class:`genfeat.models.elmo.ElmoConfig`; ``n_token`` comes from the word vocabulary and ``n_char``
from the character vocabulary built from its words (genfeat.data.chars).

Data: the training text (a registered corpus split such as ``ptb:train``, or a text file) is read
as words with an ``<eos>`` per line, its word vocabulary built (``data.vocab``), and the token stream
cut into independent windows of ``seq_len`` tokens (ELMo's 20-token unroll, without carrying the LSTM
state from one window to the next). The held-out text is encoded with the same vocabulary. Every
word is spelled from its vocabulary entry, so an out-of-vocabulary word of the pretraining text (the
vocabulary's ``<unk>``) is also spelled ``<unk>`` at the input: the LM loss predicts vocabulary words.
Task texts are read differently: every word as it is written (:class:`genfeat.models.elmo.SpelledWordVocab`).

Result: ``valid_loss`` is the sum of the forward and backward LMs' cross-entropies (nats per token
pair, the quantity Eq. 1 of the paper maximises the negative of); ``valid_forward_loss`` /
``valid_backward_loss`` each direction's (nats per token), ``valid_forward_ppl`` /
``valid_backward_ppl`` their perplexities. The checkpoint OUT/final holds the biLM (with the spelling
of every vocabulary word) and the word vocabulary; :func:`load_elmo` reads both and rebuilds the
character vocabulary, which spells words outside the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import Config, from_dict
from ..errors import ConfigError, DataError
from ..eval.held_out import evaluate_objective, row_batches
from ..eval.metrics import perplexity
from ..framework import OptimConfig, TrainConfig, seed_everything
from ..framework.checkpoint import resume_dir
from ..framework.stream import TensorStream
from ..hub import check_model_fields, load_checkpoint
from ..models.elmo import ElmoBiLM, ElmoConfig, SpelledWordVocab, char_vocab_for
from ..objectives.bilm import BiLMObjective
from ..runner import register_method
from .pretraining import train_and_save


@dataclass
class ElmoDataConfig(Config):
    """The pretraining text, its word vocabulary and the windows cut from it."""

    train_text: str = "ptb:train"
    """Training text: a registered word-level corpus split NAME:SPLIT (ptb:train, wikitext2:train) or a text file."""
    valid_text: str = "ptb:valid"
    """Held-out text, in the same forms (encoded with the training text's vocabulary)."""
    vocab: dict[str, Any] = field(default_factory=dict)
    """Word vocabulary settings (genfeat.data.vocab.VocabConfig fields, kind word); empty: the corpus's
    standard one. A text file whose held-out words are not all in the training text needs ``min_freq: 2``
    or ``max_size`` (which add ``<unk>``)."""
    seq_len: int = 20
    """Tokens per window (ELMo's unroll length)."""
    batch_size: int = 32
    """Windows per step."""
    valid_windows: int = 0
    """Evaluate on the first this many held-out windows during training (0: all); the final figures use all."""

    def __post_init__(self):
        if self.seq_len < 2 or self.batch_size < 1 or self.valid_windows < 0:
            raise ValueError(f"data.seq_len ({self.seq_len}) must be >= 2 (a pair of neighbours), data.batch_size "
                             f"({self.batch_size}) >= 1 and data.valid_windows ({self.valid_windows}) >= 0")
        if self.vocab.get("kind", "word") != "word":
            raise ValueError(f"data.vocab.kind is {self.vocab['kind']!r}: the biLM predicts words, which the "
                             "character CNN spells; drop data.vocab.kind")


@dataclass
class ElmoRecipe(Config):
    """biLM pretraining of an ELMo model."""

    data: ElmoDataConfig = field(default_factory=ElmoDataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    """Fields of genfeat.models.elmo.ElmoConfig (without n_token and n_char)."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3))
    train: TrainConfig = field(default_factory=TrainConfig)
    steps: int = 1000
    """Optimizer steps."""

    def __post_init__(self):
        for key in ("n_token", "n_char"):
            if key in self.model:
                raise ConfigError(f"model.{key} is set in the recipe",
                                  f"drop model.{key}: it comes from the vocabulary")
        for key in ("task_mix", "finetune_bilm"):   # fine-tuning settings: task_mix keeps the biLM in eval mode
            if key in self.model:
                raise ConfigError(f"model.{key} is set in an ELMo pretraining recipe, where it does not apply (with "
                                  "task_mix the biLM would train without dropout)",
                                  f"drop model.{key}: the fine-tuning recipe (method: finetune, backbone elmo) sets it")
        check_model_fields("elmo", self.model)
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def windows(tokens: torch.Tensor, seq_len: int, what: str) -> torch.Tensor:
    """Cut a 1-D token stream into consecutive windows [n, seq_len] (the remainder is dropped)."""
    n = tokens.numel() // seq_len
    if n < 1:
        raise DataError(f"the {what} has {tokens.numel()} tokens, fewer than one window of {seq_len}",
                        "use a longer text or a smaller data.seq_len")
    return tokens[: n * seq_len].view(n, seq_len)


def bilm_figures(model, examples: torch.Tensor, batch_size: int, limit: int = 0) -> dict[str, float]:
    """Both directions' cross-entropy on ``examples`` [n, t] word ids (the first ``limit``; 0: all), without gradients:
    per (word, context) pair, each direction's loss and perplexity (capped at exp(50)), their sum ``valid_loss``."""
    totals = evaluate_objective(model, BiLMObjective(), row_batches({"word_ids": examples}, batch_size, limit))
    fwd, bwd, pairs = totals.logs.get("forward", 0.0), totals.logs.get("backward", 0.0), totals.count
    forward_ppl, backward_ppl = perplexity(fwd, pairs), perplexity(bwd, pairs)   # DataError when no pairs
    f, b = fwd / pairs, bwd / pairs
    return {"valid_loss": f + b, "valid_forward_loss": f, "valid_backward_loss": b,
            "valid_forward_ppl": forward_ppl, "valid_backward_ppl": backward_ppl, "valid_pairs": int(pairs)}


def load_elmo(path: str | Path):
    """An ELMo checkpoint (OUT/final or OUT/last) as ``(biLM, word vocabulary, CharVocab)``; the biLM in eval mode.

    The word vocabulary is the one saved with it (words outside it are ``<unk>``, as the LM loss reads them);
    ``hub.load_checkpoint`` gives the :class:`~genfeat.models.elmo.SpelledWordVocab` that spells every word."""
    model, vocab = load_checkpoint(path, architecture="elmo", require_vocab=True)
    if not isinstance(vocab, SpelledWordVocab):
        vocab = model.text_vocabulary(vocab)
    return model, vocab.base, vocab.chars


@register_method("elmo", ElmoRecipe, pretraining=True)
def run(cfg: ElmoRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.corpora import load_corpus, load_split_corpus
    from ..data.vocab import VocabConfig

    data = cfg.data
    vocab_cfg = from_dict(VocabConfig, data.vocab, "data.vocab") if data.vocab else None
    train_corpus = load_corpus(data.train_text, vocab_cfg=vocab_cfg)
    vocab = train_corpus.vocab
    # a registered corpus named without a split trains on its training split
    train_tokens = train_corpus.splits.get("train", next(iter(train_corpus.splits.values())))
    train = windows(train_tokens, data.seq_len, f"training text '{data.train_text}'")
    (valid_tokens,) = load_split_corpus(data.valid_text, vocab).splits.values()
    chars = char_vocab_for(vocab, cfg.model.get("max_chars", ElmoConfig.max_chars))
    model_cfg = from_dict(ElmoConfig, {**cfg.model, "n_token": len(vocab), "n_char": len(chars)}, "model")
    valid = windows(valid_tokens, data.seq_len, f"held-out text '{data.valid_text}'")
    if train.shape[0] < data.batch_size:
        raise DataError(f"the training text gives {train.shape[0]} windows of {data.seq_len} tokens, fewer than "
                        f"data.batch_size {data.batch_size}", "use a longer text or a smaller data.batch_size")
    seed_everything(seed)
    model = ElmoBiLM(model_cfg)
    model.set_spelling(chars.spell_table(vocab.symbols))
    objective = BiLMObjective()

    def evaluate(m, limit=data.valid_windows):
        return bilm_figures(m, valid, data.batch_size, limit)

    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    stream = TensorStream({"word_ids": train}, data.batch_size, seed=seed, field="data.batch_size")
    return train_and_save(cfg, model, objective, stream, vocab, seed=seed, out_dir=out_dir, progress=progress,
                          resume_from=resume_from, evaluate=evaluate, final=lambda m: evaluate(m, 0),
                          train_windows=int(train.shape[0]))
