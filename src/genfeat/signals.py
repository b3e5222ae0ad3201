"""SIGTERM as an orderly interrupt, and renames that no interrupt may cut.

Python turns SIGINT (Ctrl-C) into KeyboardInterrupt, so a command unwinds: atomic writes remove their temporary
files and an ``--overwrite`` run settles the run it set aside. SIGTERM, what schedulers (SLURM), ``timeout``, ``kill``
and torchrun (to its ranks) send, ends a process outright; the command line turns it into :class:`Terminated`, a
KeyboardInterrupt, so that the same cleanup runs. A library import changes no signal handling.

Python runs a signal's handler in the main thread between bytecodes, so a main thread blocked inside native code
(a collective waiting for a rank that is gone, a long library call) would not see SIGTERM until that call returns,
if ever: a watchdog thread learns of the signal at once (``signal.set_wakeup_fd``) and ends the process with status
143 when it has not unwound :data:`GRACE_SECONDS` later, or at a second SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_SECONDS = 10.0
"""How long a command may take to unwind after SIGTERM before the watchdog ends it outright."""


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM inside :func:`sigterm_interrupts`: an interrupt that did not come from the keyboard."""


def _in_main_thread() -> bool:
    """Whether this is the main thread, the only one that may set signal handlers (and the one signals run in)."""
    return threading.current_thread() is threading.main_thread()


class _Watchdog(threading.Thread):
    """Reads the signal numbers Python's C-level handler writes to the wakeup pipe; at the first SIGTERM it arms a
    timer that ends the process after ``grace`` seconds (the main thread's orderly unwind normally ends it first), at
    a second it ends it at once. It stops when the pipe's write end is closed."""

    def __init__(self, read_fd: int, grace: float):
        super().__init__(name="genfeat-sigterm-watchdog", daemon=True)
        self.read_fd, self.grace = read_fd, grace
        self.timer: threading.Timer | None = None
        self.stopped = False
        self.lock = threading.Lock()

    @staticmethod
    def _end(why: str) -> None:
        print(f"terminated (SIGTERM): {why}; ended without cleanup", file=sys.stderr, flush=True)
        os._exit(128 + signal.SIGTERM)

    def run(self) -> None:
        while data := os.read(self.read_fd, 64):
            with self.lock:     # the block may have ended, its SIGTERM handled, before the byte was read here
                if self.stopped:
                    continue
                for _ in range(data.count(signal.SIGTERM)):
                    if self.timer is not None:
                        self._end("a second SIGTERM")
                    self.timer = threading.Timer(self.grace, self._end,
                                                 (f"the command did not stop within {self.grace:g} s",))
                    self.timer.daemon = True
                    self.timer.start()
        os.close(self.read_fd)

    def stop(self) -> None:
        """The block has ended (its command unwound, or never got SIGTERM): nothing is ended any more."""
        with self.lock:
            self.stopped = True
            if self.timer is not None:
                self.timer.cancel()


_WAKEUP_FDS: set[int] = set()
"""Write ends of this process's wakeup pipes: a forked child (word2vec's workers) clears its inherited wakeup fd, so
that the signals it receives never reach its parent's watchdog."""


def _clear_inherited_wakeup_fd() -> None:
    if _WAKEUP_FDS:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:      # forked from another thread than the main one: it has no wakeup fd to clear
            pass


os.register_at_fork(after_in_child=_clear_inherited_wakeup_fd)


@contextmanager
def sigterm_interrupts(grace: float = GRACE_SECONDS) -> Iterator[None]:
    """For the block, SIGTERM raises :class:`Terminated` in this process, and the process ends ``grace`` seconds
    after it (or at a second SIGTERM) if it has not unwound by then. Only in the main thread and only where SIGTERM
    has its default action (a host that handles or ignores it keeps doing so).

    A process forked meanwhile (word2vec's workers) inherits the handler; there SIGTERM keeps its default action,
    which ends it at once with that signal, as before: its parent reports it as it did.
    """
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def handler(signum: int, frame) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:          # not the main interpreter
        previous_fd = None
    if previous_fd not in (None, -1):  # a host's own wakeup fd (an event loop) stays; no watchdog then
        signal.set_wakeup_fd(previous_fd)
        previous_fd = None
    watchdog = None
    if previous_fd is not None:
        _WAKEUP_FDS.add(write_fd)
        watchdog = _Watchdog(read_fd, grace)
        watchdog.start()
    else:
        os.close(read_fd)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if watchdog is not None:
            signal.set_wakeup_fd(-1)
            _WAKEUP_FDS.discard(write_fd)
            watchdog.stop()
        os.close(write_fd)      # the watchdog reads the end of the pipe and ends


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM off the block (in the main thread, where they would raise), for a few renames that
    must not stop midway: a signal that arrives meanwhile is delivered again once the block has ended, so it still
    interrupts the command (or ends the process, where that is what it does)."""
    if not _in_main_thread():
        yield
        return
    pending: list[int] = []

    def defer(signum: int, frame) -> None:
        pending.append(signum)

    held = {sig: signal.signal(sig, defer) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            if callable(held[sig]):     # raises, as the signal would have (not re-sent: the watchdog saw it once)
                held[sig](sig, None)
            elif held[sig] == signal.SIG_DFL:
                signal.raise_signal(sig)
