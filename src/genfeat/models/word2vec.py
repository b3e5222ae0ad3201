"""word2vec (Mikolov et al. 2013a, b; seed lecture "Contextualized Word Embeddings"): two embedding tables.

Axis legend: V vocabulary, d vector size, b batch (center words), n input slots, k vectors h per row
(1, or n for skip-gram with hierarchical softmax), T targets per row.

Each word w has an input vector v_w (``input``, the vectors kept and exported). The output table holds
the vectors u the h are scored against: with negative sampling one per word (syn1neg in word2vec.c),
with the hierarchical softmax one per inner node of the Huffman tree, V − 1 (syn1). A row of a batch
scores its targets against k vectors h, s_{jt} = u_t^T h_j, where

- skip-gram, negative sampling, predicting the center (the default; word2vec.c's and gensim's order):
  k = n = 2m, h_j = v_{w_{t+j}}, each context word's input vector; the targets are the center word and
  its negatives;
- skip-gram, negative sampling, predicting the context (the lecture's P(w_{t+j} | w_t)): k = 1,
  h = v_{w_t}, the center word's input vector; the targets are the words of its window and its negatives;
- skip-gram, hierarchical softmax: k = n = 2m, h_j = v_{w_{t+j}}, each context word's input vector;
  the targets are the inner nodes on the center word's path (the center-predicting order again: one path
  a row instead of one a pair);
- CBOW: k = 1, h = (1/|C|) Σ_{c∈C} v_c, the mean of the window's input vectors (gensim's ``cbow_mean=1``);
  the targets are the center word and its negatives, or the inner nodes on its path. As in
  word2vec.c and gensim, every v_c receives the whole gradient of h, not 1/|C| of it.

The scores and their gradients are one autograd node (:class:`_RowScores`) with the closed-form
backward pass of word2vec.c's update: the looked-up rows are gathered once, and the gradients come
back as sparse (V, d) tensors holding one row per lookup. The model returns the scores only; the loss
is genfeat.objectives.word2vec.

The module also writes the word2vec text and binary formats (the files gensim's
``KeyedVectors.load_word2vec_format`` reads); nearest-neighbour queries are genfeat.eval.word_vectors'.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
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
    """skipgram: each input vector scores the targets on its own; cbow: the mean of the window's vectors does."""
    sparse: bool = True
    """Sparse gradients (one row per lookup, so only the rows a batch touches are updated); needs plain SGD.
    False: dense (V, d) gradients."""
    output: Literal["negative", "hierarchical"] = "negative"
    """The output table: one vector per word (negative sampling) or per inner node of the Huffman tree,
    V − 1 of them (hierarchical softmax)."""

    def __post_init__(self):
        if self.vocab_size < 1 or self.dim < 1:
            raise ConfigError(f"word2vec vocab_size {self.vocab_size} / dim {self.dim} must be >= 1",
                              "build the model from a non-empty vocabulary with dim >= 1")


@dataclass
class Word2VecOutput:
    """scores: (b, k, T) u_t^T h_j for every vector h_j and target t of every row."""

    scores: Tensor


def _row_gradient(ids: Tensor, rows: Tensor, shape: torch.Size, sparse: bool) -> Tensor:
    """The (V, d) gradient that adds ``rows`` (..., d) at the rows ``ids`` (...): sparse COO (uncoalesced, one
    row per lookup) or dense."""
    ids, rows = ids.reshape(-1), rows.reshape(-1, shape[1])
    if sparse:
        return torch.sparse_coo_tensor(ids.unsqueeze(0), rows, shape, check_invariants=False)
    return rows.new_zeros(shape).index_add_(0, ids, rows)


class _RowScores(torch.autograd.Function):
    """s_{jt} = u_t^T h_j for the rows of a batch, with word2vec.c's update as a closed-form backward pass.

    Forward: v = W_in[inputs] (b, n, d); h = the masked mean of v over the n slots (b, 1, d) when ``mean``,
    else v (b, n, d); u = W_out[targets] (b, T, d); scores (b, k, T).
    Backward from G = ∂L/∂s (b, k, T): ∂L/∂u_t = Σ_j G_{jt} h_j (b, T, d) and ∂L/∂h_j = Σ_t G_{jt} u_t
    (b, k, d); each slot of a mean gets the whole ∂L/∂h (word2vec.c's CBOW update), an empty slot nothing;
    each row's gradient times its lookup's grad scale. One autograd node instead of the gather, product,
    sum and scaling nodes autograd would record (docs/BENCHMARKS.md).
    """

    @staticmethod
    def forward(ctx, w_in, w_out, inputs, input_mask, targets, in_scale, out_scale, mean, sparse):
        (b, n), d = inputs.shape, w_in.shape[1]
        v = w_in.index_select(0, inputs.reshape(-1)).view(b, n, d)
        u = w_out.index_select(0, targets.reshape(-1)).view(b, targets.shape[1], d)
        if mean and n > 1:
            m = input_mask.unsqueeze(1).to(v.dtype)  # (b, 1, n)
            h = torch.bmm(m, v) / m.sum(2, keepdim=True).clamp_min(1.0)
        else:
            h = v
        # one h a row: a fused multiply-sum beats b matrix-vector products (docs/BENCHMARKS.md)
        scores = torch.linalg.vecdot(u, h).unsqueeze(1) if h.shape[1] == 1 else torch.bmm(h, u.transpose(1, 2))
        ctx.save_for_backward(h, u, inputs, input_mask, targets, in_scale, out_scale)
        ctx.sparse, ctx.shapes = sparse, (w_in.shape, w_out.shape)
        return scores

    @staticmethod
    def backward(ctx, grad):
        h, u, inputs, input_mask, targets, in_scale, out_scale = ctx.saved_tensors
        g_out = grad if out_scale is None else grad * out_scale.unsqueeze(1)
        grad_u = g_out.transpose(1, 2) * h if h.shape[1] == 1 else torch.bmm(g_out.transpose(1, 2), h)  # (b, T, d)
        slot = input_mask.to(grad.dtype) if in_scale is None else input_mask * in_scale  # (b, n)
        grad_v = torch.bmm(grad, u) * slot.unsqueeze(2)  # (b, k, d) -> (b, n, d)
        return (_row_gradient(inputs, grad_v, ctx.shapes[0], ctx.sparse),
                _row_gradient(targets, grad_u, ctx.shapes[1], ctx.sparse), None, None, None, None, None, None, None)


class Word2Vec(nn.Module):
    """Input and output vectors (module docstring).

    Initialisation as word2vec.c and gensim: v_w ~ U(−0.5/d, 0.5/d), u = 0.

    Args:
        config: :class:`Word2VecConfig`.
    """

    def __init__(self, config: Word2VecConfig):
        super().__init__()
        self.config = config
        v, d = config.vocab_size, config.dim
        self.input = nn.Embedding(v, d)
        self.output = nn.Embedding(v if config.output == "negative" else max(v - 1, 1), d)
        nn.init.uniform_(self.input.weight, -0.5 / d, 0.5 / d)
        nn.init.zeros_(self.output.weight)

    def forward(self, inputs: Tensor, input_mask: Tensor, targets: Tensor, input_grad_scale: Tensor | None = None,
                target_grad_scale: Tensor | None = None) -> Word2VecOutput:
        """Scores of the targets against the vectors h of each row.

        Args:
            inputs: (b, n) ids whose input vectors make h (skip-gram: the n = 2m window slots, each its own h,
                or n = 1, the center word, when it predicts the context; CBOW: the n = 2m window, averaged);
                any id where ``input_mask`` is false.
            input_mask: (b, n) bool, true where the slot holds a word.
            targets: (b, T) ids of output vectors scored against h.
            input_grad_scale, target_grad_scale: optional (b, n) / (b, T) factors on the gradient reaching
                each looked-up vector; the scores are unchanged (the sampler's per-batch row cap).
        Returns:
            :class:`Word2VecOutput` with scores (b, k, T): k = 1 for CBOW, n for skip-gram.
        """
        return Word2VecOutput(_RowScores.apply(self.input.weight, self.output.weight, inputs, input_mask, targets,
                                               input_grad_scale, target_grad_scale,
                                               self.config.architecture == "cbow", self.config.sparse))

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


def load_word2vec_format(path: str | Path, wanted: set[str] | None = None) -> tuple[list[str], np.ndarray]:
    """Read word vectors written by :func:`save_word2vec_format`, word2vec.c or gensim (text or binary, with the
    ``V d`` header), or GloVe's text files (no header; a word may hold spaces, as in glove.840B).

    The format is told from the file: a first line of two positive integers is the header; the file is then text
    if its first record is a word and d numbers, else binary (per record the word, a space, d little-endian
    float32), and a binary reading must account for every byte. Text is read line by line and only the wanted
    words' numbers are parsed; a binary file is mapped into memory, not read into it: either way a large file costs
    one pass and the memory of the words kept.

    Args:
        path: the file.
        wanted: keep only these words (the rest are read past); None: every word.
    Returns:
        (words, vectors (n, d) float32), in file order; a word given twice keeps its first vector.
    Raises:
        DataError: a missing file; a malformed header, line or record (named by its number); a record count
            other than the header's; a value that is not a finite number; no vectors.
    """
    path = Path(path)
    fix = "pass a word2vec text or binary file (genfeat run writes OUT/vectors.txt or .bin) or a GloVe .txt"
    if not path.is_file():
        raise DataError(f"word vectors '{path}' do not exist", fix)

    def bad(what: str) -> DataError:
        return DataError(f"word vectors '{path}' are malformed: {what}", fix)

    with open(path, "rb") as f:
        first = f.readline()
        bom = 3 if first.startswith(b"\xef\xbb\xbf") else 0
        head = first[bom:].split()
        header = len(head) == 2 and all(x.isdigit() for x in head) and int(head[1]) > 0
        n, d = (int(head[0]), int(head[1])) if header else (None, None)
        start = f.tell() if header else bom
        binary = False
        if header:
            line = f.readline()
            while line and not line.strip():
                line = f.readline()
            try:
                _text_record(line, 2, d, None)
            except (UnicodeDecodeError, ValueError) as e:
                text_error = e
                binary = True
        if binary:
            try:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # a file system that cannot map files: read it whole
                mapped = None
                f.seek(0)
            try:
                kept = _binary_records(f.read() if mapped is None else mapped, start, n, d, wanted, bad, text_error)
            finally:
                if mapped is not None:
                    mapped.close()
        else:
            f.seek(start)
            kept, count, d = _text_records(f, d, wanted, bad, 2 if header else 1)
            if header and count != n:
                raise bad(f"the header announces {n:,} vectors and the file holds {count:,}")
    words, rows = list(kept), list(kept.values())
    if d is None or (wanted is None and not words):
        raise DataError(f"word vectors '{path}' hold no vectors", fix)
    vectors = np.stack(rows) if rows else np.zeros((0, d), np.float32)
    if not np.isfinite(vectors).all():
        raise bad(f"the vector of {words[int(np.nonzero(~np.isfinite(vectors).all(1))[0][0])]!r} holds a value that "
                  "is not finite")
    return words, vectors


def _text_record(line: bytes, number: int, d: int | None, wanted: set[str] | None
                 ) -> tuple[str, np.ndarray | None, int]:
    """One text line -> (word, its numbers or None when not wanted, d); the word is everything before the last d
    fields (GloVe's words may hold spaces)."""
    text = line.decode("utf-8").rstrip("\r\n")
    parts = text.split(" ") if d is None else text.rsplit(" ", d)
    if len(parts) < 2 or (d is not None and len(parts) != d + 1) or not parts[0]:
        raise ValueError(f"line {number} is not a word and {d if d is not None else 'its'} numbers separated by "
                         "spaces")
    word, numbers = parts[0], parts[1:]
    if wanted is not None and word not in wanted:
        return word, None, len(numbers)
    try:
        return word, np.asarray(numbers, dtype=np.float32), len(numbers)
    except ValueError:
        raise ValueError(f"line {number} holds a value that is not a number") from None


def _text_records(f, d: int | None, wanted: set[str] | None, bad, first_number: int
                  ) -> tuple[dict[str, np.ndarray], int, int | None]:
    """The wanted words' vectors (the first of a repeated word), the number of records, d."""
    kept: dict[str, np.ndarray] = {}
    count = 0
    for number, line in enumerate(f, start=first_number):
        if not line.strip():
            continue
        try:
            word, row, d = _text_record(line, number, d, wanted)
        except (UnicodeDecodeError, ValueError) as e:
            raise bad(f"line {number}: {e}" if isinstance(e, UnicodeDecodeError) else str(e)) from None
        count += 1
        if row is not None:
            kept.setdefault(word, row)
    return kept, count, d


_NOT_SPACE = re.compile(rb"\S")


def _binary_records(body: mmap.mmap | bytes, pos: int, n: int, d: int, wanted: set[str] | None, bad, text_error: Exception
                    ) -> dict[str, np.ndarray]:
    """The wanted words' vectors of the n binary records from byte ``pos`` of the file's bytes (mapped, or read)
    (the first of a repeated word)."""
    kept: dict[str, np.ndarray] = {}
    width = 4 * d
    for record in range(1, n + 1):
        while body[pos:pos + 1] == b"\n":
            pos += 1
        space = body.find(b" ", pos)
        raw = body[pos:space] if space >= 0 else b""
        try:
            word = raw.decode("utf-8")
        except UnicodeDecodeError:
            word = ""
        if space < 0 or space + 1 + width > len(body) or not word or any(c.isspace() or ord(c) < 32 for c in word):
            raise bad(f"neither text (line 2: {text_error}) nor binary (record {record} of {n} is cut short or "
                      "its word is not UTF-8 text without white space)")
        if (wanted is None or word in wanted) and word not in kept:
            kept[word] = np.frombuffer(body, "<f4", d, space + 1).copy()
        pos = space + 1 + width
    if _NOT_SPACE.search(body, pos):  # scanned in place: the rest of a mapped file is not copied
        raise bad(f"{len(body) - pos:,} bytes follow the {n:,} binary records the header announces")
    return kept
