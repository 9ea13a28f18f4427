"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
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


@dataclass(frozen=True)
class Run:
    """One finished run of a whole command; `cpu_seconds`: user + system time of the command
    and every descendant it waited for."""

    seconds: float
    max_rss_kb: int
    returncode: int
    stdout: str
    stderr: str
    cpu_seconds: float


def timed_run(argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> Run:
    """Run to the end; wall time around spawn and reap, the child's own peak RSS and the
    processor time of its process tree (wait4)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=None if env is None else dict(env), cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Run(seconds, int(usage.ru_maxrss),  # kilobytes on Linux
                   proc.returncode, out.read().decode("utf-8", "replace"),
                   err.read().decode("utf-8", "replace"),
                   usage.ru_utime + usage.ru_stime)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_SECONDS = 0.05


def busy_ticks() -> int:
    """Processor time all cores of the machine have spent busy since boot, in clock ticks
    (/proc/stat: everything but idle and iowait)."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    idle, iowait = ticks[3], ticks[4]
    return sum(ticks[:8]) - idle - iowait  # guest time is already counted in user


@dataclass
class CoreUse:
    """Busy clock ticks of the whole machine, sampled while a command runs (`sampled`)."""

    samples: list[tuple[float, int]]  # (time.time(), busy_ticks())

    def busy_cores(self, start: float, end: float) -> float | None:
        """How many cores were busy on average between two time.time() moments, by the
        samples around them; None when they are too close to tell."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        if not before or not after or after[0][0] - before[-1][0] < 4 * SAMPLE_SECONDS:
            return None
        (t0, b0), (t1, b1) = before[-1], after[0]
        return (b1 - b0) / CLOCK_TICKS / (t1 - t0)


@contextmanager
def sampled() -> Iterator[CoreUse]:
    """Sample busy_ticks() in a thread for the duration of the block."""
    use = CoreUse([(time.time(), busy_ticks())])
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_SECONDS):
            use.samples.append((time.time(), busy_ticks()))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield use
    finally:
        done.set()
        thread.join()
        use.samples.append((time.time(), busy_ticks()))
