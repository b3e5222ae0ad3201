"""XLNet permutation-LM training speed and peak memory: genfeat side by side with Hugging Face.

Config (issue #11): d_model 256, 4 layers, 4 heads (d_head 64), d_inner 1024, vocab 32,000,
seq 128, mem 128, batch 8, 21 predicted tokens per sequence (K = 6, span-based choice), 2 threads,
dropout 0, AdamW. Both models start from the same weights (HF initialises, genfeat loads its
save_pretrained directory) and see the same batches: PTB ids (random ids without GENFEAT_DATA)
with the perm masks and target mappings that genfeat's permutation-LM objective samples (seed 0),
memory carried from batch to batch.

The measurement follows benchmarks/txl_train_vs_hf.py, whose helpers it imports: after warm-up,
rounds alternate ROUND_STEPS steps of each side in this process (tokens/s = median over rounds
of batch x seq input tokens per second); peak memory is each side's peak resident set size in a
fresh subprocess minus its size before the first step; matrix products of one step are recorded
and genfeat's are replayed alone for ``speedup_bound_matmul_only``. The headline figures are
genfeat's defaults (``recompute_ff`` true: the feed-forward GELU activation is recomputed in
backward). Reported separately: genfeat with ``recompute_ff`` false (``storeff_*``, timed in the
same interleaved rounds) and with layer checkpointing (HF XLNet has none; ``checkpointed_*``, two
rounds after them).

Loss: on the first batch, fp32, same weights, no memory, the mean loss over the predicted tokens.

Last stdout line: JSON with speedup, memory_ratio, loss_abs_diff, speedup_bound_matmul_only and
the raw figures. ``--rounds`` / ``--round-steps`` shorten the timing (on a loaded machine) and
``--no-memory`` skips the probes (memory figures null).

On CUDA (``--device cuda``) the steps are timed between device synchronisations, ten times as many per
round, and peak memory is the CUDA allocator's peak during each side's timed steps minus what it held
before them (both in this process, as txl_train_vs_hf.py does). ``--precision bf16`` runs both sides'
forward passes under bf16 autocast; the loss comparison stays fp32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import txl_train_vs_hf  # noqa: E402
from txl_train_vs_hf import _status_kb, record_matmuls  # noqa: E402

B, T, M, V, N = 8, 128, 128, 32000, 21
HF_KW = dict(vocab_size=V, d_model=256, n_layer=4, n_head=4, d_inner=1024, ff_activation="gelu", dropout=0.0,
             mem_len=M, attn_type="bi", bi_data=False, clamp_len=-1)
WARMUP, ROUNDS, ROUND_STEPS = 3, 6, 4


def batches(n: int, device: str = "cpu") -> list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]:
    """n consecutive segments [B, T] with their (perm_mask, target_mapping, labels)."""
    from genfeat.objectives.permutation_lm import PermutationLMConfig, PermutationLMObjective

    data_dir = os.environ.get("GENFEAT_DATA")
    if data_dir and (Path(data_dir) / "ptb" / "ptb.train.txt").is_file():
        from genfeat.data.corpora import load_corpus
        from genfeat.data.lm import LMOrderedStream

        stream = LMOrderedStream(load_corpus("ptb").splits["train"], B, T)
        xs = [next(stream).input for _ in range(n)]
    else:
        g = torch.Generator().manual_seed(0)
        xs = list(torch.randint(0, V, (n, B, T), generator=g))
    sampler = PermutationLMObjective(PermutationLMConfig(k=6, num_predict=N), torch.Generator().manual_seed(0))
    out = []
    for x in xs:
        perm, mapping, positions = sampler.sample(x)
        out.append((x.to(device), (perm.to(device), mapping.to(device), x.gather(1, positions).to(device))))
    return out


def build(tmp: Path):
    from transformers import XLNetConfig, XLNetLMHeadModel

    import genfeat

    torch.manual_seed(0)
    hf = XLNetLMHeadModel(XLNetConfig(**HF_KW))
    hf.save_pretrained(tmp)
    ours = genfeat.from_pretrained(tmp)
    return hf.train(), ours.train()


class Side(txl_train_vs_hf.Side):
    """One implementation's training state (model, each library's default AdamW, memory), as in
    txl_train_vs_hf.py, with XLNet's permutation-LM inputs."""

    def loss(self, x, inputs) -> torch.Tensor:
        perm, mapping, labels = inputs
        if self.name == "hf":
            out = self.model(x, perm_mask=perm.float(), target_mapping=mapping, mems=self.mems, use_mems=True)
        else:
            out = self.model(x, perm_mask=perm, target_mapping=mapping, mems=self.mems)
        self.mems = out.mems
        return F.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten())

    def step(self, x, inputs) -> torch.Tensor:
        with self.autocast:
            loss = self.loss(x, inputs)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


def without_broadcast(recorder):
    """The recorder with broadcast operands (stride 0: the query stream's input is one vector
    expanded over the batch) recorded as contiguous ones, which the replay can fill with values."""
    def layout(shape, stride):
        return (shape, torch.empty(shape).stride() if 0 in stride else stride)

    calls = {}
    for (name, operands), count in recorder.calls.items():
        key = (name, tuple(layout(*op) for op in operands))
        calls[key] = calls.get(key, 0) + count
    recorder.calls = calls
    return recorder


def loss_diff(hf, ours, x, inputs) -> float:
    with torch.no_grad():
        hf.eval(), ours.eval()
        losses = [Side(name, model).loss(x, inputs) for name, model in (("hf", hf), ("genfeat", ours))]
        hf.train(), ours.train()
    return abs(float(losses[0]) - float(losses[1]))


def use_variant(model, name: str) -> None:
    """Switch genfeat's memory options for the side ``name`` (genfeat, genfeat-storeff, genfeat-ckpt)."""
    model.config.checkpoint_layers = name == "genfeat-ckpt"
    model.config.recompute_ff = name != "genfeat-storeff"
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
    with open("/proc/self/clear_refs", "w") as f:  # building the two models does not count
        f.write("5")
    for x, inputs in data:
        side.step(x, inputs)
    print(json.dumps({"peak_kb": _status_kb("VmHWM") - rss_before}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-probe", choices=["hf", "genfeat", "genfeat-storeff", "genfeat-ckpt"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved timing rounds")
    parser.add_argument("--round-steps", type=int, default=ROUND_STEPS, help="steps of each side per round")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the memory probes (the *memory_ratio figures are then null)")
    args = parser.parse_args()
    if args.rounds < 1 or args.round_steps < 1:
        parser.error(f"--rounds and --round-steps must be >= 1, got {args.rounds} and {args.round_steps}")
    rounds, round_steps = args.rounds, args.round_steps
    if args.memory_probe:
        memory_probe(args.memory_probe, args.precision)
        return
    cuda = args.device == "cuda"
    if cuda:
        round_steps *= 10
    else:
        from genfeat.framework.cpu import keep_freed_memory

        keep_freed_memory()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        hf, ours = build(Path(tmp))
    hf, ours = hf.to(args.device), ours.to(args.device)
    data = batches(WARMUP + rounds * round_steps, args.device)
    diff = loss_diff(hf, ours, *data[0])
    # the genfeat variants share one model, optimizer and memory; each timed chunk switches the options
    sides = {"hf": Side("hf", hf, args.precision), "genfeat": Side("genfeat", ours, args.precision)}
    sides["genfeat-storeff"] = sides["genfeat-ckpt"] = sides["genfeat"]
    peaks: dict[str, int] = {}

    def timed(name: str, chunk) -> float:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
        if name != "hf":
            use_variant(ours, name)
        t0 = time.perf_counter()
        for x, inputs in chunk:
            sides[name].step(x, inputs)
        if cuda:
            torch.cuda.synchronize()
            peaks[name] = max(peaks.get(name, 0), (torch.cuda.max_memory_allocated() - held) // 1024)
        return len(chunk) * B * T / (time.perf_counter() - t0)

    for side in (sides["hf"], sides["genfeat"]):
        for x, inputs in data[:WARMUP]:
            side.step(x, inputs)
    recorded = {name: record_matmuls(sides[name], *data[WARMUP - 1]) for name in ("hf", "genfeat")}
    matmul_ms = without_broadcast(recorded["genfeat"]).replay_ms(args.device)
    names = ["hf", "genfeat", "genfeat-storeff"]
    rates: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        chunk = data[WARMUP + r * round_steps: WARMUP + (r + 1) * round_steps]
        for name in names[r % 3:] + names[:r % 3]:
            rates[name].append(timed(name, chunk))
    ckpt_rates = [timed("genfeat-ckpt", data[WARMUP + r * round_steps: WARMUP + (r + 1) * round_steps])
                  for r in range(min(2, rounds))]
    # glibc's dynamic mmap threshold would make the peak resident size measure allocator history
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    for name in () if args.no_memory or cuda else ("hf", "genfeat", "genfeat-storeff", "genfeat-ckpt"):
        proc = subprocess.run([sys.executable, __file__, "--memory-probe", name, "--precision", args.precision],
                              capture_output=True, text=True, check=True, env=env)
        peaks[name] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_kb"]
    hf_tps, ours_tps = statistics.median(rates["hf"]), statistics.median(rates["genfeat"])
    mb = {name: kb / 1024 for name, kb in peaks.items()}

    def ratio(name: str) -> float | None:
        return peaks[name] / peaks["hf"] if peaks else None

    print(json.dumps({
        "speedup": ours_tps / hf_tps, "memory_ratio": ratio("genfeat"), "loss_abs_diff": diff,
        "speedup_bound_matmul_only": B * T / hf_tps * 1000 / matmul_ms,
        "genfeat_tokens_per_s": ours_tps, "hf_tokens_per_s": hf_tps, "genfeat_peak_mb": mb.get("genfeat"),
        "hf_peak_mb": mb.get("hf"),
        "storeff_speedup": statistics.median(rates["genfeat-storeff"]) / hf_tps,
        "storeff_memory_ratio": ratio("genfeat-storeff"),
        "checkpointed_speedup": statistics.median(ckpt_rates) / hf_tps, "checkpointed_memory_ratio": ratio("genfeat-ckpt"),
        "genfeat_matmul_mflop_per_token": recorded["genfeat"].flops() / (B * T) / 1e6,
        "hf_matmul_mflop_per_token": recorded["hf"].flops() / (B * T) / 1e6,
        "genfeat_matmul_ms_per_step": matmul_ms, "genfeat_step_ms": B * T / ours_tps * 1000,
        "hf_step_ms": B * T / hf_tps * 1000, "rounds": rounds, "steps_per_round": round_steps,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "device": args.device,
        "precision": args.precision, **({"gpu": torch.cuda.get_device_name()} if cuda else {})}))


if __name__ == "__main__":
    main()
