"""Where a run's figures come from: the code, the software and the machine of each ``genfeat run`` invocation.

``genfeat run`` writes OUT/provenance.json before any work, ``{"invocations": [record, ...]}``, one record per
invocation: a fresh run starts the list and every ``--resume`` appends to it, so a run finished in several pieces
(on other commits or machines) names each. A run refused or failed before writing anything else takes its record
back, leaving OUT as it found it. The final JSON line carries the current invocation's record as
``provenance``. Only rank 0 writes it under torchrun.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .io import write_bytes_atomic, write_json_atomic

PROVENANCE = "provenance.json"
"""The file of a run's invocations in OUT."""


def git_state(package_dir: Path | None = None) -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of the git checkout genfeat's own files are tracked in (an editable
    install from a clone), or None: no git, genfeat installed as a package (a repository around the install, such
    as a project's venv, does not count: genfeat's ``__init__.py`` must be tracked in it). ``dirty``: some tracked
    file differs from the commit (untracked files do not count)."""
    here = package_dir or Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        git("ls-files", "--error-unmatch", "__init__.py")
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def invocation(recipe: str | Path, overrides: dict[str, Any], seeds: list[int], resume: bool,
               command: list[str] | None = None) -> dict[str, Any]:
    """The record of this invocation: when, the command line (``command``; None for a call from Python), recipe,
    overrides (values JSON has no type for, such as YAML dates, as text) and seeds, genfeat's version and git
    state, torch and Python, and the machine (CPU, cores, torch threads, torchrun world size, CUDA devices)."""
    import torch

    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "recipe": str(recipe),
        "overrides": json.loads(json.dumps(overrides, default=str)),
        "seeds": seeds,
        "resume": resume,
        "genfeat": __version__,
        "git": git_state(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    }


def _snapshot(out: Path) -> frozenset[tuple[str, int, int]]:
    """What OUT holds besides the provenance record: (path, mtime in ns, size) of every entry (empty: no OUT)."""
    if not out.is_dir():
        return frozenset()
    return frozenset((str(p.relative_to(out)), st.st_mtime_ns, st.st_size)
                     for p in out.rglob("*") if p.name != PROVENANCE for st in (p.stat(),))


@contextmanager
def recording(out: Path, record: dict[str, Any] | None, resume: bool) -> Iterator[None]:
    """Hold ``record`` in OUT/provenance.json (:func:`record_invocation`) for the block, the run. A block that raises
    before writing anything else into OUT takes the record back: provenance.json as it was before (or gone) and OUT
    gone if this created it and it is empty. A run that wrote something keeps its record; an error undoing it is
    left alone (the run's own error is the one to report). ``record`` None (not rank 0): nothing is written."""
    if record is None:
        yield
        return
    path = out / PROVENANCE
    created = not out.exists()
    before = path.read_bytes() if path.is_file() else None
    held = _snapshot(out)
    try:
        record_invocation(out, record, resume)
        yield
    except BaseException:
        try:
            if out.is_dir() and _snapshot(out) == held:
                if before is not None:
                    write_bytes_atomic(path, before)
                else:
                    path.unlink(missing_ok=True)
                    if created and not any(out.iterdir()):
                        out.rmdir()
        except OSError:
            pass
        raise


def record_invocation(out: Path, record: dict[str, Any], resume: bool) -> None:
    """Write ``record`` to OUT/provenance.json: the only invocation of a fresh run, or appended to those of the run
    ``resume`` continues (a missing or unreadable file starts the list again)."""
    path = out / PROVENANCE
    earlier: list[Any] = []
    if resume:
        try:
            earlier = json.loads(path.read_text())["invocations"]
        except (OSError, ValueError, KeyError, TypeError):
            earlier = []
        if not isinstance(earlier, list):
            earlier = []
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"invocations": [*earlier, record]})
