"""Dataset registry: every dataset is declared once with canonical URLs and sha256 checksums.

Files are read from ``$GENFEAT_DATA`` (default ``~/.cache/genfeat``) under the dataset's canonical
relative path, downloaded there when absent, and verified. Offline, missing or corrupt data ends
in one :class:`~genfeat.errors.DataError` naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
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


def _root_origin() -> str:
    """Where :func:`data_root` comes from, for messages."""
    return "set by GENFEAT_DATA" if os.environ.get("GENFEAT_DATA") else "the default: GENFEAT_DATA is not set"


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
    try:
        with atomic_path(dest) as tmp:
            with urllib.request.urlopen(spec.url, timeout=60) as resp, open(tmp, "wb") as out:
                shutil.copyfileobj(resp, out)
            if spec.archive_member is not None:
                with zipfile.ZipFile(tmp) as zf, zf.open(spec.archive_member) as member:
                    data = member.read()
                tmp.write_bytes(data)
            # Checked before the rename so that a bad download never lands under its final name.
            verify(tmp, spec, download=dest)
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        raise DataError(f"'{dest}' is missing and downloading it from {spec.url} failed ({e})",
                        f"{_by_hand(spec, dest)} (the data directory searched is '{data_root()}', "
                        f"{_root_origin()}), or point GENFEAT_DATA at a directory that holds "
                        f"'{spec.relpath}'") from None


def resolve(name: str, key: str, download: bool = True) -> Path:
    """Local path of file ``key`` of dataset ``name``: found or downloaded, and verified."""
    ds = get_dataset(name)
    if key not in ds.files:
        raise DataError(f"dataset '{name}' has no file '{key}'", f"use one of: {', '.join(ds.files)}")
    spec = ds.files[key]
    path = data_root() / spec.relpath
    if not path.is_file():
        if not download:
            raise DataError(f"'{path}' is missing (data directory '{data_root()}', {_root_origin()})",
                            f"{_by_hand(spec, path)}, or set GENFEAT_DATA to a directory holding '{spec.relpath}'")
        _download(spec, path)
    verify(path, spec)
    return path
