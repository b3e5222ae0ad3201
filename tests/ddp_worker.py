"""Training runs for the DDP tests; run directly or under torchrun.

``ddp_worker.py OUT`` trains the tiny two-head model (a joint stage of both heads, accumulating 2
micro-batches whose item counts differ between micro-batches and ranks) and writes OUT/rank{r}.pt
with the final parameters and the logged per-step losses.

``ddp_worker.py OUT --transformer-xl [--field.path value ...]`` runs the Transformer-XL debug recipe
through the command line with those overrides (metrics.jsonl, results.json and checkpoints go to
OUT as usual) and also writes OUT/rank{r}.pt with the final parameters of every rank.

``ddp_worker.py OUT --transformer-xl-resume [--field.path value ...]`` does that twice in one
process group: straight through into OUT/full, and in two invocations (``--train.stop_after_steps``
half the steps, then ``--resume``) into OUT/chunked.

``ddp_worker.py OUT --aux-lm BACKBONE`` takes one backward pass of GPT-1's L3 (λ = 0.5) on a tiny fine-tuning
model of BACKBONE wrapped as the trainer wraps it (DistributedDataParallel, find_unused_parameters), rank r on
example r of two (one process: on both), the loss sum divided as the Trainer divides it (by the global number of
examples, times the world size that DDP's gradient average divides by), and writes OUT/rank{r}.pt with the
gradients.
"""

import json
import os
import sys
from pathlib import Path

import torch

from genfeat.framework import OptimConfig, Term, TrainConfig, Trainer, joint
from genfeat.framework.distributed import leave_distributed

from _framework_fixtures import SquaredError, TwoHead, make_stream

TXL_RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "transformer_xl" / "debug.yaml"


def save_params(model: torch.nn.Module, file: Path, losses: list[float] | None = None) -> None:
    torch.save({"params": {k: v.detach() for k, v in model.state_dict().items()}, "losses": losses or []}, file)


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = TwoHead()
    terms = [Term(SquaredError("a", threshold=0.0), make_stream(batch_size=8), 1.0),
             Term(SquaredError("b", threshold=0.0), make_stream(batch_size=8, seed=1), 0.5)]
    trainer = Trainer(model, joint(terms, 6, OptimConfig(name="adamw", lr=1e-2)),
                      TrainConfig(progress=False, log_every=1, clip_norm=1.0, grad_accum=2), out_dir=out)
    trainer.fit()
    rank = trainer.dist.rank
    losses = []
    if rank == 0:
        losses = [r["mse_a"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                  if "mse_a" in r]
    save_params(model, out / f"rank{rank}.pt", losses)
    del trainer, model
    leave_distributed()


def transformer_xl(out: Path, overrides: list[str]) -> int:
    from genfeat import cli

    fit = Trainer.fit

    def fit_and_save(trainer: Trainer):
        result = fit(trainer)
        save_params(trainer.model, out / f"rank{trainer.dist.rank}.pt")
        return result

    Trainer.fit = fit_and_save  # the class every method's run builds its trainer from
    return cli.main(["run", str(TXL_RECIPE), "--out", str(out), "--no-progress", *overrides])


def transformer_xl_resume(out: Path, overrides: list[str]) -> int:
    steps = int(overrides[overrides.index("--steps") + 1])
    chunked = out / "chunked"
    return (transformer_xl(out / "full", overrides)
            or transformer_xl(chunked, [*overrides, "--train.stop_after_steps", str(steps // 2)])
            or transformer_xl(chunked, [*overrides, "--resume"]))


def aux_lm(out: Path, args: list[str]) -> int:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from genfeat.objectives.task import TaskObjective

    from genfeat.framework.distributed import all_reduce_sum
    from genfeat.tasks.transforms import collate
    from test_finetune_heads import _task_items, fmt_of, make

    model = make(args[0]).train()
    items, fmt = _task_items(model, "classification"), fmt_of(model)
    rank, world = 0, 1
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        items = items[rank::world]
        model = DistributedDataParallel(model, find_unused_parameters=True)
    loss = TaskObjective("classification", 0.5)(model, collate(items, fmt))
    (examples,) = all_reduce_sum([float(loss.count)])
    (loss.loss_sum * world / examples).backward()
    grads = {k: p.grad for k, p in getattr(model, "module", model).named_parameters() if p.grad is not None}
    torch.save({"params": grads, "losses": []}, out / f"rank{rank}.pt")
    del model  # the DDP reducer goes before the group (see leave_distributed)
    leave_distributed()
    return 0


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    modes = {"--transformer-xl": transformer_xl, "--transformer-xl-resume": transformer_xl_resume, "--aux-lm": aux_lm}
    if sys.argv[2:3] and sys.argv[2] in modes:
        sys.exit(modes[sys.argv[2]](out, sys.argv[3:]))
    main(out)
