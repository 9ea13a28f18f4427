"""`torchstack jobs STATUS_DIR [--json]`: what became of a set submitted with `eb --job`.

STATUS_DIR is the --job-output-dir of the submission (`jobs-<easystack>` in the command that
`torchstack generate --print-build-command` prints). One line a job: its state (done, running,
pending, failed, unknown), name and job id, the reason, and the log to read. Exit 0 only when
every job is done; 1 otherwise. An output file that is no regular file (a FIFO, a folder, a
symlink loop) makes its job unknown, with the reason, and the report goes on.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchstack.generator.jobs import JobsStatus

NAME = "jobs"
HELP = ("which easyconfigs of a set submitted with `eb --job` are done, running, pending or "
        "failed, with the log to read (exit 0 only when all are done)")
_INDENT = " " * 9


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", metavar="STATUS_DIR",
                        help="the --job-output-dir of the submission")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--no-queue", action="store_true",
                        help="do not ask squeue; read the output files only")


def execute(args: argparse.Namespace) -> int:
    import json  # here, not above: building the parser stays cheap for every subcommand
    from pathlib import Path

    from torchstack.generator.jobs import default_queue, status

    found = status(Path(args.folder), None if args.no_queue else default_queue())
    print(json.dumps(found.to_json(), indent=2) if args.json else describe(found))
    return 0 if found.all_done else 1


def describe(found: JobsStatus) -> str:
    """One line a job (state, name, job id, reason), its log below, then the counts."""
    lines = []
    for job in found.jobs:
        reason = f": {job.reason}" if job.reason else ""
        lines.append(f"{job.state:<8} {job.name} (job {job.job_id}){reason}")
        if job.log:
            lines.append(f"{_INDENT}log: {job.log}")
    counts = ", ".join(f"{n} {state}" for state, n in found.counts().items())
    total = len(found.jobs)
    lines.append(f"{total} job{'' if total == 1 else 's'}" + (f": {counts}" if counts else ""))
    lines += [f"note: {note}" for note in found.notes]
    return "\n".join(lines)
