"""Speed of GDAN's answer-chunk extraction (thesis §3.2.5) on the unlabelled paragraphs of the GDAN split.

Times ``genfeat.data.answer_chunks.extract_many`` on the first ``--paragraphs`` unlabelled paragraphs (SQuAD
articles outside the split's labelled, dev and test ones, then WikiText-2), with the backend asked for, after one
warm-up call on a single other paragraph (loading the spaCy model); with ``--cache-dir`` the spaCy spans are read
from / written to that folder (an empty folder: a cold run; the same folder again: a warm one), "" keeps them in
memory only. CPU seconds (``time.process_time``; with OMP_NUM_THREADS=1 about the wall time on an idle core) and
wall seconds.

    OMP_NUM_THREADS=1 GENFEAT_DATA=../shared/data .venv/bin/python benchmarks/answer_chunks_speed.py \\
        --paragraphs 300 --cache-dir /tmp/chunks

One JSON line: ``paragraphs``, ``words``, ``chunks``, ``cpu_s``, ``wall_s``, ``backend`` (what extracted them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paragraphs", type=int, default=300, help="unlabelled paragraphs to extract from")
    parser.add_argument("--backend", choices=["auto", "spacy", "rules"], default="spacy")
    parser.add_argument("--cache-dir", default="", help="where spaCy's spans are kept ('': in memory only)")
    parser.add_argument("--seed", type=int, default=0, help="the GDAN split's seed")
    args = parser.parse_args()

    from genfeat.data.answer_chunks import ChunkConfig, backend_name, extract_many, word_tokens
    from genfeat.data.gdan import GDANDataConfig, load_gdan_data
    from genfeat.errors import GenfeatError

    try:   # spaCy is the optional gdan extra: without it --backend spacy is one error line (--backend rules runs)
        paragraphs = [p.text for p in load_gdan_data(GDANDataConfig(), args.seed).unlabelled]
        texts, warm_up = paragraphs[:args.paragraphs], paragraphs[-1]
        cfg = ChunkConfig(backend=args.backend, cache_dir=args.cache_dir)
        extract_many([warm_up], ChunkConfig(backend=args.backend, cache_dir=""))
    except GenfeatError as e:
        sys.exit(f"error: {e}")
    cpu, wall = time.process_time(), time.time()
    chunks = extract_many(texts, cfg)
    cpu, wall = time.process_time() - cpu, time.time() - wall
    print(json.dumps({"paragraphs": len(texts), "words": sum(len(word_tokens(t)) for t in texts),
                      "chunks": sum(map(len, chunks)), "cpu_s": cpu, "wall_s": wall, "backend": backend_name(cfg)}))


if __name__ == "__main__":
    main()
