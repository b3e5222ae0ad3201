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
- ``gen``, ``gen_gan``, ``gen_dual``, ``gen_domain``, ``gdan``: U_G written by the question generator G
  (Algorithm 1). G's part (GDAN_G's models/question_gen.py and its objective) is not wired here yet, so
  running these settings stops with a ConfigError that says so (their recipes parse).

Each D step minimises the sum of the terms' mean losses with one Adam optimizer; an evaluation every
``train.eval_every`` steps scores dev F1 (D reads dev questions with d_true when tags are on), and the
parameters of the best dev F1 are kept (model selection on dev only). The figures of a run: ``test_f1``,
``test_em``, ``dev_f1``, ``dev_em`` (SQuAD v1.1's official EM/F1 on the word span decoded by
:func:`best_spans`, as fractions), the data sizes and ``train_seconds``; ``genfeat run --seeds N`` adds
their means over seeds (``test_f1_mean`` ...).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Sequence

import torch
from torch import Tensor, nn

from ..config import Config, to_dict
from ..data.answer_chunks import ChunkConfig, extract_many
from ..data.gdan import (CollatedStream, GDANData, GDANDataConfig, QAExample, answer_spans, build_vocab,
                         collate_qa, context_questions, load_gdan_data)
from ..data.vocab import SymbolVocab
from ..errors import ConfigError
from ..eval.metrics import squad_scores
from ..framework import OptimConfig, TrainConfig, Trainer
from ..framework.checkpoint import resume_dir
from ..framework.schedule import OptimSpec, Phase, Stage, Term
from ..io import write_json_atomic
from ..models.ga_reader import GAReader, GAReaderConfig
from ..objectives.span_qa import D_GEN, D_TRUE, SpanQAObjective, read, reader
from ..runner import register_method

Setting = Literal["sl", "context", "context_domain", "gen", "gen_gan", "gen_dual", "gen_domain", "gdan"]
GENERATOR_SETTINGS = ("gen", "gen_gan", "gen_dual", "gen_domain", "gdan")
TAGGED_SETTINGS = ("context_domain", "gen_gan", "gen_domain", "gdan")


@dataclass
class GDANRecipe(Config):
    """One row of Table 3.4 at one labelling rate. Defaults: a CPU-sized GA reader (3 layers, 64 units per
    direction), Adam lr 1e-3, batch 32, dev F1 every 250 steps with the best kept."""

    setting: Setting = "sl"
    """Table 3.4's row (module docstring)."""
    data: GDANDataConfig = field(default_factory=GDANDataConfig)
    """Split, labelling rate and unlabelled text."""
    reader: GAReaderConfig = field(default_factory=GAReaderConfig)
    """D (vocab_size is set from the vocabulary)."""
    min_freq: int = 2
    """Words rarer than this on the training side map to <unk>."""
    batch_size: int = 32
    """Labelled questions per D step."""
    unlabelled_batch: int = 32
    """Pseudo-questions (Context) or generated questions per D step."""
    steps: int = 3000
    """D optimizer steps."""
    d_optim: OptimConfig = field(default_factory=lambda: OptimConfig(name="adam", lr=1e-3))
    """D's optimizer."""
    context_window: int = 5
    """W of the Context baseline: words taken on each side of the answer chunk."""
    chunks: ChunkConfig = field(default_factory=ChunkConfig)
    """Answer-chunk extraction from the unlabelled paragraphs (spaCy when installed, else rules)."""
    chunks_per_paragraph: int = 5
    """Answer chunks drawn per unlabelled paragraph (by the run's seed)."""
    max_unlabelled: int = 0
    """Use only the first this many unlabelled paragraphs (0: all; chunk extraction with spaCy takes
    about 0.15 s per paragraph on the loaded 2-core VM)."""
    max_answer_words: int = 15
    """Longest predicted answer span in words."""
    eval_batch: int = 64
    """Questions per evaluation batch."""
    max_eval: int = 0
    """Score only the first this many dev and test questions (0: all; debug recipes)."""
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        device="cpu", threads=1, log_every=50, eval_every=250, early_stop_metric="dev_f1", early_stop_mode="max",
        keep_best=True))
    """The loop (early_stop_metric dev_f1 and keep_best select the model on dev)."""

    def __post_init__(self):
        for name in ("min_freq", "batch_size", "unlabelled_batch", "context_window", "chunks_per_paragraph",
                     "max_answer_words", "eval_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if min(self.steps, self.max_unlabelled, self.max_eval) < 0:
            raise ValueError("steps, max_unlabelled and max_eval must be >= 0")


def best_spans(start_logits: Tensor, end_logits: Tensor, max_words: int) -> tuple[Tensor, Tensor]:
    """argmax over s <= e < s + max_words of start_logits[s] + end_logits[e] per row: (b, n) each -> (b,), (b,)."""
    n = start_logits.shape[1]
    pos = torch.arange(n, device=start_logits.device)
    valid = (pos[None, :] >= pos[:, None]) & (pos[None, :] < pos[:, None] + max_words)          # (n, n): (s, e)
    scores = (start_logits[:, :, None] + end_logits[:, None, :]).masked_fill(~valid, float("-inf"))
    top = scores.flatten(1).argmax(1)
    return top // n, top % n


@torch.no_grad()
def predict(model: nn.Module, examples: Sequence[QAExample], vocab: SymbolVocab, domain: int | None,
            batch: int = 64, max_words: int = 15) -> list[str]:
    """D's answer text for each question (the paragraph's characters of the best word span)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    texts = []
    for i in range(0, len(examples), batch):
        chunk = examples[i:i + batch]
        inputs = {k: v.to(device) for k, v in collate_qa(chunk, vocab).items()}
        out = read(model, inputs, domain)
        starts, ends = best_spans(out.start_logits.float(), out.end_logits.float(), max_words)
        texts += [ex.paragraph.span_text(s, e) for ex, s, e in zip(chunk, starts.tolist(), ends.tolist())]
    model.train(was)
    return texts


def score(model: nn.Module, examples: Sequence[QAExample], vocab: SymbolVocab, domain: int | None,
          batch: int = 64, max_words: int = 15) -> dict[str, float]:
    """SQuAD EM and F1 (fractions) of D's predictions against every gold answer."""
    s = squad_scores(predict(model, examples, vocab, domain, batch, max_words), [ex.answers for ex in examples])
    return {"em": s["exact_match"], "f1": s["squad_f1"]}


def unlabelled_questions(cfg: GDANRecipe, data: GDANData, seed: int) -> list[QAExample]:
    """The Context pseudo-questions of the (first ``max_unlabelled``) unlabelled paragraphs."""
    paragraphs = data.unlabelled[:cfg.max_unlabelled or None]
    spans = answer_spans(paragraphs, extract_many([p.text for p in paragraphs], cfg.chunks))
    return context_questions(paragraphs, spans, cfg.context_window, cfg.chunks_per_paragraph, seed)


def build(cfg: GDANRecipe, data: GDANData, vocab: SymbolVocab, seed: int) -> tuple[nn.ModuleDict, list[Phase], int]:
    """D in a ModuleDict (``d``) and the schedule of ``cfg.setting``.

    Returns:
        (model, phases, number of unlabelled pseudo-questions).
    """
    if cfg.setting in GENERATOR_SETTINGS:
        raise ConfigError(f"setting '{cfg.setting}' needs the question generator G, which the gdan method "
                          "does not wire in yet", "use setting sl, context or context_domain (G: issue 14, part 2)")
    torch.manual_seed(seed)
    model = nn.ModuleDict({"d": GAReader(replace(cfg.reader, vocab_size=len(vocab)))})
    tagged = cfg.setting in TAGGED_SETTINGS
    collate = lambda ex: collate_qa(ex, vocab)  # noqa: E731
    terms = [Term(SpanQAObjective(D_TRUE if tagged else None), CollatedStream(data.labelled, collate, cfg.batch_size,
                                                                              seed=seed))]
    n_unl = 0
    if cfg.setting != "sl":
        pseudo = unlabelled_questions(cfg, data, seed)
        n_unl = len(pseudo)
        terms.append(Term(SpanQAObjective(D_GEN if tagged else None, "qa_unl"),
                          CollatedStream(pseudo, collate, cfg.unlabelled_batch, seed=seed + 1)))
    phase = Phase("train", cfg.steps, [Stage(terms, "d")], {"d": OptimSpec(cfg.d_optim, lambda m: reader(m).parameters())})
    return model, [phase], n_unl


@register_method("gdan", GDANRecipe)
def run(cfg: GDANRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    data = load_gdan_data(cfg.data, seed)
    vocab = build_vocab(data, cfg.min_freq)
    model, phases, n_unl = build(cfg, data, vocab, seed)
    domain = D_TRUE if cfg.setting in TAGGED_SETTINGS else None
    dev, test = data.dev[:cfg.max_eval or None], data.test[:cfg.max_eval or None]
    evaluate = lambda m: {f"dev_{k}": v for k, v in score(m, dev, vocab, domain, cfg.eval_batch,  # noqa: E731
                                                           cfg.max_answer_words).items()}
    tcfg = replace(cfg.train, seed=seed, progress=cfg.train.progress and progress)
    resume_from = resume_dir(Path(out_dir) / "last") if resume else None
    ckpt = {"architecture": "ga_reader", "model": to_dict(replace(cfg.reader, vocab_size=len(vocab))),
            "recipe": to_dict(cfg)}
    save_vocab = lambda d: vocab.save(Path(d) / "vocab.json")  # noqa: E731
    trainer = Trainer(model, phases, tcfg, evaluate, out_dir, checkpoint_config=ckpt, save_extra=save_vocab,
                      resume_from=resume_from)
    t0 = time.time()
    result = trainer.fit()
    seconds = time.time() - t0
    if result.interrupted:
        return {"steps": result.steps, "train_seconds": seconds, "interrupted": 1.0}
    dev_scores = score(model, dev, vocab, domain, cfg.eval_batch, cfg.max_answer_words)
    test_scores = score(model, test, vocab, domain, cfg.eval_batch, cfg.max_answer_words)
    figures = {"test_f1": test_scores["f1"], "test_em": test_scores["em"], "dev_f1": dev_scores["f1"],
               "dev_em": dev_scores["em"], "labelled": len(data.labelled), "unlabelled_questions": n_unl,
               "vocab": len(vocab), "steps": result.steps, "train_seconds": seconds}
    if out_dir is not None:
        write_json_atomic(Path(out_dir) / "results.json", figures)
    return figures
