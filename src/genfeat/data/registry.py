"""Dataset registry: every dataset is declared once with canonical URLs and sha256 checksums.

Files are read from ``$GENFEAT_DATA`` (default ``~/.cache/genfeat``) under the dataset's canonical
relative path, downloaded there when absent, and verified. Offline, missing or corrupt data ends
in one :class:`~genfeat.errors.DataError` naming the file and the fix.

Two environment variables govern downloads:

- ``GENFEAT_OFFLINE=1``: never download; a missing file is a DataError saying where to place it
  (``0`` or unset: download).
- ``GENFEAT_DOWNLOAD_TIMEOUT``: seconds one download may take in all (default 3600), checked
  whenever bytes of the file arrive, so a server that trickles the file cannot stall a run; past it
  the download is abandoned (nothing is kept) with the DataError saying how to fetch the file by
  hand. A connection that goes silent ends sooner, at the 60 s socket timeout; connecting and the
  response's headers are bounded by that per-receive timeout only.

An invalid value of either is a :class:`~genfeat.errors.ConfigError` naming the variable, raised by
every :func:`resolve` (whether or not a file is missing).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, DataError
from ..io import atomic_path


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset.

    Attributes:
        relpath: path under the data root (the canonical layout).
        url: where to download it (or the archive holding it).
        sha256: expected checksum of the file itself (None: none published; then ``sha1`` or
            ``git_blob`` is checked if given, and ``size`` always when given).
        size: expected size in bytes, checked when given.
        archive_member: member to extract when ``url`` is a zip archive.
        sha1: the file's SHA-1, checked instead when no sha256 is published (WikiText's files).
        git_blob: the file's git blob id (SHA-1 of ``blob <size>\0`` + content), checked when only
            the id of the file in a public repository is known.
        md5: the file's MD5, checked when it is the only published digest (SVHN, CIFAR-10).
    """

    relpath: str
    url: str
    sha256: str | None
    size: int | None = None
    archive_member: str | None = None
    sha1: str | None = None
    git_blob: str | None = None
    md5: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: dict[str, FileSpec]
    citation: str = ""
    note: str = ""


DOWNLOAD_TIMEOUT = 3600.0
"""Seconds one download may take when ``GENFEAT_DOWNLOAD_TIMEOUT`` is not set."""
_SOCKET_TIMEOUT = 60.0
_CHUNK = 1 << 16

_REGISTRY: dict[str, DatasetSpec] = {}
_VERIFIED: set[tuple[str, int, float]] = set()


def register(spec: DatasetSpec) -> DatasetSpec:
    _REGISTRY[spec.name] = spec
    return spec


def get_dataset(name: str) -> DatasetSpec:
    if name not in _REGISTRY:
        raise DataError(f"unknown dataset '{name}'", f"use one of: {', '.join(sorted(_REGISTRY))}, or a file path")
    return _REGISTRY[name]


def datasets() -> list[str]:
    return sorted(_REGISTRY)


def data_root() -> Path:
    return Path(os.environ.get("GENFEAT_DATA") or Path.home() / ".cache" / "genfeat").expanduser()


def root_origin() -> str:
    """Where :func:`data_root` comes from, for messages."""
    return "set by GENFEAT_DATA" if os.environ.get("GENFEAT_DATA") else "the default: GENFEAT_DATA is not set"


def _offline() -> bool:
    """Whether ``GENFEAT_OFFLINE`` forbids downloads (``1``; ``0``, empty or unset allow them)."""
    value = os.environ.get("GENFEAT_OFFLINE", "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"GENFEAT_OFFLINE is {value!r}", "set it to 1 (never download) or 0, or unset it")
    return value == "1"


def _download_timeout() -> float:
    """Seconds one download may take: ``GENFEAT_DOWNLOAD_TIMEOUT``, a positive number, or :data:`DOWNLOAD_TIMEOUT`."""
    value = os.environ.get("GENFEAT_DOWNLOAD_TIMEOUT", "")
    if not value:
        return DOWNLOAD_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"GENFEAT_DOWNLOAD_TIMEOUT is {value!r}, not a positive number of seconds",
                          f"set it to the seconds one download may take (e.g. {DOWNLOAD_TIMEOUT:g}), or unset it")
    return seconds


def _by_hand(spec: FileSpec, dest: Path) -> str:
    """How to place ``spec``'s file at ``dest`` by hand: download it, or extract it from the zip its URL names."""
    if spec.archive_member is not None:
        return f"extract the member '{spec.archive_member}' of the zip archive {spec.url} to '{dest}'"
    return f"download {spec.url} by hand to '{dest}'"


def digest_of(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file: ``sha256``, ``sha1``, ``md5`` or ``git-blob`` (git's object id of the file)."""
    if algorithm == "git-blob":
        h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    else:
        h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path, spec: FileSpec, download: Path | None = None) -> None:
    """Check the size and checksum of ``path`` (hashing once per process for an unchanged file).

    Args:
        download: for a download still under its temporary name ``path``, the name it is for; the
            error then says that what the URL served is wrong (nothing is kept).
    """
    stat = path.stat()
    if download is not None:
        name = f"'{download}' downloaded from {spec.url}"
        fix = f"the server holds another version: fetch the canonical file by hand to '{download}'"
    else:
        name = f"'{path}'"
        fix = (f"the file is corrupt or another version; delete it so genfeat downloads it from {spec.url}, "
               "or replace it with the canonical file")
    if spec.size is not None and stat.st_size != spec.size:
        raise DataError(f"{name} has {stat.st_size} bytes, expected {spec.size}", fix)
    algorithm, expected = next(((a, v) for a, v in (("sha256", spec.sha256), ("sha1", spec.sha1),
                                                      ("git-blob", spec.git_blob), ("md5", spec.md5)) if v),
                           (None, None))
    if expected is None:
        return
    key = (str(path), stat.st_size, stat.st_mtime)
    if key in _VERIFIED:
        return
    actual = digest_of(path, algorithm)
    if actual != expected:
        if download is not None:
            raise DataError(f"{name} has {algorithm} {actual}, expected {expected}", fix)
        raise DataError(f"checksum mismatch for {name}: expected {algorithm} {expected}, got {actual}", fix)
    _VERIFIED.add(key)


def _download(spec: FileSpec, dest: Path) -> None:
    """Fetch ``spec.url`` to ``dest`` atomically (extracting ``archive_member`` from a zip). The folders it
    creates for ``dest`` are removed again when the download fails, so a failed attempt leaves nothing."""
    created = [folder for folder in dest.parents if not folder.exists()]      # deepest first
    try:
        _fetch(spec, dest)
    except BaseException:
        for folder in created:
            try:
                folder.rmdir()
            except OSError:                  # not empty (another process wrote into it) or gone: keep the rest
                break
        raise


def _fetch(spec: FileSpec, dest: Path) -> None:
    """Download ``spec.url`` to a temporary name beside ``dest`` in pieces, giving up when it takes longer than
    :func:`_download_timeout` in all, then extract and verify it, and rename it to ``dest``."""
    limit = _download_timeout()
    where = (f"(the data directory searched is '{data_root()}', {root_origin()}), or point GENFEAT_DATA at a "
             f"directory that holds '{spec.relpath}'")
    deadline = time.monotonic() + limit
    try:
        with atomic_path(dest) as tmp:
            with urllib.request.urlopen(spec.url, timeout=min(_SOCKET_TIMEOUT, limit)) as resp, \
                    open(tmp, "wb") as out:
                # read1 returns what one receive brings, so the deadline is checked while bytes trickle in
                while chunk := resp.read1(_CHUNK):
                    out.write(chunk)
                    # past the deadline, unless the response's announced length has all arrived
                    if time.monotonic() > deadline and getattr(resp, "length", None) != 0:
                        raise DataError(f"downloading '{dest}' from {spec.url} took longer than {limit:g} s "
                                        f"(GENFEAT_DOWNLOAD_TIMEOUT; {out.tell()} bytes received), abandoned",
                                        f"{_by_hand(spec, dest)} {where}, or set GENFEAT_DOWNLOAD_TIMEOUT to "
                                        "more seconds")
            if spec.archive_member is not None:
                with zipfile.ZipFile(tmp) as zf, zf.open(spec.archive_member) as member:
                    data = member.read()
                tmp.write_bytes(data)
            # Checked before the rename so that a bad download never lands under its final name.
            verify(tmp, spec, download=dest)
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        raise DataError(f"'{dest}' is missing and downloading it from {spec.url} failed ({e})",
                        f"{_by_hand(spec, dest)} {where}") from None


def resolve(name: str, key: str, download: bool = True) -> Path:
    """Local path of file ``key`` of dataset ``name``: found or downloaded, and verified.

    Args:
        download: fetch a missing file from its URL; False, or ``GENFEAT_OFFLINE=1``, makes a missing
            file a DataError saying where to place it.
    """
    ds = get_dataset(name)
    if key not in ds.files:
        raise DataError(f"dataset '{name}' has no file '{key}'", f"use one of: {', '.join(ds.files)}")
    spec = ds.files[key]
    path = data_root() / spec.relpath
    offline, _ = _offline(), _download_timeout()   # both checked at every call, not only when a file is missing
    if not path.is_file():
        if not download or offline:
            refused = ", and GENFEAT_OFFLINE=1 forbids downloading it" if offline else ""
            raise DataError(f"'{path}' is missing (data directory '{data_root()}', {root_origin()}{refused})",
                            f"{_by_hand(spec, path)}, or set GENFEAT_DATA to a directory holding '{spec.relpath}'")
        _download(spec, path)
    verify(path, spec)
    return path
