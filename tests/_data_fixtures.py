"""Stand-in data files for tests: written in a dataset's real format under a temporary data root and declared
there without checksums (the canonical files are not available offline)."""

from __future__ import annotations

import dataclasses
import io
import pickle
import tarfile

import numpy as np

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


def stand_in_images(monkeypatch, tmp_path, name: str, train: int = 40, test: int = 30) -> None:
    """A stand-in of image dataset ``name`` (svhn or cifar10) in its canonical files under ``tmp_path``, the
    data root: ``train`` and ``test`` random 32 x 32 RGB images, labels cycling over the 10 classes (so that
    ``train`` / 10 of each can be labelled). SVHN: ``{train,test}_32x32.mat`` with X (32, 32, 3, n) and y (n, 1),
    the digit 0 stored as 10; CIFAR-10: the tarball, ``train`` split over its five training batches."""
    import scipy.io

    import genfeat.data.images  # noqa: F401  (declares svhn and cifar10)

    rng = np.random.RandomState(0)
    splits = {split: (rng.randint(0, 256, (n, 3, 32, 32)).astype(np.uint8), np.arange(n) % 10)
              for split, n in (("train", train), ("test", test))}
    if name == "svhn":
        files = {}
        for split, (x, y) in splits.items():
            buf = io.BytesIO()
            scipy.io.savemat(buf, {"X": x.transpose(2, 3, 1, 0), "y": np.where(y == 0, 10, y)[:, None].astype(np.uint8)})
            files[split] = buf.getvalue()
        unverified(monkeypatch, tmp_path, "svhn", files)
    elif name == "cifar10":
        (x, y), (xt, yt) = splits["train"], splits["test"]
        batches = {f"data_batch_{i + 1}": {b"data": xb.reshape(len(xb), -1), b"labels": yb.tolist()}
                   for i, (xb, yb) in enumerate(zip(np.array_split(x, 5), np.array_split(y, 5)))}
        batches["test_batch"] = {b"data": xt.reshape(len(xt), -1), b"labels": yt.tolist()}
        unverified(monkeypatch, tmp_path, "cifar10", {"archive": cifar_tar(batches)})
    else:
        raise ValueError(f"no stand-in for image dataset '{name}' (svhn or cifar10)")
