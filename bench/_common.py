"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import argparse
import sys


def log(message: str) -> None:
    """Progress on stderr, so that stdout holds only the figures."""
    print(message, file=sys.stderr, flush=True)


def positive(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value
