"""A generated set built on a cluster with `eb --robot --job`: the command that submits it, and
what became of its jobs.

Submitting. EasyBuild's `--job` fetches every source on the submitting host (compute nodes need
no network), then submits one batch job per easyconfig that is not installed yet, each waiting
(afterok) for the jobs of its dependencies; a job that fails takes down only the jobs that
depend on it. EasyBuild must see the whole set in one command: with `--easystack` it resolves
and submits each entry on its own, so a dependency shared by two entries (PyTorch under
torchvision and torchaudio) is submitted once per entry, and an entry whose dependency is an
earlier entry is not found at all. `submit_command` lists the easystack's easyconfigs instead.

Status. The Slurm backend names each job after its easyconfig (name-version: the file name
without `.eb`) and writes the job's output to `<--job-output-dir>/<name>-<jobid>.out`.
`status(folder, queue)` reads those files, EasyBuild's submission output saved beside them
(`submitted.log`: every job submitted, with its id) and the queue, and gives each job one
state with the reason and the log to read. Only regular files are read (a FIFO, a folder or a
symlink loop named like an output file is reported as that job's own line, unknown, and the
rest of the report goes on), and of each at most its last MAX_READ_BYTES: EasyBuild's verdict
is at the end.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torchstack import _files
from torchstack._files import MAX_EASYCONFIG, read_text
from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)

SUBMISSION_LOG = "submitted.log"
MAX_READ_BYTES = 4 * 1024 * 1024  # of a job's output and of submitted.log: the last ones
DONE, RUNNING, PENDING, FAILED, UNKNOWN = "done", "running", "pending", "failed", "unknown"
STATES = (DONE, RUNNING, PENDING, FAILED, UNKNOWN)
_WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_ACTIVE = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING",
           "STAGE_OUT"}
_OUTPUT_FILE = re.compile(r"^(?P<name>.+)-(?P<id>\d+)\.out$")
_SUBMITTED = re.compile(r"List of submitted jobs \(\d+\): (?P<jobs>.*)$", re.MULTILINE)
_SUBMITTED_JOB = re.compile(r"^(?P<name>\S+) \((?P<module>[^()]*)\): (?P<id>\d+)$")
_SUCCEEDED = re.compile(r"^== Build succeeded for (\d+) out of (\d+)", re.MULTILINE)
_FAILED = re.compile(r"^== FAILED: Installation ended unsuccessfully: (.*?)(?: \(took [^)]*\))?$",
                     re.MULTILINE)
_ERROR = re.compile(r"^ERROR: (.+)$", re.MULTILINE)
_KILLED = re.compile(r"^slurmstepd: error: \*\*\* (.+?) \*\*\*", re.MULTILINE)
_LOGS = re.compile(r"^== Results of the build can be found in the log file\(s\) (.+)$",
                   re.MULTILINE)
_SQUEUE_FIELDS = ("JobID", "Name", "State", "Reason", "StdOut")


class JobsError(TorchstackError):
    """A status folder or easystack that holds nothing to submit or report on."""


class UnreadableFile(JobsError):
    """A job's output or submitted.log that is no regular file or cannot be read."""


@dataclass(frozen=True)
class QueueEntry:
    """One job as the batch system lists it."""

    job_id: str
    name: str
    state: str  # Slurm's: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    reason: str  # Slurm's: Dependency, Resources, DependencyNeverSatisfied, None, ...
    stdout: str  # the output file pattern, e.g. /site/jobs/PyTorch-2.9.1-whl-%j.out


class Queue(Protocol):
    """What the status needs of a batch system: the jobs it knows."""

    def entries(self) -> list[QueueEntry]: ...


@dataclass(frozen=True)
class Verdict:
    """What EasyBuild's output in a job says: success True/False, None when it says nothing."""

    success: bool | None
    reason: str
    log: str | None


@dataclass(frozen=True)
class Job:
    """One submitted easyconfig and what became of it."""

    name: str  # the easyconfig's name-version, e.g. PyTorch-2.9.1-foss-2025a-whl
    job_id: str
    state: str  # one of STATES
    reason: str
    log: str | None  # the log to read: EasyBuild's build log, else the job's output
    module: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "job_id": self.job_id, "state": self.state,
                "reason": self.reason, "log": self.log, "module": self.module}


@dataclass(frozen=True)
class JobsStatus:
    """The jobs of one submitted set, in submission order."""

    folder: str
    jobs: tuple[Job, ...]
    notes: tuple[str, ...] = ()

    @property
    def all_done(self) -> bool:
        return bool(self.jobs) and all(job.state == DONE for job in self.jobs)

    def counts(self) -> dict[str, int]:
        return {state: n for state in STATES
                if (n := sum(job.state == state for job in self.jobs))}

    def to_json(self) -> dict[str, object]:
        return {"folder": self.folder, "all_done": self.all_done, "counts": self.counts(),
                "jobs": [job.to_json() for job in self.jobs], "notes": list(self.notes)}


# -- submitting -------------------------------------------------------------------------------

def jobs_folder(easystack: str | Path) -> str:
    """The job output folder for an easystack: easystack-foss-2025a-cpu-x86_64.yaml ->
    jobs-foss-2025a-cpu-x86_64."""
    stem = Path(easystack).name.rsplit(".", 1)[0]
    return "jobs-" + stem.removeprefix("easystack-")


def submit_command(easystack: str | Path, easyconfigs: Sequence[str],
                   backend: str = "Slurm") -> str:
    """The shell command, run in the easystack's folder, that submits its easyconfigs as jobs
    and saves EasyBuild's submission output where `status` reads it."""
    if not easyconfigs:
        raise JobsError(f"{str(easystack)!r} lists no easyconfig")
    folder = shlex.quote(jobs_folder(easystack))
    files = " ".join(shlex.quote(name) for name in easyconfigs)
    return (f'mkdir -p {folder} && eb --robot="$PWD" --job --job-backend={shlex.quote(backend)} '
            f'--job-output-dir="$PWD/"{folder} '
            f'--include-easyblocks="$(torchstack easyblocks-path)/*.py" '
            f'--hooks="$(torchstack hooks-path)" {files} 2>&1 | tee {folder}/{SUBMISSION_LOG}')


def easystack_entries(easystack: Path) -> list[str]:
    """The easyconfig files of an easystack, in order, read with EasyBuild's own parser.

    EasyBuild's parser opens the path itself and would wait on a FIFO or read /dev/zero for
    ever: it gets a private copy of the text, read bounded from a regular file."""
    from easybuild.framework.easystack import parse_easystack
    from easybuild.tools.build_log import EasyBuildError

    try:
        text = read_text(easystack, MAX_EASYCONFIG, JobsError)
    except OSError as exc:
        raise JobsError(f"{str(easystack)!r} is not a readable easystack: "
                        f"{exc.strerror or exc}") from exc
    with tempfile.TemporaryDirectory(prefix="torchstack-easystack-") as private:
        copy = Path(private) / easystack.name
        copy.write_text(text, encoding="utf-8")
        try:
            parsed = parse_easystack(str(copy))
        except EasyBuildError as exc:
            why = str(getattr(exc, "msg", exc)).replace(str(copy), str(easystack))
            raise JobsError(f"{str(easystack)!r} is not a readable easystack: {why}") from exc
    return [str(path) for path, _options in parsed.ec_opt_tuples]


# -- reading what the jobs left -----------------------------------------------------------------

def parse_output(text: str) -> Verdict:
    """EasyBuild's verdict in a job's output, with the build log it names."""
    logs = _LOGS.findall(text)
    build_log = logs[-1].split(", ")[0].strip() if logs else None
    succeeded = _SUCCEEDED.findall(text)
    if succeeded and succeeded[-1][0] == succeeded[-1][1]:
        return Verdict(True, "", build_log)
    for pattern in (_FAILED, _ERROR, _KILLED):
        found = pattern.findall(text)
        if found:
            return Verdict(False, found[-1].strip(), build_log)
    if succeeded:
        done, total = succeeded[-1]
        return Verdict(False, f"build succeeded for {done} out of {total}", build_log)
    return Verdict(None, "", build_log)


def parse_submission(text: str) -> list[tuple[str, str, str]]:
    """(name, module, job id) of every job in EasyBuild's last "List of submitted jobs" line."""
    found = _SUBMITTED.findall(text)
    if not found:
        return []
    jobs = []
    for item in found[-1].split("; "):
        match = _SUBMITTED_JOB.match(item.strip())
        if match is None:
            raise JobsError(f"unexpected entry {item!r} in EasyBuild's list of submitted jobs")
        jobs.append((match["name"], match["module"], match["id"]))
    return jobs


def parse_squeue(text: str) -> list[QueueEntry]:
    """Lines of `squeue -h -O JobID:|,Name:|,State:|,Reason:|,StdOut:|`."""
    entries = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < len(_SQUEUE_FIELDS) or not cells[0].isdigit():
            continue
        entries.append(QueueEntry(*cells[:len(_SQUEUE_FIELDS)]))
    return entries


class Squeue:
    """The Slurm queue through `squeue` (Slurm keeps finished jobs for MinJobAge, 300 s by
    default; after that only the output files tell)."""

    def __init__(self, command: str = "squeue") -> None:
        self.command = command

    def entries(self) -> list[QueueEntry]:
        fields = ",".join(f"{name}:|" for name in _SQUEUE_FIELDS)
        try:
            result = subprocess.run([self.command, "-h", "-t", "all", "-O", fields],
                                    capture_output=True, check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise JobsError(f"{self.command!r} cannot run: {exc}") from exc
        if result.returncode != 0:
            stderr = printable(os.fsdecode(result.stderr))
            last = (stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
            raise JobsError(f"{self.command!r} failed: {last!r}")
        # squeue prints names and paths as bytes (a user's path may be Latin-1): decoded as
        # Python decodes paths, so that a job's output folder compares equal to the folder
        return parse_squeue(os.fsdecode(result.stdout))


def default_queue() -> Queue | None:
    """Slurm's queue when `squeue` is installed, else None (the output files alone tell)."""
    return Squeue() if shutil.which("squeue") else None


def status(folder: Path, queue: Queue | None) -> JobsStatus:
    """What became of the jobs whose output goes to `folder` (the --job-output-dir)."""
    if not folder.is_dir():
        raise JobsError(f"{str(folder)!r} is not a folder")
    folder = folder.resolve()
    notes: list[str] = []
    submitted = _submission(folder, notes)
    outputs = _outputs(folder)
    entries = _queue_entries(folder, queue, notes)
    seen = {(name, job_id) for name, _, job_id in submitted} | set(outputs)
    seen |= set(entries or {})
    if not seen and not os.path.lexists(folder / SUBMISSION_LOG):
        raise JobsError(f"{str(folder)!r}: no job output (NAME-JOBID.out), no "
                        f"{SUBMISSION_LOG} and no job of the queue writes there")
    current = _current_jobs(submitted, seen)
    modules = {name: module for name, module, _ in submitted}
    jobs = tuple(_shown(_job(name, job_id, outputs.get((name, job_id)), entries,
                             modules.get(name)))
                 for name, job_id in current)
    return JobsStatus(printable(str(folder)), jobs, tuple(printable(n) for n in notes))


def printable(text: str) -> str:
    """`text` with the bytes that were no UTF-8 (kept as surrogates, as Python decodes paths
    and squeue's output) shown as U+FFFD: what can be printed and written as JSON."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _shown(job: Job) -> Job:
    """A job with every text printable (a name or path of the queue, a path of the folder)."""
    return Job(printable(job.name), job.job_id, job.state, printable(job.reason),
               None if job.log is None else printable(job.log),
               None if job.module is None else printable(job.module))


def _submission(folder: Path, notes: list[str]) -> list[tuple[str, str, str]]:
    path = folder / SUBMISSION_LOG
    if not os.path.lexists(path):
        return []
    try:
        text = read_tail(path)
    except UnreadableFile as exc:
        notes.append(f"{SUBMISSION_LOG}: {exc}")
        return []
    submitted = parse_submission(text)
    if not submitted:
        errors = _ERROR.findall(text)
        notes.append(f"{SUBMISSION_LOG}: no job submitted"
                     + (f": {errors[-1].strip()}" if errors else " (yet)"))
    return submitted


def read_tail(path: Path, limit: int = MAX_READ_BYTES) -> str:
    """The text of a job's output, its last `limit` bytes when it is larger; `UnreadableFile`
    for anything but a regular file (a FIFO or a device is never read)."""
    try:
        return _files.read_tail(path, limit, UnreadableFile)
    except IsADirectoryError:
        raise UnreadableFile(f"{str(path)!r} is a folder, not a regular file") from None
    except OSError as exc:
        raise UnreadableFile(f"{str(path)!r} cannot be read: {exc.strerror or exc}") from exc


def _outputs(folder: Path) -> dict[tuple[str, str], Path]:
    found = {}
    for path in folder.glob("*.out"):
        match = _OUTPUT_FILE.match(path.name)
        if match is not None:
            found[(match["name"], match["id"])] = path
    return found


def _queue_entries(folder: Path, queue: Queue | None,
                   notes: list[str]) -> dict[tuple[str, str], QueueEntry] | None:
    """The queue's jobs that write their output into `folder`, by (name, job id); None when
    the queue cannot be asked."""
    if queue is None:
        notes.append("no batch queue asked: states from the output files only")
        return None
    try:
        entries = queue.entries()
    except JobsError as exc:
        notes.append(f"{exc}: states from the output files only")
        return None
    return {(e.name, e.job_id): e for e in entries
            if e.stdout and Path(e.stdout).parent.resolve() == folder}


def _current_jobs(submitted: list[tuple[str, str, str]],
                  seen: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """(name, job id) of the current job of each easyconfig, in submission order: the one of
    the last submission, else the newest (a resubmission replaces an earlier job)."""
    current = {name: job_id for name, _, job_id in submitted}
    submitted_names = set(current)
    for name, job_id in sorted(seen, key=lambda pair: int(pair[1])):
        if name not in submitted_names:
            current[name] = job_id
    return list(current.items())


def _job(name: str, job_id: str, output: Path | None,
         entries: dict[tuple[str, str], QueueEntry] | None, module: str | None) -> Job:
    """One job's state: the queue's word while it waits or runs, then EasyBuild's verdict."""
    entry = entries.get((name, job_id)) if entries is not None else None
    out_file = str(output) if output is not None else None
    if entry is not None and entry.reason == "DependencyNeverSatisfied":  # pending or cancelled
        return Job(name, job_id, FAILED, "not run: a job it depends on failed", None, module)
    if entry is not None and entry.state in _WAITING:
        return Job(name, job_id, PENDING, f"waiting ({entry.reason})", None, module)
    if entry is not None and entry.state in _ACTIVE:
        return Job(name, job_id, RUNNING, "", out_file, module)
    try:
        verdict = parse_output(read_tail(output)) if output is not None else None
    except UnreadableFile as exc:  # its own line; the other jobs are reported as usual
        return Job(name, job_id, UNKNOWN, f"its output cannot be read: {exc}", None, module)
    if verdict is not None and verdict.success is not None:
        state = DONE if verdict.success else FAILED
        return Job(name, job_id, state, verdict.reason, verdict.log or out_file, module)
    if entry is not None:
        reason = "ended without EasyBuild's verdict" if entry.state == "COMPLETED" \
            else f"{entry.state} ({entry.reason})"
        return Job(name, job_id, FAILED, reason, out_file, module)
    if output is not None and entries is not None:  # no longer queued: it ended
        return Job(name, job_id, FAILED, "ended without EasyBuild's verdict", out_file, module)
    reason = "no verdict in its output yet" if output is not None \
        else "no output and not in the queue: never ran (cancelled?)"
    return Job(name, job_id, UNKNOWN, reason, out_file, module)
