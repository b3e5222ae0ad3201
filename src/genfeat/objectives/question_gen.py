"""Objectives of GDAN's question generator G (thesis §3.2; Yang et al., ACL 2017).

- :class:`QuestionGenMLE`: maximum likelihood with teacher forcing on labelled (paragraph, answer,
  question) triples, −Σ_t log p(y_t | y_<t, p, a) with p(y_t) of Eq. 3.7: G's pretraining.
- :class:`QuestionGenReinforce`: Algorithm 1's G step. G maximises J(U_G, d_true, D), the log-likelihood
  D assigns to the answer a of each generated example (p, q, a) when D reads q with the *true* domain
  tag d_true, i.e. G is trained to write questions that D, taking them for human ones, answers
  correctly. The objective is not differentiable in the sampled words, so its gradient is estimated
  by REINFORCE with an average-reward baseline:

      ∇J ≈ (1/B) Σ_i (r_i − b) ∇ log p_G(q_i | p_i, a_i),   q_i ~ p_G(· | p_i, a_i),
      r_i = log P_D(a_i | p_i, q_i, d_true),

  where b is a running average of past rewards (an exponential moving average with ``decay``; taken
  before the current batch, so it does not depend on the current samples and the estimate stays
  unbiased). The first batch has no past rewards: there example i's baseline is the mean reward of the
  batch's other examples (leave-one-out, still independent of q_i, so still unbiased), rather than 0,
  which would scale up the raw rewards (log-likelihoods, all negative) in G's first step; the running
  average then starts at the first batch's mean. D enters as a callable ``reward(batch, questions) -> [b]`` (genfeat.methods.gdan builds
  it from the GA reader), so any D, or a stub in tests, plugs in.

Both return :class:`~genfeat.framework.objective.LossOutput` sums with counts (target tokens for MLE,
examples for REINFORCE). The model passed in is G itself or a container with G as attribute
``generator_attr``.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch import Tensor, nn

from ..data.question_gen import QGBatch
from ..framework.objective import LossOutput, Objective
from ..models.question_gen import QuestionGenerator

Reward = Callable[[QGBatch, Tensor], Tensor]
"""``reward(batch, questions)``: [b] rewards for generated questions [b, T] (extended ids, </s> then <pad>)."""


def _generator(model: nn.Module, attr: str) -> QuestionGenerator:
    return getattr(model, attr) if attr else model


def question_mask(ids: Tensor, eos_id: int) -> Tensor:
    """[b, T] bool: the generated positions up to and including the first </s> (all T without one)."""
    is_eos = (ids == eos_id).long()
    return (is_eos.cumsum(1) - is_eos) == 0


def shift_right(ids: Tensor, bos_id: int) -> Tensor:
    """Decoder inputs for targets ``ids`` [b, T]: <s> then ids[:, :-1]."""
    return torch.cat([torch.full_like(ids[:, :1], bos_id), ids[:, :-1]], 1)


class QuestionGenMLE(Objective):
    """−Σ log p(question word | earlier words, paragraph, answer) over the batch's target tokens (</s>
    included), teacher forced. Logs ``copy_gate``: Σ (1 − g_t), the mass put on copying.

    Args:
        generator_attr: attribute holding G when the model is a container ("" : the model is G).
    """

    name = "qg_mle"

    def __init__(self, generator_attr: str = ""):
        self.generator_attr = generator_attr

    def __call__(self, model: nn.Module, batch: QGBatch) -> LossOutput:
        g = _generator(model, self.generator_attr)
        out = g(*batch.model_inputs(), batch.tgt_in)
        log_p = out.target_log_probs(batch.tgt_out)  # [b, t]
        mask = batch.tgt_mask
        copy = float(((1 - out.gate.detach()) * mask).sum())
        return LossOutput(-(log_p * mask).sum(), int(mask.sum()), {"copy_gate": copy})


class QuestionGenReinforce(Objective):
    """REINFORCE on J(U_G, d_true, D) with an average-reward baseline (module docstring).

    Sampling and rescoring run G without dropout, so the samples come from the distribution whose
    log-probability is differentiated.

    Args:
        reward: ``reward(batch, questions) -> [b]``, D's log-likelihood of each example's answer given
            the generated question tagged d_true (called without gradients).
        max_len: longest generated question, </s> included (default 30).
        temperature: sampling temperature (default 1.0: the model's distribution, as REINFORCE needs).
        decay: the baseline's moving-average decay β, b ← β b + (1 − β) mean(r) (default 0.9; 0: the
            previous batch's mean reward).
        generator_attr: attribute holding G in a container model ("": the model is G).
    Logs (sums over the batch's examples): ``reward``, ``advantage``, ``question_words``.
    """

    name = "qg_reinforce"

    def __init__(self, reward: Reward, max_len: int = 30, temperature: float = 1.0, decay: float = 0.9,
                 generator_attr: str = ""):
        if max_len < 1 or temperature <= 0 or not 0.0 <= decay < 1.0:
            raise ValueError(f"max_len must be >= 1, temperature > 0 and decay in [0, 1), got {max_len}, "
                             f"{temperature}, {decay}")
        self.reward, self.max_len, self.temperature, self.decay = reward, max_len, temperature, decay
        self.generator_attr = generator_attr
        self.reset_state()

    def reset_state(self) -> None:
        """Forget the baseline (no reward seen yet: the next batch uses the leave-one-out baseline)."""
        self.baseline = torch.zeros(())
        self.seen = torch.zeros((), dtype=torch.long)

    def current_baseline(self, rewards: Tensor) -> Tensor:
        """The baseline each of the batch's rewards [b] is compared with: the running average once a batch
        has been seen; on the first batch, the mean of the other examples' rewards ([b]; with b = 1 the
        reward itself, so a lone first example makes no step)."""
        if int(self.seen) > 0:
            return self.baseline.to(rewards.device).expand_as(rewards)
        n = rewards.numel()
        if n == 1:
            return rewards.clone()
        return (rewards.sum() - rewards) / (n - 1)

    def update_baseline(self, rewards: Tensor) -> None:
        """b ← mean(r) on the first batch, then b ← β b + (1 − β) mean(r)."""
        mean = rewards.detach().float().mean().cpu()
        self.baseline = mean if int(self.seen) == 0 else self.decay * self.baseline + (1 - self.decay) * mean
        self.seen = self.seen + 1

    def __call__(self, model: nn.Module, batch: QGBatch) -> LossOutput:
        g = _generator(model, self.generator_attr)
        cfg = g.config
        was_training = g.training
        g.eval()
        try:
            questions = g.sample(*batch.model_inputs(), self.max_len, temperature=self.temperature)
            with torch.no_grad():
                rewards = self.reward(batch, questions).float()
            mask = question_mask(questions, cfg.eos_id)
            # the log-probabilities of the policy that sampled (no dropout), with gradients: cuDNN's RNN
            # refuses a backward in evaluation mode, PyTorch's own kernels compute the same function
            with torch.backends.cudnn.flags(enabled=False):
                out = g(*batch.model_inputs(), shift_right(questions, cfg.bos_id))
            log_p = (out.target_log_probs(questions) * mask).sum(1)  # [b] log p_G(q | p, a)
        finally:
            g.train(was_training)
        advantage = rewards - self.current_baseline(rewards)
        self.update_baseline(rewards)
        loss_sum = -(advantage * log_p).sum()
        return LossOutput(loss_sum, len(rewards), {"reward": float(rewards.sum()), "advantage": float(advantage.sum()),
                                                   "question_words": float(mask.sum() - (questions == cfg.eos_id).sum())})

    def state_dict(self) -> dict[str, Tensor]:
        return {"baseline": self.baseline.clone(), "seen": self.seen.clone()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.baseline, self.seen = state["baseline"].clone().float(), state["seen"].clone().long()
