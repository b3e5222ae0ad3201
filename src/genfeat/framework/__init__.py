"""The training spine: objective contract, schedules, the loop, checkpoints, DDP."""

from .objective import LossOutput, Objective
from .optim import OptimConfig
from .schedule import OptimSpec, Phase, Stage, Term, alternating, joint, one_phase, two_phase
from .trainer import Trainer, TrainConfig, TrainResult, seed_everything

__all__ = ["LossOutput", "Objective", "OptimConfig", "OptimSpec", "Phase", "Stage", "Term", "alternating",
           "joint", "one_phase", "two_phase", "Trainer", "TrainConfig", "TrainResult", "seed_everything"]
