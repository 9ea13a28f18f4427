"""Ending a command that EasyBuild's run_shell_cmd runs, with every process it started.

run_shell_cmd hands out no process handle: it returns once the command has ended. A command
that background.BackgroundWork runs in a thread is found instead as this process's child with
the command's arguments, and ended together with everything it started: the byte-compile's
worker processes would otherwise wait for work from a parent that is gone, holding the output
pipe that run_shell_cmd reads to its end. The command runs as the leader of a process group of
its own (`in_own_group`), and the whole group is signalled: a process it forks while it is being
signalled, or whose parent has ended (reparented, no longer its descendant), is in the group
all the same, where a snapshot of /proc cannot see it. Its descendants as /proc shows them are
signalled too, for a process that left the group or where setsid is missing. Read from /proc,
as on Linux, where EasyBuild runs; where a command's process cannot be found there, it is not
signalled and ends in its own time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator, Sequence

from torchstack import _files

PROC = "/proc"
MAX_PROC_FILE = 1 << 20  # /proc/PID/stat is a line; cmdline the arguments (a few kB here)


def in_own_group(argv: Sequence[str]) -> list[str]:
    """`argv` run by util-linux's setsid as the leader of a session and process group of its own
    (run_shell_cmd has no way to ask for one); `argv` as it is where setsid is missing. The
    command's arguments stay at the end of its command line, where `children_running` looks.
    --wait: should setsid have to fork (its caller leads a group), it waits for the command."""
    setsid = shutil.which("setsid")
    return [setsid, "--wait", *argv] if setsid else list(argv)


def _read(pid: int, name: str) -> bytes | None:
    """/proc/PID/NAME, or None when the process has gone meanwhile."""
    try:
        return _files.read_regular(os.path.join(PROC, str(pid), name), limit=MAX_PROC_FILE)
    except (OSError, _files.FileKindError):
        return None


def _after_comm(stat_line: bytes) -> list[bytes]:
    # `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses, the last ')' ends it
    return stat_line.rpartition(b")")[2].split()


def _parent_of(stat_line: bytes) -> int:
    return int(_after_comm(stat_line)[1])


def parents() -> dict[int, int]:
    """Every running process and its parent, as /proc shows them now."""
    found: dict[int, int] = {}
    try:
        entries = list(os.scandir(PROC))
    except OSError:  # no /proc: nothing found, nothing signalled
        return found
    for entry in entries:
        if entry.name.isdigit():
            line = _read(int(entry.name), "stat")
            if line:
                found[int(entry.name)] = _parent_of(line)
    return found


def descendants(pid: int, parent_of: dict[int, int]) -> list[int]:
    """The processes below `pid`, children before their own children."""
    below, level = [], [pid]
    while level:
        level = [child for child, parent in parent_of.items() if parent in level]
        below.extend(level)
    return below


def children_running(argv: Sequence[str], parent_of: dict[int, int]) -> Iterator[int]:
    """This process's children running `argv`: those whose arguments end with its arguments
    after the program (a program run through a `#!` line shows its interpreter first)."""
    tail = [os.fsencode(arg) for arg in (argv[1:] or argv)]
    for pid, parent in parent_of.items():
        if parent == os.getpid():
            cmdline = _read(pid, "cmdline")
            if cmdline and cmdline.split(b"\0")[:-1][-len(tail):] == tail:
                yield pid


def end_command(argv: Sequence[str], sig: int = signal.SIGTERM) -> list[int]:
    """Send `sig` to each child running `argv`, to its process group and to its descendants;
    the processes signalled by number (none when the command has not started yet or has
    ended; the group's other members are not listed)."""
    parent_of = parents()
    signalled = []
    for pid in list(children_running(argv, parent_of)):
        _signal_group(pid, sig)
        for target in [pid, *descendants(pid, parent_of)]:
            try:
                os.kill(target, sig)
            except ProcessLookupError:  # ended meanwhile
                continue
            signalled.append(target)
    return signalled


def _signal_group(pid: int, sig: int) -> None:
    """`sig` to the process group that `pid` leads, if it leads one yet (setsid may not have
    run). A group's number is its leader's, and is not given to another process while the group
    has members, so this reaches our child's group or none. The kernel delivers it to every
    member at once, a fork under way included."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # none (yet), not ours
        os.killpg(pid, sig)


def running(pids: Sequence[int]) -> list[int]:
    """Those of `pids` that have not ended: a zombie has (only its parent's wait is left)."""
    alive = []
    for pid in pids:
        line = _read(pid, "stat")
        if line and _after_comm(line)[0] != b"Z":
            alive.append(pid)
    return alive
