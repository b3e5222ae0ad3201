"""The biLM objective of ELMo (Peters et al. 2018, §3.1, Eq. 1).

ELMo jointly maximises the log-likelihood of both directions,

    Σ_k [ log p(t_k | t_1..t_{k-1}; Θ_x, →Θ_LSTM, Θ_s) + log p(t_k | t_{k+1}..t_N; Θ_x, ←Θ_LSTM, Θ_s) ],

so the loss is the sum of the forward and backward negative log-likelihoods. Its count is the number
of neighbouring token pairs (each direction makes one prediction per pair), so the loss per item is
the sum of the two directions' per-token losses, and the logs ``forward`` and ``backward`` report
each direction's own (their per-item values add up to the loss).
"""

from __future__ import annotations

from typing import Mapping

from torch import Tensor, nn

from ..framework.objective import LossOutput, Objective


class BiLMObjective(Objective):
    """Forward + backward LM negative log-likelihood of an :class:`~genfeat.models.elmo.ElmoBiLM`.

    The batch holds ``word_ids`` [b, t] and optionally ``char_ids`` [b, t, c] (all-PAD rows after a
    sentence are padding); without ``char_ids`` the model spells the words with its ``spelling`` table.
    """

    name = "bilm"

    def __call__(self, model: nn.Module, batch: Mapping[str, Tensor]) -> LossOutput:
        out = model(batch.get("char_ids"), batch["word_ids"], score_words=True)
        fwd = -out.forward_log_probs.float().sum()
        bwd = -out.backward_log_probs.float().sum()
        pairs = (out.mask[:, 1:] & out.mask[:, :-1]).sum()
        return LossOutput(fwd + bwd, pairs, {"forward": float(fwd.detach()), "backward": float(bwd.detach())})
