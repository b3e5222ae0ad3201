"""SIGTERM as an orderly interrupt, and renames that no interrupt may cut.

Python turns SIGINT (Ctrl-C) into KeyboardInterrupt, so a command unwinds: atomic writes remove their temporary
files and an ``--overwrite`` run settles the run it set aside. SIGTERM, what schedulers (SLURM), ``timeout``, ``kill``
and torchrun (to its ranks) send, ends a process outright; the command line turns it into :class:`Terminated`, a
KeyboardInterrupt, so that the same cleanup runs. A library import changes no signal handling.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM inside :func:`sigterm_interrupts`: an interrupt that did not come from the keyboard."""


def _in_main_thread() -> bool:
    """Whether this is the main thread, the only one that may set signal handlers (and the one signals run in)."""
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """For the block, SIGTERM raises :class:`Terminated` in this process (the main thread; elsewhere, and where
    SIGTERM is ignored as the process was started, nothing changes).

    A process forked meanwhile (word2vec's workers, DataLoader's) inherits the handler; there SIGTERM keeps its
    default action, which ends it at once with that signal, as before: its parent reports it as it did.
    """
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        yield
        return
    owner = os.getpid()

    def handler(signum: int, frame) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for the block (in the main thread, where they would raise), for a few renames
    that must not stop midway."""
    if not _in_main_thread():
        yield
        return
    held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
