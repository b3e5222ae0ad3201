"""Atomic file output: nothing is ever half-written.

A writer goes to a temporary file in the destination directory, is flushed and fsynced, and
then renamed over the destination (``os.replace`` is atomic on POSIX). A kill at any moment
leaves either the old file or the new one, never a truncated one.

``mkstemp``/``mkdtemp`` create their files private (0600/0700), and so do some writers of their own
(safetensors writes model.safetensors 0600); before the rename every file and folder written gets the
permissions an ordinary ``open``/``mkdir`` would have given it under the process umask (0666/0777 less
the umask), so results, checkpoints and plots stay readable by whoever may read the rest of the output.
"""

from __future__ import annotations

import glob
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    """The process umask: from /proc on Linux; elsewhere it can only be read by setting it, which is
    set back at once (another thread creating a file meanwhile would get mode bits unmasked)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _open_modes(root: Path) -> None:
    """Give ``root`` and everything under it the mode a plain ``mkdir``/``open`` would have given it."""
    mask = _umask()
    os.chmod(root, 0o777 & ~mask)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o777 & ~mask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666 & ~mask)


def check_output_path(path: str | os.PathLike, what: str, directory: bool = True) -> None:
    """Refuse, before any work, an output ``path`` that cannot be created: a file where a folder must be
    (``path`` itself, for a ``directory``, or a folder above it), or a folder where the file ``path`` goes.

    Args:
        what: how the message names the path (``"--out"``, ``"output directory"``).

    Raises:
        ConfigError: naming ``path`` and what is in the way.
    """
    from .errors import ConfigError

    path = Path(path)
    if directory and path.exists() and not path.is_dir():
        raise ConfigError(f"{what} '{path}' is an existing file, where a folder is to be written",
                          "pass a folder path, or move the file out of the way")
    if not directory and path.is_dir():
        raise ConfigError(f"{what} '{path}' is a folder, where a file is to be written", "pass a file path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what} '{path}' cannot be written: '{parent}' is a file in the way, not a folder",
                                  "pass a path under a folder, or move the file out of the way")
            return


def backup_path(path: str | os.PathLike) -> Path:
    """Where :func:`atomic_dir` keeps the previous ``path`` while the new one is renamed into place."""
    path = Path(path)
    return path.with_name(f".{path.name}.old")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is renamed onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = None
    try:   # created inside the try: a Ctrl-C right after its creation still removes it
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory; on success it replaces ``path`` as a whole.

    An existing ``path`` is moved aside first and removed only after the new directory is in
    place, so a kill leaves a complete directory under ``path`` or under its backup name. A kill
    while the temporary directory is written leaves it behind: the next write of ``path`` removes
    such leftovers (one writer per path, as a run's rank 0 writes its checkpoints).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = None
    try:   # created inside the try: a Ctrl-C right after its creation still removes it
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        yield tmp
        _open_modes(tmp)
        backup = backup_path(path)
        if path.exists():
            # a backup beside an existing path is stale; one without it is the only complete copy
            # (a kill between two renames), kept until the new directory is in place
            if backup.exists():
                shutil.rmtree(backup)
            os.replace(path, backup)
        os.replace(tmp, path)
        if backup.exists():
            shutil.rmtree(backup)
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float (a figure that could not be computed, e.g. a correlation over fewer
    than two pairs) replaced by None, so that it serialises as standard JSON (``null``), not as ``NaN``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_results(out_dir: str | os.PathLike, figures: dict[str, Any]) -> None:
    """A run's figures as OUT/results.json, in the order the method reports them (not sorted: a resumed run's summary
    follows the order of the figures it reads back); a figure that could not be computed is ``null``."""
    write_text_atomic(Path(out_dir) / "results.json", json.dumps(json_safe(figures), indent=2, allow_nan=False) + "\n")
