"""Does ``torch.compile`` close the XLNet speed gap? genfeat's permutation-LM step, eager against compiled.

Builds the model and batches of ``xlnet_train_vs_hf.py`` (same shapes, weights, perm masks, memory) and times
genfeat's training step (no HF side) twice in one process: the eager model as the benchmark times it, and a copy
with the same weights compiled in one of two modes:

- ``layers``: each ``XLNetLayer`` wrapped in ``torch.compile(dynamic=False)`` (the inductor CPU backend);
- ``model``: the whole ``XLNetLMHeadModel.forward`` compiled (graph breaks where the code calls ``.item()``).

After 4 warm-up steps of each (the compiled side's warm-up is its compilation), rounds alternate 4 steps of each
side on the same batches (each side carries its own memory and optimizer), so load on the machine reaches both
alike. Last line JSON: ``{"mode", "compile_s", "eager_step_ms", "compiled_step_ms", "gain"}`` (medians over the
rounds' per-step times; gain = eager / compiled). Compare with ``genfeat_step_ms`` and
``genfeat_matmul_ms_per_step`` of ``xlnet_train_vs_hf.py``; figures in docs/BENCHMARKS.md (XLNet).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import xlnet_train_vs_hf as bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["layers", "model"])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    from genfeat.framework.cpu import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        _, eager = bench.build(Path(tmp))
    compiled = copy.deepcopy(eager)
    if args.mode == "layers":
        for i, layer in enumerate(compiled.layers):
            compiled.layers[i] = torch.compile(layer, dynamic=False)
    else:
        compiled.forward = torch.compile(compiled.forward, dynamic=False)
    sides = {"eager": bench.Side("genfeat", eager, "fp32"), "compiled": bench.Side("genfeat", compiled, "fp32")}
    data = bench.batches(4 + 4 * args.rounds)
    compile_s = 0.0
    for name, side in sides.items():
        start = time.perf_counter()
        for x, inputs in data[:4]:
            side.step(x, inputs)
        compile_s = time.perf_counter() - start if name == "compiled" else compile_s
    per_step: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.rounds):
        chunk = data[4 + 4 * r: 8 + 4 * r]
        for name, side in sides.items():
            start = time.perf_counter()
            for x, inputs in chunk:
                side.step(x, inputs)
            per_step[name].append((time.perf_counter() - start) / len(chunk) * 1000)
    eager_ms, compiled_ms = (statistics.median(per_step[n]) for n in ("eager", "compiled"))
    print(json.dumps({"mode": args.mode, "compile_s": round(compile_s, 1), "eager_step_ms": round(eager_ms, 1),
                      "compiled_step_ms": round(compiled_ms, 1), "gain": round(eager_ms / compiled_ms, 3)}))


if __name__ == "__main__":
    main()
