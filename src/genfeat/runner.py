"""One recipe format for every method.

A recipe is a YAML file ``method: NAME`` plus the fields of that method's typed config
dataclass. ``genfeat run RECIPE [--seeds N] [--field.path value ...]`` loads it, applies the
overrides, checks every field, and calls the method's registered runner once per seed. The
runner returns its figures (``{"test_accuracy": ...}``); over seeds they are summarised as
``<metric>_mean``, ``<metric>_std`` and ``<metric>_median`` (the fine-tuning and GDAN tables report
medians of 3 seeds, as the papers do).

With one seed the run writes OUT itself; with several, seed k writes OUT/seed<k>. ``--resume`` continues the
run in OUT: one seed from OUT/last; several seed by seed (:func:`_resume_plan`: a finished seed's figures are read
back from OUT/seed<k>/results.json, an interrupted one continues from its checkpoint, one not started yet starts),
so the summary is the one an uninterrupted run gives.

A method registered with ``pretraining=True`` writes OUT/final, a backbone a fine-tuning recipe can start
from; only such a recipe can be the ``pretrain`` stage of a fine-tuning recipe (genfeat.methods.finetune).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import pkgutil
import re
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .config import apply_overrides, dotted, from_dict, load_yaml, to_dict
from .errors import CheckpointError, ConfigError, GenfeatError, with_article
from .io import backup_path, check_output_path
from .provenance import PROVENANCE, invocation, recording
from .signals import interrupts_held

Runner = Callable[..., dict[str, float]]


@dataclass
class MethodSpec:
    name: str
    config_cls: type
    run: Runner
    pretraining: bool = False
    """The method writes OUT/final, a backbone a fine-tuning recipe can start from."""
    resume_free: tuple[str, ...] = ()
    """Recipe fields besides the ``train`` section (dotted names) a ``--resume`` may change: settings of the loop
    and its outputs (threads, checkpointing, pictures), not of what is trained (:func:`_check_resume_identity`)."""
    inputs: tuple[str, ...] = ()
    """Recipe fields (dotted names) that name a model file or directory the run reads (an init checkpoint, a density
    model, word vectors): the run's record keeps a digest of its contents (:func:`input_digests`: a directory's files,
    not its sub-folders), so that a ``--resume`` refuses other contents at the same path (the steps after it would
    train against another model)."""


_METHODS: dict[str, MethodSpec] = {}


def register_method(name: str, config_cls: type, pretraining: bool = False, resume_free: tuple[str, ...] = (),
                    inputs: tuple[str, ...] = ()) -> Callable[[Runner], Runner]:
    """Register ``fn(cfg, *, seed, out_dir, progress, resume) -> dict[str, float]`` as method ``name``
    (``pretraining``: it writes OUT/final, a backbone a fine-tuning recipe can start from; ``resume_free`` and
    ``inputs``: :attr:`MethodSpec.resume_free`, :attr:`MethodSpec.inputs`)."""

    def decorator(fn: Runner) -> Runner:
        _METHODS[name] = MethodSpec(name, config_cls, fn, pretraining, resume_free, inputs)
        return fn

    return decorator


def _digest(path: Path) -> str | None:
    """sha256 of a file, or of a directory's files (names and contents, in name order; sub-folders aside); None
    when the path does not exist."""
    from .data.registry import digest_of

    if path.is_file():
        return digest_of(path)
    if not path.is_dir():
        return None
    h = hashlib.sha256()
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        h.update(file.name.encode() + b"\0" + digest_of(file).encode())
    return h.hexdigest()


def input_digests(cfg: Any, fields: tuple[str, ...]) -> dict[str, str | None]:
    """``{field: digest}`` of the model files or directories the recipe ``cfg`` names in ``fields``
    (:attr:`MethodSpec.inputs`; a field left empty is left out)."""
    values = dotted(to_dict(cfg))
    return {name: _digest(Path(values[name])) for name in fields if values.get(name)}


def recipe_record(cfg: Any) -> dict[str, Any]:
    """``{"method": name, "recipe": fields}`` of the recipe ``cfg`` (an instance of a registered method's config
    class), as every checkpoint's config.json records them: which method wrote it and with what settings
    (:func:`check_resume_method` reads the method)."""
    for name, spec in _METHODS.items():
        if type(cfg) is spec.config_cls:
            return {"method": name, "recipe": to_dict(cfg)}
    raise TypeError(f"{type(cfg).__name__} is not the config class of a registered method")


def _import_methods() -> None:
    """Import every module of genfeat.methods, so that all methods are registered."""
    import genfeat.methods as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"genfeat.methods.{info.name}")


def get_method(name: str) -> MethodSpec:
    if name not in _METHODS:
        _import_methods()
    if name not in _METHODS:
        raise ConfigError(f"unknown method '{name}'",
                          f"use one of: {', '.join(sorted(_METHODS))}")
    return _METHODS[name]


def load_recipe(path: str | Path, overrides: dict[str, Any] | None = None,
                pretraining: bool = False) -> tuple[MethodSpec, Any]:
    """Read a recipe, apply ``overrides`` (dotted keys), and build the method's config.

    Args:
        pretraining: refuse a recipe whose method is not a pretraining one (:func:`register_method`),
            before its fields are read.

    Raises:
        ConfigError: no such file, no or an unknown method, a method that does not pretrain (with
            ``pretraining``), or a field the method's config refuses. An error the recipe file gives without
            ``overrides`` names the file (``recipe 'PATH': cause``, unless the cause names it already); one the
            overrides cause names the field they set, which is not in the file.
    """
    data = load_yaml(path)  # its errors name the file
    try:
        return _build_recipe(path, data, overrides or {}, pretraining)
    except ConfigError as e:
        if str(path) not in e.cause and (not overrides or _given_by_file(path, data, pretraining, e)):
            e.locate(f"recipe '{path}'")
        raise


def _build_recipe(path: str | Path, data: dict[str, Any], overrides: dict[str, Any],
                  pretraining: bool) -> tuple[MethodSpec, Any]:
    """:func:`load_recipe` of the mapping ``data`` that the recipe file ``path`` holds."""
    if "method" not in data:
        raise ConfigError(f"recipe '{path}' has no 'method' field", "start the recipe with e.g. 'method: transformer_xl'")
    method = get_method(str(data["method"]))
    if pretraining and not method.pretraining:
        _import_methods()
        names = ", ".join(sorted(m.name for m in _METHODS.values() if m.pretraining))
        raise ConfigError(f"'{path}' is {with_article(method.name)} recipe, not a pretraining one",
                          f"name a recipe of a pretraining method ({names}), e.g. recipes/bert/debug.yaml")
    fields = apply_overrides({k: v for k, v in data.items() if k != "method"}, overrides)
    seeded = [k for k in dotted(fields) if k == "train.seed" or k.endswith(".train.seed")]
    if seeded:   # every method sets it from the run's seed: a recipe's value was silently replaced
        raise ConfigError(f"{seeded[0]} is set, but a run's seed is --seed (or each of --seeds), which replaces it",
                          f"drop {seeded[0]} and pass --seed N to genfeat run")
    return method, from_dict(method.config_cls, fields)


def _given_by_file(path: str | Path, data: dict[str, Any], pretraining: bool, error: ConfigError) -> bool:
    """Whether the recipe file alone, without the overrides, gives ``error`` (the same message): then it is the
    file's, not the overrides'."""
    try:
        _build_recipe(path, data, {}, pretraining)
    except ConfigError as alone:
        return str(alone) == str(error)
    return False


def _writers(recipe: Any) -> list[str]:
    """The methods whose config accepts ``recipe`` (a checkpoint's saved recipe): the method that wrote it
    (every method's recipe has fields or sections of its own)."""
    if not isinstance(recipe, dict):
        return []
    _import_methods()
    found = []
    for name, spec in sorted(_METHODS.items()):
        try:
            from_dict(spec.config_cls, recipe, "recipe")
        except (GenfeatError, ValueError, TypeError):
            continue
        found.append(name)
    return found


def check_resume_method(method: MethodSpec, out_dir: str | Path) -> None:
    """A resumed run continues a checkpoint of its own method: refuse OUT/last (or its backup) written by
    another one, before any work or write (its model, vocabulary and training state mean something else,
    and a method would otherwise fail on one of them with a misleading cause, after writing its tokenizer
    into OUT).

    The checkpoint's method is its config.json's ``method`` when present, else the method whose config
    accepts the recipe saved in config.json. A directory without a checkpoint, or one whose method cannot be
    told (no recipe, or one no method accepts), is left to the method's own checks.

    Raises:
        CheckpointError: OUT/last is another method's checkpoint.
    """
    from .framework.checkpoint import CONFIG_FILE, read_config, resume_dir

    try:
        last = resume_dir(Path(out_dir) / "last")
    except CheckpointError:
        return
    if not (last / CONFIG_FILE).is_file():
        return
    saved = read_config(last)
    writers = [saved["method"]] if isinstance(saved.get("method"), str) else _writers(saved.get("recipe"))
    if not writers or method.name in writers:
        return
    arch = saved.get("architecture")
    raise CheckpointError(f"--resume: '{last}' is a checkpoint of method {' or '.join(writers)}"
                          f"{f' ({with_article(arch)} model)' if isinstance(arch, str) else ''}, and this recipe is of method "
                          f"{method.name}", f"resume it with the {' or '.join(writers)} recipe it was trained with, or "
                          f"give this {method.name} run another --out")


def summarise(runs: list[dict[str, float | None]]) -> dict[str, Any]:
    """Mean, standard deviation (sample, ddof=1; 0 for one run) and median of every figure all runs report (one
    some seeds lack would be summarised over the others, silently), in the order of the first run's figures. A
    figure some run could not compute (None, as results.json's null, or NaN) summarises to None."""
    out: dict[str, Any] = {}
    for key in [k for k in runs[0] if all(k in run for run in runs)]:
        values = [r[key] for r in runs]
        if any(v is None or not math.isfinite(v) for v in values):
            out[f"{key}_mean"] = out[f"{key}_std"] = out[f"{key}_median"] = None
            continue
        values = [float(v) for v in values]
        out[f"{key}_mean"] = statistics.fmean(values)
        out[f"{key}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
        out[f"{key}_median"] = statistics.median(values)
    return out


RUN_OUTPUTS = ("results.json", "final", "last", "metrics.jsonl", "tokenizer", "tensorboard", "init", "g_mle",
               PROVENANCE)
"""What a run writes into its OUT (a partial one: some of them; ``init`` is Planetoid's initialisation phase,
``g_mle`` GDAN's pretrained G, ``provenance.json`` genfeat.provenance's record of each invocation); ``run_recipe``
writes over them only with ``resume`` or ``overwrite`` (or over a provenance.json alone: an invocation that
ended before writing anything else)."""


RUN_EXTRAS = ("vectors.bin", "vectors.txt", "dev_questions.jsonl", "samples.png", "figures", "sample.txt")
"""Outputs some methods write beside :data:`RUN_OUTPUTS` (word2vec's vectors, the question generator's dev questions,
the complement GAN's sample grid or figures, Transformer-XL's sample): they do not by themselves make OUT a run,
but ``--overwrite`` removes them with the run they came with."""


STAGES = {"init": "planetoid", "pretrain": "finetune", "g_mle": "gdan"}
"""The folders of a run's OUT where a first phase of it checkpoints, and the method whose run it is: Planetoid's
initialisation, a fine-tuning run's pretraining stage, GDAN's pretraining of G."""


def _resumable(entry: Path) -> bool:
    """Whether ``--resume`` continues from ``entry`` of a run's OUT: the run's ``last`` checkpoint (or its backup),
    or a :data:`STAGES` folder holding one; a run with no such entry ended before its first checkpoint."""
    from .framework.checkpoint import has_checkpoint

    if entry.name == "last" or entry == backup_path(entry.parent / "last"):
        return has_checkpoint(entry.parent / "last")
    return entry.name in STAGES and has_checkpoint(entry / "last")


def _holds_run(folder: Path) -> bool:
    """Whether ``folder`` (a seed's or a pretraining stage's) holds outputs of a run."""
    return folder.is_dir() and (bool(_run_outputs(folder)) or (folder / "stage.json").is_file())


def _run_outputs(out: Path) -> list[Path]:
    """The entries of ``out`` a run wrote: :data:`RUN_OUTPUTS` (and their backups, genfeat.io.backup_path),
    and the folders of a run's seeds (``seed<k>``) or of its pretraining stage (``pretrain``) holding them."""
    found = [p for name in RUN_OUTPUTS for p in (out / name, backup_path(out / name)) if p.exists()]
    for sub in sorted(out.iterdir()):
        if (re.fullmatch(r"seed\d+", sub.name) or sub.name == "pretrain") and _holds_run(sub):
            found.append(sub)
    return found


def _run_model(out: Path) -> str | None:
    """The method or architecture of the run in ``out``, as its checkpoints or pretraining stage say."""
    for config in (out / "final" / "config.json", out / "last" / "config.json"):
        try:
            saved = json.loads(config.read_text())
        except (OSError, ValueError):
            continue
        name = saved.get("method") or saved.get("architecture") if isinstance(saved, dict) else None
        if isinstance(name, str):
            return name
    # a run stopped in its first stage: the stage's folder says whose (its stage.json names the stage's own method)
    return next((method for stage, method in STAGES.items() if (out / stage).is_dir()), None)


def _describe_run(out: Path, found: list[Path]) -> str:
    """'a finished transformer_xl run (results.json, final/, last/, metrics.jsonl)' for the run in ``out``."""
    runs = [out] + [p for p in found if p.name.startswith("seed")]
    finished = any((run / "results.json").is_file() for run in runs)
    model = next((m for m in map(_run_model, runs) if m), None)
    shown = ", ".join(p.name + ("/" if p.is_dir() else "") for p in found if p.name != PROVENANCE)
    return f"a {'finished' if finished else 'partial'} {model + ' ' if model else ''}run ({shown})"


TRAIN_LOOP_FIELDS = ("seed", "device", "log_every", "save_every", "stop_after_steps", "progress", "tensorboard",
                     "threads", "keep_freed_memory", "ddp_find_unused_parameters")
"""The fields of a recipe's train section (genfeat.framework.trainer.TrainConfig) a ``--resume`` may change: how the
loop runs, logs and checkpoints, not what it computes (``seed``: the run's seed is checked on its own)."""


REPLACED = ".replaced"
"""The folder of OUT where ``--overwrite`` moves the run it replaces, until the new run has written something (then
it is removed) or was refused before that (then the old run is put back)."""


def _check_run_dir(out: Path, resume: bool, overwrite: bool) -> Path | None:
    """Refuse, before any work, an OUT a file is in the way of, or (without ``resume`` or ``overwrite``)
    one holding a run or other files. With ``overwrite`` the run's outputs there are moved into OUT/.replaced
    (:data:`REPLACED`, returned; None: nothing to replace), for :func:`_settle_replaced`."""
    check_output_path(out, "output directory")
    # under torchrun every rank runs this; only rank 0 writes OUT, so it alone checks and clears it (a later
    # rank would find what rank 0 began writing), and torchrun ends the others when it refuses
    if resume or os.environ.get("RANK", "0") != "0" or not out.is_dir() or not any(out.iterdir()):
        return None
    found = _run_outputs(out)
    if overwrite:
        aside = out / REPLACED
        if any(p.name != PROVENANCE for p in found):
            found += [out / name for name in RUN_EXTRAS if (out / name).exists()]
        if not found:
            return None
        with interrupts_held():   # a run half set aside would lose its other half at the next invocation
            aside.mkdir()
            for p in found:
                p.rename(aside / p.name)
        return aside
    if any(p.name != PROVENANCE for p in found):
        # --resume continues from a checkpoint (last/, or a stage's or a seed's); a run that died before its
        # first one can only be replaced
        resumable = any(_resumable(p) or p.name.startswith("seed") for p in found)
        raise ConfigError(f"output directory '{out}' already holds {_describe_run(out, found)}",
                          ("pass --resume to continue it, " if resumable else "it has no checkpoint to resume from: ")
                          + "pass --overwrite to replace its outputs, or another --out")
    names = sorted(p.name for p in out.iterdir() if p.name != PROVENANCE)
    if not names:
        return  # only the record of an invocation that ended before any output: this one's replaces it
    raise ConfigError(f"output directory '{out}' is not empty and holds no run ({', '.join(names[:5])}"
                      f"{', ...' if len(names) > 5 else ''})",
                      "pass another --out, or --overwrite to write the run among those files")


def _put_back(out: Path, aside: Path) -> None:
    """Move what ``aside`` holds back into ``out`` (its provenance record over the one there), Ctrl-C and SIGTERM
    held off for the few renames, so that a run is never left half here, half there."""
    with interrupts_held():
        for p in aside.iterdir():
            if p.name == PROVENANCE or not (out / p.name).exists():
                p.replace(out / p.name)
        shutil.rmtree(aside, ignore_errors=True)


SETUP_OUTPUTS = ("tokenizer",)
"""Outputs a run writes before its last checks (the tokenizer it trains, before the model config is built): a run
refused with nothing else written has not replaced the old one."""


def _settle_replaced(out: Path, aside: Path | None, kept: set[str], failed: bool) -> None:
    """After an ``--overwrite`` run: the replaced run (in ``aside``) is put back when the new one failed before
    writing anything but its provenance record and :data:`SETUP_OUTPUTS` (OUT holds nothing else beyond ``kept``,
    the names it held once the old run was set aside: the user's own files; the new setup outputs are removed), and
    removed otherwise."""
    if aside is None or not aside.is_dir():
        return
    new = [p for p in out.iterdir() if p.name not in kept and p.name != PROVENANCE]
    if failed and all(p.name in SETUP_OUTPUTS for p in new):
        # held as a whole: a half-removed new tokenizer beside .replaced would read as the killed run's output at
        # the next invocation, which would then remove the old run
        with interrupts_held():
            for p in new:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            _put_back(out, aside)
    else:
        shutil.rmtree(aside, ignore_errors=True)


def _recover_replaced(out: Path) -> None:
    """Settle an OUT/.replaced that an ``--overwrite`` invocation killed outright (SIGKILL; SIGTERM outside the
    command line) left: the run it set aside goes back when OUT holds no run outputs (the killed run wrote none), else
    it had been replaced and is removed; a note on stderr says which."""
    aside = out / REPLACED
    if os.environ.get("RANK", "0") != "0" or not aside.is_dir():
        return
    if any(p.name != PROVENANCE for p in _run_outputs(out)):
        shutil.rmtree(aside, ignore_errors=True)
        print(f"note: removed '{aside}', the run an earlier --overwrite of '{out}' had replaced before it was killed",
              file=sys.stderr)
    else:
        _put_back(out, aside)
        print(f"note: put back into '{out}' the run an earlier --overwrite had set aside ('{aside}') and was killed "
              "before it wrote anything", file=sys.stderr)


def _check_resume_identity(out: Path, method: MethodSpec, run: dict[str, Any], seeds: list[int]) -> None:
    """``--resume`` continues the run in ``out`` as it was started: the same method and recipe (but the
    :data:`TRAIN_LOOP_FIELDS` of its train section and of a pretraining stage's, and the method's
    :attr:`MethodSpec.resume_free` fields: logging, checkpointing, stop_after_steps, threads and the device may
    change; evaluation, precision, clipping and early stopping may not; paths are compared as written, so a run
    moved elsewhere is resumed with the paths it was started with) and, for one seed, the same seed, as the first
    invocation in OUT/provenance.json records them (``run``). A run whose record has none (written before genfeat
    kept it) is left to the methods' own checks.

    Raises:
        ConfigError: naming the fields (at most four) or the seed that differ.
    """
    try:
        first = json.loads((out / PROVENANCE).read_text())["invocations"][0]
        started = first["run"]
        started_seeds = first["seeds"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return
    fix = ("resume with the recipe and overrides the run was started with (OUT/provenance.json records them), or "
           "pass --overwrite to replace it, or another --out")
    if started.get("method") != run["method"]:
        raise ConfigError(f"--resume: the run in '{out}' is {with_article(str(started.get('method')))} run, this recipe is "
                          f"of method {run['method']}", fix)
    then, now = (dotted(r["recipe"]) for r in (started, run))
    free = {*method.resume_free, *(f"{section}{name}" for section in ("train.", "pretrain.overrides.train.")
                                    for name in TRAIN_LOOP_FIELDS)}
    changed = [k for k in dict.fromkeys([*then, *now]) if k not in free and then.get(k) != now.get(k)]
    if changed:
        shown = "; ".join(f"{k} {then.get(k)!r} then, {now.get(k)!r} now" for k in changed[:4])
        raise ConfigError(f"--resume: the run in '{out}' was started with another recipe ({shown}"
                          f"{'; ...' if len(changed) > 4 else ''})", fix)
    for name, digest in run.get("inputs", {}).items():
        recorded = started.get("inputs", {}).get(name, digest)   # a record written before genfeat kept digests: none
        if recorded != digest:
            raise ConfigError(f"--resume: {name} '{now[name]}' holds other contents than when the run in '{out}' "
                              f"started (sha256 {recorded[:12] if recorded else 'missing'} then, "
                              f"{digest[:12] if digest else 'missing'} now)",
                              f"restore the {name} the run started from, or pass --overwrite to start it again with "
                              "this one, or another --out")
    if len(seeds) == 1 and isinstance(started_seeds, list) and len(started_seeds) == 1 and started_seeds != seeds:
        raise ConfigError(f"--resume: the run in '{out}' is of seed {started_seeds[0]}, and --seed {seeds[0]} was asked",
                          f"pass --seed {started_seeds[0]} to continue it, or another --out for seed {seeds[0]}")


def _listing(seeds: Any) -> str:
    """``0, 1, 2``: the seeds in order, for a message."""
    return ", ".join(map(str, sorted(seeds)))


def _seed_span(seeds: Any) -> str:
    """The ``genfeat run`` flags asking for every seed from the least of ``seeds`` to the greatest."""
    return f"--seed {min(seeds)} --seeds {max(seeds) - min(seeds) + 1}"


def read_figures(path: Path, what: str, redo: str) -> dict[str, float]:
    """The figures a finished run wrote to ``path`` (its results.json), read back by a resume.

    Args:
        what: the run's figures as an error names them (``the figures of finished seed 2``).
        redo: the fix's first part, how to have them made again (``delete it to run seed 2 again``).

    Raises:
        CheckpointError: the file is not JSON, or not an object of numbers.
    """
    try:
        figures = json.loads(path.read_text())
    except ValueError as e:     # not JSON, or not UTF-8 text
        why = f"it is not JSON ({e})"
    else:
        if isinstance(figures, dict) and all(v is None or isinstance(v, (int, float)) for v in figures.values()):
            return figures
        why = "it is not a JSON object of figures (numbers, or null for one that could not be computed)"
    raise CheckpointError(f"--resume: '{path}', {what}, cannot be read back: {why}",
                          f"{redo}, or pass --overwrite instead of --resume to start the whole run again")


def _resume_plan(method: MethodSpec, out: Path, seeds: list[int]) -> dict[int, dict[str, float] | None]:
    """What ``--resume`` does with each of ``seeds``, decided before any work or write: the seeds OUT holds, mapped to
    their figures where they finished (OUT/seed<k>/results.json, read back, not run again) or to None where they
    continue from their checkpoint; a seed OUT does not hold yet starts afresh. One seed continues OUT itself.

    With several seeds, every seed OUT holds must be among ``seeds``: the summary is over the run's seeds, never
    silently over some of them. ``seeds`` may add seeds OUT does not hold: those a run was interrupted before, or
    more seeds for a finished run.

    Raises:
        ConfigError: one seed asked for where OUT holds seed folders; several where it holds a one-seed run, no
            seed, a seed not asked for, or a seed that ended before its first checkpoint.
        CheckpointError: a finished seed's results.json that cannot be read back, or a seed (with one seed: OUT)
            another method wrote (:func:`check_resume_method`).
    """
    found = _run_outputs(out) if out.is_dir() else []
    held = {int(p.name[len("seed"):]): p for p in found if p.name.startswith("seed")}
    if len(seeds) == 1:
        if held:
            raise ConfigError(f"output directory '{out}' holds seeds {_listing(held)} of a run (a folder each), and "
                              "--resume was asked to continue one seed",
                              f"pass {_seed_span(held)} to continue that run, or another --out")
        check_resume_method(method, out)
        return {seeds[0]: None}
    single = [p.name for p in found if p.name != PROVENANCE and not p.name.startswith("seed")]
    if single:
        raise ConfigError(f"output directory '{out}' holds a one-seed run ({', '.join(single)}), and --resume was "
                          f"asked to continue {len(seeds)} seeds",
                          "pass --seeds 1 and the --seed it was started with (OUT/provenance.json records it) to "
                          "continue it, or another --out for the run of several seeds")
    if not held:
        raise ConfigError(f"there is no run in '{out}' to resume: no seed<k> folder there holds a run's outputs",
                          "run without --resume to start it, or pass the --out of the run to continue")
    left_out = set(held) - set(seeds)
    if left_out:
        raise ConfigError(f"output directory '{out}' holds seeds {_listing(held)} of a run, and --resume was asked "
                          f"for seeds {_listing(seeds)}, without {_listing(left_out)}",
                          f"pass {_seed_span(held)} to continue every seed of the run (asking for more seeds adds "
                          "them to it), or another --out")
    plan: dict[int, dict[str, float] | None] = {}
    for seed, folder in sorted(held.items()):
        check_resume_method(method, folder)
        if (folder / "results.json").is_file():
            plan[seed] = read_figures(folder / "results.json", f"the figures of finished seed {seed}",
                                      f"delete it to run seed {seed} again (from its checkpoint, where it has one)")
        elif any(map(_resumable, _run_outputs(folder))):
            plan[seed] = None
        else:
            shown = ", ".join(sorted(p.name for p in folder.iterdir()))
            fix = (f"delete '{folder}' and pass --resume again: seed {seed} then starts afresh and the other seeds "
                   "continue") if len(held) > 1 else "pass --overwrite instead of --resume to start the run again"
            raise ConfigError(f"seed {seed} of the run in '{out}' ended before its first checkpoint ('{folder}' holds "
                              f"{shown}), so there is nothing to continue it from", fix)
    return plan


def run_recipe(path: str | Path, overrides: dict[str, Any] | None = None, seeds: list[int] | None = None,
               out_dir: str | Path | None = None, progress: bool = True, resume: bool = False,
               overwrite: bool = False, command: list[str] | None = None) -> dict[str, Any]:
    """Run a recipe for each seed and return the per-seed figures, their summary and this invocation's
    ``provenance`` (genfeat.provenance; also written to OUT/provenance.json before any work). When
    ``train.stop_after_steps`` paused a seed before its end, the result says ``interrupted`` and lists
    ``unfinished_seeds`` instead of a summary (``--resume`` goes on; the summary comes when every seed is done).

    Args:
        out_dir: the run's OUT (default runs/<recipe file name>); with several seeds each writes OUT/seed<k>.
        resume: continue the run in OUT, with the recipe (its train section aside) and, for one seed, the seed it
            was started with (:func:`_check_resume_identity`); with several seeds each seed as :func:`_resume_plan`
            says (finished ones read back, an interrupted one continued, those not started run), and the summary is
            over all of them.
        overwrite: run into an OUT that holds a run or other files; the run's outputs there
            (:data:`RUN_OUTPUTS`, seed and pretraining folders) are replaced: moved aside first, removed once the new
            run has written something, put back when it is refused before that. Without it or ``resume`` such an
            OUT is refused.
        command: the command line, for the provenance record (``genfeat run`` passes its own).

    Raises:
        ConfigError: a recipe or override the method's config refuses, ``resume`` with ``overwrite``, with another
            recipe or seed than the run in OUT was started with, or with seeds that do not match it
            (:func:`_resume_plan`), an OUT a file is in the way of, or (without ``resume``) one holding a run or
            other files.
        CheckpointError: ``resume`` of another method's run, or of a seed whose results.json cannot be read back.
    """
    method, cfg = load_recipe(path, overrides)
    seeds = seeds or [0]
    if resume and overwrite:
        raise ConfigError("--resume continues the run in OUT, --overwrite replaces it", "pass one of them")
    base = Path(out_dir) if out_dir is not None else Path("runs") / Path(path).stem
    run = json.loads(json.dumps(recipe_record(cfg), default=str))   # as the first invocation's record keeps it
    if method.inputs:
        run["inputs"] = input_digests(cfg, method.inputs)
    if base.is_dir():
        _recover_replaced(base)
    if resume:
        _check_resume_identity(base, method, run, seeds)
    aside = _check_run_dir(base, resume, overwrite)
    kept = {p.name for p in base.iterdir()} if aside is not None else set()
    try:
        held = _resume_plan(method, base, seeds) if resume else {}
        writes = os.environ.get("RANK", "0") == "0"  # under torchrun rank 0 alone records the invocation
        record = {**invocation(path, overrides or {}, seeds, resume, command), "run": run} if writes else None
        t0 = time.time()
        runs = []
        with recording(base, record, resume):  # a run refused or failed before any output leaves OUT as it was
            for seed in seeds:
                figures = held.get(seed)
                if figures is None:
                    run_dir = base if len(seeds) == 1 else base / f"seed{seed}"
                    figures = method.run(cfg, seed=seed, out_dir=run_dir, progress=progress, resume=seed in held)
                runs.append(figures)
    except BaseException:
        _settle_replaced(base, aside, kept, failed=True)
        raise
    _settle_replaced(base, aside, kept, failed=False)
    result: dict[str, Any] = {"method": method.name, "recipe": str(path)}
    if len(seeds) == 1:
        result.update(runs[0])
    result.update({"seeds": seeds, "runs": runs, "seconds": time.time() - t0, "out_dir": str(base),
                   "provenance": record})
    unfinished = [seed for seed, figures in zip(seeds, runs) if figures.get("interrupted")]
    if unfinished:   # train.stop_after_steps paused these seeds: a summary would be over the others alone
        result.update({"interrupted": 1.0, "unfinished_seeds": unfinished})
    else:  # last, so that `genfeat run --json` ends with the <metric>_mean / _std / _median figures
        result.update(summarise(runs))
    return result
