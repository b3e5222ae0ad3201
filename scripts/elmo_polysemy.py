"""The polysemy demo of the "Contextualized Word Embeddings" lecture (Peters et al. 2018, Table 4) on a genfeat ELMo.

For each word asked for ("bank", "fire", "present"), sentences of the corpus that contain it are read
by the biLM; the word's contextual vector in each sentence (a layer of the biLM, the top one by
default) is compared by cosine with the word's vectors in the other sentences, and the nearest
sentences are printed next to the query. The single static vector is printed beside it: the nearest
vocabulary words of the word's context-free token vector (layer 0, the character CNN), and, with
``--word2vec FILE`` (the word2vec text format), those of a word2vec vector.

    python scripts/elmo_polysemy.py --checkpoint runs/elmo_polysemy/last --corpus ptb:train

Words are spelled from their characters, so a sentence is read as written (an out-of-vocabulary
word is not replaced by <unk>). Sentences are drawn with a fixed seed (``--seed``).

Cosines are taken after centring (``--no-center`` to skip it): a word's contextual vectors minus
their mean over its sentences, the static vectors minus their mean over the vocabulary. A small
biLM's vectors share a large common component (all raw cosines of a briefly trained model are
about 1.00), which centring removes so that what the context adds is what is compared.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from genfeat.errors import ConfigError, DataError, GenfeatError


def sentences_with(lines: list[str], word: str, n: int, seed: int) -> list[list[str]]:
    """Up to ``n`` distinct lines holding ``word`` as a token, drawn with ``seed``, as token lists."""
    found = sorted({line.strip() for line in lines if word in line.split()})
    if not found:
        raise DataError(f"no sentence of the corpus holds '{word}'", "ask for a word the corpus uses")
    picked = random.Random(seed).sample(found, min(n, len(found)))
    return [s.split() for s in picked]


def contextual_vectors(model, chars, sentences: list[list[str]], word: str, layer: int,
                       batch_size: int = 32) -> torch.Tensor:
    """The vector of the first occurrence of ``word`` in each sentence at biLM ``layer``: [n, 2d]."""
    out = []
    with torch.no_grad():
        for i in range(0, len(sentences), batch_size):
            batch = sentences[i:i + batch_size]
            layers = model(chars.spell_batch(batch)).layers[layer]                 # [b, t, 2d]
            pos = torch.tensor([s.index(word) for s in batch])
            out.append(layers[torch.arange(len(batch)), pos])
    return torch.cat(out)


def static_neighbours(table: torch.Tensor, words: list[str], word: str, k: int) -> list[tuple[str, float]]:
    """The ``k`` words whose rows of ``table`` [V, e] are nearest (cosine) to ``word``'s row."""
    if word not in words:
        return []
    i = words.index(word)
    sims = F.cosine_similarity(table, table[i:i + 1], dim=-1)
    sims[i] = -2.0
    top = sims.topk(min(k, len(words) - 1))
    return [(words[j], float(s)) for s, j in zip(top.values.tolist(), top.indices.tolist())]


def context(sentence: list[str], word: str, width: int = 8) -> str:
    """The sentence around the first ``word`` (``width`` tokens each side), the word in [brackets]."""
    i = sentence.index(word)
    left, right = sentence[max(0, i - width):i], sentence[i + 1:i + 1 + width]
    return " ".join([*(["..."] if i > width else []), *left, f"[{word}]", *right,
                     *(["..."] if i + 1 + width < len(sentence) else [])])


def main(argv: list[str] | None = None) -> int:
    from genfeat.methods.bert import text_path
    from genfeat.methods.elmo import load_elmo
    from genfeat.models.word2vec import load_word2vec_format

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="an ELMo checkpoint directory (OUT/final or OUT/last)")
    p.add_argument("--corpus", default="ptb:train", help="NAME:SPLIT of a registered corpus, or a text file")
    p.add_argument("--words", nargs="+", default=["bank", "fire", "present"])
    p.add_argument("--sentences", type=int, default=60, help="sentences read per word")
    p.add_argument("--queries", type=int, default=3, help="query sentences shown per word")
    p.add_argument("--k", type=int, default=4, help="neighbours shown per query")
    p.add_argument("--layer", type=int, default=-1, help="biLM layer of the contextual vectors (0: token layer)")
    p.add_argument("--word2vec", type=Path, help="word vectors (word2vec text or binary format, e.g. a genfeat "
                   "word2vec run's vectors.bin) for the static neighbours too")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-center", dest="center", action="store_false", help="cosines of the raw vectors")
    args = p.parse_args(argv)
    try:
        model, vocab, chars = load_elmo(args.checkpoint)
        corpus = text_path(args.corpus)
        if not corpus.is_file():
            raise DataError(f"corpus '{args.corpus}' has no file at '{corpus}'", "pass NAME:SPLIT of a registered "
                            "corpus (e.g. ptb:train) whose files are in GENFEAT_DATA, or a text file")
        lines = corpus.read_text(encoding="utf-8").splitlines()
        words = vocab.symbols
        with torch.no_grad():   # the context-free token vector of every vocabulary word: [V, d]
            token_table = torch.cat([model.tokens(model.spelling[i:i + 2048]) for i in range(0, len(words), 2048)])
        if args.center:
            token_table = token_table - token_table.mean(0)
        if not -(model.config.n_layer + 1) <= args.layer <= model.config.n_layer:
            raise ConfigError(f"--layer is {args.layer}, but the biLM has layers 0 (tokens) to {model.config.n_layer}",
                              f"pass --layer 0 to {model.config.n_layer} (or -1, the top one)")
        w2v = None
        if args.word2vec:   # text or binary, as genfeat's word2vec, word2vec.c and gensim write them
            w2v_words, w2v_rows = load_word2vec_format(args.word2vec)
            w2v = (w2v_words, torch.from_numpy(w2v_rows).float())
        if w2v is not None and args.center:
            w2v = (w2v[0], w2v[1] - w2v[1].mean(0))
        for word in args.words:
            sents = sentences_with(lines, word, args.sentences, args.seed)
            vecs = contextual_vectors(model, chars, sents, word, args.layer)
            if args.center:
                vecs = vecs - vecs.mean(0)
            sims = F.cosine_similarity(vecs[:, None], vecs[None], dim=-1)             # [n, n]
            sims.fill_diagonal_(-2.0)
            print(f"=== '{word}': {len(sents)} sentences of {args.corpus}, biLM layer "
                  f"{args.layer % (model.config.n_layer + 1)}, {'centred' if args.center else 'raw'} cosines")
            for q in range(min(args.queries, len(sents))):
                print(f"query: {context(sents[q], word)}")
                top = sims[q].topk(min(args.k, len(sents) - 1))
                for s, j in zip(top.values.tolist(), top.indices.tolist()):
                    print(f"   {s:.3f}  {context(sents[j], word)}")
            near = ", ".join(f"{w} ({s:.2f})" for w, s in static_neighbours(token_table, words, word, 8))
            print(f"static, the context-free token vector (layer 0): {near or 'not in the vocabulary'}")
            if w2v is not None:
                near = ", ".join(f"{w} ({s:.2f})" for w, s in static_neighbours(w2v[1], w2v[0], word, 8))
                print(f"static, word2vec: {near or 'not in the word2vec vocabulary'}")
            print()
    except GenfeatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
