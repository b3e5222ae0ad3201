"""``genfeat COMMAND --help``: every option with a default worth reading shows it, and none shows a default that
says nothing (None, a flag's False)."""

import argparse

import pytest

from genfeat.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(command words, parser) of every (sub)command under ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


def _help(capsys, *command: str) -> str:
    """The help text of ``genfeat COMMAND --help``, its lines joined (argparse wraps them at the terminal width)."""
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command, shown", [
    (["run"], ["--seeds SEEDS number of seeds (runs seed, seed+1, ...) (default: 1)", "--seed SEED first seed (default: 0)"]),
    (["evaluate"], ["--threads THREADS torch threads (0: torch's default) (default: 0)",
                    "--device DEVICE cpu, cuda, cuda:N or auto (default: cpu)"]),
    (["generate"], ["(default: 40)", "--temperature TEMPERATURE", "(default: 1.0)"]),
    (["recl"], ["(default: 0.1 0.5 1.0)", "directory for the PNG plots and table (default: runs/recl)"]),
    (["export"], ["(default: hf)"]),
])
def test_help_shows_the_defaults(capsys, command, shown):
    text = _help(capsys, *command)
    for needle in shown:
        assert needle in text, text


def test_every_option_with_a_default_shows_it_and_none_shows_an_empty_one():
    checked = 0
    for command, parser in _commands(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            text = " ".join(formatter._format_action(action).split())
            for empty in ("default: None", "default: False", "default: True", "default: )"):
                assert empty not in text, (command, text)
            if action.default not in (None, "", argparse.SUPPRESS) and not isinstance(action.default, bool):
                assert "(default: " in text, (command, text)
                checked += 1
    assert checked > 20, "the walk found the commands' options"
