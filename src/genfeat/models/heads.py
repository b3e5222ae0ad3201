"""Task heads on any pretrained backbone: the target side T_{θ,ψ} of thesis §1.4.

A fine-tuned model is a pretrained backbone (θ) and a small head (ψ, the only new parameters
besides GPT's special-token embeddings). One design serves every backbone:

- a **backbone adapter** (:class:`BackboneAdapter`, registered per genfeat architecture with
  :func:`register_adapter`) maps a :func:`genfeat.tasks.collate` batch row set to the last-layer
  states [n, t, d] (n = b·k sequences), optionally reading earlier segments first with memory;
  it also names the backbone's input format (special tokens, padding side) and, for causal
  backbones, scores next tokens with the backbone's own LM head (GPT-1's auxiliary L1);
- a **head** (:class:`TaskHead`) reads those states: the summary token's state for
  classification, regression (GPT-1 Fig. 1: both orders' states added for similarity) and
  multiple choice (one score per choice, the softmax over the k choices is the loss's), every
  position for span extraction (start and end scores, seed BERT §4.2; or XLNet's end scores
  conditioned on the start, :class:`EndGivenStart`), plus, for SQuAD 2.0, XLNet's answerability
  score from the summary state and the start-probability-weighted states (:class:`TaskHead`).

Adapters for bert, xlnet (content stream only: no ``target_mapping``; ``<cls>`` last, padding on the
left), gpt and lstm_lm (``<start>``/``<delim>``/``<extract>`` as new embeddings via ``add_special_tokens``) and
transformer_xl (word-level vocabulary: ``A <eos> B <eos>``, the last token summarises, padding on the
right) are registered here; a later backbone (ELMo, an LSTM LM) registers its own with
``@register_adapter("name")`` in its module, which needs no edit of this file.

:class:`FineTuneModel` (registered in genfeat.hub as architecture ``finetune``) joins the two and
carries what evaluation needs to rebuild the inputs: task name, backbone architecture and config,
head config, max_len and doc_stride.

Axes: b examples, k sequences per example (choices; 2 for similarity), n = b·k sequences,
s earlier segments read with memory, t tokens, d model width, c labels (1 for regression).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ..config import Config, check_least, to_dict
from ..data.vocab import EOS
from ..errors import CheckpointError, ConfigError, with_article
from ..nn.adaptive import check_token_input
from ..tasks.transforms import InputFormat, Packed, input_format

HeadKind = Literal["classification", "regression", "multiple_choice", "span"]
SpanEnd = Literal["linear", "start_conditioned"]

# a logit no position wins with (fp32; applied after casting, so bf16 autocast keeps it finite)
_NEG = -1.0e9


class BackboneAdapter:
    """How one backbone architecture serves the task heads (see the module docstring).

    Subclasses override what differs; every method takes the backbone module as its first argument,
    so an adapter holds no parameters and a fine-tuned checkpoint's weights are the backbone's and the
    head's only.

    Attributes:
        pool: the classification heads apply dense + tanh to the summary state first (BERT's pooler,
            XLNet's sequence summary); GPT-1 puts the linear layer straight on the extract state.
        causal: states depend only on earlier tokens (the backbone can score next tokens, and padding
            on the right never reaches a real token).
        memory: the backbone reads earlier segments with memory (long inputs, :meth:`hidden` ``mems``).
    """

    pool: bool = True
    causal: bool = False
    memory: bool = False

    def prepare(self, backbone: nn.Module) -> None:
        """Add the parameters fine-tuning needs before the optimizer is built (GPT's special tokens)."""

    def input_format(self, backbone: nn.Module, vocab) -> InputFormat:
        raise NotImplementedError

    def d_model(self, backbone: nn.Module) -> int:
        return backbone.config.d_model

    def hidden(self, backbone: nn.Module, input_ids: Tensor, attention_mask: Tensor | None,
               token_type_ids: Tensor | None, mems: list[Tensor] | None = None) -> tuple[Tensor, list[Tensor] | None]:
        """Last-layer states and the memory for the next segment.

        Shapes: input_ids, attention_mask, token_type_ids [n, t] -> hidden [n, t, d], mems (backbone's own).
        """
        raise NotImplementedError

    def lm_log_probs(self, backbone: nn.Module, hidden: Tensor, targets: Tensor) -> Tensor:
        """log P(targets | hidden) under the backbone's LM head (causal backbones only).

        Shapes: hidden [..., d], targets [...] -> [...]."""
        raise ConfigError(f"{type(self).__name__} has no causal LM head for the auxiliary LM loss",
                          "set aux_lm_weight 0 (GPT-1's L1 needs a left-to-right backbone: gpt, lstm_lm, transformer_xl)")


ADAPTERS: dict[str, BackboneAdapter] = {}


def register_adapter(architecture: str):
    """Class decorator: register an adapter instance for the genfeat ``architecture`` (hub.ARCHITECTURES name)."""

    def decorator(cls: type[BackboneAdapter]) -> type[BackboneAdapter]:
        ADAPTERS[architecture] = cls()
        return cls

    return decorator


def fine_tunable() -> list[str]:
    """The architectures with a registered adapter, those registered in their own modules included (every
    hub.ARCHITECTURES module is imported)."""
    from ..hub import ARCHITECTURES

    for module, _, _ in ARCHITECTURES.values():
        importlib.import_module(module)
    return sorted(ADAPTERS)


def get_adapter(architecture: str) -> BackboneAdapter:
    """The adapter of ``architecture``; one registered in the architecture's own module (hub.ARCHITECTURES)
    is found by importing that module, so a fine-tuned checkpoint loads before anything imported it."""
    if architecture not in ADAPTERS:
        from ..hub import ARCHITECTURES

        if architecture in ARCHITECTURES:
            importlib.import_module(ARCHITECTURES[architecture][0])
    if architecture not in ADAPTERS:
        raise ConfigError(f"no fine-tuning adapter for the {architecture} architecture",
                          f"fine-tune one of {', '.join(fine_tunable())}, or register an adapter with "
                          "genfeat.models.heads.register_adapter")
    return ADAPTERS[architecture]


def check_backbone(architecture: str, where: str) -> BackboneAdapter:
    """The adapter of a checkpoint's ``architecture``, found at ``where``.

    Raises:
        CheckpointError: no adapter serves it (a word2vec model, GDAN's question generator...), naming the
            architectures fine-tuning accepts.
    """
    try:
        return get_adapter(architecture)
    except ConfigError:
        raise CheckpointError(f"checkpoint '{where}' holds {with_article(architecture)} model, which cannot be fine-tuned "
                              f"(fine-tuning takes {with_article(', '.join(fine_tunable()))} backbone)",
                              "name a pretrained backbone of one of those architectures as init, e.g. the OUT/final "
                              "of recipes/bert/pretrain.yaml") from None


@register_adapter("bert")
class BertAdapter(BackboneAdapter):
    """BERT (``BertForMaskedLM``): the encoder's states; ``[CLS] A [SEP] B [SEP]``."""

    def input_format(self, backbone, vocab):
        return input_format("bert", vocab)

    def hidden(self, backbone, input_ids, attention_mask, token_type_ids, mems=None):
        return backbone.bert(input_ids, token_type_ids, attention_mask), None


@register_adapter("xlnet")
class XLNetAdapter(BackboneAdapter):
    """XLNet (``XLNetLMHeadModel``): the content stream (no ``target_mapping``, no permutation), segment
    ids as relative segment encodings, ``A <sep> B <sep> <cls>`` padded on the left, memory of earlier
    segments (:class:`FineTuneModel` sets ``bi_data`` off and ``reuse_len`` to the whole segment)."""

    memory = True

    def input_format(self, backbone, vocab):
        return input_format("xlnet", vocab)

    def hidden(self, backbone, input_ids, attention_mask, token_type_ids, mems=None):
        out = backbone(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask, mems=mems,
                       return_logits=False)
        return out.hidden, out.mems


@register_adapter("gpt")
class GPTAdapter(BackboneAdapter):
    """GPT-1 (``GPTLMHeadModel``): ``<start> A <delim> B <extract>`` with three new token embeddings
    (the last three rows of its special table; added by :meth:`prepare` when missing), padding on the
    right, the linear head straight on the extract state (seed paper Eq. 3)."""

    pool = False
    causal = True

    def prepare(self, backbone):
        if backbone.config.n_special < 3:
            backbone.add_special_tokens(3 - backbone.config.n_special)

    def input_format(self, backbone, vocab):
        cfg = backbone.config
        first = cfg.n_token + cfg.n_special - 3
        return input_format("gpt", vocab, [first, first + 1, first + 2])

    def hidden(self, backbone, input_ids, attention_mask, token_type_ids, mems=None):
        return backbone(input_ids, attention_mask=attention_mask, return_logits=False).hidden, None

    def lm_log_probs(self, backbone, hidden, targets):
        return backbone.target_log_probs(hidden, targets)


@register_adapter("lstm_lm")
class LSTMAdapter(GPTAdapter):
    """The LSTM language model of GPT-1's Table 5 (``LSTMLMHeadModel``): GPT-1's token tables, special
    tokens, input format and tied LM head, read left to right."""


@dataclass
class EosFormat(InputFormat):
    """A word-level language model's format: ``A <eos> (B <eos>)``, the last ``<eos>`` summarising the
    sequence (a causal model's last state has read every token), padding on the right, no token types."""

    eos_id: int
    pad_id: int = 0

    def pack(self, segments: Sequence[list[int]]) -> Packed:
        ids, starts = [], []
        for seg in segments:
            starts.append(len(ids))
            ids += [*seg, self.eos_id]
        return Packed(ids, None, len(ids) - 1, tuple(starts))


@register_adapter("transformer_xl")
class TransformerXLAdapter(BackboneAdapter):
    """Transformer-XL (``TransformerXLLMHeadModel``) with its word-level vocabulary: :class:`EosFormat`
    (the vocabulary's ``<eos>`` as delimiter and summary), causal attention with memory (its forward
    takes no padding mask: right padding only ever follows the real tokens)."""

    causal = True
    memory = True

    def input_format(self, backbone, vocab):
        eos = getattr(vocab, "index", {}).get(EOS)
        if eos is None:
            raise ConfigError("the Transformer-XL checkpoint's vocabulary has no <eos> token for the task format",
                              "fine-tune a checkpoint trained on a word-level corpus with end-of-line tokens (ptb, wikitext)")
        return EosFormat(eos_id=eos, pad_id=eos)

    def hidden(self, backbone, input_ids, attention_mask, token_type_ids, mems=None):
        out = backbone(input_ids, mems=mems, ext_len=0)
        return out.hidden, out.mems

    def lm_log_probs(self, backbone, hidden, targets):
        flat = backbone.crit.target_log_prob(hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1))
        return flat.view(targets.shape)


@dataclass
class HeadConfig(Config):
    """A task head."""

    kind: HeadKind = "classification"
    """classification (c labels), regression (one score), multiple_choice (a score per choice) or
    span (start and end scores per token)."""
    n_labels: int = 2
    """Output size c of a classification head (1 for regression; ignored by multiple choice and span)."""
    d_model: int = 256
    """Width d of the backbone's states."""
    pool: bool = True
    """dense + tanh on the summary state before the output layer (BERT/XLNet); GPT-1 has none."""
    dropout: float = 0.1
    """Dropout on the summary state before the output layer."""
    answerability: bool = False
    """Span heads: also score whether the window holds the answer (SQuAD 2.0) with XLNet's answer class
    head, which reads the summary state and the start-probability-weighted states (:class:`TaskHead`)."""
    span_end: SpanEnd = "linear"
    """Span heads: end scores from a linear layer on each token, independent of the start (BERT §4.2), or
    ``start_conditioned``: from each token's state and the start's (XLNet's SQuAD head, :class:`EndGivenStart`;
    Hugging Face's XLNetForQuestionAnswering)."""
    layer_norm_epsilon: float = 1e-12
    """Epsilon of the start-conditioned end scores' layer norm (the backbone's; XLNet's 1e-12)."""

    def __post_init__(self):
        if self.kind == "classification" and self.n_labels < 2:
            raise ValueError(f"a classification head needs n_labels >= 2, got {self.n_labels}")
        if self.kind == "regression" and self.n_labels != 1:
            raise ValueError(f"a regression head has n_labels 1, got {self.n_labels}")
        if self.d_model < 1 or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"d_model ({self.d_model}) must be >= 1 and dropout ({self.dropout}) in [0, 1)")
        if (self.answerability or self.span_end != "linear") and self.kind != "span":
            raise ValueError("answerability and span_end are a span head's options")


@dataclass
class TaskOutput:
    """What a :class:`FineTuneModel` returns (no loss: objectives/task.py computes it)."""

    logits: Tensor | None = None
    """[b, c] class scores, [b] regression scores, [b, k] choice scores; None for span heads."""
    start_logits: Tensor | None = None
    """[b, t] span start scores (positions outside the context and its summary token: -1e9)."""
    end_logits: Tensor | None = None
    """[b, t] span end scores; a start-conditioned head's: [b, t] given the ``start_positions`` passed in (training),
    else [b, t, t], row s holding the end scores given start s."""
    answer_logits: Tensor | None = None
    """[b] answerability scores (logit of "has an answer in this window")."""
    hidden: Tensor | None = None
    """[b·k, t, d] last-layer states of the final segment."""
    lm_log_probs: Tensor | None = None
    """[m] with ``lm=True``: log P(u_{j+1} | u_{≤j}) of every real next token of the final segments under the
    backbone's LM head, the terms of GPT-1's auxiliary L1 (:meth:`FineTuneModel.next_token_log_probs`)."""


def _gather(hidden: Tensor, index: Tensor) -> Tensor:
    """hidden [n, t, d] at index [n] -> [n, d]."""
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), index]


class EndGivenStart(nn.Module):
    """End scores conditioned on the start, XLNet's SQuAD head (Yang et al. 2019; the released run_squad's
    ``end_logits``, Hugging Face's PoolerEndLogits): for start s and every position i,

        e(i | s) = w_1ᵀ LayerNorm(tanh(W_0 [h_i ; h_s] + b_0)) + b_1.

    W_0 [h_i ; h_s] is computed as W_0ᵉ h_i + W_0ˢ h_s, so the m starts of a row share the [t, d] product of its
    states; the tanh and layer norm still run on [m, t, d] (one pair of start and end per entry).

    Shapes: hidden [b, t, d], starts [b, m] -> [b, m, t].
    """

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(2 * d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.score = nn.Linear(d_model, 1)

    def forward(self, hidden: Tensor, starts: Tensor) -> Tensor:
        w_end, w_start = self.dense.weight.split(hidden.shape[-1], dim=1)
        ends = hidden @ w_end.t() + self.dense.bias                                     # [b, t, d]
        at = hidden.gather(1, starts[..., None].expand(-1, -1, hidden.shape[-1])) @ w_start.t()   # [b, m, d]
        return self.score(self.norm(torch.tanh(ends[:, None] + at[:, :, None]))).squeeze(-1)


_PAIR_BUDGET = 1 << 24
"""Elements of the [b, m, t, d] tensor one chunk of starts may take when a start-conditioned head scores the ends
of every start (inference): 64 MiB in fp32."""


class TaskHead(nn.Module):
    """The head of :class:`HeadConfig` (module docstring).

    ``head(hidden, summary_index, context_mask=None) -> TaskOutput``

    Answerability (SQuAD 2.0) follows XLNet (Yang et al. 2019, §3 and its SQuAD 2.0 set-up; the
    released code's ``answer_class``): with p = softmax of the start scores over the allowed positions
    (context and summary token) and h_i the last-layer states, the logit is
    w_1ᵀ dropout(tanh(W_0 [Σ_i p_i h_i ; h_<cls>] + b_0)), no bias on w_1. No gradient is stopped, so the
    loss also reaches the start scores through p. Its sign: positive means "the answer is in this window"
    (XLNet's logit is of "impossible"; objectives/task.py trains this one).

    Span heads score ends with ``out`` beside the starts (``span_end`` linear: BERT's two scores per token) or
    with :class:`EndGivenStart` (``start_conditioned``; ``out`` scores the starts alone): given
    ``start_positions`` (training: the gold starts), the ends of that start, else of every start ([b, t, t],
    scored in chunks of starts that keep the [b, m, t, d] pair states within ``_PAIR_BUDGET``). One dropout
    mask on the states serves start and end scores.

    Shapes: hidden [b·k, t, d]; summary_index [b, k]; context_mask [b, t] (span); start_positions [b] ->
    see :class:`TaskOutput`.
    """

    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.config = cfg
        d = cfg.d_model
        self.pooler = nn.Linear(d, d) if cfg.pool and cfg.kind != "span" else None
        self.drop = nn.Dropout(cfg.dropout)
        conditioned = cfg.span_end == "start_conditioned"
        out = {"classification": cfg.n_labels, "regression": 1, "multiple_choice": 1, "span": 1 if conditioned else 2}
        self.out = nn.Linear(d, out[cfg.kind])
        if conditioned:
            self.end = EndGivenStart(d, cfg.layer_norm_epsilon)
        if cfg.answerability:
            self.answer = nn.Sequential(nn.Linear(2 * d, d), nn.Tanh(), nn.Dropout(cfg.dropout),
                                        nn.Linear(d, 1, bias=False))

    def reset_parameters(self, std: float = 0.02) -> None:
        """Normal(0, std) weights and zero biases (the backbone's init_std, as BERT/GPT-1 initialise heads)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, hidden: Tensor, summary_index: Tensor, context_mask: Tensor | None = None,
                start_positions: Tensor | None = None) -> TaskOutput:
        """The task's scores from the backbone's last-layer states (class docstring).

        Shapes: hidden [b·k, t, d], summary_index [b, k], context_mask [b, t] (span), start_positions [b]
        (start-conditioned span ends) -> :class:`TaskOutput`: logits [b, c], [b] (regression) or [b, k] (multiple
        choice); span heads: start_logits [b, t], end_logits [b, t] or [b, t, t], answer_logits [b].
        """
        cfg = self.config
        b, k = summary_index.shape
        summary = _gather(hidden, summary_index.reshape(-1)).view(b, k, -1)            # [b, k, d]
        if cfg.kind == "span":
            states = self.drop(hidden)
            if cfg.span_end == "linear":
                start, end = self.out(states).float().unbind(-1)                       # [b, t] each
            else:
                start = self.out(states).float().squeeze(-1)
                end = self._conditioned_ends(states, start_positions)                   # [b, t] or [b, t, t]
            keep = torch.zeros_like(start, dtype=torch.bool)
            keep[torch.arange(b, device=keep.device), summary_index[:, 0]] = True      # "no answer here"
            if context_mask is not None:
                keep |= context_mask.bool()
            start = start.masked_fill(~keep, _NEG)
            end = end.masked_fill(~(keep if end.dim() == 2 else keep[:, None]), _NEG)
            answer = self._answerability(hidden, start, summary[:, 0]) if cfg.answerability else None
            return TaskOutput(start_logits=start, end_logits=end, answer_logits=answer, hidden=hidden)
        if cfg.kind != "multiple_choice":
            # similarity: both orders' states added (GPT-1 §3.3), before the pooler of pooled heads
            summary = summary.sum(1, keepdim=True)
        if self.pooler is not None:
            summary = torch.tanh(self.pooler(summary))
        logits = self.out(self.drop(summary))                                          # [b, 1 or k, c]
        if cfg.kind == "multiple_choice":
            logits = logits.squeeze(-1)                                                # [b, k]
        elif cfg.kind == "regression":
            logits = logits.view(b)
        else:
            logits = logits.squeeze(1)                                                 # [b, c]
        return TaskOutput(logits=logits, hidden=hidden)

    def _conditioned_ends(self, states: Tensor, start_positions: Tensor | None) -> Tensor:
        """:class:`EndGivenStart` scores, fp32: [b, t] given ``start_positions`` [b], else [b, t, t] for every start."""
        if start_positions is not None:
            return self.end(states, start_positions[:, None]).float().squeeze(1)
        b, t, d = states.shape
        starts = torch.arange(t, device=states.device).expand(b, t)
        chunk = max(1, _PAIR_BUDGET // (b * t * d))
        return torch.cat([self.end(states, part).float() for part in starts.split(chunk, dim=1)], 1)

    def _answerability(self, hidden: Tensor, start_logits: Tensor, summary: Tensor) -> Tensor:
        """XLNet's answer class logit (class docstring).

        Shapes: hidden [b, t, d], start_logits [b, t] (masked, fp32), summary [b, d] -> [b] (fp32)."""
        p = torch.softmax(start_logits, -1).to(hidden.dtype)                          # 0 where masked
        start_state = torch.einsum("bt,btd->bd", p, hidden)
        return self.answer(torch.cat([start_state, summary], -1)).squeeze(-1).float()


MIN_MAX_LEN = 5
"""The shortest input (max_len) a pair fits in: BERT's, XLNet's and GPT-1's three special tokens of a pair
and one token of each text."""


@dataclass
class FineTuneConfig(Config):
    """A backbone with a task head, and the input settings its predictions depend on."""

    task: str = ""
    """Task name (genfeat.tasks.TASKS) the head was trained for."""
    backbone: str = "bert"
    """genfeat architecture of the backbone (hub.ARCHITECTURES), with a registered adapter."""
    backbone_config: dict[str, Any] = field(default_factory=dict)
    """The backbone's own config fields (as its checkpoint's config.json ``model``)."""
    head: HeadConfig = field(default_factory=HeadConfig)
    """The task head."""
    max_len: int = 128
    """Longest input sequence in tokens, special tokens included."""
    doc_stride: int = 128
    """Span tasks: tokens between the starts of consecutive context windows."""
    max_query_len: int = 64
    """Span tasks: longest question in tokens (longer ones are cut), as the model was trained to read them."""
    max_segments: int = 1
    """Backbones with memory: texts longer than max_len are read as up to this many segments, the
    earlier ones as memory (1: truncate, as BERT and GPT always do)."""
    both_orders: bool = True
    """Similarity tasks: encode A;B and B;A and add their summary states (GPT-1 Fig. 1); false: A;B only,
    as BERT's and XLNet's own fine-tuning and the Hugging Face task models read a pair."""
    squad_seed: int | None = None
    """Tasks split by article (TaskSpec.article_split: ``squad_split``): the seed of the split the head was trained
    on, so that evaluation scores that run's own dev and test articles; None: not trained on such a split here."""
    label_names: list[str] = field(default_factory=list)
    """Classification heads from elsewhere: what each output class means, in class-id order (a Hugging Face
    task model's ``id2label``, transformers' ``LABEL_0``... defaults included), matched against the task's labels
    before the head is used (genfeat.methods.finetune.align_labels); empty (a head genfeat trained): the classes
    are ``task``'s labels in its order."""

    def __post_init__(self):
        if not self.task:
            raise ValueError("FineTuneConfig.task is empty")
        check_least(self, max_len=MIN_MAX_LEN, doc_stride=1, max_query_len=1, max_segments=1)


class FineTuneModel(nn.Module):
    """Backbone + adapter + task head.

    ``model(input_ids, attention_mask=None, token_type_ids=None, summary_index=None, context_mask=None,
    memory_ids=None, lm=False, start_positions=None) -> TaskOutput``

    Args (a :func:`genfeat.tasks.collate` batch without its labels):
        input_ids, attention_mask, token_type_ids: [b, k, t] the (last) segment of every sequence.
        summary_index: [b, k] position of each sequence's summary token.
        context_mask: [b, t] span windows: True at context tokens.
        memory_ids: [b, s, u] earlier segments of each example, shared by its k sequences: read first
            (in order, all of u tokens, no padding), once per example and without gradients (the memory is
            stop-gradient, Transformer-XL Eq. 1's SG), and kept as the memory of each of its k sequences
            (adapters with ``memory`` only). In training, the k sequences thus read one dropout draw of it.
        lm: also return ``lm_log_probs`` (:meth:`next_token_log_probs`), computed inside this forward
            pass so that a DistributedDataParallel wrapper sees the LM head's parameters used.
        start_positions: [b] span heads: the starts a start-conditioned head scores the ends of (training: the
            gold starts; None: every start); a linear span head's end scores do not depend on them.
    """

    def __init__(self, cfg: FineTuneConfig, backbone: nn.Module | None = None):
        super().__init__()
        from ..hub import build_model

        self.adapter = get_adapter(cfg.backbone)
        if backbone is None:
            backbone = build_model(cfg.backbone, cfg.backbone_config)
        if cfg.backbone == "xlnet":
            # fine-tuning reads sequences forwards, and the memory keeps whole earlier segments
            backbone.config = dataclasses.replace(backbone.config, bi_data=False, reuse_len=None)
        if cfg.max_segments > 1 and self.adapter.memory:
            # the last segment sees every earlier one (Transformer-XL's same_length would hide the oldest from it)
            need = (cfg.max_segments - 1) * cfg.max_len
            backbone.config = dataclasses.replace(backbone.config, mem_len=max(backbone.config.mem_len, need),
                                                  **({"same_length": False}
                                                     if hasattr(backbone.config, "same_length") else {}))
        check_max_len(cfg.max_len, cfg.backbone, backbone.config)
        self.adapter.prepare(backbone)
        self.backbone = backbone
        self.head = TaskHead(cfg.head)
        self.head.reset_parameters(getattr(backbone.config, "init_std", 0.02))
        self.config = dataclasses.replace(cfg, backbone_config=to_dict(backbone.config))

    def input_format(self, vocab) -> InputFormat:
        return self.adapter.input_format(self.backbone, vocab)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                summary_index: Tensor | None = None, context_mask: Tensor | None = None,
                memory_ids: Tensor | None = None, lm: bool = False, start_positions: Tensor | None = None) -> TaskOutput:
        """The task scores of ``input_ids`` [b, k, t]: k sequences per example (1 but for multiple choice and GPT-1's
        similarity, which reads both orders), as genfeat.tasks.TaskEncoder packs them (see the class docstring)."""
        check_token_input(input_ids, "input_ids", "[b, k, t]")
        b, k, t = input_ids.shape
        flat = [None if x is None else x.reshape(b * k, -1) for x in (input_ids, attention_mask, token_type_ids)]
        if summary_index is None:
            summary_index = torch.full((b, k), t - 1, device=input_ids.device)
        mems = None
        if memory_ids is not None and (memory_ids.dim() != 3 or memory_ids.shape[0] != b):
            raise ValueError(f"memory_ids must be [b={b}, s, u] (shared by each example's sequences), got "
                             f"{list(memory_ids.shape)}")
        if memory_ids is not None and memory_ids.shape[1]:
            if not self.adapter.memory:
                raise ConfigError(f"the {self.config.backbone} backbone reads no earlier segments",
                                  "set max_segments 1 (long texts are truncated)")
            with torch.no_grad():
                for i in range(memory_ids.shape[1]):
                    _, mems = self.adapter.hidden(self.backbone, memory_ids[:, i], None,
                                                  _memory_types(flat[2], b, memory_ids.shape[2]), mems)
            mems = [m.repeat_interleave(k, dim=0) for m in mems]            # [b, m, d] -> [b * k, m, d]
            if flat[1] is not None:
                flat, summary_index = _tokens_first(flat, summary_index)
        hidden, _ = self.adapter.hidden(self.backbone, *flat, mems)
        out = self.head(hidden, summary_index, context_mask, start_positions)
        if lm:
            out = dataclasses.replace(out, lm_log_probs=self.next_token_log_probs(hidden, *flat[:2]))
        return out

    def next_token_log_probs(self, hidden: Tensor, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """GPT-1's L1 terms on the task inputs, log P(u_{j+1} | u_{≤j}) (Eq. 1, 5), through the backbone's LM head.

        Which tokens: in every one of the b·k sequences (both orders of a similarity pair, all k choices of a
        multiple-choice example, each with its own copy of the shared text), every real token after the
        sequence's first, from the state just before it; so ``<start>`` is never a target, the delimiter and
        extract tokens (and Transformer-XL's ``<eos>``) are, like any real token, and padding is neither read
        nor predicted. Only the final segment counts: tokens read as memory are not predicted, nor is the final
        segment's first token from the memory. Causal backbones only (the others' adapters raise a
        ConfigError naming ``aux_lm_weight``).

        Shapes: hidden [n, t, d], input_ids and attention_mask [n, t] -> [m], m real next tokens.
        """
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        keep = real[:, 1:] & real[:, :-1]          # state j predicts token j+1, both real tokens
        return self.adapter.lm_log_probs(self.backbone, hidden[:, :-1][keep], input_ids[:, 1:][keep])


def check_max_len(max_len: int, architecture: str, backbone_config: Any, setting: str = "max_len") -> None:
    """Refuse a max_len beyond the backbone's learned positions (``setting``: what the error calls it).

    Raises:
        ConfigError: naming the setting and the backbone's positions.
    """
    max_position = getattr(backbone_config, "max_position", None)
    if max_position is not None and max_len > max_position:
        raise ConfigError(f"{setting} {max_len} is longer than the {architecture} backbone's {max_position} positions",
                          f"lower {setting} to the backbone's positions at most")


def _tokens_first(flat: list[Tensor | None], summary_index: Tensor) -> tuple[list[Tensor | None], Tensor]:
    """The final segments' padding moved after their tokens (their order kept), and the summary positions with
    them: relative positions count the padding, so padding between the memory and the tokens (XLNet pads on the
    left) would put the memory further away the more a row is padded, and a row's scores would depend on its batch
    and on its choices' lengths.

    Shapes: flat [ids, attention_mask, token_type_ids], each [n, t] (types may be None); summary_index [b, k],
    b·k = n -> the same."""
    mask = flat[1].bool()
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices       # tokens first, then padding
    moved = [None if x is None else x.gather(1, order) for x in flat]
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order)
    where = torch.empty_like(order).scatter_(1, order, positions)                # old position -> new one
    return moved, where.gather(1, summary_index.reshape(-1, 1)).view_as(summary_index)


def _memory_types(types: Tensor | None, n: int, length: int) -> Tensor | None:
    """Segment ids [n, length] of n earlier segments: text A's (0), where the final segment has segment ids."""
    return None if types is None else torch.zeros(n, length, dtype=types.dtype, device=types.device)


