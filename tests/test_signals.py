"""SIGTERM as an interrupt inside ``sigterm_interrupts`` (what ``genfeat`` runs its commands in), its watchdog for a
main thread blocked in native code, and the renames ``interrupts_held`` keeps from either signal. The commands' own
exit on SIGTERM: tests/test_cli_run.py; forked word2vec workers: tests/test_word2vec.py."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from genfeat.signals import Terminated, interrupts_held, sigterm_interrupts


def test_sigterm_raises_terminated_in_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
    assert issubclass(Terminated, KeyboardInterrupt), "the cleanup written for Ctrl-C runs for it too"
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.set_wakeup_fd(-1) == -1, "the wakeup fd is cleared after the block"


@pytest.mark.parametrize("host", [signal.SIG_IGN, "handler"])
def test_a_host_that_ignores_or_handles_sigterm_keeps_doing_so(host):
    seen = []
    own = (lambda signum, frame: seen.append(signum)) if host == "handler" else host
    before = signal.signal(signal.SIGTERM, own)
    try:
        with sigterm_interrupts():
            assert signal.getsignal(signal.SIGTERM) is own
            os.kill(os.getpid(), signal.SIGTERM)
        assert seen == ([signal.SIGTERM] if host == "handler" else [])
    finally:
        signal.signal(signal.SIGTERM, before)


def test_interrupts_held_delivers_both_signals_once_the_renames_are_done():
    done = []
    with sigterm_interrupts():
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        with pytest.raises(Terminated):
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGTERM)
                done.append("renamed")          # the held-off signal does not cut the block
        assert done == ["renamed"]
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
        with pytest.raises(KeyboardInterrupt):
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("renamed again")
        assert done == ["renamed", "renamed again"]


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _started(proc: subprocess.Popen) -> None:
    """Wait for the child's 'ready' line (it has entered the block)."""
    assert proc.stdout.readline().strip() == "ready"


@pytest.mark.parametrize("second", [False, True])
def test_a_main_thread_blocked_in_native_code_is_ended_by_the_watchdog(second):
    """os.system is C's system(), which waits for its child without returning to Python on a signal: the handler
    cannot run, and without the watchdog SIGTERM would wait for the 8 s command. The watchdog ends the process
    after the grace period (0.5 s here); a second SIGTERM (a launcher sending one stop twice) does not hurry it."""
    proc = _python("""
        import os
        from genfeat.signals import sigterm_interrupts
        with sigterm_interrupts(grace=0.5):
            print("ready", flush=True)
            os.system("exec sleep 8 > /dev/null 2>&1")  # no process left holding the pipes
        print("not ended")
        """)
    _started(proc)
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    if second:
        time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 143 and "not ended" not in out
    assert 0.4 < time.monotonic() - t0 < 5
    assert err.strip() == "terminated (SIGTERM): the command did not stop within 0.5 s; ended without cleanup"


def test_one_stop_sent_as_two_sigterms_unwinds_once_and_in_full():
    """timeout signals the process and then its group; SLURM and torchrun both signal a rank: the duplicate that
    arrives during the cleanup neither raises again nor ends the process before the cleanup is done."""
    proc = _python("""
        import sys, time
        from genfeat.signals import Terminated, sigterm_interrupts
        def busy(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                pass
        try:
            with sigterm_interrupts(grace=30):
                try:
                    print("ready", flush=True)  # inside the try: the SIGTERM that follows it meets the cleanup
                    busy(20)
                finally:
                    busy(0.6)           # the cleanup, during which the second SIGTERM arrives
                    print("cleaned", flush=True)
        except Terminated:
            print("terminated", flush=True)
            sys.exit(143)
        """)
    _started(proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert (proc.returncode, out.split(), err) == (143, ["cleaned", "terminated"], "")


def test_the_watchdog_waits_for_held_renames():
    """The grace period (0.2 s) ends while renames are held (1 s in native code here): the watchdog waits for them,
    and the SIGTERM held off during them interrupts the command after them."""
    proc = _python("""
        import os, signal
        from genfeat.signals import Terminated, interrupts_held, sigterm_interrupts
        try:
            with sigterm_interrupts(grace=0.2):
                print("ready", flush=True)
                with interrupts_held():
                    os.kill(os.getpid(), signal.SIGTERM)
                    os.system("exec sleep 1")
                    print("renamed", flush=True)
        except Terminated:
            print("unwound", flush=True)
        """)
    _started(proc)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0 and out.split() == ["renamed", "unwound"], err


@pytest.mark.parametrize("host_wakeup_fd", [False, True], ids=["watchdog", "host_wakeup_fd"])
def test_a_forked_child_dies_of_sigterm_and_its_signal_does_not_reach_the_parent(host_wakeup_fd):
    """word2vec's workers are forked inside the block and ended with SIGTERM when one fails: each dies of it (it
    raised Terminated in the child where a host's own wakeup fd left the block without a watchdog), and its signal
    does not make the parent's watchdog end the parent, which goes on to report the failure."""
    host = "r, w = os.pipe(); os.set_blocking(w, False); signal.set_wakeup_fd(w)" if host_wakeup_fd else ""
    proc = _python(f"""
        import multiprocessing, os, signal, time
        from genfeat.signals import sigterm_interrupts
        {host}
        with sigterm_interrupts(grace=0.3):
            print("ready", flush=True)
            child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
            child.start()
            time.sleep(0.2)
            child.terminate()
            child.join()
            time.sleep(1.5)
            print("alive", child.exitcode, flush=True)
        """)
    _started(proc)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip() == f"alive {-signal.SIGTERM}"


def test_a_command_that_unwound_is_not_ended_later_by_its_watchdog():
    """The handler raises at once and the block can end before the watchdog has read the signal's byte: a timer armed
    after that ended the process (a test process calling genfeat's main in-process, 10 s after a SIGTERM test)."""
    proc = _python("""
        import os, signal, time
        from genfeat.signals import Terminated, sigterm_interrupts
        for _ in range(50):
            try:
                with sigterm_interrupts(grace=0.05):
                    os.kill(os.getpid(), signal.SIGTERM)
            except Terminated:
                pass
        time.sleep(0.5)
        print("alive", flush=True)
        """)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "alive", err


def test_a_forked_child_that_outlives_the_block_does_not_keep_its_watchdog():
    """A forked child inherits both ends of the wakeup pipe: it closes them, so the watchdog sees the pipe's end when
    the block ends, even with the child still running."""
    proc = _python("""
        import multiprocessing, threading, time
        from genfeat.signals import sigterm_interrupts
        with sigterm_interrupts():
            print("ready", flush=True)
            child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
            child.start()
        time.sleep(0.5)
        print("watchdog", any(t.name == "genfeat-sigterm-watchdog" for t in threading.enumerate()), flush=True)
        child.terminate()
        child.join()
        """)
    _started(proc)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "watchdog False", err


def test_a_sigterm_held_off_after_a_sigint_is_not_lost():
    """torchrun's Ctrl-C reaches the group (SIGINT), then torchrun sends each rank SIGTERM: both held off by the
    renames, SIGTERM is delivered first (a SIGINT first raised and the SIGTERM was never delivered)."""
    with sigterm_interrupts():
        with pytest.raises(Terminated):
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
    proc = _python("""
        import os, signal
        from genfeat.signals import interrupts_held
        print("ready", flush=True)
        try:
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
        except KeyboardInterrupt:
            print("interrupted, not ended", flush=True)
        """)
    _started(proc)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == -signal.SIGTERM and out == "", "SIGTERM at its default action ends the process"


def test_a_full_stderr_does_not_keep_the_watchdog_from_ending_the_process():
    """stderr a pipe that is full and not read: the watchdog's line cannot be written, and the process ends all the
    same (a blocking write kept it alive for good)."""
    proc = _python("""
        import fcntl, os, signal, threading
        from genfeat.signals import sigterm_interrupts
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            while True:
                os.write(w, b"x" * 4096)
        except BlockingIOError:
            pass
        os.set_blocking(w, True)
        os.dup2(w, 2)
        with sigterm_interrupts(grace=0.3):
            print("ready", flush=True)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            os.system("exec sleep 8 > /dev/null 2>&1")
        print("not ended", flush=True)
        """)
    _started(proc)
    t0 = time.monotonic()
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 143 and out == "" and time.monotonic() - t0 < 5

