"""Image datasets of the complement GAN: MNIST from the shared mirror (published statistics), SVHN and
CIFAR-10 readers on small files written here in their formats, balanced labelled subsets, bad input."""

import gzip
import hashlib
import os
import pathlib
import struct

import numpy as np
import pytest

from genfeat.data.images import (balanced_subset, load_images, read_cifar10_tar, read_idx, read_mnist,
                                 read_svhn_mat)
from genfeat.errors import ConfigError, DataError

from _data_fixtures import cifar_tar

DATA = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))
needs_mnist = pytest.mark.skipif(not (DATA / "mnist" / "t10k-images-idx3-ubyte.gz").is_file(), reason="no MNIST")


@pytest.fixture
def data_env(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))


@needs_mnist
def test_mnist_test_split_has_the_published_shape_and_label_counts(data_env):
    test = load_images("mnist", "test")
    assert test.images.shape == (10000, 1, 28, 28) and test.images.dtype == np.uint8
    assert np.bincount(test.labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@needs_mnist
def test_mnist_train_pixel_statistics(data_env):
    train = load_images("mnist", "train")
    assert train.images.shape == (60000, 1, 28, 28)
    assert np.bincount(train.labels)[1] == 6742
    x = train.images / 255.0
    assert abs(x.mean() - 0.1307) < 1e-4 and abs(x.std() - 0.3081) < 1e-4


@needs_mnist
def test_a_truncated_mnist_file_is_a_checksum_error_naming_it(tmp_path, monkeypatch):
    (tmp_path / "mnist").mkdir()
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        data = (DATA / "mnist" / name).read_bytes()
        (tmp_path / "mnist" / name).write_bytes(data[: len(data) // 2] if "images" in name else data)
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz' has 824438 bytes"):
        load_images("mnist", "test")


@needs_mnist
@pytest.mark.parametrize("name", ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"])
def test_a_same_size_mnist_file_with_one_byte_changed_is_a_checksum_error_naming_it_and_the_fix(tmp_path, monkeypatch,
                                                                                             name):
    (tmp_path / "mnist").mkdir()
    for other in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        data = bytearray((DATA / "mnist" / other).read_bytes())
        if other == name:
            data[len(data) // 2] ^= 0x01                  # inside the gzip stream, the size unchanged
        (tmp_path / "mnist" / other).write_bytes(bytes(data))
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    with pytest.raises(DataError) as e:
        load_images("mnist", "test")
    path = tmp_path / "mnist" / name
    assert e.value.cause.startswith(f"checksum mismatch for '{path}': expected sha256 ")
    assert e.value.cause.endswith(f", got {hashlib.sha256(path.read_bytes()).hexdigest()}")
    assert e.value.fix == ("the file is corrupt or another version; delete it so genfeat downloads it from "
                           f"https://yann.lecun.com/exdb/mnist/{name}, or replace it with the canonical file")
    assert path.stat().st_size == (DATA / "mnist" / name).stat().st_size, "the error is the checksum's, not the size's"


def _idx(array: np.ndarray, code: int = 0x08) -> bytes:
    return bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def test_idx_reader_round_trips_and_refuses_truncated_or_foreign_files(tmp_path):
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    (tmp_path / "img.gz").write_bytes(gzip.compress(_idx(images)))
    (tmp_path / "lab").write_bytes(_idx(np.array([3, 7], np.uint8)))
    got = read_mnist(tmp_path / "img.gz", tmp_path / "lab")
    assert got.images.shape == (2, 1, 28, 28) and np.array_equal(got.images[:, 0], images)
    assert got.labels.tolist() == [3, 7] and got.labels.dtype == np.int64
    (tmp_path / "cut").write_bytes(_idx(images)[:-5])
    with pytest.raises(DataError, match="truncated"):
        read_idx(tmp_path / "cut")
    (tmp_path / "png").write_bytes(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(DataError, match="not an IDX file"):
        read_idx(tmp_path / "png")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(_idx(images))[:40])
    with pytest.raises(DataError, match="not a readable gzip"):
        read_idx(tmp_path / "bad.gz")


def test_svhn_mat_reader_transposes_and_maps_label_10_to_digit_0(tmp_path):
    import scipy.io

    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, (32, 32, 3, 4)).astype(np.uint8)
    scipy.io.savemat(tmp_path / "train_32x32.mat", {"X": x, "y": np.array([[10], [1], [9], [10]], np.uint8)})
    got = read_svhn_mat(tmp_path / "train_32x32.mat")
    assert got.images.shape == (4, 3, 32, 32)
    assert np.array_equal(got.images[2, 1], x[:, :, 1, 2]), "image i channel c is X[:, :, c, i]"
    assert got.labels.tolist() == [0, 1, 9, 0]
    (tmp_path / "cut.mat").write_bytes((tmp_path / "train_32x32.mat").read_bytes()[:300])
    with pytest.raises(DataError, match="cut.mat"):
        read_svhn_mat(tmp_path / "cut.mat")


def test_cifar10_reader_concatenates_the_five_training_batches(tmp_path):
    rng = np.random.RandomState(0)
    rows = {i: rng.randint(0, 256, (2, 3072)).astype(np.uint8) for i in range(1, 7)}
    batches = {f"data_batch_{i}": {b"data": rows[i], b"labels": [i, 9 - i]} for i in range(1, 6)}
    batches["test_batch"] = {"data": rows[6], "labels": [4, 5]}
    (tmp_path / "c.tar.gz").write_bytes(cifar_tar(batches))
    train = read_cifar10_tar(tmp_path / "c.tar.gz", "train")
    assert train.images.shape == (10, 3, 32, 32)
    assert np.array_equal(train.images[2, 2].reshape(-1), rows[2][0, 2048:]), "the third 1024 bytes are blue"
    assert train.labels.tolist() == [1, 8, 2, 7, 3, 6, 4, 5, 5, 4]
    assert read_cifar10_tar(tmp_path / "c.tar.gz", "test").labels.tolist() == [4, 5]


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_cifar10_pickle_naming_another_global_is_refused_not_run(tmp_path):
    (tmp_path / "c.tar.gz").write_bytes(cifar_tar({"test_batch": {"data": _Evil(), "labels": [0]}}))
    with pytest.raises(DataError, match="global '(posix|os|nt).system'"):
        read_cifar10_tar(tmp_path / "c.tar.gz", "test")
    (tmp_path / "d.tar.gz").write_bytes(cifar_tar({"data_batch_1": {"data": np.zeros((1, 3072), np.uint8),
                                                                 "labels": [0]}}))
    with pytest.raises(DataError, match="not a readable CIFAR-10 python archive"):
        read_cifar10_tar(tmp_path / "d.tar.gz", "train")


def test_balanced_subset_is_per_class_seeded_and_checked():
    labels = np.repeat(np.arange(10), 30)
    a = balanced_subset(labels, 100, 10, seed=1)
    assert np.bincount(labels[a]).tolist() == [10] * 10 and len(set(a.tolist())) == 100
    assert np.array_equal(a, balanced_subset(labels, 100, 10, seed=1))
    assert not np.array_equal(a, balanced_subset(labels, 100, 10, seed=2))
    with pytest.raises(ConfigError, match="not a positive multiple of the 10 classes"):
        balanced_subset(labels, 105, 10, seed=0)
    fewer_threes = np.r_[labels[labels != 3], np.full(20, 3)]
    with pytest.raises(ConfigError, match="class 3 has only 20 examples. fix: set labelled to at most 200"):
        balanced_subset(fewer_threes, 300, 10, seed=0)
