"""Argument types shared by subcommands."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A count given on the command line: 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)
