"""word2vec (Mikolov et al. 2013a, b; seed lecture "Contextualized Word Embeddings"): two embedding tables.

Axis legend: V vocabulary, d vector size, b batch (center words), n input slots (1 for skip-gram, 2m
for CBOW), T targets per row.

Each word w has an input vector v_w (``input``, the vectors kept and exported) and an output vector u_w
(``output``, syn1neg in word2vec.c). A row of a batch scores its targets w against one vector h,
s_w = u_w^T h, where

- skip-gram (the lecture's P(w_{t+j} | w_t)): h = v_{w_t}, the center word's input vector, and the
  targets are the words of its window and its negatives;
- CBOW: h = (1/|C|) Σ_{c∈C} v_c, the mean of the window's input vectors (gensim's ``cbow_mean=1``), and
  the targets are the center word and its negatives. As in word2vec.c and gensim, every v_c receives the
  whole gradient of h, not 1/|C| of it: the forward value is the mean, the backward pass that of the sum.

So a batch's scores are b matrix-vector products (b, T, d) · (b, d), computed as one element-wise
product and sum, which on a CPU is several times faster than batched small matrix products.
The model returns the scores only; the negative-sampling loss is genfeat.objectives.word2vec.

The module also writes the word2vec text and binary formats (the files gensim's
``KeyedVectors.load_word2vec_format`` reads) and answers nearest-neighbour queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from torch import Tensor, nn

from ..config import Config
from ..errors import ConfigError, DataError
from ..io import atomic_path


@dataclass
class Word2VecConfig(Config):
    """Shape of a word2vec model."""

    vocab_size: int = 1
    """V, the number of words with vectors."""
    dim: int = 100
    """d, the vector size."""
    architecture: Literal["skipgram", "cbow"] = "skipgram"
    """skipgram: the center word's vector scores its window; cbow: the mean of the window's vectors scores the center."""
    sparse: bool = True
    """Sparse embedding gradients (only the rows a batch touches are updated); needs a plain SGD optimizer."""

    def __post_init__(self):
        if self.vocab_size < 1 or self.dim < 1:
            raise ConfigError(f"word2vec vocab_size {self.vocab_size} / dim {self.dim} must be >= 1",
                              "build the model from a non-empty vocabulary with dim >= 1")


@dataclass
class Word2VecOutput:
    """scores: (b, T) u_w^T h for every target w of every row."""

    scores: Tensor


def _scale_grad(x: Tensor, scale: Tensor | None) -> Tensor:
    """``x`` (b, k, d) whose gradient is multiplied by ``scale`` (b, k) on the way back; the value is unchanged."""
    if scale is not None and x.requires_grad:
        s = scale.unsqueeze(-1).to(x.dtype)
        x.register_hook(lambda grad: grad * s)
    return x


class Word2Vec(nn.Module):
    """Input and output word vectors (module docstring).

    Initialisation as word2vec.c and gensim: v_w ~ U(−0.5/d, 0.5/d), u_w = 0.

    Args:
        config: :class:`Word2VecConfig`.
    """

    def __init__(self, config: Word2VecConfig):
        super().__init__()
        self.config = config
        v, d = config.vocab_size, config.dim
        self.input = nn.Embedding(v, d, sparse=config.sparse)
        self.output = nn.Embedding(v, d, sparse=config.sparse)
        nn.init.uniform_(self.input.weight, -0.5 / d, 0.5 / d)
        nn.init.zeros_(self.output.weight)

    def forward(self, inputs: Tensor, input_mask: Tensor, targets: Tensor, input_grad_scale: Tensor | None = None,
                target_grad_scale: Tensor | None = None) -> Word2VecOutput:
        """Scores of the targets against the (mean) input vector of each row.

        Args:
            inputs: (b, n) ids whose input vectors make h (n = 1: the center word, skip-gram; n = 2m: the
                window, CBOW); any id where ``input_mask`` is false.
            input_mask: (b, n) bool, true where the slot holds a word.
            targets: (b, T) ids scored against h.
            input_grad_scale, target_grad_scale: optional (b, n) / (b, T) factors on the gradient reaching
                each looked-up vector; the scores are unchanged (the sampler's per-batch row cap).
        Returns:
            :class:`Word2VecOutput` with scores (b, T).
        """
        v = _scale_grad(self.input(inputs), input_grad_scale)  # (b, n, d)
        if v.shape[1] == 1:
            h = v[:, 0]
        else:
            m = input_mask.unsqueeze(-1).to(v.dtype)
            total = (v * m).sum(1)  # (b, d)
            # the value of the mean with the gradient of the sum, word2vec.c's CBOW update
            h = total + (total / m.sum(1).clamp_min(1.0) - total).detach()
        u = _scale_grad(self.output(targets), target_grad_scale)  # (b, T, d)
        return Word2VecOutput((u * h.unsqueeze(1)).sum(-1))

    @property
    def vectors(self) -> Tensor:
        """(V, d) the input vectors v_w, the word vectors a trained model is used through."""
        return self.input.weight.detach()


def save_word2vec_format(path: str | Path, words: list[str], vectors: Tensor | np.ndarray, binary: bool = False) -> Path:
    """Write vectors in the word2vec format (Mikolov's word2vec.c ``-binary 0/1``), atomically.

    Text: a header line ``V d``, then one line per word, the word and its d numbers separated by
    spaces. Binary: the same header, then per word its UTF-8 bytes, a space and d little-endian
    float32 values, then a newline.

    Args:
        path: the file to write.
        words: the V words, in the order of the rows of ``vectors``; none may hold white space.
        vectors: (V, d) float.
        binary: write the binary format (default False: text).
    """
    vec = np.ascontiguousarray(vectors.detach().cpu().numpy() if isinstance(vectors, Tensor) else vectors, "<f4")
    if vec.ndim != 2 or len(words) != vec.shape[0]:
        raise ValueError(f"{len(words)} words for vectors of shape {vec.shape}")
    bad = next((w for w in words if not w or any(ch.isspace() for ch in w)), None)
    if bad is not None:
        raise DataError(f"word {bad!r} is empty or holds white space, which the word2vec format cannot store",
                        "tokenise the corpus so that no word holds white space")
    with atomic_path(Path(path)) as tmp, open(tmp, "wb") as f:
        f.write(f"{vec.shape[0]} {vec.shape[1]}\n".encode())
        if binary:
            f.writelines(w.encode("utf-8") + b" " + row.tobytes() + b"\n" for w, row in zip(words, vec))
        else:
            f.writelines((w + " " + " ".join(repr(float(x)) for x in row) + "\n").encode("utf-8") for w, row in zip(words, vec))
    return Path(path)


def nearest_neighbours(vectors: Tensor, words: list[str], word: str, top: int = 10) -> list[tuple[str, float]]:
    """The ``top`` words of highest cosine similarity to ``word`` (itself excluded).

    Args:
        vectors: (V, d) word vectors.
        words: the V words.
        word: the query.
        top: how many neighbours (default 10).
    Returns:
        [(word, cosine)] best first.
    Raises:
        ConfigError: ``word`` is not in the vocabulary.
    """
    index = {w: i for i, w in enumerate(words)}
    if word not in index:
        near = sorted(w for w in words if w.lower() == word.lower())
        hint = f" (the vocabulary has {', '.join(near[:3])})" if near else ""
        raise ConfigError(f"word {word!r} is not in the {len(words):,}-word vocabulary{hint}",
                          "ask for a word that occurs at least min_count times in the training corpus")
    unit = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-12)
    sims = unit @ unit[index[word]]
    sims[index[word]] = -float("inf")
    best = sims.topk(min(top, len(words) - 1))
    return [(words[i], float(s)) for s, i in zip(best.values.tolist(), best.indices.tolist())]
