"""Atomic outputs (genfeat.io) get the permissions of an ordinary write, not mkstemp's private ones."""

import os
import stat

import pytest
import torch
from safetensors.torch import save_file

from genfeat.io import atomic_dir, write_json_atomic


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=oct)
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_outputs_follow_the_umask(tmp_path, umask):
    write_json_atomic(tmp_path / "results.json", {"ppl": 1.0})
    with atomic_dir(tmp_path / "final") as tmp:
        (tmp / "vocab.json").write_bytes(b"x")
        # safetensors creates its file private (0600) itself, whatever the umask
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))
        (tmp / "tokenizer").mkdir(mode=0o700)
        (tmp / "tokenizer" / "spiece.model").write_bytes(b"x")
        os.chmod(tmp / "tokenizer" / "spiece.model", 0o600)
    assert mode(tmp_path / "results.json") == 0o666 & ~umask
    assert mode(tmp_path / "final") == 0o777 & ~umask
    assert mode(tmp_path / "final" / "tokenizer") == 0o777 & ~umask
    for name in ("vocab.json", "model.safetensors", "tokenizer/spiece.model"):
        assert mode(tmp_path / "final" / name) == 0o666 & ~umask, name


def test_a_checkpoint_gets_the_modes_of_a_plain_write(tmp_path, umask):
    from genfeat.framework.checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "last", torch.nn.Linear(2, 2), None, {"architecture": "linear"})
    assert mode(tmp_path / "last" / "model.safetensors") == 0o666 & ~umask


def test_a_lone_backup_survives_until_the_new_directory_is_in_place(tmp_path, monkeypatch):
    from genfeat.io import backup_path

    # a kill between atomic_dir's two renames left only the backup: the one complete copy
    backup = backup_path(tmp_path / "last")
    backup.mkdir()
    (backup / "model.safetensors").write_bytes(b"old")
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append(backup.exists())  # the backup must still be there at every rename
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with atomic_dir(tmp_path / "last") as tmp:
        (tmp / "model.safetensors").write_bytes(b"new")
    assert seen == [True]
    assert (tmp_path / "last" / "model.safetensors").read_bytes() == b"new" and not backup.exists()
