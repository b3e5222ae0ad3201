"""SIGTERM as an interrupt inside ``sigterm_interrupts`` (what ``genfeat`` runs its commands in), and the renames
``interrupts_held`` keeps from either signal. The commands' own exit on SIGTERM: tests/test_cli_run.py; forked
word2vec workers: tests/test_word2vec.py."""

import os
import signal

import pytest

from genfeat.signals import Terminated, interrupts_held, sigterm_interrupts


def test_sigterm_raises_terminated_in_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
    assert issubclass(Terminated, KeyboardInterrupt), "the cleanup written for Ctrl-C runs for it too"
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_ignored_sigterm_stays_ignored():
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


def test_interrupts_held_keeps_both_signals_off_the_renames():
    with sigterm_interrupts():
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
        with pytest.raises(Terminated):   # held off no longer
            os.kill(os.getpid(), signal.SIGTERM)
