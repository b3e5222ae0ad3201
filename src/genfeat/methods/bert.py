"""BERT pretraining (the masked-LM baseline of thesis Table 2.19): one phase of masked LM (+ optional NSP).

Recipe: ``method: bert`` plus the fields of :class:`BertRecipe`. The model section takes the fields
of :class:`genfeat.models.bert.BertConfig`; ``n_token`` and ``pad_id`` come from the tokenizer and
``nsp`` from the objective section.

Data: the text (a registered corpus split, a file or a folder of documents) is tokenised without
special tokens, its non-blank lines joined into one stream and cut into examples of ``seq_len``
tokens, [CLS] and [SEP] included, so no example is padded. With NSP each example's body is cut at
a random point into segments A and B, and B is replaced, for half the examples, by the start of
another example's body ("B is not the next text", label 1); the cut falls between subwords, not
between sentences (a simplification of BERT's sentence-pair pipeline). Which tokens are masked is
drawn anew at every step (:class:`~genfeat.objectives.masked_lm.MaskedLMObjective`).

Result: ``valid_loss`` is the masked-LM cross-entropy (nats per masked token, NSP left out) of the
held-out text under a masking drawn from a fixed seed, so it compares across steps, runs and recipes;
``valid_accuracy`` the fraction of masked tokens predicted exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..config import Config, from_dict, to_dict
from ..errors import ConfigError, DataError
from ..framework import OptimConfig, TrainConfig, Trainer, one_phase, seed_everything
from ..framework.trainer import to_device
from ..framework.checkpoint import resume_dir
from ..framework.stream import TensorStream
from ..hub import VOCAB_FILE, checkpoint_config, save_pretrained
from ..io import write_json_atomic
from ..objectives.masked_lm import MaskedLMConfig, MaskedLMObjective
from ..runner import register_method

EVAL_MASK_SEED = 1234
"""Seed of the masking of the held-out text (the same for every evaluation)."""


@dataclass
class BertDataConfig(Config):
    """The pretraining text, its tokenizer and the examples cut from it."""

    train_text: str = "wikitext2:train"
    """Training text: a registered corpus file NAME:SPLIT (wikitext2:train, ptb:train, ...), a text
    file, or a folder of text files (documents)."""
    valid_text: str = "wikitext2:valid"
    """Held-out text, in the same forms."""
    tokenizer: str | None = None
    """A tokenizer folder (``genfeat tokenizer train`` or Hugging Face's tokenizer.json / vocab.txt /
    spiece.model); None: train a WordPiece tokenizer on ``train_text`` (written to OUT/tokenizer)."""
    vocab_size: int = 8000
    """Size of the WordPiece tokenizer trained when ``tokenizer`` is None."""
    lowercase: bool = False
    """Lower-case the text in the tokenizer trained when ``tokenizer`` is None."""
    seq_len: int = 128
    """Tokens per example, special tokens included (at most the model's max_position)."""
    batch_size: int = 8
    """Examples per step."""
    valid_examples: int = 0
    """Evaluate on the first this many held-out examples during training (0: all); the final figures use all."""

    def __post_init__(self):
        if self.seq_len < 5 or self.batch_size < 1 or self.valid_examples < 0 or self.vocab_size < 10:
            raise ValueError(f"seq_len ({self.seq_len}) must be >= 5, batch_size ({self.batch_size}) >= 1, "
                             f"valid_examples ({self.valid_examples}) >= 0 and vocab_size ({self.vocab_size}) >= 10")


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


def make_examples(ids: list[int], seq_len: int, special: dict[str, int], nsp: bool,
                  generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Cut a token stream into [CLS] body [SEP] examples, or [CLS] A [SEP] B [SEP] pairs with NSP labels.

    Args:
        ids: the text's token ids, without special tokens.
        seq_len: tokens per example, special tokens included.
        special: ids of the ``cls`` and ``sep`` tokens.
        nsp: build sentence pairs (module doc).
        generator: draws the cut points, which pairs are swapped and their partners.
    Returns:
        ``input_ids`` and ``token_type_ids`` [n, seq_len]; with ``nsp`` also ``next_sentence_label`` [n].
    """
    body = seq_len - (3 if nsp else 2)
    n = len(ids) // body
    if n < 1:
        raise DataError(f"the text has {len(ids)} tokens, fewer than one example of {seq_len}",
                        "use a longer text or a smaller data.seq_len")
    chunks = torch.tensor(ids[:n * body], dtype=torch.long).view(n, body)
    cls = torch.full((n, 1), special["cls"])
    sep = torch.full((n, 1), special["sep"])
    if not nsp:
        input_ids = torch.cat([cls, chunks, sep], 1)
        return {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids)}
    cut = torch.randint(1, body, (n,), generator=generator).tolist()              # len(A) per example
    # B is replaced for half the examples, by the start of any other example's body
    swapped = ((torch.rand(n, generator=generator) < 0.5) & (n > 1)).tolist()
    partner = ((torch.arange(n) + torch.randint(1, max(n, 2), (n,), generator=generator)) % n).tolist()
    rows, types = [], []
    for i, c in enumerate(cut):
        b = chunks[partner[i], :body - c] if swapped[i] else chunks[i, c:]
        rows.append(torch.cat([cls[0], chunks[i, :c], sep[0], b, sep[0]]))
        types.append(torch.tensor([0] * (c + 2) + [1] * (body - c + 1)))
    return {"input_ids": torch.stack(rows), "token_type_ids": torch.stack(types),
            "next_sentence_label": torch.tensor(swapped, dtype=torch.long)}


def _token_ids(path: Path, vocab) -> list[int]:
    from ..data.tokenizers import corpus_lines

    ids: list[int] = []
    for line in corpus_lines(path):
        ids.extend(vocab.encode(line))
    return ids


def _load_or_train_tokenizer(data: BertDataConfig, train_path: Path, out_dir: Path | None, resume: bool):
    """``data.tokenizer``; else the one trained into OUT/tokenizer (read back when resuming), or trained in a temporary folder."""
    import tempfile

    from ..data.tokenizers import TokenizerConfig, load_tokenizer, train_tokenizer

    if data.tokenizer is not None:
        return load_tokenizer(data.tokenizer)
    if resume and out_dir is not None and (Path(out_dir) / "tokenizer").is_dir():
        return load_tokenizer(Path(out_dir) / "tokenizer")
    tok_cfg = TokenizerConfig("wordpiece", data.vocab_size, data.lowercase)
    if out_dir is not None:
        return train_tokenizer(tok_cfg, train_path, Path(out_dir) / "tokenizer")
    with tempfile.TemporaryDirectory() as tmp:
        return train_tokenizer(tok_cfg, train_path, Path(tmp) / "tokenizer")


def masked_lm_figures(model, objective: MaskedLMObjective, examples: dict[str, torch.Tensor], batch_size: int,
                      limit: int = 0) -> dict[str, float]:
    """Masked-LM loss and accuracy of ``examples`` (the first ``limit``; 0: all), in batches, without gradients."""
    n = examples["input_ids"].shape[0]
    n = min(n, limit) if limit else n
    device = next(model.parameters()).device
    loss = correct = count = 0.0
    with torch.no_grad():
        for start in range(0, n, batch_size):
            batch = to_device({k: v[start:start + batch_size] for k, v in examples.items()}, device)
            out = objective(model, batch)
            loss += float(out.loss_sum)
            correct += out.logs["correct"]
            count += float(out.count)
    return {"valid_loss": loss / max(count, 1.0), "valid_accuracy": correct / max(count, 1.0), "valid_masked": int(count)}


@register_method("bert", BertRecipe)
def run(cfg: BertRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from ..data.tokenizers import special_ids, word_start
    from ..models.bert import BertConfig, BertForMaskedLM

    data = cfg.data
    train_path, valid_path = text_path(data.train_text), text_path(data.valid_text)
    vocab = _load_or_train_tokenizer(data, train_path, out_dir, resume)
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
    nsp = cfg.objective.nsp
    train = make_examples(_token_ids(train_path, vocab), data.seq_len, special, nsp, torch.Generator().manual_seed(seed))
    valid = make_examples(_token_ids(valid_path, vocab), data.seq_len, special, nsp,
                          torch.Generator().manual_seed(EVAL_MASK_SEED))
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

    train_cfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    trainer = Trainer(model, one_phase(objective, TensorStream(train, data.batch_size, seed=seed), cfg.steps, cfg.optim),
                      train_cfg, evaluate=evaluate, out_dir=out_dir,
                      checkpoint_config=checkpoint_config(model, recipe=to_dict(cfg)),
                      save_extra=lambda d: vocab.save(d / VOCAB_FILE), resume_from=resume_from)
    t0 = time.time()
    result = trainer.fit()
    train_seconds = time.time() - t0
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": train_seconds, "interrupted": 1.0}
    model.eval()
    figures: dict[str, float] = {"steps": result.steps, "train_seconds": train_seconds,
                                 "params": sum(p.numel() for p in model.parameters()),
                                 "train_examples": int(train["input_ids"].shape[0]), **evaluate(model, 0)}
    if out_dir is not None and trainer.dist.is_main:
        save_pretrained(model, Path(out_dir) / "final", vocab)
        write_json_atomic(Path(out_dir) / "results.json", figures)
    return figures
