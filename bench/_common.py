"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any


def log(message: str) -> None:
    """Progress on stderr, so that stdout holds only the figures."""
    print(message, file=sys.stderr, flush=True)


def positive(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class RunStats:
    """Median and minimum seconds and peak RSS over `self.runs` (each with `.seconds`, and
    `.max_rss_kb` for peak_mb): the figures every benchmark's series prints."""

    runs: list[Any]

    @property
    def median(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def minimum(self) -> float:
        return min(r.seconds for r in self.runs)

    @property
    def peak_mb(self) -> float:
        return max(r.max_rss_kb for r in self.runs) / 1024.0
