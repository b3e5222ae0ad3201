"""Image classification datasets of the complement GAN (thesis §3.1): MNIST, SVHN and CIFAR-10.

Each is declared once in the registry with its canonical URL and checksum, and read from its
original format without torchvision:

- MNIST: the four gzip'd IDX files of LeCun et al. (``mnist/*-ubyte.gz``), sha256-checked;
- SVHN (cropped digits): ``svhn/{train,test}_32x32.mat`` (MATLAB v5; ``X`` is (32, 32, 3, n), ``y``
  is (n, 1) with the digit 0 stored as label 10), md5-checked;
- CIFAR-10: ``cifar10/cifar-10-python.tar.gz`` holding Python pickles of dicts with ``data``
  (10000, 3072) uint8 rows (R, G, B planes of 32 x 32) and ``labels``; they are read with
  :class:`ImageUnpickler`, which admits only numpy's array reconstruction, never arbitrary globals.

Every loader returns an :class:`ImageSet` of uint8 images (n, c, h, w) and int64 labels (n,).
:func:`balanced_subset` draws the labelled subset of semi-supervised learning (the same number of
examples from each class, chosen by seed).
"""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError
from .graph import _ALLOWED_GLOBALS
from .registry import DatasetSpec, FileSpec, register, resolve

IMAGE_DATASETS = ("mnist", "svhn", "cifar10")

_MNIST_URL = "https://yann.lecun.com/exdb/mnist/{}"
# (file, bytes, sha256) from shared/data/mnist/PROVENANCE.md; the md5s there are the canonical ones
_MNIST = {
    "train_images": ("train-images-idx3-ubyte.gz", 9912422,
                     "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
    "train_labels": ("train-labels-idx1-ubyte.gz", 28881,
                     "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
    "test_images": ("t10k-images-idx3-ubyte.gz", 1648877,
                    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
    "test_labels": ("t10k-labels-idx1-ubyte.gz", 4542,
                    "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
}
register(DatasetSpec(
    name="mnist",
    files={key: FileSpec(f"mnist/{name}", _MNIST_URL.format(name), sha256, size)
           for key, (name, size, sha256) in _MNIST.items()},
    citation="LeCun, Cortes & Burges, The MNIST database of handwritten digits",
))
register(DatasetSpec(
    name="svhn",
    files={
        "train": FileSpec("svhn/train_32x32.mat", "http://ufldl.stanford.edu/housenumbers/train_32x32.mat", None,
                          182040794, md5="e26dedcc434d2e4c54c9b2d4a06d8373"),
        "test": FileSpec("svhn/test_32x32.mat", "http://ufldl.stanford.edu/housenumbers/test_32x32.mat", None,
                         64275384, md5="eb5a983be6a315427106f1b164d9cef3"),
    },
    citation="Netzer et al., Reading Digits in Natural Images with Unsupervised Feature Learning, 2011",
))
register(DatasetSpec(
    name="cifar10",
    files={"archive": FileSpec("cifar10/cifar-10-python.tar.gz",
                               "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", None, 170498071,
                               md5="c58f30108f718f92721af3b95e74349a")},
    citation="Krizhevsky, Learning Multiple Layers of Features from Tiny Images, 2009",
))


@dataclass
class ImageSet:
    """Images and labels of one split.

    Attributes:
        images: (n, c, h, w) uint8.
        labels: (n,) int64 class ids in 0..num_classes-1.
        num_classes: K.
    """

    images: np.ndarray
    labels: np.ndarray
    num_classes: int = 10


_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX array (LeCun's format: magic 0x0000TTNN, NN big-endian uint32 dims, then the data), gzip'd or not.

    Raises:
        DataError: the file is not IDX, or is truncated.
    """
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"'{path}' is not a readable gzip file ({e})", "replace it with the canonical file") from None
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_DTYPES:
        raise DataError(f"'{path}' is not an IDX file (magic {raw[:4].hex()})", "replace it with the canonical file")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim]) if len(raw) >= 4 + 4 * ndim else None
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    if dims is None or len(raw) != 4 + 4 * ndim + int(np.prod(dims)) * dtype.itemsize:
        raise DataError(f"'{path}' is truncated or has trailing bytes (header dims {dims}, {len(raw)} bytes)",
                        "replace it with the canonical file")
    return np.frombuffer(raw, dtype, offset=4 + 4 * ndim).reshape(dims)


def _checked(images: np.ndarray, labels: np.ndarray, where: str, num_classes: int = 10) -> ImageSet:
    if len(images) != len(labels):
        raise DataError(f"'{where}' has {len(images)} images but {len(labels)} labels",
                        "the files belong to different splits or versions; replace them with the canonical files")
    labels = labels.astype(np.int64)
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"'{where}' has labels outside 0..{num_classes - 1}", "replace it with the canonical file")
    return ImageSet(np.ascontiguousarray(images, dtype=np.uint8), labels, num_classes)


def read_mnist(images_path: str | Path, labels_path: str | Path) -> ImageSet:
    """MNIST images (n, 1, 28, 28) and labels from an IDX image file and an IDX label file."""
    images = read_idx(images_path)
    if images.ndim != 3:
        raise DataError(f"'{images_path}' holds a {images.ndim}-D array, not images", "pass the *-images-idx3 file")
    return _checked(images[:, None], read_idx(labels_path), str(images_path))


def read_svhn_mat(path: str | Path) -> ImageSet:
    """SVHN cropped digits (n, 3, 32, 32) from a ``*_32x32.mat`` file (label 10 is the digit 0)."""
    import scipy.io

    try:
        mat = scipy.io.loadmat(str(path), variable_names=("X", "y"))
    except (OSError, ValueError, TypeError, zlib.error) as e:
        raise DataError(f"'{path}' is not a readable MATLAB file ({e})", "replace it with the canonical file") from None
    if "X" not in mat or "y" not in mat or mat["X"].ndim != 4:
        raise DataError(f"'{path}' has no (32, 32, 3, n) 'X' and 'y' arrays", "replace it with the canonical file")
    labels = mat["y"].reshape(-1).astype(np.int64) % 10
    return _checked(mat["X"].transpose(3, 2, 0, 1), labels, str(path))


_NUMPY_GLOBALS = {k: v for k, v in _ALLOWED_GLOBALS.items() if k[0].split(".")[0] in ("numpy", "_codecs")}


class ImageUnpickler(pickle.Unpickler):
    """Unpickler that resolves only numpy's array reconstruction (all a CIFAR batch holds); any other
    global, which a genuine file never names, is a DataError instead of code run from the file."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _NUMPY_GLOBALS:
            raise DataError(f"pickle refers to the global '{module}.{name}', which a CIFAR-10 batch never contains",
                            "the file is not the genuine CIFAR-10 archive; fetch it from www.cs.toronto.edu/~kriz")
        return _NUMPY_GLOBALS[(module, name)]


CIFAR10_MEMBERS = {"train": [f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)],
                   "test": ["cifar-10-batches-py/test_batch"]}


def read_cifar10_tar(path: str | Path, split: str) -> ImageSet:
    """CIFAR-10 images (n, 3, 32, 32) of ``split`` (train: data_batch_1..5, test: test_batch) from the python tarball."""
    images, labels = [], []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in CIFAR10_MEMBERS[split]:
                f = tar.extractfile(member)
                if f is None:
                    raise KeyError(member)
                batch = ImageUnpickler(io.BytesIO(f.read()), encoding="latin1").load()
                batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
                images.append(np.asarray(batch["data"], np.uint8).reshape(-1, 3, 32, 32))
                labels.append(np.asarray(batch["labels"]))
    except DataError as e:
        raise DataError(f"'{path}': {e.cause}", e.fix) from None
    except (OSError, EOFError, KeyError, ValueError, TypeError, AttributeError, tarfile.TarError, zlib.error,
            pickle.UnpicklingError) as e:
        raise DataError(f"'{path}' is not a readable CIFAR-10 python archive ({type(e).__name__}: {e})",
                        "replace it with the canonical cifar-10-python.tar.gz") from None
    return _checked(np.concatenate(images), np.concatenate(labels), str(path))


def load_images(name: str, split: str) -> ImageSet:
    """Split ``train`` or ``test`` of dataset ``name`` (mnist, svhn, cifar10), found or downloaded and verified."""
    if split not in ("train", "test"):
        raise ConfigError(f"image split '{split}' does not exist", "use train or test")
    if name == "mnist":
        return read_mnist(resolve("mnist", f"{split}_images"), resolve("mnist", f"{split}_labels"))
    if name == "svhn":
        return read_svhn_mat(resolve("svhn", split))
    if name == "cifar10":
        return read_cifar10_tar(resolve("cifar10", "archive"), split)
    raise ConfigError(f"unknown image dataset '{name}'", f"use one of: {', '.join(IMAGE_DATASETS)}")


def balanced_subset(labels: np.ndarray, size: int, num_classes: int, seed: int, field: str = "labelled") -> np.ndarray:
    """Indices of ``size`` examples, ``size / num_classes`` of each class, drawn without replacement by ``seed``.

    Args:
        labels: (n,) int64.
        size: total labelled examples (MNIST 100, SVHN 1,000, CIFAR-10 4,000 in the paper).
        num_classes: K.
        seed: seed of the draw (the same seed gives the same subset).
        field: the config field named in errors (default ``labelled``).
    Returns:
        (size,) int64 indices, sorted.
    Raises:
        ConfigError: ``size`` is not a positive multiple of K, or a class has fewer examples than its share.
    """
    if size <= 0 or size % num_classes:
        raise ConfigError(f"{field} is {size}, not a positive multiple of the {num_classes} classes",
                          f"set {field} to a multiple of {num_classes} (e.g. {num_classes * max(size // num_classes, 1)})")
    per_class = size // num_classes
    counts = np.bincount(labels, minlength=num_classes)
    smallest = int(counts.argmin())
    if counts[smallest] < per_class:
        raise ConfigError(f"{field} is {size}: {per_class} per class, but class {smallest} has only "
                          f"{counts[smallest]} examples", f"set {field} to at most {num_classes * counts[smallest]}")
    rng = np.random.RandomState(seed)
    picked = [rng.choice(np.flatnonzero(labels == k), per_class, replace=False) for k in range(num_classes)]
    return np.sort(np.concatenate(picked))
