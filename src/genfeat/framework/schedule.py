"""Schedules: how the generative and target objectives are optimised (DESIGN.md, the schedule column).

A schedule is a list of :class:`Phase` s run one after another (two phase = pretrain, then
fine-tune). A phase cycles through its :class:`Stage` s; a stage runs ``repeat`` consecutive
steps, each step summing the weighted mean losses of its :class:`Term` s and stepping one named
optimizer. This one structure expresses every schedule of the thesis:

- one phase (Transformer-XL LM): one stage, one term;
- joint with weights (losses on different streams, e.g. GDAN's discriminator on labelled and generated
  data): one stage, several weighted terms (GPT-1's L2 + λ·L1 on one batch is one objective instead,
  genfeat.objectives.task, so that one forward pass serves both);
- alternating with separate optimizers (Planetoid T1/T2 steps, GAN G/D): several stages, each
  with its own optimizer and ``repeat`` = n steps per objective;
- two phase (XLNet/BERT pretrain then fine-tune): two phases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from torch import nn

from .objective import Objective
from .optim import OptimConfig
from .stream import Stream


@dataclass
class Term:
    """One objective paired with the data stream it is computed on, and its weight in the sum."""

    objective: Objective
    stream: Stream
    weight: float = 1.0


@dataclass
class Stage:
    """``repeat`` consecutive steps of the weighted sum of ``terms``, stepping ``optimizer``."""

    terms: list[Term]
    optimizer: str = "main"
    repeat: int = 1

    def __post_init__(self):
        if not self.terms:
            raise ValueError("a stage needs at least one term")
        if self.repeat < 1:
            raise ValueError(f"stage repeat must be >= 1, got {self.repeat}")


@dataclass
class OptimSpec:
    """An optimizer over ``params(model)`` (all trainable parameters when None)."""

    config: OptimConfig = field(default_factory=OptimConfig)
    params: Callable[[nn.Module], Iterable[nn.Parameter]] | None = None


def stage_steps(repeats: Sequence[int], done: int) -> list[int]:
    """The steps each stage of a cycle (``repeats[i]`` consecutive steps of stage i, in turn) runs in the first
    ``done`` steps of a phase."""
    rounds, rest = divmod(done, sum(repeats))
    counts = []
    for repeat in repeats:
        counts.append(rounds * repeat + min(rest, repeat))
        rest = max(rest - repeat, 0)
    return counts


@dataclass
class Phase:
    """``steps`` optimizer steps cycling through ``stages``, with the phase's own optimizers."""

    name: str
    steps: int
    stages: list[Stage]
    optimizers: dict[str, OptimSpec] = field(default_factory=lambda: {"main": OptimSpec()})

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"phase '{self.name}' has negative steps {self.steps}")
        for stage in self.stages:
            if stage.optimizer not in self.optimizers:
                raise ValueError(f"phase '{self.name}' uses optimizer '{stage.optimizer}' "
                                 f"but defines only {sorted(self.optimizers)}")

    @property
    def cycle(self) -> int:
        return sum(s.repeat for s in self.stages)

    def stage_at(self, step: int) -> Stage:
        """The stage that runs at 0-based ``step`` of this phase."""
        pos = step % self.cycle
        for stage in self.stages:
            if pos < stage.repeat:
                return stage
            pos -= stage.repeat
        raise AssertionError("unreachable: pos < cycle")

    def optimizer_steps(self, done: int) -> dict[str, int]:
        """The steps each optimizer took in the first ``done`` steps of this phase (every stage's ``repeat`` in
        turn), by optimizer name."""
        counts = dict.fromkeys(self.optimizers, 0)
        for stage, n in zip(self.stages, stage_steps([s.repeat for s in self.stages], done)):
            counts[stage.optimizer] += n
        return counts

    def terms(self) -> list[Term]:
        return [t for s in self.stages for t in s.terms]

    def long_warmups(self) -> list[str]:
        """A line (cause and fix) for each optimizer whose warm-up is not shorter than this phase: its learning rate
        climbs for the whole phase (:meth:`OptimConfig.lr_at` counts the phase's steps) and reaches its peak ``lr``
        at most at the last step. Not an error: a recipe run for a few steps (a test, a benchmark) warms up so."""
        lines = []
        for name, spec in self.optimizers.items():
            cfg = spec.config
            if 0 < self.steps <= cfg.warmup_steps:
                which = "its optimizer" if name == "main" else f"its optimizer '{name}'"
                lines.append(f"phase '{self.name}' has {self.steps} steps and {which} warms up over {cfg.warmup_steps} "
                             f"(warmup_steps), so its learning rate never leaves the warm-up: it reaches "
                             f"{self.steps / cfg.warmup_steps:.0%} of lr {cfg.lr:g}, at the last step. fix: set "
                             f"warmup_steps below {self.steps}, or give the phase more steps")
        return lines


def one_phase(objective: Objective, stream: Stream, steps: int, optim: OptimConfig) -> list[Phase]:
    """A single objective trained alone (Transformer-XL language modelling)."""
    return [Phase("train", steps, [Stage([Term(objective, stream)])], {"main": OptimSpec(optim)})]


def joint(terms: list[Term], steps: int, optim: OptimConfig, name: str = "train") -> list[Phase]:
    """Weighted sum of several objectives, each on its own stream, with one optimizer."""
    return [Phase(name, steps, [Stage(terms)], {"main": OptimSpec(optim)})]


def alternating(stages: list[tuple[Term, int, OptimSpec]], steps: int, name: str = "train") -> list[Phase]:
    """n_i steps of objective i with its own optimizer, in turn (Planetoid Algorithm 3, GAN G/D)."""
    optimizers = {f"opt{i}": spec for i, (_, _, spec) in enumerate(stages)}
    built = [Stage([term], optimizer=f"opt{i}", repeat=n) for i, (term, n, _) in enumerate(stages)]
    return [Phase(name, steps, built, optimizers)]


def two_phase(pretrain: list[Phase], finetune: list[Phase]) -> list[Phase]:
    """Pretrain, then fine-tune with fresh optimizers: one model, one Trainer, the phases in turn.

    The library's own XLNet, BERT and GPT fine-tuning chains two runs instead (methods/finetune: the
    phases differ in model, data, tokenizer and evaluation, and the pretraining's checkpoint serves many
    tasks); this schedule is for a method whose two phases train the same model in one run."""
    return [*pretrain, *finetune]
