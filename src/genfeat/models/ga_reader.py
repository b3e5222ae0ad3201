"""Gated-attention reader (Dhingra et al., ACL 2017), the discriminative model D of GDAN (thesis §3.2.3).

Axis legend: b batch, n paragraph words, m question words, h GRU size per direction (2h both), e embedding.

Layers k = 1..K-1 (Dhingra et al. Eqs. 1-3): the paragraph states D^(k) = BiGRU_D^(k)(X^(k-1)) (X^(0) the
paragraph's word embeddings) and the question states Q^(k) = BiGRU_Q^(k)(Y) (Y the question's word
embeddings, re-read by each layer's own GRU) meet in the gated-attention module

    α_i = softmax_j(q_j^T d_i),   q̃_i = Σ_j α_ij q_j,   x_i = d_i ⊙ q̃_i,    X^(k) = [x_1 .. x_n],

the element-wise product that lets each question word gate each paragraph word's features. Layer K
reads D^(K) = BiGRU_D^(K)(X^(K-1)) and Q^(K). The GA reader answers a cloze question with the inner
product of D^(K) and the question state at the blank; for SQuAD's spans GDAN takes a softmax over the
paragraph for the start and one for the end (§3.2.3), so here the query is the question summary
q = [q_m^→ ; q_1^←] (the last forward and first backward states of Q^(K)) and

    start_i = d_i^T W_s q,    end_i = d_i^T W_e q,    p(start = i) = softmax_i(start_i), likewise end,

two bilinear forms in place of the reader's one inner product.

Domain tags (thesis §3.2.3, "domain adaptation with tags"): when ``domain`` is given, the word d_true
(0: a human question) or d_gen (1: a question written by G) is appended after the last real word of both
the question and the paragraph, so D can learn a different conditional for generated questions; the
tag is never a span position. Without ``domain`` (the settings SL, Context, Gen and Gen + dual: see
methods/gdan.py TAGGED_SETTINGS for the tagged ones, Gen + GAN among them) nothing is
appended.

Padding does not change any output at real positions: the GRUs read each row's real words before its
padding (:class:`BiGRU`), attention ignores padded question words, and padded paragraph positions get
logit -inf.

Question-evidence common-word feature (Dhingra et al. §3.3, "qe-comm", from Li et al. 2016; ``qe_comm``): for each
paragraph word an indicator f_i ∈ {0, 1} of whether the word occurs in the question, looked up in a trainable
table F (2 x 2, n_F = 2) and appended to the input of the last layer's paragraph GRU: X^(K-1)_i <- [X^(K-1)_i ; F f_i].
Special words (padding, unknown word, domain tags: ids below ``first_word_id``) are never common words.

Not from the GA reader paper: no character embeddings. Embeddings start at random; GDAN's ``d_vectors`` starts
them from word vectors (the paper's GloVe, or genfeat's word2vec).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..config import Config


@dataclass
class GAReaderConfig(Config):
    """Sizes of the gated-attention reader (defaults: the GA reader's 3 layers; smaller GRUs than its 128
    per direction, for CPU)."""

    vocab_size: int = 0
    """Word types (set by the method from the vocabulary; ids 0 padding)."""
    embed_dim: int = 100
    """e, word embedding size."""
    hidden: int = 64
    """h, GRU size per direction."""
    layers: int = 3
    """K, reading layers (K-1 gated-attention modules)."""
    dropout: float = 0.2
    """Dropout on the embeddings and on each layer's GRU outputs."""
    d_true_id: int = 2
    """Word id of the tag d_true (:data:`genfeat.data.gdan.SPECIALS`)."""
    d_gen_id: int = 3
    """Word id of the tag d_gen."""
    qe_comm: bool = False
    """Append the question-evidence common-word feature to the last layer's paragraph input (Dhingra et al.
    §3.3); off: the reader of the runs made before it existed."""
    first_word_id: int = 6
    """Ids below this are special words (:data:`genfeat.data.gdan.SPECIALS`), never common words for qe_comm. GDAN
    checks it and the tag ids against its vocabulary (:func:`genfeat.methods.gdan.check_special_ids`)."""

    def __post_init__(self):
        if self.vocab_size < 0 or self.embed_dim < 1 or self.hidden < 1 or self.layers < 1:
            raise ValueError("vocab_size must be >= 0 and embed_dim, hidden, layers >= 1, got "
                             f"{self.vocab_size}, {self.embed_dim}, {self.hidden}, {self.layers}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.first_word_id < 1:
            raise ValueError(f"first_word_id must be >= 1 (id 0 is padding), got {self.first_word_id}")


QE_COMM_DIM = 2
"""n_F, the size of the qe-comm feature embedding (Dhingra et al. use 2)."""


@dataclass
class GAReaderOutput:
    """start_logits, end_logits: (b, n) span scores, -inf at padding; paragraph_states: (b, n, 2h) D^(K)."""

    start_logits: Tensor
    end_logits: Tensor
    paragraph_states: Tensor


def gated_attention(d: Tensor, q: Tensor, q_mask: Tensor) -> Tensor:
    """The GA module (Dhingra et al. Eqs. 2-3): x_i = d_i ⊙ Σ_j softmax_j(q_j^T d_i) q_j.

    Args:
        d: (b, n, 2h) paragraph states; q: (b, m, 2h) question states; q_mask: (b, m) True at real words.
    Returns:
        (b, n, 2h).
    """
    scores = torch.einsum("bnh,bmh->bnm", d, q).masked_fill(~q_mask[:, None, :], float("-inf"))
    return d * torch.einsum("bnm,bmh->bnh", scores.softmax(-1), q)


def append_tag(ids: Tensor, mask: Tensor, tag: Tensor) -> tuple[Tensor, Tensor]:
    """ids (b, t) right-padded with their mask, and one tag id per row (b,) -> (b, t + 1) with the tag
    right after each row's last real word, and its mask."""
    lengths = mask.sum(1)
    rows = torch.arange(ids.shape[0], device=ids.device)
    ids = torch.cat([ids, ids.new_zeros(ids.shape[0], 1)], 1)
    mask = torch.cat([mask, mask.new_zeros(mask.shape[0], 1)], 1)
    ids[rows, lengths] = tag
    mask[rows, lengths] = True
    return ids, mask


@functools.lru_cache(maxsize=None)
def _one_way_gru(inputs: int, hidden: int) -> nn.GRU:
    """A parameter-less (meta) unidirectional GRU that :class:`BiGRU` runs each direction's weights through."""
    return nn.GRU(inputs, hidden, batch_first=True, device="meta")


def reverse_rows(mask: Tensor) -> Tensor:
    """(b, t) mask of right-padded rows -> (b·t,) flat positions that reverse each row within its length and
    leave its padding in place (an involution): x.flatten(0, 1)[index] reverses every row of x (b, t, ...)."""
    b, t = mask.shape
    pos = torch.arange(t, device=mask.device)[None, :]
    lengths = mask.sum(1, keepdim=True)
    rows = torch.arange(b, device=mask.device)[:, None] * t
    return (rows + torch.where(pos < lengths, lengths - 1 - pos, pos)).flatten()


class BiGRU(nn.Module):
    """A one-layer bidirectional GRU over right-padded sequences. (b, t, in) and (b, t) mask -> (b, t, 2h),
    zeros at padding.

    Each direction is one fused ``nn.GRU`` call on the padded batch: the forward direction reads x, the
    backward one reads every row reversed within its length, so both read a row's real words first and its
    padding only after them, and every real position's output is that of a packed bidirectional GRU (the
    parameters are one bidirectional ``nn.GRU``'s, ``gru.weight_ih_l0_reverse`` ...). Not packed because on
    CPU the backward pass of a packed GRU slices the packed input once per time step and each slice's
    gradient is a zero-filled copy of the whole input, quadratic in t: with t about 300 it took two thirds
    of D's training step.
    """

    WEIGHTS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")

    def __init__(self, inputs: int, hidden: int):
        super().__init__()
        self.gru = nn.GRU(inputs, hidden, batch_first=True, bidirectional=True)

    def _direction(self, x: Tensor, suffix: str) -> Tensor:
        weights = {name: getattr(self.gru, name + suffix) for name in self.WEIGHTS}
        return functional_call(_one_way_gru(self.gru.input_size, self.gru.hidden_size), weights, (x,))[0]

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        rev = reverse_rows(mask)                                                       # (b·t,)
        forward = self._direction(x, "")
        backward = self._direction(x.flatten(0, 1)[rev].view_as(x), "_reverse")
        backward = backward.flatten(0, 1)[rev].view_as(forward)
        return torch.cat([forward, backward], -1) * mask[:, :, None]


class GAReader(nn.Module):
    """The gated-attention reader with span output (see the module docstring)."""

    def __init__(self, cfg: GAReaderConfig):
        super().__init__()
        if cfg.vocab_size < 1:
            raise ValueError("GAReaderConfig.vocab_size must be set (>= 1) before building the model")
        self.config = cfg
        h2 = 2 * cfg.hidden
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embed_dim, padding_idx=0)
        extra = [QE_COMM_DIM if cfg.qe_comm and k == cfg.layers - 1 else 0 for k in range(cfg.layers)]
        self.doc_grus = nn.ModuleList([BiGRU((cfg.embed_dim if k == 0 else h2) + extra[k], cfg.hidden)
                                       for k in range(cfg.layers)])
        self.qe_comm = nn.Embedding(2, QE_COMM_DIM) if cfg.qe_comm else None
        self.query_grus = nn.ModuleList([BiGRU(cfg.embed_dim, cfg.hidden) for _ in range(cfg.layers)])
        self.start = nn.Linear(h2, h2, bias=False)
        self.end = nn.Linear(h2, h2, bias=False)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, paragraph: Tensor, paragraph_mask: Tensor, question: Tensor, question_mask: Tensor,
                domain: Tensor | None = None) -> GAReaderOutput:
        """Span scores for the questions on the paragraphs.

        Args:
            paragraph: (b, n) word ids, right-padded with 0; paragraph_mask: (b, n) True at real words.
            question: (b, m) word ids; question_mask: (b, m).
            domain: (b,) 0 for d_true, 1 for d_gen, appended as a tag word; None: no tag.
        Returns:
            :class:`GAReaderOutput` with (b, n) logits over the paragraph's own words.
        """
        n = paragraph.shape[1]
        if self.qe_comm is not None:
            common = (paragraph[:, :, None] == question[:, None, :]) & question_mask[:, None, :]
            common = common.any(-1) & paragraph_mask & (paragraph >= self.config.first_word_id)   # (b, n)
        if domain is not None:
            tag = torch.where(domain.bool(), self.config.d_gen_id, self.config.d_true_id)
            paragraph, paragraph_mask_t = append_tag(paragraph, paragraph_mask, tag)
            question, question_mask = append_tag(question, question_mask, tag)
        else:
            paragraph_mask_t = paragraph_mask
        x = self.drop(self.embed(paragraph))
        y = self.drop(self.embed(question))
        for k in range(self.config.layers):
            if k == self.config.layers - 1 and self.qe_comm is not None:
                # F f_i at the real words; zeros at padding and at the domain tag (appended past the words)
                feature = self.qe_comm(common.long()) * paragraph_mask[:, :, None]           # (b, n, 2)
                feature = torch.cat([feature, feature.new_zeros(feature.shape[0], x.shape[1] - n, QE_COMM_DIM)], 1)
                x = torch.cat([x, feature], -1)
            d = self.drop(self.doc_grus[k](x, paragraph_mask_t))
            q = self.drop(self.query_grus[k](y, question_mask))
            if k < self.config.layers - 1:
                x = gated_attention(d, q, question_mask)
        rows = torch.arange(q.shape[0], device=q.device)
        last = question_mask.sum(1) - 1
        half = self.config.hidden
        summary = torch.cat([q[rows, last, :half], q[:, 0, half:]], -1)               # (b, 2h)
        d = d[:, :n]
        pad = ~paragraph_mask
        start = torch.einsum("bnh,bh->bn", d, self.start(summary)).masked_fill(pad, float("-inf"))
        end = torch.einsum("bnh,bh->bn", d, self.end(summary)).masked_fill(pad, float("-inf"))
        return GAReaderOutput(start, end, d)
