"""GPT-1 greedy generation speed: genfeat's key/value cache side by side with Hugging Face OpenAIGPTLMHeadModel.

HF's OpenAI-GPT has no key/value cache (no ``past_key_values`` in any transformers release), so its ``generate``
feeds the whole sequence again at every step: step s costs a forward pass over prompt + s tokens. genfeat's
``GPTLMHeadModel.generate`` feeds the prompt once and then only the newest token, attending over the cached keys
and values. A third side, genfeat with ``use_cache=False``, recomputes as HF does: it shows what the cache alone
is worth, apart from the rest of the two implementations.

Config: the training benchmark's model (gpt_train_vs_hf.py: d_model 256, 4 layers, 4 heads, vocab 10,000,
512 positions, the same HF-initialised weights loaded into genfeat), 2 threads, eval mode; a prompt of
PROMPT random ids, NEW new tokens by greedy decoding (genfeat ``top_k=1``, HF ``do_sample=False``), for each
batch size asked. After one short warm-up generation per side, rounds alternate the sides in this process;
each side's figure is the median over rounds of new tokens per second (batch x NEW / seconds).
``tokens_equal``: whether the three sides produced the same tokens (greedy decoding from the same weights: a
parity check of the cache against HF's recomputation, as tests/test_gpt_hf_parity.py's at small size).

Last stdout line: JSON with ``speedup`` (genfeat tokens/s / HF's, at the largest batch asked), ``tokens_equal``
(all batch sizes) and per batch size the raw figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_train_vs_hf import V, build_in_tmp  # noqa: E402


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def sides(hf, ours, new: int) -> dict:
    """name -> function(prompt ids [b, p]) -> the new ids [b, new]."""
    def hf_side(ids):
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                          do_sample=False, pad_token_id=0)
        return out[:, ids.shape[1]:]

    return {"hf": hf_side,
            "genfeat": lambda ids: ours.generate(ids, new, top_k=1),
            "genfeat_no_cache": lambda ids: ours.generate(ids, new, top_k=1, use_cache=False)}


def measure(fns: dict, ids: torch.Tensor, rounds: int, device: str) -> tuple[dict, bool]:
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    outputs = {}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for name in order:
            sync(device)
            t0 = time.perf_counter()
            out = fns[name](ids)
            sync(device)
            seconds[name].append(time.perf_counter() - t0)
            outputs[name] = out
    first = outputs["hf"]
    equal = all(torch.equal(first, out) for out in outputs.values())
    return {name: statistics.median(s) for name, s in seconds.items()}, equal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(2)
    hf, ours = build_in_tmp()
    hf, ours = hf.eval().to(args.device), ours.eval().to(args.device)
    g = torch.Generator().manual_seed(0)
    result: dict = {"device": args.device, "threads": torch.get_num_threads(), "prompt": args.prompt,
                    "new_tokens": args.new, "vocab": V, "rounds": args.rounds, "hf_cache": "none (recomputes)"}
    with torch.no_grad():
        warm = torch.randint(0, V, (1, args.prompt), generator=g).to(args.device)
        for fn in sides(hf, ours, 8).values():
            fn(warm)
        fns = sides(hf, ours, args.new)
        equal_all = True
        for b in args.batch:
            ids = torch.randint(0, V, (b, args.prompt), generator=g).to(args.device)
            secs, equal = measure(fns, ids, args.rounds, args.device)
            equal_all &= equal
            rates = {name: b * args.new / s for name, s in secs.items()}
            result[f"batch_{b}"] = {"tokens_per_s": rates, "seconds": secs, "tokens_equal": equal,
                                    "speedup": rates["genfeat"] / rates["hf"],
                                    "speedup_no_cache": rates["genfeat_no_cache"] / rates["hf"]}
    result["speedup"] = result[f"batch_{max(args.batch)}"]["speedup"]
    result["tokens_equal"] = equal_all
    print(json.dumps(result))


if __name__ == "__main__":
    main()
