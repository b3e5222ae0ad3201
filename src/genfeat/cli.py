"""The ``genfeat`` command line.

Subcommands: ``run`` (train and evaluate what a recipe names), ``evaluate`` (LM figures of a
checkpoint on a corpus; with ``--task``, a fine-tuned checkpoint's or a GDAN discriminator's task metrics),
``generate`` (top-k sampling from a Transformer-XL, reusing memory, or a GPT, reusing its keys and values),
``recl`` (relative effective context length of a model group), ``export`` (a checkpoint in Hugging Face format,
or a Hugging Face directory in genfeat's), ``tokenizer train`` (a WordPiece, sentencepiece or BPE tokenizer
for pretraining), ``zero-shot`` (GPT-1's zero-shot heuristic for a causal LM checkpoint),
``generate-questions`` (GDAN's question generator on paragraphs, JSONL out), ``neighbours`` (nearest words
in a word2vec checkpoint).
Every command that reports figures has ``--json``: its last stdout line is one JSON object.
Errors a user can cause print one line ``error: <cause>. fix: <fix>`` and exit with status 2, as do
argument errors and, behind the commands' own checks of their output paths, an OSError on a path;
``--debug`` shows the traceback instead. Ctrl-C prints one line and exits with status 130, SIGTERM (a
scheduler's, ``timeout``'s) likewise with 143.
``run`` refuses an OUT that holds a run or other files unless given ``--resume`` or ``--overwrite``.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
import time
from typing import Any

from .errors import CheckpointError, ConfigError, DataError, GenfeatError, with_article
from .io import json_safe


def _emit(result: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:   # in the order the command built it (run: the summary last); NaN as null
        print(json.dumps(json_safe(result), allow_nan=False))
    else:
        print(human)


def _fmt(result: dict[str, Any]) -> str:
    single = len(result.get("seeds", [])) == 1
    return "\n".join(f"{k:>24}: {v:.4f}" if isinstance(v, float) else f"{k:>24}: {v}"
                     for k, v in result.items()
                     if k not in ("runs", "provenance") and not (single and k.endswith(("_mean", "_std", "_median"))))


def _seed(text: str) -> int:
    """An argparse type: a seed torch's generators take (0 to 2**63 - 1)."""
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2 ** 63:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2**63 - 1, got {text}")
    return seed


def _require(args: argparse.Namespace, **bounds: tuple[float, str]) -> None:
    """Check numeric options before any work: ``name=(least, fix)``; None values are left alone.

    A value below its least one is refused with a ConfigError naming the flag, so a degenerate
    number never reaches a loop that would misreport or crash on it.
    """
    for name, (least, fix) in bounds.items():
        values = getattr(args, name)
        for value in values if isinstance(values, list) else [values]:
            if value is not None and value < least:
                raise ConfigError(f"--{name.replace('_', '-')} is {value}, below its least value {least:g}", fix)


def _check_out(out: str | None, replaces_dir: bool = False, flag: str = "--out", directory: bool = True) -> None:
    """Refuse, before any work, an output path a file is in the way of (genfeat.io.check_output_path) or, for
    an output that ``replaces_dir`` as a whole (an exported model), a directory holding anything but a model:
    writing there would delete it."""
    from pathlib import Path

    from .framework.checkpoint import CONFIG_FILE
    from .io import check_output_path

    if out is None:
        return
    check_output_path(out, flag, directory)
    path = Path(out)
    if replaces_dir and path.is_dir() and any(path.iterdir()) and not (path / CONFIG_FILE).is_file():
        raise ConfigError(f"{flag} '{out}' is a directory that holds other files, which writing the model there "
                          "would delete", "pass a new directory, or an existing model directory to replace")


def _check_segment(model, length: int, flag: str) -> None:
    """Refuse segments longer than a learned-position Transformer-XL (attn_type absolute_learned) has positions."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "attn_type", None) == "absolute_learned" and length > cfg.max_klen:
        raise ConfigError(f"{flag} is {length}, but the model learned positions for segments of at most {cfg.max_klen} "
                          "tokens (attn_type absolute_learned, max_klen)", f"pass {flag} {cfg.max_klen} or less")


OOV_WARN_RATE = 0.05
"""``evaluate`` and ``recl`` warn on stderr when more than this share of the data's tokens is outside
the checkpoint's vocabulary: those tokens are all scored as its one unknown token, so the figures no
longer measure the text (a PTB-vocabulary model on tinyshakespeare:val: 41.0%)."""


def _eval_tokens(data: str, vocab, max_tokens: int):
    """The tokens of ``data`` encoded with ``vocab`` (the first ``max_tokens``; 0: all) and the share
    of the data's tokens outside ``vocab`` (counted over all of it), warned about above OOV_WARN_RATE."""
    from .data.corpora import load_split_corpus

    corpus = load_split_corpus(data, vocab)
    ((split, tokens),) = corpus.splits.items()
    rate = corpus.oov.get(split, 0) / max(tokens.numel(), 1)
    if rate > OOV_WARN_RATE:
        print(f"warning: {rate:.1%} of the {tokens.numel()} tokens of '{data}' are outside the checkpoint's "
              f"{len(corpus.vocab)}-type vocabulary and are scored as its unknown token, so the figures say little "
              f"about this text (warned above {OOV_WARN_RATE:.0%}; the share is oov_rate in the output)",
              file=sys.stderr)
    return (tokens[:max_tokens] if max_tokens else tokens), rate


def _check_ids(tokens, model, data: str) -> None:
    """Refuse token ids the model cannot score (data encoded with another vocabulary)."""
    n_token = model.config.n_token
    if tokens.numel() and int(tokens.max()) >= n_token:
        raise DataError(f"'{data}' holds token id {int(tokens.max())} but the model has {n_token} types",
                        "encode the data with the model's vocabulary")


def cmd_run(args: argparse.Namespace, extra: list[str]) -> None:
    from .config import parse_overrides
    from .runner import run_recipe

    _require(args, seeds=(1, "pass --seeds 1 or more"))
    overrides = parse_overrides(extra)
    seeds = list(range(args.seed, args.seed + args.seeds))
    result = run_recipe(args.recipe, overrides, seeds, out_dir=args.out, progress=not args.no_progress,
                        resume=args.resume, overwrite=args.overwrite, command=["genfeat", *args.argv])
    _emit(result, args.json, _fmt(result))


def _check_architecture(path: str, arch: str, architectures: tuple[str, ...]) -> None:
    """Refuse checkpoint ``path`` of architecture ``arch`` for a command that serves ``architectures``."""
    if arch not in architectures:
        raise CheckpointError(f"checkpoint '{path}' holds {with_article(arch)} model, not {' or '.join(architectures)}",
                              f"pass {with_article(' or '.join(architectures))} checkpoint")


def _load_lm(path: str, device: str = "cpu", architectures: tuple[str, ...] = ("transformer_xl",),
             data: str | None = None):
    """The model of checkpoint ``path`` on ``device`` and its vocabulary; the model must be one of ``architectures``.
    The vocabulary must be there unless ``data`` (what is scored; None: text is generated) is a file of token
    ids (.npy), which are scored as they are: text encoded with a vocabulary rebuilt from it would be other ids
    than the model's."""
    from pathlib import Path

    from .framework.trainer import resolve_device
    from .hub import architecture_of, load_checkpoint, require_vocabulary

    target = resolve_device(device, "--device")
    model, vocab = load_checkpoint(path)
    _check_architecture(path, architecture_of(model), architectures)
    if data is None or Path(data).suffix != ".npy":
        require_vocabulary(vocab, path)
    return model.to(target), vocab


def cmd_evaluate_task(args: argparse.Namespace) -> None:
    """``evaluate --task``: a fine-tuned checkpoint's task metrics (genfeat.methods.finetune.evaluate_task)."""
    from .methods.finetune import evaluate_task

    import torch

    lm_only = [flag for flag, value in (("--data", args.data), ("--tgt-len", args.tgt_len), ("--mem-len", args.mem_len),
                                        ("--clamp-len", args.clamp_len), ("--max-tokens", args.max_tokens or None))
               if value is not None]
    if lm_only:
        raise ConfigError(f"{', '.join(lm_only)} belong(s) to language-model evaluation, not to --task",
                          "drop them, or drop --task to score a language model")
    _require(args, batch_size=(1, "pass --batch-size 1 or more"), max_examples=(0, "pass 0 (all) or more"),
             threads=(0, "pass 0 (default) or more"))
    if args.threads:
        torch.set_num_threads(args.threads)
    _check_out(args.predictions, flag="--predictions", directory=False)
    result = evaluate_task(args.checkpoint, args.task, args.split or "dev", args.predictions, batch_size=args.batch_size or 64,
                           device=args.device, max_examples=args.max_examples, squad_seed=args.squad_seed)
    _emit(result, args.json, _fmt(result))


def cmd_evaluate(args: argparse.Namespace, extra: list[str]) -> None:
    import torch

    _no_extra(extra)
    if args.task is not None:
        return cmd_evaluate_task(args)
    task_only = [flag for flag, value in (("--split", args.split), ("--predictions", args.predictions),
                                          ("--max-examples", args.max_examples or None),
                                          ("--squad-seed", args.squad_seed)) if value is not None]
    if task_only:
        raise ConfigError(f"{', '.join(task_only)} belong(s) to task evaluation (--task), not to a language model's",
                          "add --task NAME, or drop them")
    missing = [flag for flag, value in (("--data", args.data), ("--tgt-len", args.tgt_len), ("--mem-len", args.mem_len))
               if value is None]
    if missing:
        from .hub import architecture_of, load_checkpoint

        # a model evaluate does not score (GPT, BERT, XLNet): say so first, not which flags it would need
        _check_architecture(args.checkpoint, architecture_of(load_checkpoint(args.checkpoint)[0]), ("transformer_xl",))
        raise ConfigError(f"evaluate needs {', '.join(missing)} to score a language model",
                          "pass them, or --task NAME to score a fine-tuned checkpoint")
    args.batch_size = 1 if args.batch_size is None else args.batch_size
    _require(args, tgt_len=(1, "pass a segment length of 1 or more"),
             mem_len=(0, "pass a memory length of 0 (no memory) or more"),
             clamp_len=(-1, "pass -1 (no clamping) or a distance >= 0"),
             batch_size=(1, "pass 1 (one stream) or more streams"),
             max_tokens=(0, "pass 0 (all tokens) or a positive count"), threads=(0, "pass 0 (default) or more"))
    if args.threads:
        torch.set_num_threads(args.threads)
    model, vocab = _load_lm(args.checkpoint, args.device, data=args.data)
    _check_segment(model, args.tgt_len, "--tgt-len")
    from .eval.lm import evaluate_lm

    tokens, oov_rate = _eval_tokens(args.data, vocab, args.max_tokens)
    _check_ids(tokens, model, args.data)
    with torch.no_grad():
        result = evaluate_lm(model, tokens, tgt_len=args.tgt_len, mem_len=args.mem_len, clamp_len=args.clamp_len,
                             batch_size=args.batch_size)
    result = {k: (float(v) if not isinstance(v, (int, str)) else v) for k, v in result.items()}
    result.update({"checkpoint": args.checkpoint, "data": args.data, "tgt_len": args.tgt_len,
                   "mem_len": args.mem_len, "clamp_len": args.clamp_len, "batch_size": args.batch_size,
                   "oov_rate": oov_rate})
    _emit(result, args.json, _fmt(result))


DEFAULT_LENGTH = 200
"""Tokens ``generate`` samples when --length is not given (a GPT: at most the positions its prompt leaves)."""


def cmd_generate(args: argparse.Namespace, extra: list[str]) -> None:
    """``generate``: a Transformer-XL samples with its memory (genfeat.generation.generate), a GPT with its
    key/value cache (GPTLMHeadModel.generate)."""
    import functools

    import torch

    from .generation import generate
    from .hub import architecture_of

    _no_extra(extra)
    _require(args, length=(1, "pass --length 1 or more"), top_k=(1, "pass --top-k 1 (greedy) or more"),
             mem_len=(0, "pass a memory length of 0 or more"))
    if not args.temperature > 0:   # NaN too
        raise ConfigError(f"--temperature is {args.temperature}, but must be > 0", "pass e.g. --temperature 1.0")
    model, vocab = _load_lm(args.checkpoint, args.device, ("transformer_xl", "gpt"))
    gpt = architecture_of(model) == "gpt"
    if gpt and args.mem_len is not None:
        raise ConfigError(f"--mem-len is a Transformer-XL memory, but '{args.checkpoint}' holds a GPT model, which "
                          "attends over every earlier position", "drop --mem-len")
    ids = vocab.encode(args.prompt) if args.prompt else []
    if not ids:   # no prompt (or one of spaces alone): the sample starts as a new line of text would
        try:
            ids = vocab.encode("\n")
        except ConfigError:      # a character vocabulary without a newline
            ids = []
        if not ids:
            ids = [0]
            print(f"note: no prompt, and the tokenizer has no token for a new line: the sample starts from id 0 "
                  f"({vocab.decode([0])!r})", file=sys.stderr)
    length = DEFAULT_LENGTH if args.length is None else args.length
    if gpt:
        positions = model.config.max_position
        room = positions - len(ids)
        if room < 1:
            raise ConfigError(f"the prompt's {len(ids)} tokens fill the GPT model's {positions} positions",
                              f"pass a prompt of fewer than {positions} tokens")
        if args.length is None:
            length = min(length, room)
        if length > room:
            raise ConfigError(f"the prompt's {len(ids)} tokens and --length {length} exceed the GPT model's "
                              f"{positions} positions", f"pass --length {room} or less, or a shorter prompt")
    sample = model.generate if gpt else functools.partial(generate, model, mem_len=args.mem_len)
    g = torch.Generator(device=next(model.parameters()).device).manual_seed(args.seed)
    t0 = time.time()
    out = sample(torch.tensor(ids), length, top_k=args.top_k, temperature=args.temperature, generator=g)
    seconds = time.time() - t0
    text = vocab.decode(out.flatten().tolist())
    # the prompt and the sample decoded together, so word-level output keeps the space between them
    shown = vocab.decode(ids + out.flatten().tolist()) if args.prompt else text
    _emit({"prompt": args.prompt, "text": text, "tokens": length, "seconds": seconds}, args.json, shown)


def cmd_recl(args: argparse.Namespace, extra: list[str]) -> None:
    from .eval.recl import check_recl_args, run_recl

    _no_extra(extra)
    _require(args, seg_len=(1, "pass --seg-len 1 or more"), batch_size=(1, "pass --batch-size 1 or more"),
             delta=(1, "pass --delta 1 or more"), threshold=(0, "pass a threshold >= 0"),
             max_tokens=(0, "pass 0 (all tokens) or a positive count"))
    check_recl_args(args.contexts, args.r, args.delta)
    _check_out(args.out)
    from .hub import vocab_fingerprint

    models, vocab0, first = {}, None, None
    for item in args.model:
        if "=" not in item:
            raise ConfigError(f"--model '{item}' is not NAME=CHECKPOINT", "write e.g. --model xl=runs/ptb/final")
        name, path = item.split("=", 1)
        if name in models:
            raise ConfigError(f"--model names '{name}' twice", "give each model its own NAME")
        model, vocab = _load_lm(path, args.device, data=args.data)
        _check_segment(model, args.seg_len, "--seg-len")
        # the data is encoded once, with the first vocabulary: every model must read those ids as the same tokens
        if vocab0 is not None and vocab is not None and vocab_fingerprint(vocab) != vocab_fingerprint(vocab0):
            raise ConfigError(f"model '{name}' has another vocabulary ({len(vocab)} types) than model '{first}' "
                              f"({len(vocab0)} types), so the data's token ids would mean other tokens to it",
                              "compare models trained on the same corpus and vocabulary")
        if vocab0 is None and vocab is not None:
            vocab0, first = vocab, name
        models[name] = model
    tokens, oov_rate = _eval_tokens(args.data, vocab0, args.max_tokens)
    for model in models.values():
        _check_ids(tokens, model, args.data)
    result = run_recl(models, tokens, contexts=args.contexts, r=args.r, delta=args.delta, threshold=args.threshold,
                      out_dir=args.out, seg_len=args.seg_len, batch_size=args.batch_size)
    result["oov_rate"] = oov_rate
    _emit(result, args.json, result.get("table", _fmt(result)))


def cmd_export(args: argparse.Namespace, extra: list[str]) -> None:
    from pathlib import Path

    from .hub import load_checkpoint, save_pretrained
    from .interop.hf_finetune import read_differently
    from .models.heads import FineTuneModel

    _no_extra(extra)
    _check_out(args.out, replaces_dir=True)
    if Path(args.out).resolve() == Path(args.checkpoint).resolve():
        raise ConfigError(f"--out '{args.out}' is the checkpoint being exported, which the export would replace",
                          "pass another directory")
    model, vocab = load_checkpoint(args.checkpoint)
    if args.format == "hf" and isinstance(model, FineTuneModel):
        for note in read_differently(model):
            print(f"note: {note}", file=sys.stderr)
    save_pretrained(model, args.out, vocab, hf=args.format == "hf")
    _emit({"out": args.out, "format": args.format}, args.json, f"wrote {args.out}")


def cmd_tokenizer_train(args: argparse.Namespace, extra: list[str]) -> None:
    from .data.tokenizers import TokenizerConfig, train_tokenizer

    _no_extra(extra)
    _check_out(args.out)
    cfg = TokenizerConfig(kind=args.kind, vocab_size=args.vocab_size, lowercase=args.lowercase)
    t0 = time.time()
    vocab = train_tokenizer(cfg, args.corpus, args.out)
    result = {"out": args.out, "kind": args.kind, "vocab_size": len(vocab), "seconds": time.time() - t0}
    _emit(result, args.json, f"wrote a {len(vocab)}-type {args.kind} tokenizer to {args.out}")


def cmd_zero_shot(args: argparse.Namespace, extra: list[str]) -> None:
    from .eval.zero_shot import CAUSAL_ARCHITECTURES, ZeroShotEvaluator
    from .framework.trainer import resolve_device
    from .hub import architecture_of, load_checkpoint

    _no_extra(extra)
    _require(args, batch_size=(1, "pass --batch-size 1 or more"), max_examples=(0, "pass 0 (all) or more"))
    model, vocab = load_checkpoint(args.checkpoint)
    arch = architecture_of(model)
    if arch not in CAUSAL_ARCHITECTURES or vocab is None:
        raise ConfigError(f"checkpoint '{args.checkpoint}' holds {with_article(arch)} model"
                          f"{'' if vocab else ' without a vocabulary'}, which the zero-shot heuristic cannot score",
                          f"pass a causal language model with its vocabulary ({', '.join(CAUSAL_ARCHITECTURES)})")
    model.to(resolve_device(args.device, "--device"))
    t0 = time.time()
    evaluator = ZeroShotEvaluator(vocab, args.task, args.split, limit=args.max_examples,
                                  max_len=getattr(model.config, "max_position", None), batch_size=args.batch_size)
    figures = evaluator(model)
    result = {"task": args.task, "split": args.split, "accuracy": figures["zero_shot_accuracy"],
              "positive_rate": figures["zero_shot_positive_rate"], "examples": figures["zero_shot_examples"],
              "seconds": time.time() - t0}
    _emit(result, args.json, f"zero-shot {args.task} {args.split}: accuracy {result['accuracy']:.4f} "
                             f"on {result['examples']} examples")


def cmd_generate_questions(args: argparse.Namespace, extra: list[str]) -> None:
    from pathlib import Path

    from .data.answer_chunks import ChunkConfig
    from .methods.question_gen import generate_questions

    _no_extra(extra)
    _require(args, beam=(1, "pass --beam 1 (greedy) or more"), max_len=(1, "pass --max-len 1 or more"),
             per_paragraph=(0, "pass 0 (all chunks) or more"))
    if args.out is None:
        args.out = Path(args.paragraphs).stem + ".questions.jsonl"
    _check_out(args.out, directory=False)
    if Path(args.out).resolve() == Path(args.paragraphs).resolve():
        raise ConfigError(f"--out '{args.out}' is the --paragraphs file, which the questions would replace",
                          "pass another --out")
    cache = {} if args.chunk_cache is None else {"cache_dir": args.chunk_cache}
    result = generate_questions(args.checkpoint, args.paragraphs, args.out, beam=args.beam, max_len=args.max_len,
                                chunks=ChunkConfig(backend=args.chunks, **cache), per_paragraph=args.per_paragraph,
                                seed=args.seed)
    _emit(result, args.json, f"wrote {result['questions']} questions for {result['paragraphs']} paragraphs to {args.out}")


def cmd_neighbours(args: argparse.Namespace, extra: list[str]) -> None:
    from .hub import load_checkpoint
    from .eval.word_vectors import nearest_neighbours

    _no_extra(extra)
    _require(args, top=(1, "pass --top 1 or more"))
    model, vocab = load_checkpoint(args.checkpoint, "word2vec", require_vocab=True)
    if len(vocab) != model.vectors.shape[0]:   # a word would be given another word's vector
        raise CheckpointError(f"checkpoint '{args.checkpoint}' has a vocabulary of {len(vocab)} words but "
                              f"{model.vectors.shape[0]} vectors", "the vocab.json belongs to another run; restore the "
                              "one saved with these vectors")
    found = nearest_neighbours(model.vectors, vocab.symbols, args.word, args.top)
    result = {"word": args.word, "neighbours": [{"word": w, "cosine": c} for w, c in found]}
    _emit(result, args.json, "\n".join(f"{w}\t{c:.4f}" for w, c in found))


def _no_extra(extra: list[str]) -> None:
    if extra:
        raise ConfigError(f"unexpected arguments {extra}", "see genfeat COMMAND --help")


class _HelpFormatter(argparse.HelpFormatter):
    """Help that ends an option's text with its default where the default says something: not for a flag, nor
    for an option whose default is None or empty (its text says what happens without it) or whose text already
    names its default, "(default: ...)"."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default in (None, "", argparse.SUPPRESS) or isinstance(default, bool)
                or "(default:" in text):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list) else "%(default)s"
        return f"{text} (default: {shown})".lstrip()


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are the CLI's one line, pointing at the (sub)command's help, and whose
    help shows the options' defaults (:class:`_HelpFormatter`); its subcommands' parsers are of this class too."""

    def __init__(self, *args, formatter_class: type[argparse.HelpFormatter] = _HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str):
        print(f"error: {message}. fix: see {self.prog} --help", file=sys.stderr)
        sys.exit(2)


_PATH_ERRNOS = {errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.EACCES, errno.EPERM, errno.ENOENT}
"""OSErrors on a path that the CLI reports as one error line (the path and the system's reason)."""


def _path_error(e: OSError) -> GenfeatError:
    """The one-line error for an OSError on a path: the path, the system's reason and, where a file stands
    where a folder must be, that file."""
    from pathlib import Path

    cause = f"cannot use '{e.filename}': {e.strerror or type(e).__name__}"
    if isinstance(e, (NotADirectoryError, FileExistsError)):
        path = Path(e.filename)
        in_the_way = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        if in_the_way is not None:
            cause += f" ('{in_the_way}' is a file in the way)"
    fixes = {PermissionError: "pass a path you may write to, or change its permissions",
             IsADirectoryError: "pass a file path, not a folder",
             FileNotFoundError: "check the path"}
    return GenfeatError(cause, fixes.get(type(e), "move the file out of the way, or pass another path"))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="genfeat", description="Generative feature learning on current PyTorch.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    # --debug is accepted after the subcommand too; SUPPRESS keeps a subparser from resetting it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    device_kw = dict(default="cpu", help="cpu, cuda, cuda:N or auto")

    r = sub.add_parser("run", parents=[common], help="train and evaluate what a recipe names",
                       description="Extra arguments --section.field VALUE override recipe fields; VALUE is read "
                                   "as YAML. A mapping given for a section is merged into the recipe's section, "
                                   "recursively: --model '{d_model: 8, n_layer: 4}' is --model.d_model 8 "
                                   "--model.n_layer 4, and the section's other fields stay as the recipe writes them.")
    r.add_argument("recipe")
    r.add_argument("--seeds", type=int, default=1, help="number of seeds (runs seed, seed+1, ...)")
    r.add_argument("--seed", type=_seed, default=0, help="first seed")
    r.add_argument("--out", default=None, help="output directory (default: runs/RECIPE_NAME)")
    r.add_argument("--resume", action="store_true",
                   help="continue the run in OUT exactly: one seed from OUT/last; several seed by seed, a finished "
                        "seed's figures read back from OUT/seed<k>/results.json, an interrupted seed continued from "
                        "OUT/seed<k>/last, a seed not started yet run, then the summary over all of them. Every seed "
                        "OUT holds must be among those asked for (more may be added). Give the recipe and overrides "
                        "the run was started with (OUT/provenance.json records them; train.log_every, save_every, "
                        "stop_after_steps, threads, device and the like may differ) and, for one seed, its --seed")
    r.add_argument("--overwrite", action="store_true",
                   help="run into an OUT that holds a run (its results.json, final/, last/, metrics.jsonl, seed and "
                        "pretrain folders are replaced: moved aside, and put back if the new run is refused before "
                        "it writes anything) or other files; without it or --resume such an OUT is refused")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=cmd_run)

    e = sub.add_parser("evaluate", parents=[common], help="perplexity / bpc of a Transformer-XL checkpoint (genfeat or Hugging Face), "
                                                         "or task metrics of a fine-tuned one (--task)",
                       epilog=f"The output's oov_rate is the share of the data's tokens (all of them, before "
                              f"--max-tokens) outside the checkpoint's vocabulary; above {OOV_WARN_RATE:.0%} a warning "
                              "goes to stderr. With --task the JSON holds the task's metrics, examples and seconds.")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--data", default=None, help="LM: corpus[:split], a text file or a .npy of token ids")
    e.add_argument("--tgt-len", type=int, default=None, help="LM: segment length")
    e.add_argument("--mem-len", type=int, default=None, help="LM: memory length")
    e.add_argument("--task", default=None, help="score a fine-tuned checkpoint on this task (genfeat.tasks.TASKS); "
                   "a GDAN run's OUT/final/d on squad_split (its run's dev and test articles)")
    e.add_argument("--split", default=None, help="--task: the split to score (default: dev)")
    e.add_argument("--predictions", default=None,
                   help="--task: write one prediction per example here (GLUE: the submission TSV, index<TAB>prediction; "
                        "SQuAD: the official {id: answer} JSON; IMDB, RACE and others: uid<TAB>prediction, the "
                        "files' own labels)")
    e.add_argument("--max-examples", type=int, default=0,
                   help="--task: score a seeded subset of N examples, as the runner's data.max_eval_examples (a GDAN "
                        "discriminator: the first N questions; 0: all)")
    e.add_argument("--squad-seed", type=int, default=None,
                   help="--task squad_split: the seed of the article split (default: the one the checkpoint was "
                        "trained on; a head trained for another task: 0; a squad_split head recording none: "
                        "required)")
    e.add_argument("--clamp-len", type=int, default=None,
                   help="LM: relative distances beyond this share one encoding (default: the model's; 0 or -1: none)")
    e.add_argument("--batch-size", type=int, default=None,
                   help="LM: contiguous streams (default: 1, one stream); --task: examples per batch (default: 64)")
    e.add_argument("--max-tokens", type=int, default=0, help="LM: score only the first N tokens (0: all)")
    e.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    e.add_argument("--device", **device_kw)
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=cmd_evaluate)

    g = sub.add_parser("generate", parents=[common], help="top-k sampling from a context with a Transformer-XL "
                                                          "(reusing memory) or GPT (reusing keys and values) checkpoint")
    g.add_argument("--checkpoint", required=True)
    g.add_argument("--prompt", default="", help="text to continue (default: none: the sample starts after a new line, or from id 0 "
                                                  "where the tokenizer has no newline token)")
    g.add_argument("--length", type=int, default=None, help=f"tokens to sample (default: {DEFAULT_LENGTH}; for a GPT "
                   "at most the positions the prompt leaves)")
    g.add_argument("--top-k", type=int, default=40, help="sample from the k most likely tokens (1: greedy)")
    g.add_argument("--temperature", type=float, default=1.0, help="divides the logits before sampling")
    g.add_argument("--mem-len", type=int, default=None, help="Transformer-XL: memory length while sampling "
                   "(default: the model's)")
    g.add_argument("--seed", type=_seed, default=0, help="seed of the sampling")
    g.add_argument("--device", **device_kw)
    g.add_argument("--json", action="store_true")
    g.set_defaults(fn=cmd_generate)

    c = sub.add_parser("recl", parents=[common], help="relative effective context length of a model group (§2.1.4)")
    c.add_argument("--model", action="append", required=True, help="NAME=CHECKPOINT, once per model of the group")
    c.add_argument("--data", required=True)
    c.add_argument("--contexts", type=int, nargs="+", required=True, help="context lengths c to score")
    c.add_argument("--r", type=float, nargs="+", default=[0.1, 0.5, 1.0], help="fractions of hardest tokens (top-r)")
    c.add_argument("--seg-len", type=int, default=16, help="segment length; memory = context - segment")
    c.add_argument("--batch-size", type=int, default=10, help="contiguous streams scored together")
    c.add_argument("--delta", type=int, default=None, help="context step Δ (default: the grid spacing)")
    c.add_argument("--threshold", type=float, default=0.01, help="relative-gain threshold")
    c.add_argument("--max-tokens", type=int, default=0, help="score only the first N tokens (0: all)")
    c.add_argument("--device", **device_kw)
    c.add_argument("--out", default="runs/recl", help="directory for the PNG plots and table")
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_recl)

    x = sub.add_parser("export", parents=[common], help="write a checkpoint in another format")
    x.add_argument("--checkpoint", required=True)
    x.add_argument("--out", required=True)
    x.add_argument("--format", choices=["hf", "genfeat"], default="hf",
                   help="hf: a Hugging Face model directory; genfeat: genfeat's own checkpoint")
    x.add_argument("--json", action="store_true")
    x.set_defaults(fn=cmd_export)

    tk = sub.add_parser("tokenizer", parents=[common], help="subword tokenizers for pretraining")
    tk_sub = tk.add_subparsers(dest="tokenizer_command", required=True)
    tt = tk_sub.add_parser("train", parents=[common], help="train a WordPiece, sentencepiece or BPE tokenizer and "
                                                           "write its Hugging Face files (genfeat.data.tokenizers)")
    tt.add_argument("--kind", choices=["wordpiece", "sentencepiece", "bpe"], required=True)
    tt.add_argument("--corpus", required=True, help="a text file or a folder of text files")
    tt.add_argument("--vocab-size", type=int, required=True, help="types, special tokens included")
    tt.add_argument("--lowercase", action="store_true", help="lower-case the text (an uncased tokenizer)")
    tt.add_argument("--out", required=True, help="folder for tokenizer.json/vocab.txt or spiece.model")
    tt.add_argument("--json", action="store_true")
    tt.set_defaults(fn=cmd_tokenizer_train)

    z = sub.add_parser("zero-shot", parents=[common], help="GPT-1's zero-shot heuristic for a causal LM checkpoint "
                                                           "(genfeat.eval.zero_shot)")
    z.add_argument("--checkpoint", required=True, help="a gpt, lstm_lm or transformer_xl checkpoint (or Hugging Face "
                                                       "OpenAI GPT directory) with its vocabulary")
    z.add_argument("--task", required=True, choices=["sst2"])
    z.add_argument("--split", default="dev", help="the split to score")
    z.add_argument("--max-examples", type=int, default=0, help="score the first N examples (0: all)")
    z.add_argument("--batch-size", type=int, default=32, help="examples per batch")
    z.add_argument("--device", **device_kw)
    z.add_argument("--json", action="store_true")
    z.set_defaults(fn=cmd_zero_shot)

    q = sub.add_parser("generate-questions", parents=[common],
                       help="questions for paragraphs and answers by a GDAN question generator (beam search)",
                       description="Reads paragraphs (a .jsonl file of {context, answers?} objects, answers in SQuAD's "
                                   "form, or a text file with one paragraph per line); paragraphs without answers get "
                                   "answer chunks extracted (genfeat.data.answer_chunks). Writes one JSON object per "
                                   "question: id, paragraph_id, answer, answer_start, question, log_prob. The id is "
                                   "PARAGRAPH_ID#ANSWER_START+ANSWER_LENGTH (characters; e.g. line2#13+7), one per "
                                   "answer span and the same in every run; paragraph_id is the object's 'id', else "
                                   "line<N>.")
    q.add_argument("--checkpoint", required=True, help="a question_gen checkpoint (OUT/final of method question_gen, "
                   "OUT/final/g of method gdan) or a GDAN run's OUT/last or OUT/g_mle/last (a setting with a generator)")
    q.add_argument("--paragraphs", required=True, help="a .jsonl or text file of paragraphs")
    q.add_argument("--out", help="the JSONL file to write (default: PARAGRAPHS' file name with the suffix "
                   "'.questions.jsonl', in the current directory)")
    q.add_argument("--beam", type=int, default=5, help="beam width (1: greedy)")
    q.add_argument("--max-len", type=int, default=30, help="longest question in words, </s> included")
    q.add_argument("--chunks", choices=["auto", "spacy", "rules"], default="auto",
                   help="answer-chunk extraction: spaCy when installed (auto), spaCy, or the rule-based fallback")
    q.add_argument("--chunk-cache", metavar="DIR",
                   help="folder where the spaCy backend keeps the parses of the paragraphs it read, so a later run "
                        "reads them instead of parsing again (default: ChunkConfig.cache_dir, "
                        "~/.cache/genfeat/answer_chunks; '' keeps them in memory only)")
    q.add_argument("--per-paragraph", type=int, default=0, help="at most N extracted answers per paragraph (0: all)")
    q.add_argument("--seed", type=_seed, default=0, help="seed of the per-paragraph draw")
    q.add_argument("--json", action="store_true")
    q.set_defaults(fn=cmd_generate_questions)
    nb = sub.add_parser("neighbours", parents=[common], help="nearest neighbours of a word in a word2vec checkpoint")
    nb.add_argument("--checkpoint", required=True, help="a word2vec checkpoint (OUT/final of method: word2vec)")
    nb.add_argument("--word", required=True)
    nb.add_argument("--top", type=int, default=10, help="how many neighbours")
    nb.add_argument("--json", action="store_true")
    nb.set_defaults(fn=cmd_neighbours)

    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.command != "run" and extra:
        command = " ".join(c for c in (args.command, getattr(args, "tokenizer_command", None)) if c)
        parser.prog = f"genfeat {command}"
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from .signals import Terminated, sigterm_interrupts

    ok = False
    try:
        with sigterm_interrupts():  # SIGTERM (a scheduler's, timeout's, kill's, torchrun's) unwinds as Ctrl-C does
            args.fn(args, extra)
            ok = True
            if "torch.distributed" in sys.modules:  # torch is loaded: the command may have joined a process group,
                from .framework.distributed import leave_distributed  # which the ranks leave together (not after

                leave_distributed()  # an error, where a barrier would wait for a failed rank)
    except GenfeatError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of stdout closed it early (``| head``): what it read is what it wanted; stdout goes to
        # /dev/null so that the interpreter's last flush does not fail again; 141 as a shell's 128 + SIGPIPE
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        # a safety net behind the commands' own checks of their paths: the path and the system's reason
        # (a path in the way or not permitted; anything else, e.g. a full disk or an I/O error, keeps its traceback)
        if args.debug or e.filename is None or e.errno not in _PATH_ERRNOS:
            raise
        print(f"error: {_path_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        # outputs are written atomically, so what the interrupted command left is complete
        hint = (" (outputs written so far are complete; where the run saved a checkpoint, every train.save_every "
                "steps (save_every in word2vec and Planetoid recipes), the same command with --resume continues "
                "from it)") if args.command == "run" else ""
        terminated = isinstance(e, Terminated)
        print(f"{'terminated (SIGTERM)' if terminated else 'interrupted'}{hint}", file=sys.stderr)
        return 143 if terminated else 130   # a shell's 128 + the signal
    finally:
        if not ok and "torch.distributed" in sys.modules:  # after an error too, no DDP reducer may outlive it
            from .framework.distributed import free_reducers

            free_reducers()
    return 0


if __name__ == "__main__":
    sys.exit(main())
