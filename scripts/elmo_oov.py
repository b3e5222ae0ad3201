"""Out-of-vocabulary rates of GLUE task texts against an ELMo checkpoint's pretraining vocabulary.

    python scripts/elmo_oov.py --checkpoint runs/elmo/pretrain/final [--tasks sst2 mrpc stsb]

For each task and split, the share of word tokens (whitespace-separated, as the word vocabulary splits a
text) and of distinct words that the vocabulary lacks, as written, after lowercasing (what
genfeat.models.elmo.SpelledWordVocab reads when the vocabulary has no capitals, as PTB's), and among the
lowercased tokens with a letter (PTB has no punctuation tokens and writes numbers as N). Before the fix
of SpelledWordVocab every such word reached the biLM as ``<unk>``; now it is spelled. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from genfeat.errors import GenfeatError


def rates(words: Counter, known: set[str]) -> dict[str, float]:
    """OOV share of the tokens and of the types in ``words`` (word -> count)."""
    tokens = sum(words.values())
    oov = {w: c for w, c in words.items() if w not in known}
    return {"tokens": tokens, "types": len(words), "oov_token_rate": sum(oov.values()) / max(tokens, 1),
            "oov_type_rate": len(oov) / max(len(words), 1)}


def main(argv: list[str] | None = None) -> None:
    from genfeat.methods.elmo import load_elmo
    from genfeat.tasks import get_task, load_task

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="an ELMo checkpoint directory (OUT/final or OUT/last)")
    p.add_argument("--tasks", nargs="+", default=["sst2", "mrpc", "stsb"])
    p.add_argument("--splits", nargs="+", default=["train", "dev"])
    args = p.parse_args(argv)
    _, vocab, _ = load_elmo(args.checkpoint)
    known = set(vocab.symbols)
    out = {"checkpoint": args.checkpoint, "vocabulary": len(vocab)}
    for task in args.tasks:
        for split in args.splits:
            raw = Counter(w for ex in load_task(get_task(task), split) for t in ex.texts for w in t.split())
            lower = Counter()
            for w, c in raw.items():
                lower[w.lower()] += c
            words = Counter({w: c for w, c in lower.items() if any(ch.isalpha() for ch in w)})
            out[f"{task}_{split}"] = {"as_written": rates(raw, known), "lowercased": rates(lower, known),
                                      "lowercased_with_a_letter": rates(words, known)}
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except GenfeatError as e:
        sys.exit(f"error: {e}")
