"""BERT masked-LM training speed and peak memory: genfeat side by side with Hugging Face BertForMaskedLM.

Config (issue #11): d_model 256, 4 layers, 4 heads, d_inner 1024, vocab 32,000, seq 128, batch 8,
15 % of the tokens masked (BERT's 80/10/10), 2 threads, dropout 0, AdamW. Both models start from the
same weights (HF initialises, genfeat loads its save_pretrained directory) and train on the same
batches: random ids (the data mirror has no 32,000-type tokenizer; the ids do not change the
arithmetic), masked once up front by genfeat.objectives.masked_lm, so both sides see the same
positions and replacements.

- HF: ``BertForMaskedLM`` with ``attn_implementation="sdpa"`` where the installed transformers has
  it for BERT (>= 4.41), else eager (the project venv pins 4.37.2); reported as ``hf_attention``.
  Labels are -100 except at the masked positions: HF computes its 32,000-way head at every position
  and the loss at the masked ones.
- genfeat: ``BertForMaskedLM(..., masked_positions=M)`` and the summed cross-entropy over the count,
  what :class:`~genfeat.objectives.masked_lm.MaskedLMObjective` computes; the head runs at M only.

Speed, memory, the loss check and the arithmetic bound are measured as in txl_train_vs_hf.py (its
``MatmulRecorder`` and ``_status_kb`` are imported from there): after warm-up, rounds alternate
ROUND_STEPS steps of each side in this process (tokens/s: median over rounds of batch x seq input
tokens per second); peak memory is each side's peak resident set size during training in a fresh
subprocess, minus its resident size before the first step; ``loss_abs_diff`` compares the mean
masked-LM loss of the first batch in fp32; ``speedup_bound_matmul_only`` is HF's step time over
genfeat's matrix products replayed alone.

Last stdout line: JSON with speedup, memory_ratio, loss_abs_diff and the raw figures.
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
from txl_train_vs_hf import MatmulRecorder, _status_kb  # noqa: E402

B, T, V = 8, 128, 32000
HF_KW = dict(vocab_size=V, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
             max_position_embeddings=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
WARMUP, ROUNDS, ROUND_STEPS = 3, 6, 4
SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def batches(n: int, device: str = "cpu") -> list[dict[str, torch.Tensor]]:
    """``n`` masked batches: corrupted ids, masked positions, their labels and HF's -100-filled labels."""
    from genfeat.objectives.masked_lm import MaskedLMConfig, MaskedLMObjective

    g = torch.Generator().manual_seed(0)
    masker = MaskedLMObjective(MaskedLMConfig(), SPECIAL["mask"], V, list(SPECIAL.values()), generator=g)
    out = []
    for _ in range(n):
        ids = torch.randint(5, V, (B, T), generator=g)
        ids[:, 0], ids[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
        m = masker.mask({"input_ids": ids})
        hf_labels = torch.full_like(ids, -100).masked_scatter_(m.positions, m.labels)
        out.append({k: v.to(device) for k, v in dict(x=m.input_ids, positions=m.positions, labels=m.labels,
                                                      hf_labels=hf_labels).items()})
    return out


def build(tmp: Path, attn: str):
    from transformers import BertConfig, BertForMaskedLM

    import genfeat

    torch.manual_seed(0)
    hf = BertForMaskedLM(BertConfig(**HF_KW, attn_implementation=attn))
    hf.save_pretrained(tmp)
    ours = genfeat.from_pretrained(tmp)
    return hf.train(), ours.train()


def hf_attention() -> str:
    """sdpa where this transformers has it for BERT, else eager."""
    from transformers import BertConfig, BertForMaskedLM

    try:
        BertForMaskedLM(BertConfig(vocab_size=8, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=8, attn_implementation="sdpa"))
        return "sdpa"
    except ValueError:
        return "eager"


class Side:
    """One implementation's training state: model and optimizer."""

    def __init__(self, name, model, precision: str = "fp32"):
        from genfeat.framework import OptimConfig

        self.name, self.model = name, model
        device = next(model.parameters()).device.type
        self.autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")
        # each side's library default, as in txl_train_vs_hf.py
        if name == "hf":
            self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        else:
            self.opt = OptimConfig(name="adamw", lr=1e-4).build(model.parameters())

    def loss(self, batch) -> torch.Tensor:
        with self.autocast:
            if self.name == "hf":
                return self.model(input_ids=batch["x"], labels=batch["hf_labels"]).loss.float()
            logits = self.model(batch["x"], masked_positions=batch["positions"]).logits
            return F.cross_entropy(logits.float(), batch["labels"], reduction="sum") / batch["labels"].numel()

    def step(self, batch) -> torch.Tensor:
        loss = self.loss(batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


def memory_probe(which: str, precision: str, attn: str) -> None:
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        hf, ours = build(Path(tmp), attn)
    side = Side(which, hf if which == "hf" else ours, precision)
    del hf, ours
    print(json.dumps({"peak_kb": training_peak_kb(side, batches(WARMUP + 3))}))


def training_peak_kb(side: Side, data: list) -> int:
    """Peak resident size (kB) while ``side`` trains on ``data``, over the resident size before it."""
    rss_before = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak-RSS mark: building the models does not count
        f.write("5")
    for batch in data:
        side.step(batch)
    return _status_kb("VmHWM") - rss_before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-probe", choices=["hf", "genfeat"])
    parser.add_argument("--attn", choices=["sdpa", "eager"], default=None, help="HF attention (default: sdpa if any)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    attn = args.attn or hf_attention()
    if args.memory_probe:
        memory_probe(args.memory_probe, args.precision, attn)
        return
    result, data = compare(__file__, lambda: build_in_tmp(attn), batches, Side, args.device, args.precision,
                           ["--attn", attn])
    result["masked_per_step"] = int(sum(int(b["labels"].numel()) for b in data) / len(data))
    result["hf_attention"] = attn
    print(json.dumps(result))


def build_in_tmp(attn: str):
    with tempfile.TemporaryDirectory() as tmp:
        return build(Path(tmp), attn)


def compare(script: str, build_sides, make_batches, side_cls, device: str, precision: str,
            probe_args: list[str]) -> tuple[dict, list]:
    """The measurements of the module doc for two sides; gpt_train_vs_hf.py uses it too.

    Args:
        script: the benchmark file, run again as ``script --memory-probe hf|genfeat --precision P *probe_args``.
        build_sides: () -> (hf, genfeat) models in train mode, on CPU, with the same weights.
        make_batches: (n, device) -> n batches of B x T input tokens, each passed whole to ``side_cls.step``.
        side_cls: the training state, :class:`Side` or a subclass with another loss.
        device, precision: the command-line flags.
    Returns:
        The JSON figures common to the train benchmarks, and the batches.
    """
    cuda = device == "cuda"
    if not cuda:
        from genfeat.framework.cpu import keep_freed_memory

        keep_freed_memory()
    round_steps = ROUND_STEPS * (10 if cuda else 1)
    torch.set_num_threads(2)
    hf, ours = build_sides()
    hf, ours = hf.to(device), ours.to(device)
    data = make_batches(WARMUP + ROUNDS * round_steps, device)
    sides = {"hf": side_cls("hf", hf, precision), "genfeat": side_cls("genfeat", ours, precision)}
    with torch.no_grad():
        hf.eval(), ours.eval()
        fp32 = {name: side_cls(name, m) for name, m in (("hf", hf), ("genfeat", ours))}
        diff = abs(float(fp32["hf"].loss(data[0])) - float(fp32["genfeat"].loss(data[0])))
        hf.train(), ours.train()
    peaks = {}

    def timed(name: str, chunk) -> float:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        for batch in chunk:
            sides[name].step(batch)
        if cuda:
            torch.cuda.synchronize()
            peaks[name] = max(peaks.get(name, 0), (torch.cuda.max_memory_allocated() - held) // 1024)
        return len(chunk) * B * T / (time.perf_counter() - t0)

    for side in sides.values():
        for batch in data[:WARMUP]:
            side.step(batch)
    recorded = {}
    for name, side in sides.items():
        recorded[name] = MatmulRecorder()
        with recorded[name]:
            side.step(data[WARMUP - 1])
    matmul_ms = recorded["genfeat"].replay_ms(device)
    rates: dict[str, list[float]] = {"hf": [], "genfeat": []}
    for r in range(ROUNDS):
        chunk = data[WARMUP + r * round_steps: WARMUP + (r + 1) * round_steps]
        for name in (("hf", "genfeat") if r % 2 == 0 else ("genfeat", "hf")):
            rates[name].append(timed(name, chunk))
    if not cuda:
        # a fixed mmap threshold makes the peak resident size the live peak (txl_train_vs_hf.py)
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        for name in ("hf", "genfeat"):
            proc = subprocess.run([sys.executable, script, "--memory-probe", name, "--precision", precision,
                                   *probe_args], capture_output=True, text=True, check=True, env=env)
            peaks[name] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_kb"]
    hf_tps, ours_tps = statistics.median(rates["hf"]), statistics.median(rates["genfeat"])
    import transformers

    result = {"speedup": ours_tps / hf_tps, "memory_ratio": peaks["genfeat"] / peaks["hf"], "loss_abs_diff": diff,
              "genfeat_tokens_per_s": ours_tps, "hf_tokens_per_s": hf_tps, "genfeat_peak_mb": peaks["genfeat"] / 1024,
              "hf_peak_mb": peaks["hf"] / 1024,
              "genfeat_matmul_mflop_per_token": recorded["genfeat"].flops() / (B * T) / 1e6,
              "hf_matmul_mflop_per_token": recorded["hf"].flops() / (B * T) / 1e6,
              "genfeat_matmul_ms_per_step": matmul_ms, "genfeat_step_ms": B * T / ours_tps * 1000,
              "hf_step_ms": B * T / hf_tps * 1000, "speedup_bound_matmul_only": B * T / hf_tps * 1000 / matmul_ms,
              "rounds": ROUNDS, "steps_per_round": round_steps,
              "transformers": transformers.__version__, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "device": device, "precision": precision}
    if cuda:
        result["gpu"] = torch.cuda.get_device_name()
    return result, data


if __name__ == "__main__":
    main()
