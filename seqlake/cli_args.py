"""Argument types shared by the jobs' command lines: bad values fail at parse time with a clear message."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def integer_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text}")
        return value

    return parse


def number_above(minimum: float, strict: bool) -> Callable[[str], float]:
    """A float >= minimum (> minimum when `strict`)."""

    def parse(text: str) -> float:
        value = float(text)
        if value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be a number {'>' if strict else '>='} {minimum:g}, got {text}")
        return value

    return parse
