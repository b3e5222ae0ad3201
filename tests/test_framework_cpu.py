"""keep_freed_memory: glibc serves large blocks from the heap (kept for reuse) instead of fresh mmaps."""

import ctypes
import ctypes.util
import subprocess
import sys

import pytest

SCRIPT = """
import ctypes, ctypes.util, sys
from genfeat.framework.cpu import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
libc = ctypes.CDLL(ctypes.util.find_library("c"))

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]

libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
block = libc.malloc(16 << 20)
mmapped = libc.mallinfo2().hblkhd  # bytes in blocks served by mmap
libc.free(block)
kept = libc.mallinfo2().fordblks  # free bytes kept in the heap
print(mmapped >= 16 << 20, kept >= 16 << 20)
"""


def _glibc_with_mallinfo2() -> bool:
    name = ctypes.util.find_library("c")
    return sys.platform.startswith("linux") and name is not None and hasattr(ctypes.CDLL(name), "mallinfo2")


@pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="glibc >= 2.33 only")
def test_large_blocks_come_from_the_heap_and_stay_there():
    def run(mode):
        return subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                              check=True).stdout.split()

    # default glibc: a 16 MB block is above the initial 128 KiB mmap threshold, mmapped and unmapped on free
    assert run("default") == ["True", "False"]
    assert run("keep") == ["False", "True"]
