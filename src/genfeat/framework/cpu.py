"""Process-level CPU settings for training.

Training allocates and frees the same large activation buffers every step. glibc's malloc serves
blocks above its mmap threshold (dynamic, up to 32 MB) with fresh ``mmap`` calls and trims the heap
top eagerly, so each step pays page faults for memory it just gave back; on virtual machines a
fault costs microseconds per 4 KiB page, which makes filling a fresh 10 MB tensor some 50× slower
than filling a reused one. :func:`keep_freed_memory` fixes the thresholds so freed blocks stay in
the heap and are reused. Peak resident memory is unchanged in the steady state; memory freed
after a peak is kept by the process instead of returned to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's largest fixed threshold on 64-bit


def keep_freed_memory(trim_threshold: int = 1 << 30, top_pad: int = 64 << 20) -> bool:
    """Make glibc keep freed blocks up to 32 MB for reuse; returns False where malloc is not glibc's.

    Args:
        trim_threshold: free memory at the heap top kept before trimming it (default 1 GiB).
        top_pad: extra bytes obtained with each heap extension (default 64 MiB).
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    ok &= libc.mallopt(_M_TOP_PAD, top_pad)
    return bool(ok)
