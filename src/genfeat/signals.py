"""SIGTERM as an orderly interrupt, and renames that no interrupt may cut.

Python turns SIGINT (Ctrl-C) into KeyboardInterrupt, so a command unwinds: atomic writes remove their temporary
files and an ``--overwrite`` run settles the run it set aside. SIGTERM, what schedulers (SLURM), ``timeout``, ``kill``
and torchrun (to its ranks) send, ends a process outright; the command line turns it into :class:`Terminated`, a
KeyboardInterrupt, so that the same cleanup runs. A library import changes no signal handling.

Python runs a signal's handler in the main thread between bytecodes, so a main thread blocked inside native code
(a collective waiting for a rank that is gone, a long library call) would not see SIGTERM until that call returns,
if ever: a watchdog thread learns of the signal at once (``signal.set_wakeup_fd``) and ends the process with status
143 when the command has not unwound :data:`GRACE_SECONDS` later, though never inside :func:`interrupts_held`'s
renames (it waits up to :data:`HOLD_WAIT_SECONDS` for them). Launchers often send one stop as two SIGTERMs (``timeout``
to the process and its group; SLURM and torchrun): later ones neither hurry the end nor cut the cleanup.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_SECONDS = 10.0
"""How long a command may take to unwind after SIGTERM before the watchdog ends it outright."""
HOLD_WAIT_SECONDS = 5.0
"""How much longer the watchdog waits for renames held by :func:`interrupts_held` before it ends the process."""


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM inside :func:`sigterm_interrupts`: an interrupt that did not come from the keyboard."""


def _in_main_thread() -> bool:
    """Whether this is the main thread, the only one that may set signal handlers (and the one signals run in)."""
    return threading.current_thread() is threading.main_thread()


_holds = 0
"""How many :func:`interrupts_held` blocks the main thread is in: the watchdog never ends the process inside one."""
_lock = threading.Lock()
"""Guards :data:`_holds` and the watchdogs' state; the watchdog keeps it from its decision to end the process to the
end, so that no held renames begin and no block ends (:meth:`_Watchdog.stop`) in between."""


class _Watchdog(threading.Thread):
    """Reads the signal numbers Python's C-level handler writes to the wakeup pipe; the first SIGTERM arms a timer
    that ends the process after ``grace`` seconds unless :meth:`stop` (the block has ended) comes first. It stops
    reading when the pipe's write end is closed."""

    def __init__(self, read_fd: int, grace: float):
        super().__init__(name="genfeat-sigterm-watchdog", daemon=True)
        self.read_fd, self.grace = read_fd, grace
        self.timer: threading.Timer | None = None
        self.stopped = False

    def run(self) -> None:
        while data := os.read(self.read_fd, 64):
            if signal.SIGTERM in data:
                with _lock:         # the block may have ended, its SIGTERM handled, before the byte was read here
                    if not self.stopped and self.timer is None:
                        self.timer = threading.Timer(self.grace, self._expire)
                        self.timer.daemon = True
                        self.timer.start()
        os.close(self.read_fd)

    def _expire(self) -> None:
        """The grace period is over: end the process, once no renames are held (or after waiting for them)."""
        give_up = time.monotonic() + HOLD_WAIT_SECONDS
        while True:
            _lock.acquire()     # kept to the end once the process is to end
            if self.stopped:
                _lock.release()
                return
            if not _holds or time.monotonic() > give_up:
                break
            _lock.release()
            time.sleep(0.05)
        line = f"terminated (SIGTERM): the command did not stop within {self.grace:g} s; ended without cleanup\n"
        # a full stderr pipe whose reader does not read would block the write: it gets one second
        writer = threading.Thread(target=_write_stderr, args=(line.encode(),), daemon=True)
        writer.start()
        writer.join(1.0)
        os._exit(128 + signal.SIGTERM)

    def stop(self) -> None:
        """The block has ended (its command unwound, or never got SIGTERM): nothing is ended any more."""
        with _lock:
            self.stopped = True
            if self.timer is not None:
                self.timer.cancel()


def _write_stderr(data: bytes) -> None:
    try:
        os.write(2, data)
    except OSError:             # stderr's reader is gone: the process ends all the same
        pass


_pipes: set[tuple[int, int]] = set()
"""This process's wakeup pipes (read, write end)."""
_handlers: set = set()
"""The SIGTERM handlers :func:`sigterm_interrupts` has installed (and not yet removed)."""


def _after_fork_in_child() -> None:
    """A forked child (word2vec's workers) drops what it inherited of the block: the wakeup fd and both ends of the
    pipe (so that its signals never reach its parent's watchdog, and the pipe's end reaches the watchdog when the
    parent closes it), and genfeat's SIGTERM handler (so SIGTERM ends it at once, as before). Its lock is new: a
    watchdog thread of the parent may have held it at the fork, and that thread does not exist here."""
    global _lock
    _lock = threading.Lock()
    if not _pipes and not _handlers:
        return
    try:
        if _pipes:              # (a host's own wakeup fd, where the block set none, stays)
            signal.set_wakeup_fd(-1)
        if signal.getsignal(signal.SIGTERM) in _handlers:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:          # not the main thread of the child: Python set neither up in it
        pass
    for fds in _pipes:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
    _pipes.clear()
    _handlers.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def sigterm_interrupts(grace: float = GRACE_SECONDS) -> Iterator[None]:
    """For the block, SIGTERM raises :class:`Terminated` in this process (once), and the process ends ``grace``
    seconds after it if the block has not ended by then. Only in the main thread and only where SIGTERM has its
    default action (a host that handles or ignores it keeps doing so). A SIGTERM that arrives while the block is
    ending is delivered once the default action is back (it ends the process, as it would just after the block).
    """
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    state = {"raised": False, "closing": False, "pending": False}

    def handler(signum: int, frame) -> None:
        if state["closing"] or state["raised"]:   # a duplicate, or too late to unwind: not raised (again)
            state["pending"] = not state["raised"]  # a first SIGTERM while the block ends: delivered after it
            return
        state["raised"] = True
        raise Terminated

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    watchdog = None
    try:
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous_fd != -1:   # a host's own wakeup fd (an event loop) stays; no watchdog then
            signal.set_wakeup_fd(previous_fd)
            os.close(read_fd)
        else:
            _pipes.add((read_fd, write_fd))
            watchdog = _Watchdog(read_fd, grace)
            watchdog.start()
        _handlers.add(handler)
        signal.signal(signal.SIGTERM, handler)
        yield
    finally:
        state["closing"] = True
        try:
            _restore(signal.SIGTERM, signal.SIG_DFL)
        finally:                # a SIGINT handled while restoring must not leave the watchdog or the pipe behind
            _handlers.discard(handler)
            if watchdog is not None:
                signal.set_wakeup_fd(-1)
                watchdog.stop()
                _pipes.discard((read_fd, write_fd))
            os.close(write_fd)  # the watchdog reads the end of the pipe and ends
        if state["pending"]:
            signal.raise_signal(signal.SIGTERM)


def _restore(sig: int, handler) -> None:
    """Set ``sig``'s handler, again if a pending signal's handler raised before it was set (``signal.signal``
    runs pending handlers first); the first such error is raised once it is set."""
    error = None
    while True:
        try:
            signal.signal(sig, handler)
            break
        except BaseException as e:  # noqa: BLE001 -- re-raised below, after the handler is in place
            error = error or e
    if error is not None:
        raise error


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM off the block (in the main thread, where they would raise), for a few renames that
    must not stop midway: a signal that arrives meanwhile is delivered once the block has ended, so it still
    interrupts the command (or ends the process, where that is what it does). The SIGTERM watchdog waits for it."""
    global _holds
    if not _in_main_thread():
        yield
        return
    pending: list[int] = []

    def defer(signum: int, frame) -> None:
        pending.append(signum)

    held: dict[int, object] = {}
    with _lock:                 # not while a watchdog is ending the process
        _holds += 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            held[sig] = signal.signal(sig, defer)
        yield
    finally:
        error = None
        for sig, handler in held.items():
            try:
                _restore(sig, handler)
            except BaseException as e:  # noqa: BLE001 -- the other handler is restored first, then it is raised
                error = error or e
        with _lock:
            _holds -= 1
        if error is not None:
            raise error
        # SIGTERM first: a handler that raises ends the loop, and a SIGTERM after a SIGINT (torchrun's Ctrl-C to the
        # group, then SIGTERM to each rank) would be lost
        for sig in sorted(dict.fromkeys(pending), key=lambda sig: sig != signal.SIGTERM):
            if callable(held[sig]):     # raises, as the signal would have (not re-sent: the watchdog saw it once)
                held[sig](sig, None)
            elif held[sig] == signal.SIG_DFL:
                signal.raise_signal(sig)
