"""ELMo (Peters et al. 2018, "Deep contextualized word representations"): a character-CNN biLM and its scalar mix.

Token representation x_k (§3.1, after Kim et al. 2016 and Józefowicz et al. 2016): the token's
characters (:mod:`genfeat.data.chars`, BOW c_1..c_n EOW, padded to ``max_chars``) are embedded,
convolved with filters of several widths, max-pooled over the character positions and passed
through a ReLU; ``n_highway`` highway layers y = g * x + (1 - g) * relu(W_h x), g = sigmoid(W_g x)
follow, then a linear projection to the LSTM width d.

biLM (§3.1, Eq. 1): a forward LM of L LSTM layers reads the tokens left to right and its top state
at k predicts t_{k+1}; a backward LM of L other layers reads them right to left and its top state at
k predicts t_{k-1}. Both share the token representation and the softmax (Θ_x and Θ_s of Eq. 1).
Each LSTM has cell width ``d_lstm`` and projects its output to d (LSTMP, torch's ``proj_size``), and
a residual connection adds layer 1's output to layer 2's (and so on upwards). Differences from
bilm-tf: no cell or projection clipping, and no LSTM state carried from one batch to the next.

Layer activations (§3.2): h_{k,0} = [x_k; x_k] and h_{k,j} = [→h_{k,j}; ←h_{k,j}] for j = 1..L,
returned as one tensor [L + 1, b, t, 2d]; :class:`ScalarMix` turns them into
ELMo_k = γ Σ_j s_j h_{k,j} (Eq. 1 of §3.2), which :class:`ElmoAdapter` hands to the fine-tuning task
heads (frozen biLM by default, or fine-tuned with ``finetune_bilm``).

Words outside the vocabulary: the character CNN gives every word a representation, so a task text is
read word for word (:class:`SpelledWordVocab`): a word the pretraining vocabulary lacks gets an id from
V on whose spelling the biLM keeps beside its table (:meth:`ElmoBiLM.add_spellings`), instead of the
``<unk>`` the word-level vocabulary would give it. Only the LM loss needs ids below V (the softmax rows).

Softmax: a full softmax over the word vocabulary by default, or an adaptive softmax (Grave et al.
2017) with ``cutoffs`` for a large vocabulary; ELMo itself used a sampled softmax.

Axes: b batch (sentences or windows), t tokens, c characters per token (``max_chars``), e character
embedding width, f filters (all widths together), d LSTM output width, L LSTM layers, V words.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import Config
from ..data.chars import PAD, CharVocab
from ..data.vocab import EOS, Vocab
from ..errors import CheckpointError, ConfigError
from ..nn.adaptive import AdaptiveLogSoftmax, check_ids, check_token_input
from .heads import BackboneAdapter, EosFormat, register_adapter


@dataclass
class ElmoConfig(Config):
    """Architecture of an ELMo biLM (bilm-tf option names in parentheses)."""

    n_token: int = 10000
    """Word vocabulary V of the softmax (n_tokens_vocab); set from the vocabulary by the runner."""
    n_char: int = 261
    """Character vocabulary size, the four specials included (n_characters); set from the vocabulary."""
    max_chars: int = 50
    """Characters per token, the two word markers included (max_characters_per_token); longer words
    are truncated (genfeat.data.chars)."""
    char_dim: int = 16
    """Character embedding width e (char_cnn.embedding.dim)."""
    filters: list[tuple[int, int]] = field(default_factory=lambda: [(1, 32), (2, 32), (3, 64), (4, 128),
                                                                     (5, 256), (6, 512), (7, 1024)])
    """(width, number of filters) of each convolution (char_cnn.filters)."""
    n_highway: int = 2
    """Highway layers after the max-pooled filters (char_cnn.n_highway)."""
    d_proj: int = 512
    """Width d of the token projection and of every LSTM's output (lstm.projection_dim)."""
    d_lstm: int = 4096
    """LSTM cell width (lstm.dim); when larger than d_proj the output is projected to d_proj."""
    n_layer: int = 2
    """LSTM layers L per direction (lstm.n_layers)."""
    residual: bool = True
    """Add each LSTM layer's input to its output from the second layer on (lstm.use_skip_connections)."""
    dropout: float = 0.1
    """Dropout on the token representation, between LSTM layers and before the softmax."""
    cutoffs: list[int] = field(default_factory=list)
    """Adaptive-softmax cluster boundaries over frequency-ordered word ids (empty: full softmax)."""
    task_mix: bool = False
    """Carry a task-specific :class:`ScalarMix` (``mix``); fine-tuning adds it (:meth:`ElmoBiLM.add_task_mix`)."""
    finetune_bilm: bool = False
    """When fine-tuned on a task, train the biLM's weights too (False: frozen features, the paper's §3.3
    use, where only the scalar mix and the task model learn)."""

    @property
    def d_model(self) -> int:
        """Width of the layer activations, 2 d_proj (both directions): the features the task heads read."""
        return 2 * self.d_proj

    def __post_init__(self):
        if self.n_token < 1 or self.n_char < 5 or self.char_dim < 1 or self.d_proj < 1 or self.n_layer < 1:
            raise ValueError("n_token, char_dim, d_proj and n_layer must be >= 1 and n_char >= 5 "
                             "(four special characters and one real one)")
        if self.max_chars < 3:
            raise ValueError(f"max_chars ({self.max_chars}) must be >= 3: the two word markers and a character")
        if not self.filters or any(w < 1 or n < 1 for w, n in self.filters):
            raise ValueError(f"filters must be a non-empty list of (width >= 1, count >= 1), got {self.filters}")
        if max(w for w, _ in self.filters) > self.max_chars:
            raise ValueError(f"the widest filter ({max(w for w, _ in self.filters)}) is wider than max_chars "
                             f"({self.max_chars})")
        if self.n_highway < 0 or self.d_lstm < self.d_proj:
            raise ValueError(f"n_highway must be >= 0 and d_lstm ({self.d_lstm}) >= d_proj ({self.d_proj})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.cutoffs and (sorted(set(self.cutoffs)) != self.cutoffs or self.cutoffs[0] < 1
                             or self.cutoffs[-1] >= self.n_token):
            raise ValueError(f"cutoffs must be increasing and inside (0, n_token={self.n_token}), got {self.cutoffs}")


@dataclass
class ElmoOutput:
    layers: Tensor
    """[L + 1, b, t, 2d] the biLM's layer activations h_{k,j}: the token layer [x; x], then each LSTM
    layer's forward and backward states concatenated; zero at padding tokens."""
    mask: Tensor
    """[b, t] bool, True at real tokens (a token whose character row is all PAD is padding)."""
    forward_log_probs: Tensor | None = None
    """[b, t - 1] log p(t_{k+1} | t_1..t_k) at column k (``score_words``); 0 where either token is padding."""
    backward_log_probs: Tensor | None = None
    """[b, t - 1] log p(t_k | t_{k+1}..t_t) at column k (``score_words``); 0 where either token is padding."""


class Highway(nn.Module):
    """Highway layers (Srivastava et al. 2015): y = g * x + (1 - g) * relu(W_h x + b_h), g = sigmoid(W_g x + b_g).

    Shapes: x [n, f] -> [n, f].
    """

    def __init__(self, width: int, n_layer: int):
        super().__init__()
        # one linear gives both the transform and the gate: [n, f] -> [n, 2f]
        self.layers = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(n_layer))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            transform, gate = layer(x).chunk(2, dim=-1)
            g = torch.sigmoid(gate)
            x = g * x + (1 - g) * F.relu(transform)
        return x


class CharCNNEncoder(nn.Module):
    """Context-free token representation x_k from characters (module doc): embed, convolve, max-pool,
    ReLU, highway, project.

    Shapes: char_ids [..., c] -> [..., d]; all-PAD rows (padding tokens) give an arbitrary vector.
    """

    def __init__(self, cfg: ElmoConfig):
        super().__init__()
        self.max_chars = cfg.max_chars
        self.embed = nn.Embedding(cfg.n_char, cfg.char_dim, padding_idx=PAD)
        self.convs = nn.ModuleList(nn.Conv1d(cfg.char_dim, n, w) for w, n in cfg.filters)
        width = sum(n for _, n in cfg.filters)
        self.highway = Highway(width, cfg.n_highway)
        self.proj = nn.Linear(width, cfg.d_proj)

    def forward(self, char_ids: Tensor) -> Tensor:
        if char_ids.shape[-1] != self.max_chars:
            raise ValueError(f"tokens are spelled with {char_ids.shape[-1]} characters, the model takes "
                             f"{self.max_chars} (spell them with a CharVocab of max_chars={self.max_chars})")
        lead = char_ids.shape[:-1]
        e = self.embed(char_ids.reshape(-1, self.max_chars)).transpose(1, 2)                # [n, e, c]
        # max over character positions, then the activation (bilm-tf's order)
        pooled = torch.cat([F.relu(conv(e).amax(dim=-1)) for conv in self.convs], dim=-1)   # [n, f]
        return self.proj(self.highway(pooled)).view(*lead, -1)


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each row's first ``lengths[i]`` positions along dim 1 and leave its padding where it is.

    Its own inverse; the backward LM runs on the reversed rows, so padding stays at the right.
    Shapes: x [b, t, ...], lengths [b] -> [b, t, ...].
    """
    t = x.shape[1]
    pos = torch.arange(t, device=x.device)[None]                                   # [1, t]
    idx = torch.where(pos < lengths[:, None], lengths[:, None] - 1 - pos, pos)    # [b, t]
    return x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))


class ElmoBiLM(nn.Module):
    """The ELMo biLM (module doc): character CNN, forward and backward LSTM stacks, one shared softmax.

    ``model(char_ids=None, word_ids=None, *, score_words=False) -> ElmoOutput``

    Args:
        char_ids: [b, t, c] spelled tokens (genfeat.data.chars.CharVocab), right-padded with all-PAD
            tokens; default: ``word_ids`` spelled with the model's ``spelling`` table (:meth:`spell`).
        word_ids: [b, t] the tokens' word ids in [0, V).
        score_words: also return both directions' log-probabilities of the neighbouring words of
            ``word_ids`` (the terms of Eq. 1), which the biLM objective (genfeat.objectives.bilm) sums.

    The buffer ``spelling`` [V, c] holds the character row of every word of the vocabulary the
    model was trained with (:meth:`set_spelling`), so a checkpoint spells word ids by itself. Ids from V
    on are words outside that vocabulary, spelled by the rows :meth:`add_spellings` appended (a task
    text's words, :class:`SpelledWordVocab`); they are read, never predicted.
    """

    def __init__(self, cfg: ElmoConfig):
        super().__init__()
        self.config = cfg
        self.tokens = CharCNNEncoder(cfg)
        proj = cfg.d_proj if cfg.d_lstm > cfg.d_proj else 0

        def stack() -> nn.ModuleList:
            return nn.ModuleList(nn.LSTM(cfg.d_proj, cfg.d_lstm, proj_size=proj, batch_first=True)
                                 for _ in range(cfg.n_layer))

        self.forward_lstms = stack()
        self.backward_lstms = stack()
        self.drop = nn.Dropout(cfg.dropout)
        self.softmax = AdaptiveLogSoftmax(cfg.n_token, cfg.d_proj, cfg.d_proj, list(cfg.cutoffs))
        self.register_buffer("spelling", torch.zeros(cfg.n_token, cfg.max_chars, dtype=torch.long))
        # [n, c] spellings of ids V .. V + n - 1; a plain tensor, not a buffer: it grows as task texts are
        # encoded, so it is in no checkpoint (the vocabulary re-reads the words) and DDP never broadcasts it
        # (every rank encodes the same texts in the same order and gets the same rows)
        self.extra_spelling = torch.zeros(0, cfg.max_chars, dtype=torch.long)
        self.mix = ScalarMix(cfg.n_layer + 1) if cfg.task_mix else None

    def set_spelling(self, table: Tensor) -> None:
        """Store the character rows of the vocabulary's words ([V, c], ``CharVocab.spell_table``)."""
        if tuple(table.shape) != tuple(self.spelling.shape):
            raise ValueError(f"spelling table {tuple(table.shape)} does not match the model's "
                             f"{tuple(self.spelling.shape)} (n_token, max_chars)")
        self.spelling.copy_(table)

    def add_spellings(self, rows: Tensor) -> int:
        """Append the character rows [k, c] of k words outside the vocabulary; returns the id of the first.

        The rows must come from the model's character vocabulary (``CharVocab.spell``)."""
        if rows.dim() != 2 or rows.shape[1] != self.config.max_chars:
            raise ValueError(f"spellings must be [words, {self.config.max_chars}], got {tuple(rows.shape)}")
        check_ids(rows, self.config.n_char, "character ids")
        first = self.config.n_token + self.extra_spelling.shape[0]
        self.extra_spelling = torch.cat([self.extra_spelling, rows.to("cpu", torch.long)])
        return first

    def spell(self, word_ids: Tensor) -> Tensor:
        """Character rows of word ids: the table below V, the appended rows from V on. Shapes: [...] -> [..., c]."""
        v = self.config.n_token
        check_ids(word_ids, v + self.extra_spelling.shape[0], "word ids")
        rows = self.spelling[word_ids.clamp(max=v - 1)]
        extra = word_ids >= v
        if extra.any():
            rows[extra] = self.extra_spelling[(word_ids[extra] - v).cpu()].to(rows.device)
        return rows

    def text_vocabulary(self, vocab) -> "SpelledWordVocab":
        """The vocabulary task texts are encoded with (genfeat.hub.load_checkpoint calls it): ``vocab``, the
        word vocabulary this model was trained with, read word for word (:class:`SpelledWordVocab`)."""
        return SpelledWordVocab(vocab, self)

    def add_task_mix(self) -> ScalarMix:
        """Add the task's scalar mix (even weights, γ = 1) unless the model has one; returns it.

        It is a new parameter: call this before building the optimizer."""
        if self.mix is None:
            self.mix = ScalarMix(self.config.n_layer + 1).to(self.spelling.device)
            self.config = dataclasses.replace(self.config, task_mix=True)
        return self.mix

    def train(self, mode: bool = True) -> "ElmoBiLM":
        """Set training mode; with frozen features (a task mix, ``finetune_bilm`` false) only the mix follows it.

        The frozen biLM stays in eval mode, its dropout off, so the task reads the same deterministic
        features in training as in evaluation (the paper's §3.3 use: the biLM is a fixed feature
        extractor; regularisation is the task side's dropout on ELMo_k, the head's ``head_dropout``)."""
        super().train(mode)
        if self.mix is not None and not self.config.finetune_bilm:
            for name, child in self.named_children():
                if name != "mix":
                    child.train(False)
        return self

    def _direction(self, lstms: nn.ModuleList, x: Tensor) -> list[Tensor]:
        """Outputs of each layer of one direction's stack, [b, t, d] each (inputs right-padded)."""
        outs, h = [], x
        for j, lstm in enumerate(lstms):
            with warnings.catch_warnings():
                # torch says on CPU, once per process, that oneDNN lacks LSTMP and it uses its own kernel: no action
                warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
                y, _ = lstm(self.drop(h))
            if self.config.residual and j > 0:
                y = y + h
            outs.append(y)
            h = y
        return outs

    def forward(self, char_ids: Tensor | None = None, word_ids: Tensor | None = None, *,
                score_words: bool = False) -> ElmoOutput:
        """The biLM's layer activations h_{k,j} (§3.2) and, with ``score_words``, both directions' log-probabilities
        of the neighbouring words, the terms of Eq. 1 (arguments in the class docstring).

        Shapes: char_ids [b, t, c], word_ids [b, t] -> :class:`ElmoOutput`: layers [L + 1, b, t, 2d], mask [b, t],
        forward_log_probs and backward_log_probs [b, t - 1].
        """
        if word_ids is not None:
            check_token_input(word_ids, "word_ids", "[b, t]")
        if char_ids is not None:
            check_token_input(char_ids, "char_ids", "[b, t, c]")
            check_ids(char_ids, self.config.n_char, "char_ids")
        elif word_ids is None:
            raise ValueError("give char_ids or word_ids")
        else:
            char_ids = self.spell(word_ids)
        mask = (char_ids != PAD).any(-1)                                           # [b, t]
        lengths = mask.sum(1)
        # reverse_padded and the forward LSTM assume right padding
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device)[None] < lengths[:, None]):
            raise ValueError("padding tokens (all-PAD character rows) must come after a sentence's tokens")
        x = self.tokens(char_ids) * mask[..., None]                                # [b, t, d]
        fwd = self._direction(self.forward_lstms, x)
        bwd = [reverse_padded(y, lengths) for y in self._direction(self.backward_lstms, reverse_padded(x, lengths))]
        keep = mask[..., None].to(x.dtype)
        layers = torch.stack([torch.cat([x, x], -1)] + [torch.cat([f, b], -1) * keep for f, b in zip(fwd, bwd)])
        out = ElmoOutput(layers=layers, mask=mask)
        if score_words:
            if word_ids is None or word_ids.shape != mask.shape:
                raise ValueError(f"score_words needs word_ids matching the {tuple(mask.shape)} tokens")
            pair = mask[:, 1:] & mask[:, :-1]                                      # [b, t - 1]
            out.forward_log_probs = self._pair_log_probs(fwd[-1][:, :-1], word_ids[:, 1:], pair)
            out.backward_log_probs = self._pair_log_probs(bwd[-1][:, 1:], word_ids[:, :-1], pair)
        return out

    def _pair_log_probs(self, hidden: Tensor, targets: Tensor, pair: Tensor) -> Tensor:
        """log p(targets | hidden) under the shared softmax at the ``pair`` positions, 0 elsewhere.

        Shapes: hidden [b, t', d], targets [b, t'], pair [b, t'] bool -> [b, t'] (at least fp32).
        """
        picked = targets[pair]
        check_ids(picked, self.config.n_token, "word ids")
        lp = self.softmax.target_log_prob(self.drop(hidden[pair]), picked)
        return torch.zeros(pair.shape, dtype=lp.dtype, device=lp.device).masked_scatter(pair, lp)

    def log_probs(self, hidden: Tensor) -> Tensor:
        """Full log-distribution over the V words of the shared softmax. Shapes: [..., d] -> [..., V]."""
        return self.softmax.log_prob(hidden.reshape(-1, hidden.shape[-1])).view(*hidden.shape[:-1], -1)


class ScalarMix(nn.Module):
    """ELMo_k^task = γ^task Σ_j s_j^task h_{k,j} (Peters et al. 2018, §3.2, Eq. 1).

    s = softmax(w) over the L + 1 layers and the scale γ are trained with the task; w starts at 0
    (an even average) and γ at 1. ``layer_norm`` normalises each layer first (over the real tokens'
    2d features, as the paper's footnote suggests for some tasks).

    Shapes: layers [L + 1, b, t, D], mask [b, t] (needed with ``layer_norm``) -> [b, t, D].
    """

    def __init__(self, n_layers: int, layer_norm: bool = False):
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"ScalarMix needs at least one layer, got {n_layers}")
        self.weights = nn.Parameter(torch.zeros(n_layers))
        self.gamma = nn.Parameter(torch.ones(()))
        self.layer_norm = layer_norm

    def forward(self, layers: Tensor, mask: Tensor | None = None) -> Tensor:
        """ELMo_k = γ Σ_j s_j h_{k,j} (§3.2, Eq. 1).

        Shapes: layers [L + 1, b, t, D], mask [b, t] (needed with ``layer_norm``) -> [b, t, D].
        """
        if layers.shape[0] != self.weights.numel():
            raise ValueError(f"ScalarMix was built for {self.weights.numel()} layers, got {layers.shape[0]}")
        if self.layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with layer_norm needs the token mask")
            m = mask[None, ..., None].to(layers.dtype)                             # [1, b, t, 1]
            n = (m.sum(dim=(1, 2, 3)) * layers.shape[-1]).clamp(min=1.0)           # [1]
            mean = (layers * m).sum(dim=(1, 2, 3)) / n
            var = (((layers - mean[:, None, None, None]) * m) ** 2).sum(dim=(1, 2, 3)) / n
            layers = (layers - mean[:, None, None, None]) / torch.sqrt(var[:, None, None, None] + 1e-12)
        s = torch.softmax(self.weights, 0).to(layers.dtype)
        return self.gamma * torch.einsum("j,jbtd->btd", s, layers)


@register_adapter("elmo")
class ElmoAdapter(BackboneAdapter):
    """ELMo as a fine-tuning backbone (genfeat.models.heads; the paper's §3.3 use with the task heads).

    The task states are the task's scalar mix of the biLM layers, ELMo_k = γ Σ_j s_j h_{k,j} [n, t, 2d]
    (:meth:`ElmoBiLM.add_task_mix` adds the mix). With ``finetune_bilm`` false (default) the biLM is
    frozen and only the mix and the head learn; true trains the biLM too. Input: the word-level
    vocabulary's ``A <eos> (B <eos>)`` (:class:`~genfeat.models.heads.EosFormat`), right padding, word ids
    spelled by the model (:meth:`ElmoBiLM.spell`): with the :class:`SpelledWordVocab` the checkpoint loads
    with, every word of the task reaches the character CNN as it is written, in the pretraining vocabulary or not.
    The summary token (the last ``<eos>``) gets the mean of the sequence's ELMo vectors: a biLM has no
    single state that has read the whole sequence in both directions.
    """

    def prepare(self, backbone):
        backbone.add_task_mix()
        if not backbone.config.finetune_bilm:
            for name, p in backbone.named_parameters():
                p.requires_grad_(name.startswith("mix."))

    def input_format(self, backbone, vocab):
        eos = getattr(vocab, "index", {}).get(EOS)
        if eos is None:
            raise ConfigError("the ELMo checkpoint's vocabulary has no <eos> token for the task format",
                              "fine-tune an ELMo trained on a word-level corpus with end-of-line tokens (ptb)")
        return EosFormat(eos_id=eos, pad_id=eos)

    def hidden(self, backbone, input_ids, attention_mask, token_type_ids, mems=None):
        char_ids = backbone.spell(input_ids)
        if attention_mask is not None:
            char_ids = char_ids.masked_fill(attention_mask[..., None] == 0, PAD)     # padding: all-PAD rows
        out = backbone(char_ids)
        mixed = backbone.mix(out.layers, out.mask)                                  # [n, t, 2d]
        keep = out.mask[..., None].to(mixed.dtype)
        pooled = (mixed * keep).sum(1) / keep.sum(1).clamp(min=1.0)                # [n, 2d]
        rows = torch.arange(mixed.shape[0], device=mixed.device)
        last = (out.mask.sum(1) - 1).clamp(min=0)
        return mixed.index_put((rows, last), pooled), None


def char_vocab_for(vocab, max_chars: int) -> CharVocab:
    """The character vocabulary of a word vocabulary (genfeat.data.chars), as pretraining builds it."""
    symbols = getattr(vocab, "symbols", None)
    if symbols is None or getattr(vocab, "kind", None) != "word":
        raise ConfigError(f"ELMo needs a word-level vocabulary, got one of kind {getattr(vocab, 'kind', None)!r}",
                          "train on a word-level corpus (ptb, wikitext2 or a text file read as words)")
    return CharVocab.from_words(symbols, max_chars)


class SpelledWordVocab(Vocab):
    """A word vocabulary as ELMo reads task text: every word keeps its own identity, none becomes ``<unk>``.

    A word of the pretraining vocabulary gets its id there (< V); any other word gets the next free id
    from V on, the first time it is met, and its character row is appended to ``model``'s spellings
    (:meth:`ElmoBiLM.add_spellings`). A word's features therefore depend only on its characters, never on
    whether the pretraining corpus happened to contain it. When the pretraining vocabulary has no
    capital letter (PTB is lowercased) words are lowercased first, so that "The" is read as "the"
    rather than with an unknown character.

    Ids from V on are assigned in the order words are met, so they differ between runs that encode
    different texts; nothing is trained per id (the character CNN reads the spelling), so a saved model
    needs none of them: ``save`` writes the pretraining vocabulary, and loading it encodes the texts anew.
    ``len`` is V, the words the biLM's softmax predicts.

    Args:
        vocab: the model's word vocabulary (a ``SymbolVocab`` of kind word, as saved with the checkpoint).
        model: the :class:`ElmoBiLM` whose spellings it extends.
    """

    kind = "word"

    def __init__(self, vocab, model: ElmoBiLM):
        if isinstance(vocab, SpelledWordVocab):
            vocab = vocab.base
        self.chars = char_vocab_for(vocab, model.config.max_chars)
        if len(self.chars) != model.config.n_char or len(vocab) != model.config.n_token:
            raise CheckpointError(f"the word vocabulary ({len(vocab)} words, {len(self.chars)} characters) is not "
                                  f"the ELMo model's ({model.config.n_token} words, {model.config.n_char} characters)",
                                  "use the vocab.json saved with the checkpoint")
        self.base, self.model = vocab, model
        self.index = vocab.index
        self.add_eos = vocab.add_eos
        self.lowercase = not any(c.isupper() for c in self.chars.chars)
        self.extra: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.base)

    def encode(self, text: str) -> list[int]:
        words = self.base.split(text.lower() if self.lowercase else text)
        new = list(dict.fromkeys(w for w in words if w not in self.index and w not in self.extra))
        if new:
            first = self.model.add_spellings(torch.tensor([self.chars.spell(w) for w in new], dtype=torch.long))
            self.extra.update({w: first + i for i, w in enumerate(new)})
        return [self.index[w] if w in self.index else self.extra[w] for w in words]

    def decode(self, ids) -> str:
        spelled = {i: w for w, i in self.extra.items()}
        words = " ".join(spelled[i] if i in spelled else self.base.symbols[i] for i in map(int, ids))
        return words.replace(f" {EOS} ", "\n").replace(EOS, "\n")

    def payload(self) -> dict:
        return self.base.payload()
