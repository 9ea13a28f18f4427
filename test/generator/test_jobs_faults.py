"""`torchstack jobs` on job folders with entries it cannot read: no hang, no abort.

A job folder as test_cluster_build writes it (submitted.log with three jobs, PyTorch's output
with EasyBuild's success), plus torchvision's output `torchvision-0.28.0-whl-12.out` that is
no regular file: a FIFO, a folder, a symlink loop, a dangling symlink, a symlink to /dev/zero,
a socket. Each is reported as the line of its own job (unknown, naming the file and what it
is) and the rest of the report goes on; the exit status is 1. submitted.log may be broken the
same way. The command runs as a process of its own under a timeout: a FIFO must not hang it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.joblogs import CHECKSUM_FAILED, SUBMISSION, SUCCEEDED

from torchstack.generator import jobs

TORCH, VISION, AUDIO = "PyTorch-2.13.0-whl", "torchvision-0.28.0-whl", "torchaudio-2.13.0-whl"


def run_jobs(folder: Path, *options: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "torchstack", "jobs", str(folder), "--no-queue",
                           *options], capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


def _socket(path: Path) -> None:
    server, here = socket.socket(socket.AF_UNIX), os.getcwd()
    os.chdir(path.parent)  # a relative name: the full path may be too long for AF_UNIX
    try:
        server.bind(path.name)
    finally:
        os.chdir(here)
        server.close()


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "inside.out").write_text(SUCCEEDED)


BROKEN: dict[str, tuple[Callable[[Path], None], str]] = {  # how, and what the report says
    "fifo": (os.mkfifo, "is a FIFO, not a regular file"),
    "folder": (_folder, "is a folder, not a regular file"),
    "symlink-loop": (lambda p: p.symlink_to(p.name), "is a symlink loop"),
    "dangling-symlink": (lambda p: p.symlink_to("gone.out"), "is a dangling symlink"),
    "dev-zero": (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    "socket": (_socket, "is a socket, not a regular file"),
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / jobs.SUBMISSION_LOG).write_text(SUBMISSION)
    (tmp_path / f"{TORCH}-11.out").write_text(SUCCEEDED)
    return tmp_path


class TestUnreadableOutput:
    @pytest.mark.parametrize("kind", list(BROKEN))
    def test_own_line_and_the_rest_goes_on(self, folder: Path, kind: str) -> None:
        make, what = BROKEN[kind]
        entry = folder / f"{VISION}-12.out"
        make(entry)
        code, out, err = run_jobs(folder)
        assert (code, err) == (1, ""), out + err
        lines = out.splitlines()
        assert lines[0] == f"done     {TORCH} (job 11)"
        assert lines[2] == (f"unknown  {VISION} (job 12): its output cannot be read: "
                            f"{str(entry)!r} {what}")
        assert lines[3].startswith(f"unknown  {AUDIO} (job 13): no output")
        assert lines[4] == "3 jobs: 1 done, 2 unknown"

    @pytest.mark.parametrize("kind", list(BROKEN))
    def test_json(self, folder: Path, kind: str) -> None:
        make, what = BROKEN[kind]
        make(folder / f"{VISION}-12.out")
        code, out, _ = run_jobs(folder, "--json")
        found = {job["name"]: job for job in json.loads(out)["jobs"]}
        assert code == 1
        assert found[TORCH]["state"] == "done"
        assert found[VISION]["state"] == "unknown" and what in found[VISION]["reason"]

    def test_all_kinds_at_once(self, tmp_path: Path) -> None:
        # no submitted.log: every entry named like an output is a job of its own
        (tmp_path / f"{TORCH}-1.out").write_text(SUCCEEDED)
        for i, (make, _) in enumerate(BROKEN.values(), 2):
            make(tmp_path / f"broken{i}-1.0-{i}.out")
        code, out, _ = run_jobs(tmp_path)
        assert code == 1
        for i, (_, what) in enumerate(BROKEN.values(), 2):
            assert f"unknown  broken{i}-1.0 (job {i}): its output cannot be read: " in out
            assert what in out
        assert f"done     {TORCH} (job 1)" in out
        assert f"\n{len(BROKEN) + 1} jobs: 1 done, {len(BROKEN)} unknown\n" in out

    def test_large_output_read_from_its_end(self, folder: Path) -> None:
        # EasyBuild's verdict ends the output: the last MAX_READ_BYTES are enough
        noise = "== installing... " + "x" * 100 + "\n"
        big = noise * (2 * jobs.MAX_READ_BYTES // len(noise)) + CHECKSUM_FAILED
        (folder / f"{VISION}-12.out").write_text(big)
        found = {j.name: j for j in jobs.status(folder, None).jobs}
        assert found[VISION].state == "failed"
        assert found[VISION].reason.startswith("Checksum verification")


class TestUnreadableSubmissionLog:
    @pytest.mark.parametrize("kind", list(BROKEN))
    def test_note_and_the_rest_goes_on(self, folder: Path, kind: str) -> None:
        make, what = BROKEN[kind]
        log = folder / jobs.SUBMISSION_LOG
        log.unlink()
        make(log)
        (folder / f"{VISION}-12.out").write_text(CHECKSUM_FAILED)
        code, out, err = run_jobs(folder)
        assert (code, err) == (1, ""), out + err
        assert f"done     {TORCH} (job 11)" in out and f"failed   {VISION} (job 12)" in out
        assert f"note: {jobs.SUBMISSION_LOG}: {str(log)!r} {what}" in out

    def test_alone_it_is_still_reported(self, tmp_path: Path) -> None:
        # only a FIFO submitted.log: not "no job", but no job and the note why
        os.mkfifo(tmp_path / jobs.SUBMISSION_LOG)
        code, out, _ = run_jobs(tmp_path)
        assert code == 1
        assert out.splitlines()[0] == "0 jobs"
        assert "is a FIFO, not a regular file" in out


class TestAnyContent:
    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.binary(max_size=2000))
    def test_any_bytes_give_a_state(self, folder: Path, data: bytes) -> None:
        (folder / f"{VISION}-12.out").write_bytes(data)
        found = jobs.status(folder, None)
        assert [j.name for j in found.jobs] == [TORCH, VISION, AUDIO]
        assert all(j.state in jobs.STATES for j in found.jobs)


class TestQueueBytes:
    """squeue prints what users gave Slurm as bytes: a job name or output path in Latin-1 is
    no UTF-8. Its line is shown with the byte replaced; a job writing into a folder with such
    a name is still matched to it. squeue here is a script that prints those bytes (the real
    Slurm's word on them: test_slurm.py)."""

    @pytest.fixture
    def accented(self, tmp_path: Path) -> tuple[Path, dict[str, str]]:
        folder = Path(os.fsdecode(bytes(tmp_path) + b"/jos\xe9/jobs"))  # as argv decodes it
        folder.mkdir(parents=True)
        (folder / jobs.SUBMISSION_LOG).write_text(SUBMISSION)
        (folder / f"{TORCH}-11.out").write_text(SUCCEEDED)
        lines = [b"12|" + VISION.encode() + b"|PENDING|Dependency|" + bytes(folder)
                 + b"/" + VISION.encode() + b"-12.out|",
                 b"14|caf\xe9-1.0|PENDING|JobHeldUser|" + bytes(folder) + b"/caf\xe9-1.0-14.out|",
                 b"15|other|RUNNING|None|/home/andr\xe9/x-15.out|"]
        bin_folder = tmp_path / "bin"
        bin_folder.mkdir()
        (bin_folder / "queue.txt").write_bytes(b"\n".join(lines) + b"\n")
        squeue = bin_folder / "squeue"
        squeue.write_text(f"#!/bin/sh\ncat '{bin_folder / 'queue.txt'}'\n")
        squeue.chmod(0o755)
        return folder, {**os.environ, "PATH": f"{bin_folder}:{os.environ['PATH']}"}

    def test_entries(self, accented: tuple[Path, dict[str, str]]) -> None:
        _, environ = accented
        squeue = jobs.Squeue(environ["PATH"].split(":")[0] + "/squeue")
        names = [entry.name for entry in squeue.entries()]
        assert names == [VISION, "caf\udce9-1.0", "other"]  # the byte kept, as a path's is

    @pytest.mark.parametrize("json_output", [False, True], ids=["lines", "json"])
    def test_report(self, accented: tuple[Path, dict[str, str]], json_output: bool) -> None:
        folder, environ = accented
        done = subprocess.run([sys.executable, "-m", "torchstack", "jobs", bytes(folder),
                               *(["--json"] if json_output else [])], env=environ,
                              capture_output=True, timeout=60, check=False)
        out, err = done.stdout.decode(), done.stderr.decode()
        assert (done.returncode, err) == (1, ""), out + err
        if json_output:
            found = json.loads(out)
            assert found["folder"].endswith("/jos\ufffd/jobs")
            assert [(j["name"], j["state"]) for j in found["jobs"]] == [
                (TORCH, "done"), (VISION, "pending"), (AUDIO, "unknown"),
                ("caf\ufffd-1.0", "pending")]
        else:
            assert out.splitlines()[2:5] == [
                f"pending  {VISION} (job 12): waiting (Dependency)",
                f"unknown  {AUDIO} (job 13): no output and not in the queue: never ran "
                "(cancelled?)",
                "pending  caf\ufffd-1.0 (job 14): waiting (JobHeldUser)"]
