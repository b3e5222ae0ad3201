"""Checkpoints: weights in safetensors, training state beside them, written atomically.

A checkpoint is a directory::

    model.safetensors     weights (shared/tied tensors stored once)
    config.json           {"architecture": ..., "model": {...}, ...} written by the method
    vocab.json            the vocabulary, when the method has one
    best_state.safetensors  the parameters of the phase's best evaluation so far, when a run with
                          ``keep_best`` is checkpointed inside a phase (restored at the phase's end)
    trainer_state.pt      optimizer states, step, phase, data positions, RNG states, objective
                          states; only tensors and plain containers, read back with
                          ``torch.load(weights_only=True)`` (no arbitrary unpickling)

The directory is assembled under a temporary name and renamed into place (genfeat.io.atomic_dir),
so a kill mid-write leaves the previous checkpoint intact, under its own name or, for the instant
between the two renames, under its backup name (:func:`resume_dir` looks there too).
"""

from __future__ import annotations

import json
import pickle
import random
import tempfile
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from ..errors import CheckpointError
from ..io import atomic_dir, backup_path

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
STATE_FILE = "trainer_state.pt"
BEST_STATE_FILE = "best_state.safetensors"


def rng_state() -> dict[str, Any]:
    """Every RNG a step may draw from, in a form ``torch.load(weights_only=True)`` accepts."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _Unshared(nn.Module):
    """``module`` as safetensors' ``save_model`` / ``load_model`` see it: each tensor that is a view into a
    larger buffer is given as a copy. On the GPU cuDNN keeps an RNN's weights as views of one flat buffer
    (``nn.RNNBase.flatten_parameters``: ELMo's biLSTMs, GDAN's GRUs), which safetensors refuses to write as
    memory shared without a tensor covering it. Tied weights (one whole tensor under two names) stay shared,
    so they are still written once and tied again on load."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.inner = [module]            # in a list: not a submodule, so no prefix on its names

    def state_dict(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        return {k: v.clone() if v.untyped_storage().nbytes() > v.numel() * v.element_size() else v
                for k, v in self.inner[0].state_dict(*args, **kwargs).items()}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.inner[0].load_state_dict(state_dict, strict=strict, assign=assign)


def save_checkpoint(path: str | Path, model: nn.Module, trainer_state: dict[str, Any] | None = None,
                    config: dict[str, Any] | None = None,
                    extra: Callable[[Path], None] | None = None,
                    best_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a checkpoint directory atomically.

    Args:
        path: destination directory (replaced as a whole).
        model: its ``state_dict`` goes to model.safetensors.
        trainer_state: optional training state (see module docstring).
        config: optional JSON-serialisable description of the model (architecture + config).
        extra: optional callback writing more files (vocabulary, recipe) into the temp directory.
        best_state: optional parameters of the best evaluation (a state dict of tensors that share
            no memory), written to best_state.safetensors.
    """
    path = Path(path)
    with atomic_dir(path) as tmp:
        save_model(_Unshared(model), str(tmp / MODEL_FILE))
        if best_state is not None:
            save_file(best_state, str(tmp / BEST_STATE_FILE))
        if config is not None:
            (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if trainer_state is not None:
            torch.save(trainer_state, tmp / STATE_FILE)
        if extra is not None:
            extra(tmp)
    return path


def resume_dir(path: str | Path) -> Path:
    """The checkpoint directory to resume from: ``path``, or its backup when ``path`` is missing.

    :func:`save_checkpoint` moves the previous checkpoint to its backup name before renaming the
    new one into place; a kill between the two renames leaves only the backup, which is complete.

    Raises:
        CheckpointError: neither ``path`` nor a complete backup of it exists.
    """
    path = Path(path)
    if path.is_dir():
        return path
    backup = backup_path(path)
    if (backup / MODEL_FILE).is_file() and (backup / STATE_FILE).is_file():
        return backup
    raise CheckpointError(f"there is no checkpoint '{path}' to resume from",
                          "run without --resume first (adding --overwrite if OUT holds a run that ended before its first "
                          "checkpoint), or pass the --out of the run to continue")


def has_checkpoint(path: str | Path) -> bool:
    """Whether :func:`resume_dir` finds a checkpoint at ``path`` (the directory or its complete backup)."""
    try:
        resume_dir(path)
    except CheckpointError:
        return False
    return True


def _corrupt_fix(path: str | Path, resuming: bool = True) -> str:
    """What to do about a damaged file of checkpoint ``path``: a training checkpoint being resumed is only
    a stage of its run (start the run again); a model being loaded is somebody's result, never to delete."""
    if resuming:
        return ("start the run again with --overwrite instead of --resume (or another --out), or resume from another "
                "checkpoint")
    return (f"the file is damaged: export or copy the checkpoint '{path}' again from where it was written, "
            "or use another checkpoint")


def _short(value: Any) -> str:
    text = json.dumps(value)
    if len(text) <= 40:
        return text
    return f"a {type(value).__name__} of {len(value)}" if isinstance(value, (list, dict)) else text[:37] + "..."


def _differences(saved: Any, current: Any, where: str) -> Iterator[str]:
    """Where two JSON values differ, as ``where: <saved> in the checkpoint, <current> in this run``."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(saved.keys() | current.keys(), key=str):
            yield from _differences(saved.get(key), current.get(key), f"{where}.{key}")
    elif isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        for i, (a, b) in enumerate(zip(saved, current)):
            yield from _differences(a, b, f"{where}[{i}]")
    elif saved != current:
        yield f"{where}: {_short(saved)} in the checkpoint, {_short(current)} in this run"


def _config_differences(path: Path, config: dict[str, Any] | None) -> list[str]:
    """The model fields in which the checkpoint's config.json differs from ``config`` (this run's)."""
    if config is None or not (path / CONFIG_FILE).is_file():
        return []
    saved = read_config(path)
    current = json.loads(json.dumps(config))  # tuples become lists, as in the saved file
    keys = ("architecture", "model")
    return list(islice(_differences({k: saved.get(k) for k in keys}, {k: current.get(k) for k in keys}, "config"), 5))


def load_weights(path: str | Path, model: nn.Module, config: dict[str, Any] | None = None,
                 resuming: bool = False) -> None:
    """Load model.safetensors of checkpoint ``path`` into ``model`` (strict).

    Args:
        path: checkpoint directory.
        model: receives the weights; the file must hold exactly its tensors, in its shapes.
        config: this model's description as :func:`save_checkpoint` writes it (default None); when
            given and the checkpoint has a config.json, a mismatch names the model fields that differ.
        resuming: the weights continue a training run (:func:`load_for_resume`), which the fix of an error
            says; False: a model is loaded for use (evaluate, generate, a fine-tuning init).
    Raises:
        CheckpointError: the file is missing, corrupt or truncated, or holds another model (the
            message names the differing config fields and parameters).
    """
    path = Path(path)
    file = path / MODEL_FILE
    if not file.is_file():
        raise CheckpointError(f"checkpoint '{path}' has no {MODEL_FILE}",
                              "pass a directory written by genfeat (or a Hugging Face model directory)")
    try:
        with safe_open(str(file), framework="pt") as f:
            saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except SafetensorError as e:
        raise CheckpointError(f"'{file}' is corrupt or truncated ({e})", _corrupt_fix(path, resuming)) from None
    current = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    resized = sorted(k for k in saved.keys() & current.keys() if saved[k] != current[k])
    # A shape mismatch is found before loading: torch would copy the matching tensors and then raise.
    missing, unexpected = ([], []) if resized else load_model(_Unshared(model), str(file), strict=False)
    if not (resized or missing or unexpected):
        return
    found = _config_differences(path, config)
    found += [f"{k}: shape {list(saved[k])} in the checkpoint, {list(current[k])} in this model" for k in resized[:5]]
    if missing:
        found.append(f"not in the checkpoint: {sorted(missing)[:5]}")
    if unexpected:
        found.append(f"not in this model: {sorted(unexpected)[:5]}")
    raise CheckpointError(f"checkpoint '{path}' holds another model than this one ({'; '.join(found)})",
                          "use the model settings it was trained with (its config.json), or train a new model "
                          "without --resume" if resuming else "its weights do not match its config.json: export or "
                          "copy the checkpoint again from where it was written, or use another checkpoint")


def _check_same_files(path: Path, write: Callable[[Path], None]) -> None:
    """Refuse a checkpoint whose files (vocabulary) differ from those ``write`` writes for this run.

    A vocabulary of the same size but with other tokens loads without any shape error and would
    silently train every embedding row on another token. Files the checkpoint lacks are not compared.
    """
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp))
        for mine in sorted(Path(tmp).iterdir()):
            theirs = path / mine.name
            if not theirs.is_file() or theirs.read_bytes() == mine.read_bytes():
                continue
            try:
                found = list(islice(_differences(json.loads(theirs.read_text()), json.loads(mine.read_text()),
                                                 mine.name), 3))
            except (json.JSONDecodeError, UnicodeDecodeError):
                found = [f"{mine.name}: other contents"]
            if found:
                raise CheckpointError(f"checkpoint '{path}' was trained with another vocabulary or data: "
                                      f"{'; '.join(found)}",
                                      "resume with the data and vocabulary settings it was trained with, or "
                                      "start a new run without --resume")


def load_for_resume(path: str | Path, model: nn.Module, config: dict[str, Any] | None = None,
                    extra: Callable[[Path], None] | None = None) -> None:
    """Load the weights of checkpoint ``path`` into ``model`` after checking that they mean the same here.

    Model settings that leave the weights loadable (dropout, memory length) may change on resume;
    another vocabulary, or settings that change the parameters, are refused.

    Args:
        path: checkpoint directory.
        model: receives the weights.
        config: this run's config.json content (default None), to name the model fields that differ.
        extra: the callback that writes this run's further files (vocabulary) into a checkpoint
            (default None); each must equal the checkpoint's copy where it has one.
    Raises:
        CheckpointError: another vocabulary or model, or a corrupt file.
    """
    path = Path(path)
    if extra is not None:
        _check_same_files(path, extra)
    load_weights(path, model, config, resuming=True)


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    """Read trainer_state.pt of checkpoint ``path`` (tensors and plain containers only).

    Raises:
        CheckpointError: the file is missing, corrupt, or holds other objects. torch's own message
            for the latter suggests ``weights_only=False``, which would run arbitrary code from
            the file, so it is never shown.
    """
    file = Path(path) / STATE_FILE
    if not file.is_file():
        raise CheckpointError(f"checkpoint '{path}' has no {STATE_FILE}, so training cannot resume from it",
                              "resume from a checkpoint written during training (e.g. OUT/last)")
    try:
        return torch.load(file, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        raise CheckpointError(f"training state '{file}' holds objects other than tensors and plain containers "
                              "(it was not written by genfeat, or is damaged), so it is not loaded",
                              _corrupt_fix(path)) from None
    except Exception:  # torch raises RuntimeError, EOFError, ValueError... for a damaged archive
        raise CheckpointError(f"training state '{file}' is corrupt or truncated", _corrupt_fix(path)) from None


def load_best_state(path: str | Path) -> dict[str, torch.Tensor] | None:
    """The best_state.safetensors of checkpoint ``path`` (on the CPU), or None when it has none.

    Raises:
        CheckpointError: the file is corrupt or truncated.
    """
    file = Path(path) / BEST_STATE_FILE
    if not file.is_file():
        return None
    try:
        return load_file(str(file))
    except SafetensorError as e:
        raise CheckpointError(f"'{file}' is corrupt or truncated ({e})", _corrupt_fix(path)) from None


def read_config(path: str | Path) -> dict[str, Any]:
    file = Path(path) / CONFIG_FILE
    if not file.is_file():
        raise CheckpointError(f"'{path}' is not a genfeat checkpoint (no {CONFIG_FILE})",
                              "pass a checkpoint directory written by genfeat or a Hugging Face model directory")
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"'{file}' is not valid JSON ({e.msg})", "the checkpoint is corrupt; use another one") from None
    if not isinstance(config, dict):
        kind = {list: "an array", str: "a string", type(None): "null", bool: "a boolean"}.get(type(config), "a number")
        raise CheckpointError(f"'{file}' holds {kind}, not a JSON object",
                              "the checkpoint is corrupt; use another one")
    return config
