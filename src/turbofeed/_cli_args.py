"""The CLI's argument plumbing: one-line usage errors, help that shows every default, and
argument types that refuse nonsense numbers before any work starts.

Kept apart from ``cli.py`` so that file holds only what each command does.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn


def one_line(message: str) -> str:
    """``message`` with its line breaks folded, so every error is one grep-able line."""
    return re.sub(r"\s*\n\s*", " ", message.strip())


def fail(message: str) -> None:
    """Print ``turbofeed: error: <message>`` on stderr: the one shape of every CLI error."""
    print(f"turbofeed: error: {one_line(message)}", file=sys.stderr)


def describe(exc: BaseException) -> str:
    """What went wrong, for the user: an OSError as ``no such file or directory: PATH``
    (the shape DatasetError uses), anything else as its message."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror[:1].lower()}{exc.strerror[1:]}: {exc.filename}"
    return str(exc) or type(exc).__name__


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, like every other CLI error.

    argparse prints the usage block and then ``turbofeed bench: error: ...``; here the
    message says which ``--help`` to read instead. Sub-command parsers are built from
    this class too (argparse uses the parent's class), so they behave the same.
    """

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see '{self.prog} --help')")
        self.exit(2)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to every option, unless its help already states the
    default in words (for defaults such as None or the CPU count, a value alone would
    mislead); a required option says ``(required)`` instead."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required and action.option_strings:
            return text + " (required)"
        if "default" in text:
            return text
        return super()._get_help_string(action) or ""


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number ``>= low``; argparse names the option in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"wants a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


positive = int_at_least(1)
non_negative = int_at_least(0)


def existing_folder(text: str) -> str:
    """An argparse ``type``: a folder that exists, checked before anything is written."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such folder: {text}")
    return text


def name_value(text: str) -> tuple[str, str]:
    """An argparse ``type``: ``NAME=VALUE`` split in two (``-o images=pixels``)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"wants NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def plot_file(text: str) -> str:
    """An argparse ``type``: a picture file to write (``.png``, ``.svg`` or ``.pdf``) in a
    folder that exists, checked before the benchmark runs."""
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"no such folder: {folder}")
    if not text.lower().endswith(PLOT_SUFFIXES):
        raise argparse.ArgumentTypeError(f"wants a file ending in {', '.join(PLOT_SUFFIXES)}, got {text!r}")
    return text
