"""`torchstack generate` as a user runs it, in real processes: Ctrl-C, a reader that closes
the pipe, two runs into one --out at once, a full disk; and --out errors through `main`.

Generation is offline (the embedded catalog), so every run is the real command.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchstack.cli import main

GENERATE = [sys.executable, "-m", "torchstack", "generate", "--toolchain", "foss/2025a"]
OFFLINE = ["--offline", "2.9.1"]
SET_2_9_1 = {"PyTorch-2.9.1-foss-2025a-whl.eb", "PyTorch-2.9.1-foss-2025a-CUDA-12.8.0-whl.eb",
             "Triton-3.5.1-gfbf-2025a-CUDA-12.8.0-whl.eb",
             "torchaudio-2.9.1-foss-2025a-whl.eb", "easystack-foss-2025a-cpu-aarch64.yaml",
             "easystack-foss-2025a-cu128-x86_64.yaml"}
KEEP = 20000  # files already in --out: their copy keeps a run writing for a while


def filled(out: Path, count: int = KEEP) -> Path:
    out.mkdir()
    for i in range(count):
        (out / f"site-{i}.txt").write_text(f"{i}\n")
    return out


def sigint_as_at_a_terminal() -> None:
    """A runner started in the background (`cmd &` without job control) hands its children
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler: give it back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def site_files_intact(out: Path, count: int = KEEP) -> bool:
    names = {p.name for p in out.iterdir() if p.name.startswith("site-")}
    return len(names) == count and (out / f"site-{count - 1}.txt").read_text() == f"{count - 1}\n"


class TestCtrlC:
    """SIGINT: one line `torchstack: interrupted`, exit 130, and no half-written output;
    SIGTERM (a batch job's end, `timeout`) the same with `torchstack: terminated` and 143."""

    @pytest.mark.parametrize("signum, code, line", [
        (signal.SIGINT, 130, "torchstack: interrupted\n"),
        (signal.SIGTERM, 143, "torchstack: terminated\n"),
    ])
    def test_while_writing(self, tmp_path: Path, signum: int, code: int, line: str) -> None:
        out = filled(tmp_path / "out")
        run = subprocess.Popen([*GENERATE, *OFFLINE, "--out", str(out)], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=sigint_as_at_a_terminal)
        deadline = time.monotonic() + 120
        while not any(".tmp-" in name for name in os.listdir(tmp_path)):
            assert run.poll() is None, "generate ended before it wrote"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        run.send_signal(signum)
        stdout, stderr = run.communicate(timeout=60)
        assert (run.returncode, stderr, stdout) == (code, line, "")
        assert leftovers(tmp_path) == []  # staging folder and lock file removed
        assert {p.name for p in out.iterdir()} == {f"site-{i}.txt" for i in range(KEEP)}
        assert site_files_intact(out)

    def test_while_an_index_does_not_answer(self, tmp_path: Path) -> None:
        """Ctrl-C where an impatient user presses it: waiting for an index."""
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            server.settimeout(120)
            index = f"http://127.0.0.1:{server.getsockname()[1]}/simple/"
            run = subprocess.Popen([*GENERATE, "2.9.1", "--index", index, "--out",
                                    str(tmp_path / "out")], text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   preexec_fn=sigint_as_at_a_terminal)
            connection, _ = server.accept()
            with connection:
                time.sleep(0.2)
                run.send_signal(signal.SIGINT)
                stdout, stderr = run.communicate(timeout=60)
        assert (run.returncode, stderr, stdout) == (130, "torchstack: interrupted\n", "")
        assert list(tmp_path.iterdir()) == []


class TestClosedPipe:
    """A reader that stops reading ends generate quietly with 141; the set is written."""

    def pipeline(self, out: Path, reader: str) -> tuple[int, str, str]:
        script = (f'"$@" 2>"{out}.err" | {reader}; echo "status=${{PIPESTATUS[0]}}"')
        run = subprocess.run(["bash", "-c", script, "bash", *GENERATE, *OFFLINE, "--out",
                              str(out)], capture_output=True, text=True, timeout=300)
        status = run.stdout.rsplit("status=", 1)[1].strip()
        return int(status), run.stdout.rsplit("status=", 1)[0], Path(f"{out}.err").read_text()

    def test_reader_gone_before_the_report(self, tmp_path: Path) -> None:
        status, _, stderr = self.pipeline(tmp_path / "out", "true")
        assert (status, stderr) == (141, "")
        assert {p.name for p in (tmp_path / "out").iterdir()} >= SET_2_9_1

    @pytest.mark.parametrize("attempt", range(3))
    def test_head(self, tmp_path: Path, attempt: int) -> None:
        """`| head -1`: whether the report still fit into the pipe decides 0 or 141."""
        status, shown, stderr = self.pipeline(tmp_path / "out", "head -1")
        assert status in (0, 141) and stderr == "", (status, stderr)
        assert shown.startswith("torch 2.9.1: ") and shown.count("\n") == 1
        assert {p.name for p in (tmp_path / "out").iterdir()} >= SET_2_9_1

    def test_catalog_list(self) -> None:
        run = subprocess.run(f"{sys.executable} -m torchstack catalog list | head -1",
                             shell=True, capture_output=True, text=True, timeout=300)
        assert run.stderr == "" and run.stdout.startswith("torch ")


class TestConcurrentRuns:
    """Two runs into one --out at once: they take turns, and no set is lost."""

    def start(self, out: Path, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*GENERATE, "--offline", *args, "--out", str(out)], text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def test_same_set_twice(self, tmp_path: Path) -> None:
        out = filled(tmp_path / "out")
        runs = [self.start(out, "2.9.1") for _ in range(2)]
        results = sorted((run.wait(timeout=300), run.stderr.read() if run.stderr else "")
                         for run in runs)
        (first, first_err), (second, second_err) = results
        assert first == 0 and first_err == "", results
        assert second == 2 and second_err.count("\n") == 1, results
        assert second_err.startswith("torchstack: error: output folder ")
        assert ("already has" in second_err
                or "another torchstack generate is writing" in second_err), second_err
        assert {p.name for p in out.iterdir()} >= SET_2_9_1
        assert site_files_intact(out)
        assert leftovers(tmp_path) == []

    def test_two_releases_with_force(self, tmp_path: Path) -> None:
        out = filled(tmp_path / "out")
        runs = [self.start(out, release, "--force") for release in ("2.9.1", "2.10.0")]
        for run in runs:
            assert run.wait(timeout=300) == 0, run.stderr.read() if run.stderr else ""
        names = {p.name for p in out.iterdir()}
        assert {"PyTorch-2.9.1-foss-2025a-whl.eb", "PyTorch-2.10.0-foss-2025a-whl.eb"} <= names
        assert names >= SET_2_9_1
        easystack = (out / "easystack-foss-2025a-cpu-aarch64.yaml").read_text()
        assert easystack.count("PyTorch-2.9.1") + easystack.count("PyTorch-2.10.0") == 1
        assert site_files_intact(out)
        assert leftovers(tmp_path) == []


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


class TestErrorsNameOut:
    """Errors name --out as the user gave it, never the staging folder."""

    def test_full_disk(self, tmp_path: Path) -> None:
        """A file size limit: the CUDA PyTorch easyconfig does not fit (a real EFBIG)."""
        (tmp_path / "out").mkdir()
        run = subprocess.run([*GENERATE, *OFFLINE, "--out", "out"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300,
                             preexec_fn=_small_files)
        assert run.returncode == 2, run.stderr
        assert run.stderr.startswith("torchstack: error: cannot write output folder 'out': ")
        assert run.stderr.count("\n") == 1 and "File too large" in run.stderr, run.stderr
        assert ".tmp-" not in run.stderr and str(tmp_path) not in run.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        assert list((tmp_path / "out").iterdir()) == []

    @pytest.mark.parametrize("case, fragment", [
        ("file", "exists and is not a folder"),
        ("here", "is the current folder"),
        ("dangling", "which does not exist"),
    ])
    def test_one_line(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str], case: str, fragment: str) -> None:
        monkeypatch.chdir(tmp_path)
        out = {"file": "out", "here": ".", "dangling": "out"}[case]
        if case == "file":
            (tmp_path / "out").write_text("")
        if case == "dangling":
            (tmp_path / "out").symlink_to("/nonexistent/out")
        assert main(["generate", "2.9.1", "--offline", "--toolchain", "foss/2025a",
                     "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"torchstack: error: output folder {out!r} ")
        assert err.count("\n") == 1 and fragment in err, err
