"""GPT-1 causal-LM training speed and peak memory: genfeat side by side with Hugging Face OpenAIGPTLMHeadModel.

Config (issue #12): d_model 256, 4 layers, 4 heads, d_inner 1024 (4 d, fixed by HF), vocab 10,000,
seq 128, batch 8, 2 threads, dropout 0, AdamW. Both models start from the same weights (HF
initialises, genfeat loads its save_pretrained directory) and train on the same batches of random
ids (the ids do not change the arithmetic).

- HF: ``OpenAIGPTLMHeadModel(input_ids, labels=input_ids)``: eager attention (OpenAI GPT has no sdpa
  path in any transformers release), logits at all t positions, then its shifted mean cross-entropy
  over the t - 1 positions that have a next token.
- genfeat: ``GPTLMHeadModel(ids, return_logits=False)``, then ``target_log_probs`` (the tied head,
  fused with the softmax) at the t - 1 positions that have a next token, negated, summed and
  divided by their count: the causal-LM loss L1 (seed paper Eq. 1).

Speed, memory, the loss check and the arithmetic bound are measured by bert_train_vs_hf.py's
``compare`` (imported, with its training state ``Side``): after warm-up, rounds alternate
ROUND_STEPS steps of each side in this process (tokens/s: median over rounds of batch x seq input
tokens per second); peak memory is each side's peak resident set size during training in a fresh
subprocess, minus its resident size before the first step; ``loss_abs_diff`` compares the mean loss of the first batch in fp32;
``speedup_bound_matmul_only`` is HF's step time over genfeat's matrix products replayed alone.

Last stdout line: JSON with speedup, memory_ratio, loss_abs_diff and the raw figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bert_train_vs_hf import B, T, WARMUP, compare, training_peak_kb  # noqa: E402
from bert_train_vs_hf import Side as BertSide  # noqa: E402

V = 10000  # B 8, T 128 as bert_train_vs_hf.py
HF_KW = dict(vocab_size=V, n_embd=256, n_layer=4, n_head=4, n_positions=512, resid_pdrop=0.0, embd_pdrop=0.0,
             attn_pdrop=0.0)


def batches(n: int, device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, V, (B, T), generator=g).to(device) for _ in range(n)]


def build_in_tmp():
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    import genfeat

    torch.manual_seed(0)
    hf = OpenAIGPTLMHeadModel(OpenAIGPTConfig(**HF_KW))
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        ours = genfeat.from_pretrained(tmp)
    return hf.train(), ours.train()


class Side(BertSide):
    """bert_train_vs_hf.py's training state (model, each library's AdamW) with the causal-LM loss."""

    def loss(self, ids: torch.Tensor) -> torch.Tensor:
        with self.autocast:
            if self.name == "hf":
                return self.model(input_ids=ids, labels=ids).loss.float()
            hidden = self.model(ids, return_logits=False).hidden[:, :-1]  # [b, t - 1, d]
            log_probs = self.model.target_log_probs(hidden, ids[:, 1:])
            return -log_probs.sum() / log_probs.numel()


def memory_probe(which: str, precision: str) -> None:
    torch.set_num_threads(2)
    hf, ours = build_in_tmp()
    side = Side(which, hf if which == "hf" else ours, precision)
    del hf, ours
    print(json.dumps({"peak_kb": training_peak_kb(side, batches(WARMUP + 3))}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory-probe", choices=["hf", "genfeat"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe, args.precision)
        return
    result, _ = compare(__file__, build_in_tmp, batches, Side, args.device, args.precision, [])
    result["hf_attention"] = "eager"  # OpenAI GPT has no other
    print(json.dumps(result))


if __name__ == "__main__":
    main()
