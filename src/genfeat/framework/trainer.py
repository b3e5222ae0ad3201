"""The single training loop every method runs through.

One :class:`Trainer` runs a schedule (a list of :class:`~genfeat.framework.schedule.Phase`):
optimizers and learning-rate schedules per phase, gradient accumulation and clipping, bf16
autocast on CPU and CUDA, seeding, a tqdm bar with loss and items/s, a JSONL metrics log
(TensorBoard optional), periodic evaluation, early stopping on a validation metric, checkpoints
that resume exactly, and torchrun/DDP.

Loss normalisation (token weighting): a step minimises ``sum_t w_t * S_t / C_t`` over the terms
t of its stage, where S_t is the term's loss sum and C_t its item count (tokens, examples), both
summed over the step's accumulation micro-batches and over ranks. Every item of the global batch
weighs the same, also when micro-batches or ranks hold different counts (padding, masked LM), so
``grad_accum`` micro-batches step like one batch that many times as large, and a run on ``world``
ranks with per-rank batch B/world like a single-process run with batch B.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from ..config import Config
from ..errors import CheckpointError, ConfigError, DivergenceError
from ..io import json_safe, write_text_atomic
from .checkpoint import (BEST_STATE_FILE, load_best_state, load_for_resume, load_trainer_state, resume_dir,
                         rng_state, save_checkpoint, set_rng_state)
from .cpu import keep_freed_memory
from .distributed import DistInfo, all_reduce_sum, init_distributed, on_rank_0
from .optim import OptimConfig
from .objective import LossOutput
from .schedule import Phase, Stage, Term

__all__ = ["TrainConfig", "Trainer", "TrainResult", "OptimConfig", "seed_everything", "to_device"]

METRICS_FILE = "metrics.jsonl"
_DIVERGED_FIX = "lower optim.lr, raise optim.warmup_steps or set train.clip_norm, then run again with --overwrite"


@dataclass
class TrainConfig(Config):
    """How the loop runs (the schedule itself says what is optimised)."""

    seed: int = 0
    """Seed of every RNG at the start of training (rank r uses seed + r for its dropout masks); a run sets it from
    ``genfeat run --seed`` (a recipe may not: genfeat.runner refuses ``train.seed`` there)."""
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16 runs forward passes under torch.autocast (CPU and CUDA); parameters stay fp32."""
    clip_norm: float = 0.0
    """Clip the global gradient norm of the stepped parameters to this value (0: off)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; every item of them weighs the same in the step's loss (the
    module docstring's token weighting), however the items are spread over the micro-batches."""
    log_every: int = 50
    """Write a metrics line every this many steps."""
    eval_every: int = 0
    """Evaluate every this many steps (0: only at the end of each phase)."""
    early_stop_metric: str | None = None
    """Metric returned by the evaluator that early stopping and ``keep_best`` watch."""
    early_stop_mode: Literal["min", "max"] = "min"
    """Whether a smaller (loss, perplexity) or larger (accuracy) metric is better."""
    patience: int = 0
    """Stop the phase after this many evaluations without improvement (0: never stop early)."""
    keep_best: bool = False
    """At the end of each phase restore the parameters of its best evaluation. A checkpoint written
    inside a phase holds them (best_state.safetensors), so a resumed run restores the same ones."""
    save_every: int = 0
    """Write the ``last`` checkpoint every this many steps (0: only at the end); needs an output directory."""
    progress: bool = True
    """Show a tqdm progress bar."""
    tensorboard: bool = False
    """Also write TensorBoard scalars (needs the tensorboard package)."""
    threads: int = 0
    """torch intra-op threads (0: leave torch's default)."""
    keep_freed_memory: bool = True
    """On CPU, have glibc keep freed blocks for reuse instead of returning them to the system after
    every step (:func:`genfeat.framework.cpu.keep_freed_memory`; faster steps, same peak)."""
    ddp_find_unused_parameters: bool = True
    """Under DDP, allow parameters without gradient in a step (alternating schedules, unused heads);
    false saves a graph traversal per step when every parameter is always used (in a stage of several
    terms: by its last term, whose backward pass DDP synchronises)."""
    stop_after_steps: int = 0
    """End this invocation after this many steps, writing the ``last`` checkpoint, so a long run
    can be done in chunks with ``--resume`` (0: run to the end)."""

    def __post_init__(self):
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {self.grad_accum}")
        if self.log_every < 1:
            raise ValueError(f"log_every must be >= 1, got {self.log_every}")
        negative = [f"{name} {value}" for name, value in (("eval_every", self.eval_every), ("save_every", self.save_every),
                                                         ("patience", self.patience), ("threads", self.threads))
                    if value < 0]
        if negative:   # a negative interval divides every step (done % -1 == 0): an evaluation or save at each one
            raise ValueError(f"eval_every, save_every, patience and threads must be >= 0 (0: off / default), got "
                             f"{', '.join(negative)}")
        if not (math.isfinite(self.clip_norm) and self.clip_norm >= 0):
            raise ValueError(f"clip_norm must be a finite number >= 0 (0: off), got {self.clip_norm}")
        if (self.patience or self.keep_best) and not self.early_stop_metric:
            raise ValueError("patience and keep_best need early_stop_metric (the validation metric to watch)")
        if self.stop_after_steps < 0:
            raise ValueError(f"stop_after_steps must be >= 0, got {self.stop_after_steps}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")


@dataclass
class TrainResult:
    steps: int
    """Optimizer steps taken over all phases."""
    seconds: float
    """Wall seconds of training; a resumed run's include those of the invocations before it, up to the checkpoint
    it resumed from (a checkpoint written before 2026-11-28 records none: only this invocation's then)."""
    best_metrics: dict[str, float] = field(default_factory=dict)
    final_metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    interrupted: bool = False
    """True when ``stop_after_steps`` ended the invocation before the schedule's end."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def resolve_device(name: str, option: str = "train.device") -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``; ``option`` names the setting in errors."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise ConfigError(f"{option} is '{name}', not a device", f"set {option} to auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{option} is '{name}' but CUDA is not available", f"set {option} cpu (or auto)")
    return torch.device(name)


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor inside a batch (tensor, dataclass, mapping or sequence) to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if is_dataclass(batch) and not isinstance(batch, type):
        return replace(batch, **{f.name: to_device(getattr(batch, f.name), device) for f in fields(batch) if f.init})
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


class Trainer:
    """Runs ``phases`` on ``model``.

    Args:
        model: the network (or an ``nn.ModuleDict`` of networks) the objectives are called with.
        phases: the schedule.
        cfg: loop settings.
        evaluate: ``evaluate(model) -> {metric: value}``, on validation data only.
        out_dir: where ``metrics.jsonl`` and the ``last``/``best`` checkpoints go (None: nothing written).
        checkpoint_config: JSON description of the model written as config.json into checkpoints.
        save_extra: writes further files (the vocabulary) into a checkpoint directory; a resume is
            refused when one differs from the checkpoint's copy.
        resume_from: a ``last`` checkpoint directory to continue exactly from (its backup when a kill
            between the two renames of a checkpoint write left only that).
        after_step: called with the global step count after every optimizer step, before that step's
            logging, evaluation and checkpoint; an exception it raises ends training there and propagates
            (nothing more is logged or saved). word2vec's Hogwild parent checks its worker processes with it.
        diverged_fix: the fix a :class:`DivergenceError` names, in the fields of the method's recipe (default: the
            optim and train sections').
    """

    def __init__(self, model: nn.Module, phases: list[Phase], cfg: TrainConfig,
                 evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
                 out_dir: str | Path | None = None, checkpoint_config: dict[str, Any] | None = None,
                 save_extra: Callable[[Path], None] | None = None, resume_from: str | Path | None = None,
                 after_step: Callable[[int], None] | None = None, diverged_fix: str = _DIVERGED_FIX):
        self.diverged_fix = diverged_fix
        if (cfg.save_every or cfg.stop_after_steps) and out_dir is None:
            raise ConfigError("train.save_every / stop_after_steps need an output directory for checkpoints",
                              "pass --out DIR")
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                raise ConfigError("train.tensorboard is true but the tensorboard package is not installed",
                                  "pip install tensorboard, or set --train.tensorboard false") from None
        self.cfg = cfg
        self.phases = phases
        self.evaluate = evaluate
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.checkpoint_config = checkpoint_config
        self.save_extra = save_extra
        self.resume_from = resume_from
        self.after_step = after_step
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(cfg.device)
        if cfg.keep_freed_memory and self.device.type == "cpu":
            keep_freed_memory()
        self.dist: DistInfo = init_distributed(self.device)
        if self.dist.is_main:
            for line in (line for phase in phases for line in phase.long_warmups()):
                print(f"warning: {line}", file=sys.stderr)
        if self.device.type == "cuda" and self.dist.enabled:
            self.device = torch.device("cuda", self.dist.local_rank)
        self.model = model.to(self.device)
        self.wrapped: nn.Module = self.model
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.model, device_ids=ids, find_unused_parameters=cfg.ddp_find_unused_parameters)
        self._writer = None

    # ----------------------------------------------------------------- helpers
    def _autocast(self):
        if self.cfg.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _start_log(self, resumed_step: int | None) -> None:
        """Begin the metrics log (and TensorBoard's) of this run.

        A fresh run (``resumed_step`` None) starts an empty log, so an earlier run into the same
        directory does not mix into it. A resumed run keeps the records up to the checkpoint's
        global step and drops the ones logged after it, which this run logs again; a line that does
        not parse is the tail of a write that the kill cut short. The log is rewritten atomically,
        so a kill meanwhile leaves the old one.
        """
        # TensorBoard hides earlier events from this step on: all of an earlier run's, or those a
        # resumed run logs again
        self._purge_step = 0 if resumed_step is None else resumed_step + 1
        if self.out_dir is None or not self.dist.is_main:
            return
        path = self.out_dir / METRICS_FILE
        kept = []
        if resumed_step is not None and path.is_file():
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record["step"] <= resumed_step:
                    kept.append(line + "\n")
        write_text_atomic(path, "".join(kept))

    def _log(self, record: dict[str, Any]) -> None:
        if self.out_dir is None or not self.dist.is_main:
            return
        with open(self.out_dir / METRICS_FILE, "a") as f:
            f.write(json.dumps(json_safe(record), allow_nan=False) + "\n")    # a NaN loss as null: standard JSON
        if self.cfg.tensorboard:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter
                self._writer = SummaryWriter(str(self.out_dir / "tensorboard"), purge_step=self._purge_step)
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._writer.add_scalar(k, v, record["step"])

    def _build_optimizers(self, phase: Phase) -> dict[str, torch.optim.Optimizer]:
        out = {}
        for name, spec in phase.optimizers.items():
            params = list(spec.params(self.model) if spec.params is not None else self.model.parameters())
            if not params:
                raise ConfigError(f"optimizer '{name}' of phase '{phase.name}' has no parameters",
                                  "check the parameter selection of that optimizer")
            out[name] = spec.config.build(params)
        return out

    def _gather(self, local: Any) -> list[Any]:
        """``local`` of every rank, in rank order (objective memories and RNG states differ per rank)."""
        if not self.dist.enabled:
            return [local]
        gathered: list[Any] = [None] * self.dist.world
        dist.all_gather_object(gathered, local)
        return gathered

    def _save(self, name: str, phase_idx: int, phase_step: int, global_step: int,
              optimizers: dict[str, torch.optim.Optimizer], tracker: dict[str, Any],
              window: dict[str, list[float]] | None = None) -> None:
        """``window``: the logging window's sums since the last log line, each rank's, kept so that a resumed run
        logs that line over the same steps as an uninterrupted one.

        Raises:
            DivergenceError: the weights, or a loss logged since the last log line, are NaN or infinite: such a
                checkpoint is not written (a resume from it could only go on diverging)."""
        self._check_savable(window or {}, global_step)
        phase = self.phases[phase_idx]
        objective_states = self._gather([{k: v.detach().cpu() for k, v in t.objective.state_dict().items()}
                                         for t in phase.terms()])
        rng_states = self._gather(rng_state())
        windows = self._gather(window or {})
        if self.out_dir is not None:   # rank 0 writes; the others wait for its outcome (one error line each)
            on_rank_0(lambda: self._write_checkpoint(name, phase_idx, phase_step, global_step, optimizers, tracker,
                                                     objective_states, rng_states, windows),
                      f"failed to write the checkpoint '{self.out_dir / name}'", self.dist)

    def _write_checkpoint(self, name: str, phase_idx: int, phase_step: int, global_step: int,
                          optimizers: dict[str, torch.optim.Optimizer], tracker: dict[str, Any],
                          objective_states: list, rng_states: list, windows: list) -> None:
        """Rank 0's part of :meth:`_save`: OUT/``name`` with the state the ranks gathered."""
        phase = self.phases[phase_idx]
        state = {
            "phase_idx": phase_idx,
            "phase_step": phase_step,
            "global_step": global_step,
            "seconds": self._earlier_seconds + time.time() - self._start_time,
            "world": self.dist.world,
            "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
            "streams": [t.stream.state_dict() for t in phase.terms()],
            "objectives": objective_states,
            "rng": rng_states,
            "tracker": {k: v for k, v in tracker.items() if k != "best_state"},
            "log_windows": windows,
        }
        # only a checkpoint inside a phase needs the best state: at a phase's end it is restored already
        inside = 0 < phase_step < self.phases[phase_idx].steps
        save_checkpoint(self.out_dir / name, self.model, state, self.checkpoint_config, self.save_extra,
                        best_state=tracker.get("best_state") if inside else None)

    def _run_eval(self, tracker: dict[str, Any], step: int, phase: Phase) -> bool:
        """Evaluate, update the best-so-far record; return True when early stopping triggers."""
        if self.evaluate is None:
            return False
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad(), self._autocast():
            metrics = {k: float(v) for k, v in self.evaluate(self.model).items()}
        self.model.train(was_training)
        record = {"step": step, "phase": phase.name, "event": "eval", **metrics}
        tracker["history"].append(record)
        tracker["final"] = metrics
        self._log(record)
        key = self.cfg.early_stop_metric
        if key is None:
            return False
        if key not in metrics:
            raise ConfigError(f"train.early_stop_metric is '{key}' but the evaluator returns {sorted(metrics)}",
                              "set train.early_stop_metric to one of those")
        value = metrics[key]
        best = tracker.get("best_value")
        better = best is None or (value < best if self.cfg.early_stop_mode == "min" else value > best)
        if better:
            tracker["best_value"] = value
            tracker["best"] = metrics
            tracker["bad_evals"] = 0
            if self.cfg.keep_best:
                # copies that share no memory (tied weights are copied per name), as safetensors stores them
                tracker["best_state"] = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        else:
            tracker["bad_evals"] = tracker.get("bad_evals", 0) + 1
        return bool(self.cfg.patience) and tracker["bad_evals"] >= self.cfg.patience

    def _step(self, phase: Phase, stage: Stage, optimizer: torch.optim.Optimizer,
              window: dict[str, list[float]]) -> float:
        """One optimizer step of ``stage`` (token-weighted, see the module docstring); returns the
        number of items (tokens, examples) seen.

        A term's count C_t is known only after the forward passes of all its micro-batches, so the
        terms run one after another: the term's micro-batches are backpropagated as plain loss sums,
        and at its last one, once C_t is summed over ranks, the gradient gathered so far is divided by
        ``C_t / world`` (``world`` undoes DDP's averaging over ranks) and the earlier terms' gradient,
        set aside meanwhile (one more gradient's memory, in a stage of several terms with
        ``grad_accum`` > 1), is added back, all before the backward pass that DDP synchronises.
        """
        optimizer.zero_grad(set_to_none=True)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        items = 0.0
        accum = self.cfg.grad_accum
        for t, term in enumerate(stage.terms):
            earlier = None
            if accum > 1 and t > 0:
                earlier = [p.grad for p in params]
                for p in params:
                    p.grad = None
            count = 0.0
            for micro in range(accum):
                last_micro = micro == accum - 1
                final = last_micro and t == len(stage.terms) - 1
                with self.wrapped.no_sync() if self.dist.enabled and not final else nullcontext():
                    with self._autocast():
                        batch = to_device(next(term.stream), self.device)
                        out = term.objective(self.wrapped, batch)
                    self._record(window, term, out)
                    count += float(out.count)
                    loss = term.weight * out.loss_sum
                    if last_micro:
                        total = all_reduce_sum([count], self.dist)[0]
                        if total <= 0:
                            raise ValueError(f"objective '{term.objective.name}' returned count {total} in a step")
                        # with one micro-batch and equal counts on all ranks: the rank's count exactly
                        per_rank = total / self.dist.world
                        if accum > 1:
                            for i, p in enumerate(params):
                                if p.grad is not None:
                                    p.grad.div_(per_rank)
                                if earlier is not None and earlier[i] is not None:
                                    p.grad = earlier[i] if p.grad is None else p.grad.add_(earlier[i])
                        loss = loss / per_rank
                    loss.backward()
            items += count
        params = [p for p in params if p.grad is not None]
        if self.cfg.clip_norm > 0 and params:
            torch.nn.utils.clip_grad_norm_(params, self.cfg.clip_norm)
        optimizer.step()
        return items

    def _check_savable(self, window: dict[str, list[float]], step: int) -> None:
        """Refuse to checkpoint a diverged model: non-finite weights (on any rank) or a non-finite loss sum in the
        logging window, which the log lines check only every ``log_every`` steps.

        Raises:
            DivergenceError: naming what is not finite, the step and the fix.
        """
        keys = sorted(window)
        finite = [torch.isfinite(p).all() for p in self.model.parameters()]
        bad_weights = float(not torch.stack(finite).all()) if finite else 0.0       # one device sync
        sums = all_reduce_sum([x for k in keys for x in window[k]] + [bad_weights], self.dist)
        bad = [k for i, k in enumerate(keys) if "/" not in k and not math.isfinite(sums[2 * i])]
        if bad or sums[-1]:
            what = f"the {bad[0]} loss" if bad else "the model's weights"
            raise DivergenceError(f"training diverged: {what} became NaN or infinite by step {step}, so that "
                                  "checkpoint was not written", self.diverged_fix)

    def _check_finite(self, record: dict[str, Any], keys: list[str], step: int) -> None:
        """Stop a run whose loss became NaN or infinite (the sums are reduced over ranks, so every rank stops):
        its later steps, evaluations and figures would all be of a broken model (argmax of NaN scores is class 0,
        a figure that looks like the majority class).

        Raises:
            DivergenceError: naming the loss, the step and the fix.
        """
        bad = [k for k in keys if "/" not in k and not math.isfinite(record[k])]
        if bad:
            self._log(record)
            raise DivergenceError(f"training diverged: the {bad[0]} loss is {record[bad[0]]} over the {self.cfg.log_every} "
                                  f"steps logged at step {step}", self.diverged_fix)

    @staticmethod
    def _record(window: dict[str, list[float]], term: Term, out: LossOutput) -> None:
        """Add a micro-batch's loss sum, count and logged sums to the logging window (those of each of
        its ``parts`` under the part's name, when it has parts)."""
        for name, part in (out.parts or {term.objective.name: out}).items():
            count = float(part.count)
            for key, value in [(name, float(part.loss_sum.detach())),
                               *((f"{name}/{k}", float(v)) for k, v in part.logs.items())]:
                stats = window.setdefault(key, [0.0, 0.0])
                stats[0] += value
                stats[1] += count

    # ------------------------------------------------------------------- fit
    def fit(self) -> TrainResult:
        start_time = self._start_time = time.time()
        self._earlier_seconds = 0.0
        tracker: dict[str, Any] = {"history": [], "final": {}, "best": {}}
        phase_idx, phase_step, global_step = 0, 0, 0
        resume_state = None
        resume_from = resume_dir(self.resume_from) if self.resume_from is not None else None
        if resume_from is not None:
            resume_state = load_trainer_state(resume_from)
            if resume_state.get("world", 1) != self.dist.world:
                raise CheckpointError(f"checkpoint '{resume_from}' was written by {resume_state.get('world')} "
                                      f"process(es), this run has {self.dist.world}",
                                      "resume with the same number of processes")
            load_for_resume(resume_from, self.model, self.checkpoint_config, self.save_extra)
            phase_idx = resume_state["phase_idx"]
            phase_step = resume_state["phase_step"]
            global_step = resume_state["global_step"]
            self._earlier_seconds = float(resume_state.get("seconds", 0.0))
            tracker.update(resume_state["tracker"])
            best_state = load_best_state(resume_from) if self.cfg.keep_best else None
            if best_state is not None:
                tracker["best_state"] = best_state
            if phase_idx >= len(self.phases):
                raise CheckpointError(f"checkpoint '{resume_from}' is past the end of this schedule",
                                      "resume with the recipe it was trained with")
        else:
            seed_everything(self.cfg.seed + self.dist.rank)
        self._start_log(global_step if resume_state is not None else None)

        steps_this_run = 0
        for p_idx in range(phase_idx, len(self.phases)):
            phase = self.phases[p_idx]
            optimizers = self._build_optimizers(phase)
            terms = phase.terms()
            for term in terms:
                if self.dist.enabled:
                    term.stream.shard(self.dist.rank, self.dist.world)
                term.objective.reset_state()
            start, restored = 0, {}
            if resume_state is not None and p_idx == phase_idx:
                for name, opt_state in resume_state["optimizers"].items():
                    optimizers[name].load_state_dict(opt_state)
                for term, s in zip(terms, resume_state["streams"]):
                    term.stream.load_state_dict(s)
                if phase_step > 0:   # a phase's start (a checkpoint at the end of the phase before) resets them
                    for term, s in zip(terms, resume_state["objectives"][self.dist.rank]):
                        term.objective.load_state_dict({k: v.to(self.device) for k, v in s.items()})
                rng = resume_state["rng"]
                # Checkpoints written before per-rank RNG states hold one state (a dict).
                set_rng_state(rng[self.dist.rank] if isinstance(rng, list) else rng)
                start = phase_step
                # checkpoints written before the logging window was kept hold none: that log line covers fewer steps
                restored = (resume_state.get("log_windows") or [{}] * self.dist.world)[self.dist.rank]
                if start > phase.steps:
                    raise CheckpointError(f"checkpoint '{resume_from}' is at step {start} of phase '{phase.name}', "
                                          f"past its {phase.steps} steps in this schedule",
                                          "resume with the recipe it was trained with")
                if start == phase.steps:
                    # the checkpoint the end of this (last) phase wrote: its evaluation, best-state
                    # restore and checkpoint are done already, and repeating them would log them twice
                    resume_state = None
                    continue
            if start == 0:
                # each phase watches its own evaluations (also one a checkpoint at the previous phase's end
                # resumes into: its tracker still holds that phase's best)
                tracker.pop("best_value", None)
                tracker.pop("best_state", None)
                tracker["bad_evals"] = 0
            elif self.cfg.keep_best and "best_value" in tracker and "best_state" not in tracker:
                raise CheckpointError(f"checkpoint '{resume_from}' has no {BEST_STATE_FILE} (it was written without "
                                      "train.keep_best, or by an older genfeat), so keep_best cannot restore the best "
                                      "evaluation made before it", "resume with --train.keep_best false, or start a "
                                      "new run without --resume")
            self.model.train()
            window: dict[str, list[float]] = {k: list(v) for k, v in restored.items()}
            window_items, window_t0 = 0.0, time.time()   # items_per_s: the items of this invocation's steps
            # a checkpoint older code wrote at the evaluation that stopped the phase early: the phase has ended
            stopped = 0 < start and bool(self.cfg.patience) and tracker.get("bad_evals", 0) >= self.cfg.patience
            step = start

            def log_window(done: int, step: int, lr: float) -> None:
                """One metrics line of the steps since the last (a sum over ranks), then a new window."""
                nonlocal window, window_items, window_t0
                keys = sorted(window)
                sums = all_reduce_sum([x for k in keys for x in window[k]] + [window_items], self.dist)
                elapsed = max(time.time() - window_t0, 1e-9)
                record: dict[str, Any] = {"step": global_step, "phase": phase.name, "phase_step": done,
                                          "lr": lr}
                if len(phase.optimizers) > 1:  # "lr" is the last-stepped optimizer's; name each one's
                    record.update({f"lr/{name}": spec.config.lr_at(step, phase.steps)
                                   for name, spec in phase.optimizers.items()})
                for i, k in enumerate(keys):
                    s, c = sums[2 * i], sums[2 * i + 1]
                    record[k] = s / max(c, 1.0)
                self._check_finite(record, keys, global_step)
                record["items_per_s"] = sums[-1] / elapsed
                self._log(record)
                first = next((k for k in keys if "/" not in k), None)
                if first is not None and math.isfinite(record[first]):
                    bar.set_postfix({first: f"{record[first]:.3f}", "items/s": f"{record['items_per_s']:.0f}"})
                window, window_items, window_t0 = {}, 0.0, time.time()

            with tqdm(total=phase.steps, initial=start, desc=phase.name, dynamic_ncols=True, mininterval=1.0,
                      disable=not (self.cfg.progress and self.dist.is_main)) as bar:
                for step in range(start, phase.steps if not stopped else start):
                    stage = phase.stage_at(step)
                    opt = optimizers[stage.optimizer]
                    lr = phase.optimizers[stage.optimizer].config.lr_at(step, phase.steps)
                    for group in opt.param_groups:
                        group["lr"] = lr
                    window_items += self._step(phase, stage, opt, window)
                    global_step += 1
                    bar.update(1)
                    if self.after_step is not None:
                        self.after_step(global_step)
                    done = step + 1
                    steps_this_run += 1
                    if done % self.cfg.log_every == 0 or done == phase.steps:
                        log_window(done, step, lr)
                    if self.cfg.eval_every and done % self.cfg.eval_every == 0 and done != phase.steps:
                        stopped = self._run_eval(tracker, global_step, phase)
                    if stopped:
                        # early stopping ends the phase at this step: its end (the best-state restore and the
                        # checkpoint after it) follows at once, so that no checkpoint places a resume inside a phase
                        # that has ended; the steps since the last log line are logged first
                        if window:
                            log_window(done, step, lr)
                        break
                    # at the phase's last step the checkpoint follows its evaluation (below), so a resume from
                    # it never skips that evaluation or the best-state restore
                    if self.cfg.save_every and done % self.cfg.save_every == 0 and done != phase.steps:
                        self._save("last", p_idx, done, global_step, optimizers, tracker, window)
                    if self.cfg.stop_after_steps and steps_this_run >= self.cfg.stop_after_steps and done < phase.steps:
                        self._save("last", p_idx, done, global_step, optimizers, tracker, window)
                        return TrainResult(steps=global_step, seconds=self._earlier_seconds + time.time() - start_time,
                                           best_metrics=tracker.get("best", {}), final_metrics=tracker.get("final", {}),
                                           history=tracker["history"], interrupted=True)
            if not stopped:
                self._run_eval(tracker, global_step, phase)
            if self.cfg.keep_best and tracker.get("best_state") is not None:
                self.model.load_state_dict(tracker["best_state"])
            last_phase = p_idx == len(self.phases) - 1
            self._save("last", p_idx + 1 if not last_phase else p_idx, 0 if not last_phase else phase.steps,
                       global_step, optimizers if last_phase else {}, tracker)
            resume_state = None
            if self.cfg.stop_after_steps and steps_this_run >= self.cfg.stop_after_steps and not last_phase:
                # the budget ended with this phase: the next one starts in the next invocation, from that save
                return TrainResult(steps=global_step, seconds=self._earlier_seconds + time.time() - start_time,
                                   best_metrics=tracker.get("best", {}), final_metrics=tracker.get("final", {}),
                                   history=tracker["history"], interrupted=True)
        if self._writer is not None:
            self._writer.close()
        return TrainResult(steps=global_step, seconds=self._earlier_seconds + time.time() - start_time,
                           best_metrics=tracker.get("best", {}), final_metrics=tracker.get("final", {}),
                           history=tracker["history"])
