"""word2vec runner (Mikolov et al. 2013a, b): skip-gram or CBOW with negative sampling or the hierarchical softmax,
then intrinsic evaluation.

Recipe: ``method: word2vec`` + the fields of :class:`Word2VecRecipe`. The corpus is read as sentences of
tokens; words seen fewer than ``min_count`` times are dropped from the sentences (they take no window
position, as in word2vec.c and gensim); then :class:`~genfeat.objectives.word2vec.WindowSampler`
batches feed :class:`~genfeat.objectives.word2vec.Word2VecObjective` in the one training loop,
with plain SGD on sparse gradients and a learning rate decaying linearly from ``lr`` to ``min_lr``. With
``workers: W`` > 1, W processes run that loop at once on shares of the corpus, updating the same vectors
without locks (Hogwild, as word2vec.c's and gensim's threads; :func:`fit_word2vec`).

Output directory (``--out OUT``): ``metrics.jsonl`` and the ``last`` checkpoint of the training loop,
``final`` (model.safetensors, config.json, vocab.json: ``genfeat neighbours --checkpoint OUT/final``),
``vectors.bin`` / ``vectors.txt`` in the word2vec format, and ``results.json``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from ..config import Config, to_dict
from ..errors import ConfigError, DataError, GenfeatError
from ..framework.distributed import refuse_several_processes
from ..framework.optim import OptimConfig
from ..framework.schedule import OptimSpec, Phase, Stage, Term
from ..framework.trainer import TrainConfig, Trainer, TrainResult
from ..io import write_results
from ..runner import recipe_record, register_method

DIVERGED_FIX = "lower lr or batch_size, or set row_cap (e.g. 128), then run again with --overwrite"
"""The fix of a word2vec run whose loss or vectors became NaN (the trainer's, in this recipe's fields)."""


@dataclass
class Word2VecRecipe(Config):
    """word2vec training and evaluation. Defaults: gensim 4's (skip-gram, d = 100, m = 5, K = 5,
    min_count 5, sample 1e-3, α 0.025 → 0.0001, 5 epochs)."""

    corpus: list[str] = field(default_factory=lambda: ["ptb:train"])
    """Text read as sentences (genfeat.data.documents): ``ptb:SPLIT``, ``wikitext2:SPLIT``, ``imdb:train``,
    a text file or a folder; several are concatenated."""
    max_documents: int = 0
    """Read at most this many documents of each corpus (0: all; a PTB split is one document)."""
    tokens: Literal["whitespace", "words"] = "whitespace"
    """whitespace: split at white space (PTB and WikiText are tokenised already); words: the ``tokenizers``
    BERT pre-tokeniser (white space and punctuation), for raw text such as IMDB reviews."""
    lowercase: bool = False
    """Lower-case the text before tokenising."""
    architecture: Literal["skipgram", "cbow"] = "skipgram"
    """skipgram or cbow (genfeat.models.word2vec)."""
    loss: Literal["negative", "hierarchical"] = "negative"
    """negative: negative sampling (``negatives`` noise words); hierarchical: the hierarchical softmax over a
    Huffman tree of the vocabulary (gensim's ``hs=1, negative=0``; genfeat.objectives.word2vec)."""
    dim: int = 100
    """Vector size d."""
    window: int = 5
    """m, the largest distance between a center word and a context word (dynamic window b ~ U{1..m})."""
    negatives: int = 5
    """K noise words per center word (negative sampling only)."""
    ns_exponent: float = 0.75
    """Exponent of the unigram noise distribution."""
    min_count: int = 5
    """Words seen fewer times are dropped."""
    sample: float = 1e-3
    """Frequent-word subsampling threshold s (0: off)."""
    epochs: int = 5
    """Passes over the corpus."""
    batch_size: int = 1024
    """Center words per step."""
    shared_negatives: bool = True
    """Skip-gram: one set of K negatives per center word, shared by its window's pairs (fast), or K per pair
    (false, word2vec.c's draws, each pair scored against the center word's vector whatever ``predicts`` says;
    about 3 times the time of shared negatives with ``predicts: context``, and 3.76% against 2.04% on the
    analogies of docs/BENCHMARKS.md's PTB + WikiText-2 run)."""
    predicts: Literal["center", "context"] = "center"
    """Skip-gram with shared negatives: center (h = each context word's vector scores the center word and the K
    negatives: the pair order of word2vec.c and gensim, which the hierarchical softmax always uses) or context
    (h = the center word's vector scores its window and the K negatives, the lecture's P(w_{t+j} | w_t)).
    center is the default because it meets the quality targets beside gensim where context does not: on
    PTB + WikiText-2 (docs/BENCHMARKS.md, seeds 0 / 1) center scored 3.67% / 3.60% on the analogies against
    gensim's 3.74% / 3.74%, context 1.90% / 1.95% against gensim's 3.83% / 4.22%; context's step is about 0.75
    of center's."""
    row_cap: float = 128.0
    """C: within one step a vector gets at most C pair updates' worth of gradient (genfeat.objectives.word2vec,
    batched SGD; 0: the plain sum, which diverges for large batches)."""
    lr: float = 0.025
    """α, the SGD step on each pair's loss at the start (word2vec.c's alpha)."""
    min_lr: float = 0.0001
    """α at the end of training (linear decay)."""
    threads: int = 1
    """torch intra-op threads. 1 is the fast setting: word2vec's operations are small, and a second intra-op
    thread made a step of 1,024 center words 12 times slower on the 2-core VM under load (130 ms against
    10.6 ms; docs/BENCHMARKS.md)."""
    workers: int = 1
    """Processes that train at once, each on its share of the corpus (cut at sentence starts), updating the
    same vectors in shared memory without locks: Hogwild (Recht et al. 2011), as word2vec.c's and gensim's
    worker threads do. Each worker has its own batches, random stream and learning-rate decay over its share.
    1 (default) is deterministic; more runs on as many cores but is not reproducible bit for bit, logs worker
    0's losses only, and cannot be resumed (needs threads 1 and save_every 0)."""
    similarity_file: str = "gensim"
    """Word-similarity file scored after training: ``gensim`` (its wordsim353.tsv; skipped without gensim),
    a path, or empty (none)."""
    analogy_file: str = "gensim"
    """Analogy file: ``gensim`` (its questions-words.txt; skipped without gensim), a path, or empty."""
    export: Literal["none", "text", "binary"] = "binary"
    """Write OUT/vectors.txt (text) or OUT/vectors.bin (binary) in the word2vec format."""
    save_every: int = 0
    """Write the ``last`` checkpoint every this many steps (0: at the end); needs an output directory."""

    def __post_init__(self):
        if self.window < 1:
            raise ConfigError(f"window is {self.window}, so no word has a context", "set window >= 1")
        for name in ("dim", "negatives", "min_count", "epochs", "batch_size", "threads", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}", f"set {name} >= 1")
        if not self.corpus:
            raise ConfigError("corpus is empty", "name at least one corpus, e.g. [ptb:train]")
        if self.sample < 0 or self.max_documents < 0 or self.save_every < 0 or self.row_cap < 0:
            raise ConfigError("sample, max_documents, save_every and row_cap must be >= 0", "set them to 0 or more")
        if self.workers > 1 and (self.threads > 1 or self.save_every):
            raise ConfigError(f"workers {self.workers} with threads {self.threads} / save_every {self.save_every}: "
                              "Hogwild workers run one torch thread each and write no mid-run checkpoint (it could "
                              "not be resumed)", "set threads 1 and save_every 0, or workers 1")
        if not 0 < self.min_lr <= self.lr:
            raise ConfigError(f"lr {self.lr} / min_lr {self.min_lr}", "use 0 < min_lr <= lr")


@dataclass
class SparseSGDConfig(OptimConfig):
    """Plain SGD (no momentum, no weight decay) that accepts sparse gradients; torch's fused SGD, which
    :class:`OptimConfig` builds, refuses them."""

    def __post_init__(self):
        super().__post_init__()
        if self.name != "sgd" or self.momentum or self.weight_decay:
            raise ValueError("sparse gradients take plain SGD: name sgd, momentum 0, weight_decay 0")

    def build(self, params):
        return torch.optim.SGD([p for p in params if p.requires_grad], lr=self.lr)


def _tokeniser(kind: str, lowercase: bool):
    if kind == "whitespace":
        return (lambda s: s.lower().split()) if lowercase else str.split
    from tokenizers.pre_tokenizers import BertPreTokenizer

    pre = BertPreTokenizer()
    # each whitespace-separated piece (Python's white space, which the vectors files separate words by: BERT's
    # pre-tokenizer keeps \x1c-\x1f inside a word) split into BERT's words and punctuation
    return lambda s: [w for piece in (s.lower() if lowercase else s).split() for w, _ in pre.pre_tokenize_str(piece)]


def read_sentences(cfg: Word2VecRecipe) -> list[list[str]]:
    """The sentences of the recipe's corpora as lists of tokens (empty sentences dropped).

    Raises:
        DataError: a corpus that cannot be read or holds no token.
    """
    from ..data.documents import read_documents

    split = _tokeniser(cfg.tokens, cfg.lowercase)
    out = []
    for spec in cfg.corpus:
        for doc in read_documents(spec, cfg.max_documents):
            out.extend(tokens for tokens in map(split, doc) if tokens)
    if not out:
        raise DataError(f"the corpus {cfg.corpus} holds no token", "train on a corpus with text in it")
    return out


def build_vocab(sentences: list[list[str]], min_count: int) -> tuple[list[str], np.ndarray]:
    """Words seen at least ``min_count`` times, most frequent first (ties in first-seen order), and their counts.

    Raises:
        DataError: no word is that frequent.
    """
    from collections import Counter

    counts = Counter(w for s in sentences for w in s)
    kept = sorted(((w, c) for w, c in counts.items() if c >= min_count), key=lambda wc: -wc[1])
    if not kept:
        top = max(counts.values()) if counts else 0
        raise DataError(f"no word of the corpus occurs min_count={min_count} times (the most frequent occurs {top})",
                        f"lower min_count to at most {max(top, 1)} or train on more text")
    return [w for w, _ in kept], np.array([c for _, c in kept], np.int64)


def encode_sentences(sentences: list[list[str]], words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids (N,), sentence index (N,)) of the in-vocabulary tokens; out-of-vocabulary ones are dropped."""
    index = {w: i for i, w in enumerate(words)}
    ids, sent = [], []
    for k, s in enumerate(sentences):
        row = [index[w] for w in s if w in index]
        ids.extend(row)
        sent.extend([k] * len(row))
    return np.array(ids, np.int64), np.array(sent, np.int64)


def model_config(vocab_size: int, cfg: Word2VecRecipe):
    """The :class:`~genfeat.models.word2vec.Word2VecConfig` of a recipe over ``vocab_size`` words."""
    from ..models.word2vec import Word2VecConfig

    return Word2VecConfig(vocab_size, cfg.dim, cfg.architecture, output=cfg.loss)


def corpus_shards(sentence: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive (start, stop) ranges of about equal length covering the corpus: each cut k·N/parts moves
    to the nearer start of a sentence (the one it falls in or the next) when that start lies within N/(2·parts) of
    it and keeps every range non-empty; otherwise it stays inside the sentence.

    Raises:
        DataError: an empty corpus. ConfigError: fewer words than parts.
    """
    n = len(sentence)
    if n == 0:
        raise DataError("the corpus holds no word of the vocabulary", "train on a corpus with text in it")
    if n < parts:
        raise ConfigError(f"the corpus has {n} words in the vocabulary for {parts} workers", f"set workers <= {n}")
    cuts, slack = [0], n / (2 * parts)
    for k in range(1, parts):
        cut = k * n // parts
        before = int(np.searchsorted(sentence, sentence[cut], side="left"))
        after = int(np.searchsorted(sentence, sentence[cut], side="right"))
        near = min((c for c in (before, after) if cuts[-1] < c < n and abs(c - cut) <= slack),
                   key=lambda c: abs(c - cut), default=max(cut, cuts[-1] + 1))
        cuts.append(near)
    cuts.append(n)
    return list(itertools.pairwise(cuts))


def _train_share(model, sampler, steps: int, cfg: Word2VecRecipe, tcfg: TrainConfig, out_dir=None,
                 checkpoint_config=None, save_extra=None, resume_from=None, after_step=None) -> TrainResult:
    """The one training loop over one sampler: SGD on sparse gradients, α decaying linearly over ``steps``
    (``after_step``: as :class:`Trainer`'s)."""
    from ..objectives.word2vec import Word2VecObjective

    # α applies to each pair's loss: the trainer minimises the mean over the batch's center words
    optim = SparseSGDConfig(name="sgd", lr=cfg.lr * cfg.batch_size, decay="linear", min_lr_ratio=cfg.min_lr / cfg.lr)
    objective = Word2VecObjective("sgns" if cfg.loss == "negative" else "hs")
    phase = Phase("train", steps, [Stage([Term(objective, sampler)])], {"main": OptimSpec(optim)})
    return Trainer(model, [phase], tcfg, None, out_dir, checkpoint_config=checkpoint_config, save_extra=save_extra,
                   resume_from=resume_from, after_step=after_step, diverged_fix=DIVERGED_FIX).fit()


def _share_with_forks(model: torch.nn.Module) -> None:
    """Move every parameter's data into anonymous shared memory (``mmap``), which processes forked afterwards
    write into as well; unlike ``share_memory_()`` it needs no room in /dev/shm (64 MB in a default container)."""
    import mmap

    for p in model.parameters():
        shared = torch.frombuffer(mmap.mmap(-1, p.numel() * p.element_size()), dtype=p.dtype).view(p.shape)
        shared.copy_(p.data)
        p.data = shared


def _hogwild_worker(model, sampler, steps: int, cfg: Word2VecRecipe, tcfg: TrainConfig, report,
                    parent: int) -> None:
    """A forked worker: train the shared model on its sampler. An exception's text (on one line, cut to 2,000
    characters, so the write never waits on a full pipe) goes to ``report``, its own pipe's write end; an interrupt
    ends the process with status 130. It ends too when the parent process ``parent`` dies (Linux: parent-death
    signal)."""
    import ctypes
    import os
    import signal

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    try:
        _train_share(model, sampler, steps, cfg, tcfg)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as e:  # noqa: BLE001 (any failure is reported to the parent, which raises it)
        report.send(" ".join(f"{type(e).__name__}: {e}".split())[:2000])
        raise SystemExit(1) from None


def _worker_failure(proc, reader) -> str:
    """Why a worker ended with a non-zero status: its reported exception, else its status or signal."""
    if reader.poll():
        try:
            return f"raised {reader.recv()}"
        except EOFError:  # no report, and no process holds the pipe's write end any more
            pass
    if proc.exitcode == 130:
        return "was interrupted"
    if proc.exitcode < 0:
        sig = -proc.exitcode
        hint = " (SIGKILL: most likely out of memory)" if sig == 9 else ""
        return f"was killed by signal {sig}{hint}"
    return f"ended with exit code {proc.exitcode}"


def _check_workers(procs, readers, shards: list[tuple[int, int]]) -> None:
    """Raise the error of the first worker process (``procs[k]`` trains share k + 1) that has ended with a failure;
    one still training, or one that finished its share, passes. It costs one ``waitpid(WNOHANG)`` per worker, a few
    microseconds against a step's milliseconds, so share 0 runs it after every step.

    Raises:
        GenfeatError: naming the worker, its share and the cause.
    """
    for w, (proc, reader) in enumerate(zip(procs, readers), 1):
        if proc.exitcode not in (None, 0):
            a, b = shards[w]
            raise GenfeatError(f"a word2vec worker process failed: {proc.name} (share {w} of shares 0-{len(shards) - 1}"
                               f": corpus words {a:,} to {b:,}) {_worker_failure(proc, reader)}",
                               "fix the cause named (a killed worker: lower workers or the corpus size), or train "
                               "with workers 1 to see it in this process")


def fit_word2vec(ids: np.ndarray, sentence: np.ndarray, counts: np.ndarray, cfg: Word2VecRecipe, seed: int,
                 out_dir: Path | None = None, progress: bool = False, checkpoint_config: dict | None = None,
                 save_extra=None, resume_from: Path | None = None, steps: int = 0):
    """Train word vectors on an encoded corpus with the one training loop, in ``cfg.workers`` processes.

    Also the skip-gram of Planetoid's GraphEmb baseline (random walks as sentences). With ``cfg.workers`` W > 1
    the corpus is cut into W shares (:func:`corpus_shards`); the model's tables move to shared memory and W − 1
    forked processes train on shares 1.. while this one trains on share 0 with the logs and checkpoints (so
    ``out_dir/last`` is written when share 0 ends, while the others may still be training; the returned model,
    which ``run`` saves as ``final``, is taken after all of them). After every step of share 0, and while it waits
    for the others at the end, this process checks its workers (:func:`_check_workers`): the first one that has
    ended with a failure (an exception, a signal, a non-zero status) ends the run at once, the others are
    terminated and its error is raised, so ``out_dir`` keeps share 0's ``metrics.jsonl`` up to that step and no
    ``last`` (workers write no mid-run checkpoint), and ``run`` writes no ``final``, vectors or results. A worker
    that finishes its share before share 0 ends is no failure.

    Args:
        ids: (N,) word ids; sentence: (N,) sentence index of each; counts: (V,) word counts.
        cfg: the training fields of the recipe (architecture, loss, dim, window, negatives, shared_negatives, sample,
            epochs, batch_size, row_cap, lr, min_lr, threads, workers, save_every).
        seed: seed of the initialisation, subsampling, windows and negatives.
        out_dir, progress, checkpoint_config, save_extra, resume_from: as :class:`Trainer`'s.
        steps: train this many steps of ``cfg.batch_size`` center words over all workers (default 0:
            ``cfg.epochs`` epochs' worth).
    Returns:
        (model, TrainResult, steps); with workers, the result's ``seconds`` span all of them, from the fork to
        the last one's end, and ``steps`` counts all workers' steps.
    Raises:
        ConfigError: the vectors are not finite after training (the settings made SGD diverge); resuming a run
            with workers > 1.
        GenfeatError: a worker process failed (its exception's text) or was killed, raised as soon as this process
            sees it (after share 0's current step), naming the worker and its share.
    """
    import multiprocessing
    import os
    import time
    from multiprocessing.connection import wait

    from ..models.word2vec import Word2Vec
    from ..objectives.word2vec import WindowSampler

    if cfg.workers > 1 and resume_from is not None:
        raise ConfigError(f"a word2vec run with workers {cfg.workers} cannot be resumed (its Hogwild workers keep "
                          "no joint state)", "start the run again with --overwrite instead of --resume")
    torch.set_num_threads(cfg.threads)  # before the fork: the workers inherit no intra-op thread pool
    torch.manual_seed(seed)
    model = Word2Vec(model_config(len(counts), cfg))
    shards = corpus_shards(sentence, cfg.workers)
    samplers = [WindowSampler(ids[a:b], sentence[a:b], counts, cfg.window, cfg.negatives, cfg.batch_size, cfg.sample,
                              cfg.ns_exponent, seed, cfg.architecture, cfg.row_cap, cfg.shared_negatives, cfg.loss,
                              cfg.predicts, stream=w) for w, (a, b) in enumerate(shards)]
    centers = [s.expected_centers() for s in samplers]
    total = steps or max(1, math.ceil(cfg.epochs * sum(centers) / cfg.batch_size))
    share_steps = [max(1, math.ceil(total * c / sum(centers))) for c in centers]  # [total] for one worker
    tcfg = TrainConfig(seed=seed, device="cpu", threads=cfg.threads, progress=progress,
                       log_every=max(1, share_steps[0] // 20), save_every=cfg.save_every)
    procs, readers = [], []
    t0 = time.time()
    if cfg.workers > 1:
        _share_with_forks(model)
        ctx = multiprocessing.get_context("fork")
        quiet = dataclasses.replace(tcfg, progress=False)
        for w in range(1, cfg.workers):
            reader, writer = ctx.Pipe(duplex=False)
            procs.append(ctx.Process(target=_hogwild_worker, name=f"word2vec-worker-{w}", daemon=True,
                                     args=(model, samplers[w], share_steps[w], cfg, quiet, writer, os.getpid())))
            readers.append(reader)
        for p in procs:
            p.start()
    check = (lambda step: _check_workers(procs, readers, shards)) if procs else None
    try:
        result = _train_share(model, samplers[0], share_steps[0], cfg, tcfg, out_dir, checkpoint_config,
                              save_extra, resume_from, check)
        running = {p.sentinel: p for p in procs}
        while running:  # in the order they end, so the first failure ends the wait
            for ended in wait(list(running)):
                running.pop(ended).join()
            _check_workers(procs, readers, shards)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    if procs:
        result = dataclasses.replace(result, steps=sum(share_steps), seconds=time.time() - t0)
    if not torch.isfinite(model.input.weight).all():
        raise ConfigError(f"word2vec training diverged (non-finite vectors after {result.steps} steps of "
                          f"{cfg.batch_size} center words at lr {cfg.lr}, row_cap {cfg.row_cap})", DIVERGED_FIX)
    return model.eval(), result, sum(share_steps)


def _eval_file(setting: str, gensim_name: str) -> str | None:
    if setting != "gensim":
        return setting or None
    from ..eval.word_vectors import gensim_test_file

    path = gensim_test_file(gensim_name)
    return str(path) if path is not None else None


@register_method("word2vec", Word2VecRecipe, resume_free=("threads", "save_every"))
def run(cfg: Word2VecRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    import time

    from ..data.vocab import SymbolVocab
    from ..eval.word_vectors import evaluate_vectors, read_analogy_questions, read_similarity_pairs
    from ..framework.checkpoint import resume_dir, save_checkpoint
    from ..hub import VOCAB_FILE
    from ..models.word2vec import save_word2vec_format

    refuse_several_processes("word2vec", "its parallelism is its own Hogwild worker processes (workers), and its "
                             "window sampler draws every window in one process")
    if resume and out_dir is None:
        raise ConfigError("--resume needs the output directory of the run to continue", "pass --out DIR")
    # the evaluation files are read before the training, so that a missing or malformed one does not cost it
    similarity_file = _eval_file(cfg.similarity_file, "wordsim353.tsv")
    analogy_file = _eval_file(cfg.analogy_file, "questions-words.txt")
    if similarity_file:
        read_similarity_pairs(similarity_file)
    if analogy_file:
        read_analogy_questions(analogy_file)
    t0 = time.time()
    sentences = read_sentences(cfg)
    words, counts = build_vocab(sentences, cfg.min_count)
    ids, sentence = encode_sentences(sentences, words)
    del sentences
    vocab = SymbolVocab(words, "word", add_eos=False)
    save_vocab = lambda d: vocab.save(d / VOCAB_FILE)
    out = Path(out_dir) if out_dir is not None else None
    ckpt = {"architecture": "word2vec", "model": to_dict(model_config(len(words), cfg)),
            **recipe_record(cfg)}
    prep = time.time() - t0
    model, result, steps = fit_word2vec(ids, sentence, counts, cfg, seed, out, progress, ckpt, save_vocab,
                                        resume_dir(out / "last") if resume else None)
    if result.interrupted:
        return {"steps": result.steps, "interrupted": 1.0}
    figures: dict[str, float] = {
        "vocab_size": len(words), "corpus_words": len(ids), "steps": steps,
        "train_seconds": result.seconds, "prepare_seconds": prep,
        # the words of the corpus (in the vocabulary, before subsampling) over all epochs, per training second
        "words_per_s": cfg.epochs * len(ids) / max(result.seconds, 1e-9),
    }
    figures.update(evaluate_vectors(model.vectors, words, similarity_file, analogy_file))
    figures["seconds"] = time.time() - t0
    if out is not None:
        save_checkpoint(out / "final", model, None, ckpt, save_vocab)
        if cfg.export != "none":
            binary = cfg.export == "binary"
            save_word2vec_format(out / ("vectors.bin" if binary else "vectors.txt"), words, model.vectors, binary)
        write_results(out, figures)
    return figures
