"""Stand-in data files for tests: written in a dataset's real format under a temporary data root and declared
there without checksums (the canonical files are not available offline)."""

from __future__ import annotations

import dataclasses
import io
import pickle
import tarfile


from genfeat.data import registry


def unverified(monkeypatch, tmp_path, name: str, files: dict[str, bytes], keep_size: bool = False) -> None:
    """Write ``files`` (file key -> bytes) where dataset ``name`` keeps them under a data root in
    ``tmp_path``, and declare them without checksums (they are stand-ins in the dataset's format)."""
    spec = registry.get_dataset(name)
    no_digest = {f.name: None for f in dataclasses.fields(registry.FileSpec)
                 if f.name in ("sha256", "sha1", "git_blob", "md5") or (f.name == "size" and not keep_size)}
    monkeypatch.setitem(registry._REGISTRY, name, dataclasses.replace(
        spec, files={k: dataclasses.replace(f, **no_digest) for k, f in spec.files.items()}))
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    for key, data in files.items():
        path = tmp_path / spec.files[key].relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def cifar_tar(batches: dict[str, object]) -> bytes:
    """A cifar-10-python.tar.gz holding ``batches`` (member name under cifar-10-batches-py/ -> the object
    pickled there, or raw bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, obj in batches.items():
            data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
