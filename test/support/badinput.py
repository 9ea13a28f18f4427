"""Helpers of the bad-input property tests: the CLI run in-process, a guard against hangs.

`run_cli` captures with redirect_stdout/redirect_stderr rather than pytest's capsys, which is
function-scoped and so cannot serve hypothesis tests; `deadline` turns a hang (a FIFO opened
for reading, a hash chain that loops) into a test failure, and reading /dev/zero to its end
into a MemoryError instead of the OOM killer: it caps the address space for the block.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
from collections.abc import Iterator
from types import FrameType

from torchstack.cli import main

PREFIX = "torchstack: error: "


class Hang(BaseException):
    """Raised by `deadline` in the code under test; a BaseException so no `except` eats it."""


@contextlib.contextmanager
def deadline(seconds: float, memory: int = 1 << 30) -> Iterator[None]:
    """Fail with `Hang` when the block runs longer than `seconds` (SIGALRM, main thread), and
    with MemoryError when it grows the address space by more than `memory` bytes."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still running after {seconds} s")

    with open("/proc/self/statm", encoding="ascii") as statm:
        in_use = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limits = resource.getrlimit(resource.RLIMIT_AS)
    cap = in_use + memory
    if limits[1] != resource.RLIM_INFINITY:
        cap = min(cap, limits[1])
    previous = signal.signal(signal.SIGALRM, expire)
    resource.setrlimit(resource.RLIMIT_AS, (cap, limits[1]))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, limits)
        signal.signal(signal.SIGALRM, previous)


def run_cli(argv: list[str], seconds: float = 20) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `torchstack.cli.main(argv)`, within `seconds`."""
    out, err = io.StringIO(), io.StringIO()
    with deadline(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else -1
    return code, out.getvalue(), err.getvalue()


def assert_one_error(code: int, err: str, *fragments: str) -> str:
    """Exit 2 and one stderr line `torchstack: error: ...` naming every fragment; the line."""
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(PREFIX), err
    assert "Traceback" not in err
    assert all(f in lines[0] for f in fragments), (fragments, err)
    return lines[0]
