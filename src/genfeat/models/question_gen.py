"""GDAN's generative model G: question generation from a paragraph and an answer in it (thesis §3.2;
Yang et al., ACL 2017, "Semi-Supervised QA with Generative Domain-Adaptive Nets").

G is a GRU sequence-to-sequence model with attention and a copy mechanism. The encoder is a
bidirectional GRU over the paragraph; each paragraph token's input is its word embedding joined
with an embedding of the *answer indicator* (1 when the token lies inside the answer chunk, else 0;
embedding the 0/1 feature is a linear map of its one-hot form), so G knows which span the question
must ask about. The decoder is a GRU over the question. At step t its output distribution mixes
generating from the vocabulary and copying a paragraph word through a gate (Eq. 3.7):

    p(y_t = w) = g_t · p_vocab(w) + (1 − g_t) · p_copy(w),   p_copy(w) = Σ_{i : x_i = w} α_{t,i},

where α_t is the attention over paragraph positions, so copying reuses the attention weights. The
parts the equation leaves open are genfeat's choices: the decoder starts from a projection of the
encoder's final states; the attention score is bilinear, h_t^T W_a h_i; the decoder state h_t and
the context c_t = Σ_i α_{t,i} h_i give o_t = tanh(W_o [h_t; c_t]), from which p_vocab = softmax(W_v o_t)
and g_t = σ(w_g · o_t + b_g).

A paragraph word outside the vocabulary can still be copied: each paragraph's out-of-vocabulary
words get ids V, V+1, ... in the order of their first occurrence (its *extended vocabulary*), and
p(y_t) is a distribution over V + n_ext ids. A copied out-of-vocabulary word is fed back to the
decoder as <unk>.

The decoder has no input feeding (o_{t-1} is not an input of step t), so teacher forcing runs the
decoder GRU over the whole question in one call; generation steps one token at a time with the
same weights (:meth:`QuestionGenerator.decode_step`). Generation is by sampling (for REINFORCE,
Algorithm 1's G steps) and by beam search (for display, Table 3.3).

Axes: b batch, s paragraph tokens, t question tokens, d hidden width (decoder; the encoder has d/2
per direction), e embedding width, V vocabulary, X = V + n_ext extended vocabulary, k beam.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config
from .ga_reader import BiGRU

@dataclass
class QuestionGenConfig(Config):
    """Architecture of G."""

    n_token: int = 20000
    """Vocabulary size V (input and output), special symbols included."""
    pad_id: int = 0
    """Id of <pad> (defaults: the layout of genfeat.data.gdan.SPECIALS, the vocabulary G shares with D)."""
    unk_id: int = 1
    """Id of <unk>: decoder input for a copied out-of-vocabulary word."""
    bos_id: int = 4
    """Id of <s>, the decoder's first input."""
    eos_id: int = 5
    """Id of </s>, which ends a question."""
    d_embed: int = 128
    """Word embedding width e (shared by encoder and decoder)."""
    d_hidden: int = 256
    """Decoder GRU width d; the encoder's bidirectional GRU has d/2 per direction."""
    d_answer: int = 16
    """Width of the answer-indicator embedding joined to each paragraph word embedding."""
    dropout: float = 0.2
    """Dropout on embeddings and on o_t."""

    def __post_init__(self):
        specials = (self.pad_id, self.unk_id, self.bos_id, self.eos_id)
        if len(set(specials)) < 4 or not all(0 <= i < self.n_token for i in specials):
            raise ValueError(f"pad_id, unk_id, bos_id, eos_id must be distinct ids below n_token {self.n_token}, "
                             f"got {specials}")
        if min(self.d_embed, self.d_hidden, self.d_answer) < 1 or self.d_hidden % 2:
            raise ValueError(f"d_embed, d_answer must be >= 1 and d_hidden even and >= 2, got "
                             f"{self.d_embed}, {self.d_answer}, {self.d_hidden}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class Encoded:
    """The encoded paragraph, what every decoder step reads."""

    states: Tensor
    """[b, s, d] bidirectional GRU states."""
    keys: Tensor
    """[b, s, d] the states through the bilinear attention matrix (W_a h_i), computed once."""
    mask: Tensor
    """[b, s] bool, True at real paragraph tokens."""
    src_ext: Tensor
    """[b, s] extended-vocabulary ids of the paragraph tokens (copy targets)."""
    n_ext: int
    """Largest number of out-of-vocabulary paragraph words in the batch (X = V + n_ext)."""
    init: Tensor
    """[b, d] the decoder's initial state."""

    def repeat(self, k: int) -> "Encoded":
        """Each example repeated k times in a row (beam search): [b, ...] -> [b·k, ...]."""
        rep = lambda x: x.repeat_interleave(k, dim=0)  # noqa: E731
        return Encoded(rep(self.states), rep(self.keys), rep(self.mask), rep(self.src_ext), self.n_ext, rep(self.init))


@dataclass
class QuestionGenOutput:
    """Teacher-forced decoding of questions (the parts of Eq. 3.7)."""

    vocab_log_probs: Tensor
    """[b, t, V] log p_vocab."""
    attention: Tensor
    """[b, t, s] α_t, the attention (= copy distribution over positions); 0 at padding."""
    gate: Tensor
    """[b, t] g_t, the probability of generating from the vocabulary."""
    src_ext: Tensor
    """[b, s] extended ids of the paragraph tokens."""
    n_ext: int
    """Out-of-vocabulary slots of the batch."""

    def log_probs(self) -> Tensor:
        """[b, t, X] log p(y_t) over the extended vocabulary (Eq. 3.7), X = V + n_ext."""
        return mixture_log_probs(self.vocab_log_probs, self.attention, self.gate, self.src_ext, self.n_ext)

    def target_log_probs(self, targets: Tensor) -> Tensor:
        """[b, t] log p(y_t = targets) without building the [b, t, X] distribution.

        Args:
            targets: [b, t] extended ids (padding positions may hold any id; mask them afterwards).
        """
        v = self.vocab_log_probs.shape[-1]
        in_vocab = targets < v
        p_vocab = self.vocab_log_probs.gather(-1, targets.clamp(max=v - 1)[..., None]).squeeze(-1).exp() * in_vocab
        p_copy = (self.attention * (self.src_ext[:, None, :] == targets[..., None])).sum(-1)
        return torch.log(self.gate * p_vocab + (1 - self.gate) * p_copy + 1e-12)


def mixture_log_probs(vocab_log_probs: Tensor, attention: Tensor, gate: Tensor, src_ext: Tensor, n_ext: int) -> Tensor:
    """Eq. 3.7 over the extended vocabulary: log(g · p_vocab ⊕ 0_{n_ext} + (1 − g) · scatter(α, src_ext)).

    Shapes: vocab_log_probs [..., V], attention [..., s], gate [...], src_ext [b, s] with the leading
    axis of the others b (any axes between are broadcast) -> [..., V + n_ext].
    """
    p = F.pad(vocab_log_probs.exp() * gate[..., None], (0, n_ext))
    index = src_ext.view(src_ext.shape[0], *([1] * (attention.dim() - 2)), src_ext.shape[1]).expand_as(attention)
    p = p.scatter_add(-1, index, attention * (1 - gate[..., None]))
    return torch.log(p + 1e-12)


class QuestionGenerator(nn.Module):
    """G of GDAN (module docstring): encode(paragraph, answer indicator) then decode a question.

    Args:
        cfg: :class:`QuestionGenConfig`.
    """

    def __init__(self, cfg: QuestionGenConfig):
        super().__init__()
        self.config = cfg
        d, e = cfg.d_hidden, cfg.d_embed
        self.embed = nn.Embedding(cfg.n_token, e, padding_idx=cfg.pad_id)
        self.answer_embed = nn.Embedding(2, cfg.d_answer)
        self.encoder = BiGRU(e + cfg.d_answer, d // 2)
        self.init_proj = nn.Linear(d, d)
        self.decoder = nn.GRU(e, d, batch_first=True)
        self.attn = nn.Linear(d, d, bias=False)
        self.combine = nn.Linear(2 * d, d)
        self.out = nn.Linear(d, cfg.n_token)
        self.gate_proj = nn.Linear(d, 1)
        self.drop = nn.Dropout(cfg.dropout)

    def _embed_input(self, ids: Tensor) -> Tensor:
        """Embed decoder inputs, extended ids (copied OOV words) as <unk>."""
        return self.drop(self.embed(ids.masked_fill(ids >= self.config.n_token, self.config.unk_id)))

    def encode(self, src_ids: Tensor, answer: Tensor, mask: Tensor, src_ext: Tensor, n_ext: int) -> Encoded:
        """Encode the paragraph with its answer indicator.

        Args:
            src_ids: [b, s] vocabulary ids of the paragraph (out-of-vocabulary words as <unk>).
            answer: [b, s] 1 inside the answer chunk, 0 elsewhere.
            mask: [b, s] bool, True at real tokens (each row at least one).
            src_ext: [b, s] extended ids (OOV words V + their index among the paragraph's OOV words).
            n_ext: number of OOV slots the batch needs (>= 1 + the largest src_ext - V).
        """
        x = torch.cat([self.drop(self.embed(src_ids)), self.answer_embed(answer.long())], -1)
        states = self.encoder(x, mask)  # [b, s, d]
        half, rows = self.config.d_hidden // 2, torch.arange(src_ids.shape[0], device=src_ids.device)
        # the forward GRU's state at the last word and the backward GRU's at the first: each has read it all
        final = torch.cat([states[rows, mask.sum(1) - 1, :half], states[:, 0, half:]], -1)
        init = torch.tanh(self.init_proj(final))  # [b, d]
        return Encoded(states, self.attn(states), mask, src_ext, n_ext, init)

    def _attend_and_mix(self, enc: Encoded, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Attention, p_vocab and g for decoder states h [b, t, d]: ([b, t, V] log p_vocab, [b, t, s] α, [b, t] g)."""
        scores = torch.einsum("btd,bsd->bts", h, enc.keys).masked_fill(~enc.mask[:, None, :], float("-inf"))
        alpha = scores.softmax(-1)
        context = torch.einsum("bts,bsd->btd", alpha, enc.states)
        o = self.drop(torch.tanh(self.combine(torch.cat([h, context], -1))))
        return self.out(o).log_softmax(-1), alpha, torch.sigmoid(self.gate_proj(o)).squeeze(-1)

    def forward(self, src_ids: Tensor, answer: Tensor, mask: Tensor, src_ext: Tensor, n_ext: int,
                tgt_in: Tensor) -> QuestionGenOutput:
        """Teacher-forced decoding.

        Args:
            src_ids, answer, mask, src_ext, n_ext: the paragraph, as for :meth:`encode`.
            tgt_in: [b, t] decoder inputs, <s> then the question's extended ids (the targets shifted right).
        Returns:
            :class:`QuestionGenOutput` with [b, t, ...] parts.
        """
        enc = self.encode(src_ids, answer, mask, src_ext, n_ext)
        h, _ = self.decoder(self._embed_input(tgt_in), enc.init[None].contiguous())
        vocab_lp, alpha, gate = self._attend_and_mix(enc, h)
        return QuestionGenOutput(vocab_lp, alpha, gate, src_ext, n_ext)

    def decode_step(self, enc: Encoded, token: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One decoder step: ([b, X] log p(y_t) over the extended vocabulary, [b, d] new state) for the
        previous tokens [b] (extended ids) and state [b, d]."""
        h, _ = self.decoder(self._embed_input(token[:, None]), state[None].contiguous())
        vocab_lp, alpha, gate = self._attend_and_mix(enc, h)
        return mixture_log_probs(vocab_lp, alpha, gate, enc.src_ext, enc.n_ext)[:, 0], h[:, 0]

    @torch.no_grad()
    def sample(self, src_ids: Tensor, answer: Tensor, mask: Tensor, src_ext: Tensor, n_ext: int, max_len: int,
               *, greedy: bool = False, temperature: float = 1.0,
               generator: torch.Generator | None = None) -> Tensor:
        """Questions drawn from p(q | paragraph, answer) (ancestral sampling; ``greedy``: the argmax each step).

        Gradients are not tracked: REINFORCE rescores the samples with :meth:`forward` (objectives.question_gen).

        Returns:
            [b, max_len] extended ids, </s> after the last word and <pad> after it (a question that
            reaches max_len has no </s>).
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        cfg = self.config
        enc = self.encode(src_ids, answer, mask, src_ext, n_ext)
        b = src_ids.shape[0]
        token = torch.full((b,), cfg.bos_id, dtype=torch.long, device=src_ids.device)
        state, done, out = enc.init, torch.zeros(b, dtype=torch.bool, device=src_ids.device), []
        for _ in range(max_len):
            log_p, state = self.decode_step(enc, token, state)
            if greedy:
                token = log_p.argmax(-1)
            else:
                token = torch.multinomial((log_p / temperature).softmax(-1), 1, generator=generator).squeeze(-1)
            token = token.masked_fill(done, cfg.pad_id)
            out.append(token)
            done = done | (token == cfg.eos_id)
            if bool(done.all()):
                break
        ids = torch.stack(out, 1)
        return F.pad(ids, (0, max_len - ids.shape[1]), value=cfg.pad_id)

    @torch.no_grad()
    def beam_search(self, src_ids: Tensor, answer: Tensor, mask: Tensor, src_ext: Tensor, n_ext: int,
                    max_len: int, beam: int = 5, length_penalty: float = 1.0) -> tuple[Tensor, Tensor]:
        """The most probable questions by beam search (for display; Table 3.3).

        Beams are ranked by their summed log-probability while searching; a finished hypothesis (one that
        emitted </s>) stays in its beam with its score frozen. At the end each example's hypotheses are
        compared by score / length^length_penalty (0: the plain sum).

        Returns:
            ([b, max_len] extended ids of the best hypothesis, </s> then <pad> after it;
             [b] its summed log-probability).
        """
        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        cfg, b, dev = self.config, src_ids.shape[0], src_ids.device
        enc = self.encode(src_ids, answer, mask, src_ext, n_ext).repeat(beam)
        x = cfg.n_token + n_ext
        scores = torch.full((b, beam), float("-inf"), device=dev)
        scores[:, 0] = 0.0  # only the first beam is alive at the start, so the k first picks differ
        token = torch.full((b * beam,), cfg.bos_id, dtype=torch.long, device=dev)
        state = enc.init
        done = torch.zeros(b, beam, dtype=torch.bool, device=dev)
        lengths = torch.zeros(b, beam, device=dev)
        seqs = torch.empty(b, beam, 0, dtype=torch.long, device=dev)
        for _ in range(max_len):
            log_p, state = self.decode_step(enc, token, state)
            log_p = log_p.view(b, beam, x)
            # a finished hypothesis continues only with <pad>, at no cost
            frozen = torch.full_like(log_p, float("-inf"))
            frozen[..., cfg.pad_id] = 0.0
            log_p = torch.where(done[..., None], frozen, log_p)
            total = (scores[..., None] + log_p).view(b, beam * x)
            scores, flat = total.topk(beam, dim=-1)
            origin, token = flat // x, flat % x  # [b, k]
            seqs = torch.cat([seqs.gather(1, origin[..., None].expand(-1, -1, seqs.shape[2])), token[..., None]], -1)
            done = done.gather(1, origin)
            lengths = lengths.gather(1, origin) + (~done).float()
            done = done | (token == cfg.eos_id)
            rows = (torch.arange(b, device=dev)[:, None] * beam + origin).view(-1)
            state, token = state[rows], token.view(-1)
            if bool(done.all()):
                break
        ranked = scores / lengths.clamp(min=1) ** length_penalty
        best = ranked.argmax(-1)
        ids = seqs[torch.arange(b, device=dev), best]
        return F.pad(ids, (0, max_len - ids.shape[1]), value=cfg.pad_id), scores[torch.arange(b, device=dev), best]
