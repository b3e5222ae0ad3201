"""Transformer-XL training speed and peak memory: genfeat side by side with Hugging Face.

Config (issue #2): d_model 256, 4 layers, 4 heads (d_head 64), d_inner 1024, tgt_len 128,
mem_len 128, vocab 10,000 with adaptive softmax cutoffs [2000, 6000] (div_val 1), batch 8,
2 threads, dropout 0, AdamW. Both models start from the same weights (HF initialises, genfeat loads
its save_pretrained directory) and see the same PTB batches (random ids without GENFEAT_DATA).

Speed: after warm-up, rounds alternate ROUND_STEPS steps of each side in this one process
(forward with carried memory, backward, Adam step); tokens/s is the median over rounds of
batch x tgt_len input tokens per second. HF scores t-1 positions per segment (it shifts its
labels inside), genfeat scores t; both consume the same input tokens.

Memory: each side trains in a fresh subprocess of this script; peak memory is the process's
peak resident set size during training (VmHWM, reset after building the models) minus its resident
set size just before the first step
(so imports, weights and data are excluded and activations, gradients and optimizer state count),
with glibc's mmap threshold fixed so that freed tensors leave the resident set.

genfeat is also measured with its two memory options, reported separately: feed-forward
recomputation (``recompute_ff``: ``recompute_ff_speedup``, ``recompute_ff_memory_ratio``, timed in the
same interleaved rounds) and layer checkpointing (``checkpoint_layers``: ``checkpointed_speedup``,
``checkpointed_memory_ratio``, two rounds after them); the headline figures use the default.

On CUDA (``--device cuda``) the steps are timed between device synchronisations and peak memory is
the CUDA allocator's peak during each side's steps minus what it held before them (both in this
process). ``--precision bf16`` runs both sides' forward passes under bf16 autocast; the loss
comparison stays fp32.

Allocator: the speed rounds run with :func:`genfeat.framework.cpu.keep_freed_memory` applied to
the process, as genfeat's Trainer does on CPU; it applies to both sides alike (HF gains from it
too), so the ratio compares the implementations, not the allocator settings. The memory probes
run without it.

Loss: on the first batch, fp32, same weights, fresh memory (HF given zero-length mems), the mean
loss of the t-1 positions both score.

Arithmetic bound: on one extra warm-up step of each side, every matrix product (mm, addmm, bmm)
is recorded with its operand shapes and strides; their FLOPs per input token are reported
(``*_matmul_mflop_per_token``), and genfeat's products are replayed alone, each on random operands
of the same layout, timed, and summed over the step (``genfeat_matmul_ms_per_step``). HF's median
time per step divided by that sum is ``speedup_bound_matmul_only``: the speedup genfeat would have
if everything in its step but its matrix products took no time at all. 2x needs that bound well
above 2, since the rest of a step (softmax, layer norm, copies, the optimizer) is never free.

Last stdout line: JSON with speedup, memory_ratio, loss_abs_diff and the raw figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

B, T, M, V, CUTOFFS = 8, 128, 128, 10000, [2000, 6000]
HF_KW = dict(vocab_size=V, cutoffs=CUTOFFS, div_val=1, d_model=256, d_embed=256, n_head=4, d_head=64, d_inner=1024,
             n_layer=4, mem_len=M, dropout=0.0, dropatt=0.0, clamp_len=-1, same_length=False, untie_r=True)
WARMUP, ROUNDS, ROUND_STEPS = 3, 6, 4


def batches(n: int, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    data_dir = os.environ.get("GENFEAT_DATA")
    if data_dir and (Path(data_dir) / "ptb" / "ptb.train.txt").is_file():
        from genfeat.data.corpora import load_corpus
        from genfeat.data.lm import LMOrderedStream

        stream = LMOrderedStream(load_corpus("ptb").splits["train"], B, T)
        return [(b.input.to(device), b.target.to(device)) for b in (next(stream) for _ in range(n))]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, n * T + 1), generator=g).to(device)
    return [(ids[:, i * T:(i + 1) * T], ids[:, i * T + 1:(i + 1) * T + 1]) for i in range(n)]


def build(tmp: Path):
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel

    import genfeat

    torch.manual_seed(0)
    hf = TransfoXLLMHeadModel(TransfoXLConfig(**HF_KW))
    hf.save_pretrained(tmp)
    ours = genfeat.from_pretrained(tmp)
    return hf.train(), ours.train()


class Side:
    """One implementation's training state: model, optimizer, memory."""

    def __init__(self, name, model, precision: str = "fp32"):
        from genfeat.framework import OptimConfig

        self.name, self.model, self.mems = name, model, None
        device = next(model.parameters()).device.type
        self.autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")
        # Each side's library default: genfeat's OptimConfig (fused AdamW) and torch's AdamW,
        # which the HF Trainer's default optimizer ("adamw_torch") builds.
        if name == "hf":
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        else:
            self.opt = OptimConfig(name="adamw", lr=1e-4).build(model.parameters())

    def step(self, x, y) -> torch.Tensor:
        with self.autocast:
            if self.name == "hf":
                out = self.model(x, mems=self.mems, labels=x)
                loss = out.losses.float().mean()
            else:
                out = self.model(x, mems=self.mems, labels=y)
                loss = -out.target_log_probs.mean()
        self.mems = out.mems
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


class MatmulRecorder(TorchDispatchMode):
    """Records the matrix products a step dispatches: (op, operand shapes and strides) -> count."""

    OPS = {"mm", "addmm", "bmm"}

    def __init__(self):
        super().__init__()
        self.calls: dict[tuple, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        if name in self.OPS:
            operands = tuple((tuple(a.shape), tuple(a.stride())) for a in args if isinstance(a, torch.Tensor))
            key = (name, operands)
            self.calls[key] = self.calls.get(key, 0) + 1
        return func(*args, **(kwargs or {}))

    def flops(self) -> int:
        """2 per multiply-add over all recorded products."""
        total = 0
        for (name, operands), count in self.calls.items():
            a, b = (operands[1:] if name == "addmm" else operands)[:2]
            total += count * 2 * math.prod(a[0]) * b[0][-1]
        return total

    def replay_ms(self, device: str, reps: int = 10) -> float:
        """Milliseconds the recorded products take when each runs alone (median of ``reps``), summed."""
        total = 0.0
        for (name, operands), count in self.calls.items():
            tensors = [torch.empty_strided(shape, stride, device=device).normal_() for shape, stride in operands]
            op = getattr(torch.ops.aten, name).default
            for _ in range(2):
                op(*tensors)
            times = []
            for _ in range(reps):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                op(*tensors)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            total += count * statistics.median(times) * 1000
        return total


def record_matmuls(side: Side, x, y) -> MatmulRecorder:
    recorder = MatmulRecorder()
    with recorder:
        side.step(x, y)
    return recorder


def loss_diff(hf, ours, x, y) -> float:
    with torch.no_grad():
        hf.eval(), ours.eval()
        empty = [torch.zeros(0, B, 256, device=x.device) for _ in range(4)]
        hf_loss = hf(x, mems=empty, labels=x).losses.mean()
        our_loss = -ours(x, labels=y).target_log_probs[:, :-1].mean()
        hf.train(), ours.train()
    return abs(float(hf_loss) - float(our_loss))


def use_variant(model, name: str) -> None:
    """Switch genfeat's memory options for the side ``name`` (genfeat, genfeat-rff, genfeat-ckpt)."""
    model.config.checkpoint_layers = name == "genfeat-ckpt"
    model.config.recompute_ff = name == "genfeat-rff"
    for layer in model.layers:
        layer.ff.recompute = model.config.recompute_ff


def memory_probe(which: str, precision: str) -> None:
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        hf, ours = build(Path(tmp))
    use_variant(ours, which)
    side = Side("hf" if which == "hf" else "genfeat", hf if which == "hf" else ours, precision)
    del hf, ours
    data = batches(WARMUP + 3)
    rss_before = _status_kb("VmRSS")
    # Reset the kernel's peak-RSS mark so building the two models does not count.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for x, y in data:
        side.step(x, y)
    print(json.dumps({"peak_kb": _status_kb("VmHWM") - rss_before}))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-probe", choices=["hf", "genfeat", "genfeat-rff", "genfeat-ckpt"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe, args.precision)
        return
    cuda = args.device == "cuda"
    if not cuda:
        from genfeat.framework.cpu import keep_freed_memory

        keep_freed_memory()
    round_steps = ROUND_STEPS * (10 if cuda else 1)
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        hf, ours = build(Path(tmp))
    hf, ours = hf.to(args.device), ours.to(args.device)
    data = batches(WARMUP + ROUNDS * round_steps, args.device)
    diff = loss_diff(hf, ours, *data[0])
    # the genfeat variants share one model, optimizer and memory; each timed chunk switches the options
    sides = {"hf": Side("hf", hf, args.precision), "genfeat": Side("genfeat", ours, args.precision)}
    sides["genfeat-rff"] = sides["genfeat-ckpt"] = sides["genfeat"]
    peaks = {}

    def timed(name: str, chunk) -> float:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
        if name != "hf":
            use_variant(ours, name)
        t0 = time.perf_counter()
        for x, y in chunk:
            sides[name].step(x, y)
        if cuda:
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - held) // 1024
            peaks[name] = max(peaks.get(name, 0), peak)
        return len(chunk) * B * T / (time.perf_counter() - t0)

    for side in (sides["hf"], sides["genfeat"]):
        for x, y in data[:WARMUP]:
            side.step(x, y)
    recorded = {name: record_matmuls(sides[name], *data[WARMUP - 1]) for name in ("hf", "genfeat")}
    matmul_ms = recorded["genfeat"].replay_ms(args.device)
    names = ["hf", "genfeat", "genfeat-rff"]
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(ROUNDS):
        chunk = data[WARMUP + r * round_steps: WARMUP + (r + 1) * round_steps]
        order = names[r % 3:] + names[:r % 3]
        for name in order:
            rates[name].append(timed(name, chunk))
    if not cuda:
        # glibc's dynamic mmap threshold keeps freed blocks of up to 32 MB in the heap, so the peak
        # resident size would measure allocator history; a fixed threshold makes it the live peak.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        for name in ("hf", "genfeat", "genfeat-rff", "genfeat-ckpt"):
            proc = subprocess.run([sys.executable, __file__, "--memory-probe", name, "--precision", args.precision],
                                  capture_output=True, text=True, check=True, env=env)
            peaks[name] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_kb"]
    ckpt_rates = [timed("genfeat-ckpt", data[WARMUP + r * round_steps: WARMUP + (r + 1) * round_steps])
                  for r in range(2)]
    hf_tps, ours_tps = statistics.median(rates["hf"]), statistics.median(rates["genfeat"])
    result = {"speedup": ours_tps / hf_tps, "memory_ratio": peaks["genfeat"] / peaks["hf"], "loss_abs_diff": diff,
              "genfeat_tokens_per_s": ours_tps, "hf_tokens_per_s": hf_tps, "genfeat_peak_mb": peaks["genfeat"] / 1024,
              "hf_peak_mb": peaks["hf"] / 1024,
              "recompute_ff_speedup": statistics.median(rates["genfeat-rff"]) / hf_tps,
              "recompute_ff_memory_ratio": peaks["genfeat-rff"] / peaks["hf"],
              "checkpointed_speedup": statistics.median(ckpt_rates) / hf_tps,
              "checkpointed_memory_ratio": peaks["genfeat-ckpt"] / peaks["hf"],
              "genfeat_matmul_mflop_per_token": recorded["genfeat"].flops() / (B * T) / 1e6,
              "hf_matmul_mflop_per_token": recorded["hf"].flops() / (B * T) / 1e6,
              "genfeat_matmul_ms_per_step": matmul_ms, "genfeat_step_ms": B * T / ours_tps * 1000,
              "hf_step_ms": B * T / hf_tps * 1000, "speedup_bound_matmul_only": B * T / hf_tps * 1000 / matmul_ms,
              "rounds": ROUNDS, "steps_per_round": round_steps,
              "threads": torch.get_num_threads(), "torch": torch.__version__, "device": args.device,
              "precision": args.precision}
    if cuda:
        result["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
