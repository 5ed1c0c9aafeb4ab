"""Argument types shared by the jobs' command lines: bad values fail at parse time with a clear message."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import NoReturn

INT64_MAX = 2**63 - 1
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error (`prog: error: ...`, exit 2); `--help` shows the usage."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def integer_at_least(minimum: int, maximum: int = INT64_MAX) -> Callable[[str], int]:
    """An integer in [minimum, maximum] (by default up to the largest 64-bit integer)."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be an integer <= {maximum}, got {text}")
        return value

    return parse


def number_above(minimum: float, strict: bool) -> Callable[[str], float]:
    """A float >= minimum (> minimum when `strict`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be a number {'>' if strict else '>='} {minimum:g}, got {text}")
        return value

    return parse


def table_name(text: str) -> str:
    """A table name in the configured namespace: letters, digits and underscores, not a path."""
    if not _TABLE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a table name (letters, digits and _; e.g. history)")
    return text


def namespace_name(text: str) -> str:
    """A catalog namespace: letters, digits and underscores, not a path or a dotted name."""
    if not _TABLE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace name (letters, digits and _; e.g. bench)")
    return text
