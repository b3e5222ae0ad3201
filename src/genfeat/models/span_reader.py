"""A pretrained genfeat encoder (BERT or XLNet) with a span head as GDAN's discriminator D, in place of the
gated-attention reader (beyond the thesis: the future work of §3.2 named in issue 14).

Axis legend: b questions, w windows (every question's windows, together), L window tokens, n paragraph
words, d the backbone's width.

D reads a question and its paragraph as the backbone's pair input (BERT ``[CLS] question [SEP] paragraph
[SEP]``, XLNet ``paragraph <sep> question <sep> <cls>``); a paragraph longer than a window is read as
several windows (:class:`genfeat.data.gdan.WindowEncoder`). The backbone and the span head are
:class:`genfeat.models.heads.FineTuneModel`'s (its adapters and :class:`~genfeat.models.heads.TaskHead`), so
the head scores every subword. Word i of the paragraph takes the start score of its first subword and the
end score of its last subword, in the window where the word has the most context (BERT's rule for
overlapping windows), so D's output is the GA reader's: a start and an end score per paragraph word (b, n),
-inf at padding. Everything downstream (the span loss of :mod:`genfeat.objectives.span_qa`, span decoding,
G's reward) is shared with the GA reader.

Domain tags (thesis §3.2.3) are learned embeddings: one vector per tag (d_true, d_gen; 2 × d, initialised
as the backbone initialises its embeddings) added to the input embedding of one extra token that the
collate function appends to a tagged question (the tokenizer's mask token, which fine-tuning inputs
otherwise never hold). An untagged batch has no such token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..config import Config
from ..errors import ConfigError
from .heads import FineTuneConfig, FineTuneModel, HeadConfig


def _span_finetune() -> FineTuneConfig:
    return FineTuneConfig(task="gdan", head=HeadConfig(kind="span"))


@dataclass
class SpanReaderConfig(Config):
    """A backbone with a span head, read in windows (``finetune.max_len`` tokens, paragraph windows
    ``finetune.doc_stride`` subwords apart)."""

    finetune: FineTuneConfig = field(default_factory=_span_finetune)
    """Backbone architecture and config (bert or xlnet), the span head, max_len and doc_stride."""

    def __post_init__(self):
        if self.finetune.head.kind != "span":
            raise ValueError(f"a span reader needs a span head, got {self.finetune.head.kind}")
        if self.finetune.backbone not in ("bert", "xlnet"):
            raise ValueError(f"a span reader's backbone is bert or xlnet, got {self.finetune.backbone}")


@dataclass
class SpanReaderOutput:
    """start_logits, end_logits: (b, n) scores of the paragraph words, -inf at padding."""

    start_logits: Tensor
    end_logits: Tensor


def word_embedding(backbone: nn.Module) -> nn.Embedding:
    """The backbone's input word embedding (``word_emb`` of genfeat's BERT and XLNet)."""
    for name, module in backbone.named_modules():
        if name.split(".")[-1] == "word_emb" and isinstance(module, nn.Embedding):
            return module
    raise ConfigError(f"the {type(backbone).__name__} backbone has no word_emb embedding for the domain tags",
                      "initialise D from a genfeat bert or xlnet checkpoint")


class SpanReader(nn.Module):
    """A pretrained backbone + span head read in windows, scoring paragraph words (module docstring).

    Args:
        cfg: the reader's config (``finetune.backbone_config`` is replaced by the backbone's own).
        backbone: a pretrained backbone (e.g. ``genfeat.load_checkpoint(...)[0]``); None builds one at random
            from the config (loading a saved reader).
    """

    def __init__(self, cfg: SpanReaderConfig, backbone: nn.Module | None = None):
        super().__init__()
        self.model = FineTuneModel(cfg.finetune, backbone)
        self.config = dataclasses.replace(cfg, finetune=self.model.config)
        d = self.model.adapter.d_model(self.model.backbone)
        std = getattr(self.model.backbone.config, "init_std", 0.02)
        self.tag_embed = nn.Parameter(torch.randn(2, d) * std)
        self._tags: tuple[Tensor, Tensor, Tensor] | None = None
        word_embedding(self.model.backbone).register_forward_hook(self._add_tags)

    def _add_tags(self, module: nn.Module, args, out: Tensor) -> Tensor | None:
        """Forward hook of the word embedding: (w, L, d) embeddings + the tag vector at each tag token."""
        if self._tags is None:
            return None
        rows, positions, domains = self._tags
        return out.index_put((rows, positions), self.tag_embed[domains].to(out.dtype), accumulate=True)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor, summary_index: Tensor,
                context_mask: Tensor, window_of: Tensor, word_window: Tensor, word_first: Tensor, word_last: Tensor,
                paragraph_mask: Tensor, tag_position: Tensor | None = None,
                domain: Tensor | None = None) -> SpanReaderOutput:
        """Word span scores for the questions of a :func:`genfeat.data.gdan.WindowEncoder.collate` batch.

        Args:
            input_ids, attention_mask, token_type_ids: (w, L) the windows; summary_index: (w,); context_mask:
                (w, L) True at paragraph subwords (the span head scores only those).
            window_of: (w,) question of each window. word_window: (b, n) window (index into w) each word is
                scored in; word_first, word_last: (b, n) positions of its first and last subword there.
            paragraph_mask: (b, n) True at real words. tag_position: (w,) position of the tag token.
            domain: (b,) 0 for d_true, 1 for d_gen (needs ``tag_position``); None: no tag.
        Returns:
            :class:`SpanReaderOutput` with (b, n) scores.
        """
        if domain is not None:
            if tag_position is None:
                raise ValueError("domain tags need windows collated with a tag token (WindowEncoder tagged=True)")
            self._tags = (torch.arange(input_ids.shape[0], device=input_ids.device), tag_position, domain[window_of])
        try:
            out = self.model(input_ids[:, None], attention_mask[:, None], token_type_ids[:, None], summary_index[:, None],
                             context_mask)
        finally:
            self._tags = None
        pad = ~paragraph_mask
        start = out.start_logits[word_window, word_first].masked_fill(pad, float("-inf"))
        end = out.end_logits[word_window, word_last].masked_fill(pad, float("-inf"))
        return SpanReaderOutput(start, end)
