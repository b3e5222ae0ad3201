"""Evaluation speed: Transformer-XL with memory reuse vs a vanilla Transformer (thesis Table 2.10).

Both sides are the same network (4 layers, d_model 256, 4 heads, d_inner 1024, vocabulary
10,000 with adaptive softmax) and give every predicted token an attention length of L:

- vanilla (Al-Rfou et al. style): for each predicted token, one forward pass over the L previous
  tokens, scoring only the last position (nothing is reused);
- Transformer-XL: segments of SEG tokens with a cached memory of L - SEG positions, so each new
  token costs one position of computation over the memory (fast cached evaluation: the memory's
  keys, values and relative encodings are reused from the previous segment, ``model.new_cache()``).

The XL side is also timed without the cache (``xl_uncached_ms_per_token_L``: memory reused, but
its keys, values and encodings re-projected every segment), to show what the cache adds.

Time per predicted token is measured after warm-up (the memory full) on 2 threads, batch 1;
the vanilla side is timed on fewer tokens since each costs a full pass. ``--device cuda`` runs both
sides on the GPU, timed between device synchronisations. Last stdout line: JSON with
speedup_640, speedup_800, speedup_1600 (with the cache) and the per-token milliseconds.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

LENGTHS = (640, 800, 1600)
SEG = 64
XL_SEGMENTS = 16
VANILLA_TOKENS = 16


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize()


@torch.no_grad()
def xl_ms_per_token(model, tokens: torch.Tensor, length: int, cached: bool = True) -> float:
    mem_len = length - SEG
    mems, cache = None, model.new_cache() if cached else None
    warm = (mem_len + SEG - 1) // SEG + 1  # fill the memory before timing
    for i in range(warm):
        x = tokens[:, i * SEG:(i + 1) * SEG]
        mems = model(x, mems=mems, labels=x, mem_len=mem_len, cache=cache).mems
    _sync(tokens)
    t0 = time.perf_counter()
    for i in range(warm, warm + XL_SEGMENTS):
        x = tokens[:, i * SEG:(i + 1) * SEG]
        mems = model(x, mems=mems, labels=x, mem_len=mem_len, cache=cache).mems
    _sync(tokens)
    return (time.perf_counter() - t0) * 1000 / (XL_SEGMENTS * SEG)


@torch.no_grad()
def vanilla_ms_per_token(model, tokens: torch.Tensor, length: int) -> float:
    def one(pos: int) -> None:
        window = tokens[:, pos - length:pos]
        model(window, labels=tokens[:, pos:pos + 1], mem_len=0)

    one(length)  # warm-up
    _sync(tokens)
    t0 = time.perf_counter()
    for pos in range(length + 1, length + 1 + VANILLA_TOKENS):
        one(pos)
    _sync(tokens)
    return (time.perf_counter() - t0) * 1000 / VANILLA_TOKENS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    cfg = TransformerXLConfig(n_token=10000, cutoffs=[2000, 6000], d_model=256, n_head=4, d_head=64, d_inner=1024,
                              n_layer=4, mem_len=SEG, dropout=0.0)
    model = TransformerXLLMHeadModel(cfg).eval().to(args.device)
    tokens = torch.randint(0, 10000, (1, 4 * max(LENGTHS) + SEG * (XL_SEGMENTS + 2))).to(args.device)
    result: dict[str, float] = {}
    for length in LENGTHS:
        xl = xl_ms_per_token(model, tokens, length)
        vanilla = vanilla_ms_per_token(model, tokens, length)
        result[f"xl_ms_per_token_{length}"] = xl
        result[f"xl_uncached_ms_per_token_{length}"] = xl_ms_per_token(model, tokens, length, cached=False)
        result[f"vanilla_ms_per_token_{length}"] = vanilla
        result[f"speedup_{length}"] = vanilla / xl
    result.update({"segment": SEG, "threads": torch.get_num_threads(), "torch": torch.__version__,
                   "device": args.device})
    if args.device == "cuda":
        result["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
