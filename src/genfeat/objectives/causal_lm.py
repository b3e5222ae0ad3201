"""Causal language modelling with segment-level recurrence (thesis §2.1, Eq. 2.1).

L_g = -sum_t log p(x_t | x_<t), computed segment by segment; the model's memory of the previous
segment is carried between calls (stop-gradient is the model's job) and reset when the data
stream starts a new epoch or hands out unrelated segments.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

from ..framework.objective import LossOutput, RecurrentObjective


class CausalLMObjective(RecurrentObjective):
    """Negative log-likelihood of the next token, with memory carried across segments.

    Args:
        loss_positions: ``full`` scores every position of a segment; ``half`` only its second half
            (the "half loss" of Table 2.6, which evens out the context that absolute-position
            models without recurrence see).
        recurrence: carry the memory to the next segment (False: every segment starts empty).
        ext_len: the ``ext_len`` of the stream, whose inputs after the first start with the previous
            segment's last ext_len tokens (scored by nobody): the memory leaves those positions out,
            so every earlier token is in the context once (default None: the model's ``ext_len``).

    The batch must have ``input`` ([b, t] token ids, or [b, ext_len + t]), ``target`` ([b, t]) and
    ``new_epoch`` (bool). The model is called as ``model(input, labels=target)``, plus ``mems=``
    (the carried memory) with ``recurrence`` and ``ext_len=`` when given, and returns an output with
    ``target_log_probs`` [b, t] (and ``mems`` with recurrence). Models without memory (GPT-1, the
    LSTM LM of genfeat.models.lstm_lm) take ``recurrence=False``: every block starts afresh.
    """

    name = "lm"

    def __init__(self, loss_positions: Literal["full", "half"] = "full", recurrence: bool = True,
                 ext_len: int | None = None):
        if loss_positions not in ("full", "half"):
            raise ValueError(f"loss_positions must be 'full' or 'half', got {loss_positions!r}")
        if ext_len is not None and ext_len < 0:
            raise ValueError(f"ext_len must be >= 0, got {ext_len}")
        super().__init__(recurrence)
        self.loss_positions = loss_positions
        self.ext_len = ext_len

    def __call__(self, model: nn.Module, batch) -> LossOutput:
        mems = self.memory(batch.new_epoch)
        extra = {} if self.ext_len is None else {"ext_len": self.ext_len}
        if self.recurrence:
            extra["mems"] = mems
        out = model(batch.input, labels=batch.target, **extra)
        self.keep(out.mems if self.recurrence else None)
        log_probs = out.target_log_probs  # [b, t]
        if self.loss_positions == "half":
            log_probs = log_probs[:, log_probs.shape[1] // 2:]
        nll = -log_probs.float()
        return LossOutput(nll.sum(), nll.numel())
