"""install.background.BackgroundWork: the byte-compile and the checks that PyTorchWheels runs
beside EasyBuild's steps, started and joined through one object, with EasyBuild's real
run_shell_cmd on a stand-in for the easyblock (its build options set as `eb` would)."""

from __future__ import annotations

import logging
import os
import stat
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from easybuild.tools import run
from easybuild.tools.build_log import EasyBuildError

from torchstack.install import _processes, background
from torchstack.install.background import BackgroundWork
from torchstack.install.wheels import cache_dir

PYLIBDIR = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
TAG = sys.implementation.cache_tag
OPTIONS = {"hooks": None, "logtostdout": False, "extended_dry_run": False}


@pytest.fixture(autouse=True)
def options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build options run_shell_cmd reads, as a plain `eb` run sets them."""
    monkeypatch.setattr(run, "build_option", lambda name: OPTIONS[name])


def _block(root: Path, python: str = sys.executable) -> Any:
    """A stand-in for PyTorchWheels with what BackgroundWork reads of it."""
    (root / "build").mkdir(parents=True, exist_ok=True)
    (root / "install" / PYLIBDIR).mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(installdir=str(root / "install"), pylibdir=PYLIBDIR,
                           builddir=str(root / "build"), python_cmd=python,
                           cfg=SimpleNamespace(parallel=2),
                           log=logging.getLogger("test-background"))


def _site(block: Any) -> Path:
    return Path(block.installdir) / block.pylibdir


def _package(block: Any, name: str, init: str = "") -> Path:
    folder = _site(block) / name
    folder.mkdir()
    (folder / "__init__.py").write_text(init)
    return folder


def _script(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _slow_python(tmp_path: Path) -> tuple[str, Path]:
    """A "python" that starts a child of its own and waits for it (as the byte-compile waits
    for its workers), writing the pids of both; the file where they appear."""
    pids = tmp_path / "pids"
    python = _script(tmp_path / "slowpython", f"""\
        #!/bin/sh
        sleep 300 &
        echo "$$ $!" > {pids}.tmp && mv {pids}.tmp {pids}
        wait
        """)
    return python, pids


def _pids_when_started(pids: Path) -> list[int]:
    for _ in range(1200):  # a guard against a hang, not a measure: a minute
        if pids.exists():
            return [int(p) for p in pids.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"the command never wrote {pids}")


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie that no parent has collected yet."""
    try:
        line = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return line.rpartition(b")")[2].split()[0] == b"Z"


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "test-background")


class TestByteCompile:
    def test_started_at_install_joined_at_permissions(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO)
        block = _block(tmp_path)
        package = _package(block, "pkg", "X = 1\n")
        work = BackgroundWork(block)
        work.start_bytecode_compile()
        work.finish_bytecode_compile()
        assert (package / "__pycache__" / f"__init__.{TAG}.pyc").is_file()
        assert "torchstack: byte-compile took" in _messages(caplog)
        assert ", waited for " in _messages(caplog)  # the timing line bench/install.py reads

    def test_runs_when_the_build_folder_is_gone(self, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
        # EasyBuild's cleanup step removes the build folder before the permissions step joins
        # the byte-compile; its thread may start the command only then
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir()
        block = _block(tmp_path)
        package = _package(block, "pkg", "X = 1\n")
        os.rmdir(block.builddir)
        work = BackgroundWork(block)
        work.start_bytecode_compile()
        work.finish_bytecode_compile()
        assert (package / "__pycache__" / f"__init__.{TAG}.pyc").is_file()
        # its own folder, removed after (run_shell_cmd keeps its output beside it)
        assert list((tmp_path / "tmp").glob("torchstack-*")) == []

    def test_files_that_do_not_compile_are_logged(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        # exit code 1: left as sources, as pip and uv leave them
        block = _block(tmp_path)
        _package(block, "broken", "def (:\n")
        work = BackgroundWork(block)
        work.start_bytecode_compile()
        work.finish_bytecode_compile()
        assert "some files do not byte-compile, left as sources" in _messages(caplog)

    def test_failure_surfaces_at_join(self, tmp_path: Path) -> None:
        block = _block(tmp_path)
        work = BackgroundWork(block)
        os.rmdir(_site(block))  # bytecode.py refuses a folder that is not there: exit code 2
        work.start_bytecode_compile()
        with pytest.raises(EasyBuildError, match=r"(?s)byte-compiling the installation failed "
                                                 r"\(exit code 2\):\n.*not a folder"):
            work.finish_bytecode_compile()

    def test_a_command_that_cannot_run_surfaces_at_join(self, tmp_path: Path) -> None:
        # setsid starts it (see _processes.in_own_group), and says why it could not
        block = _block(tmp_path, python=str(tmp_path / "no-such-python"))
        work = BackgroundWork(block)
        work.start_bytecode_compile()
        with pytest.raises(EasyBuildError, match=r"(?s)byte-compiling the installation failed "
                           r"\(exit code 127\):\n.*no-such-python: No such file or directory"):
            work.finish_bytecode_compile()

    def test_joined_once(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        # nothing started (eb --module-only) or already joined: nothing to wait for
        caplog.set_level(logging.INFO)
        work = BackgroundWork(_block(tmp_path))
        work.finish_bytecode_compile()
        work.start_bytecode_compile()
        work.finish_bytecode_compile()
        work.finish_bytecode_compile()
        assert _messages(caplog).count("torchstack: byte-compile took") == 1


class TestChecks:
    def test_import_and_libraries_pass(self, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        caplog.set_level(logging.INFO)
        block = _block(tmp_path)
        _package(block, "okpkg")
        monkeypatch.setenv("PYTHONPATH", str(_site(block)))  # the module the sanity check loaded
        work = BackgroundWork(block)
        work.will_import(["okpkg"])
        work.start_checks([], extension=False)
        work.start_import_check()
        work.finish_checks()
        log = _messages(caplog)
        assert "torchstack: library resolution took" in log
        assert "torchstack: import check took" in log
        assert f"torchstack: sanity check command {sys.executable} -c 'import okpkg' ran " \
               "successfully" in log

    def test_import_runs_once_in_an_empty_folder_removed_after(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        block = _block(tmp_path)
        record = tmp_path / "imported-in"
        _package(block, "whereami", f"import os\nwith open({str(record)!r}, 'a') as f:\n"
                                    "    f.write(os.getcwd() + '\\n')\n")
        monkeypatch.setenv("PYTHONPATH", str(_site(block)))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir()
        work = BackgroundWork(block)
        work.will_import(["whereami"])
        work.start_checks([], extension=False)
        work.start_import_check()
        work.start_import_check()  # the sanity check loads its module again: still one import
        work.finish_checks()
        folders = record.read_text().splitlines()
        assert len(folders) == 1
        assert Path(folders[0]).parent == tmp_path / "tmp"
        assert Path(folders[0]).name.startswith("torchstack-import-check-")
        assert not Path(folders[0]).exists()

    def test_nothing_to_import(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO)
        work = BackgroundWork(_block(tmp_path))
        work.start_checks([], extension=False)
        work.start_import_check()
        work.finish_checks()
        assert "import check" not in _messages(caplog)

    def test_every_failure_surfaces_at_join(self, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
        # the import fails and the C++ extension cannot build (no torch in this stand-in):
        # both are waited for and reported in one EasyBuildError
        monkeypatch.delenv("PYTHONPATH", raising=False)
        work = BackgroundWork(_block(tmp_path))
        work.will_import(["torchstack_not_installed"])
        work.start_checks([], extension=True)
        work.start_import_check()
        with pytest.raises(EasyBuildError) as raised:
            work.finish_checks()
        message = str(raised.value)
        assert "-c 'import torchstack_not_installed' failed with exit code 1" in message
        assert "ModuleNotFoundError: No module named 'torchstack_not_installed'" in message
        assert "a C++ extension does not build against torch with this toolchain" in message

    def test_cache_removed_by_the_join(self, tmp_path: Path) -> None:
        block = _block(tmp_path)
        Path(cache_dir(block.installdir), "entry").mkdir(parents=True)
        work = BackgroundWork(block)
        work.start_cache_removal()
        assert not Path(cache_dir(block.installdir)).exists()  # renamed out at once
        work.start_checks([], extension=False)
        work.finish_checks()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "install"]


class TestStepFailsBeforeJoin:
    def test_byte_compile_stopped_with_its_children(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO)
        python, pids = _slow_python(tmp_path)
        block = _block(tmp_path, python=python)
        failed = pytest.raises(EasyBuildError, match="the post-processing failed")
        with failed, BackgroundWork(block) as work:
            work.start_bytecode_compile()
            started = _pids_when_started(pids)
            raise EasyBuildError("the post-processing failed")
        assert all(_gone(pid) for pid in started)
        assert "torchstack: byte-compile stopped after" in _messages(caplog)
        assert "a step failed before it was waited for" in _messages(caplog)

    def test_checks_stopped_and_their_folder_removed(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture,
            monkeypatch: pytest.MonkeyPatch) -> None:
        caplog.set_level(logging.INFO)
        python, pids = _slow_python(tmp_path)
        block = _block(tmp_path, python=python)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir()
        # eb interrupted during the sanity check
        with pytest.raises(KeyboardInterrupt), BackgroundWork(block) as work:
            work.will_import(["torch"])
            work.start_checks([], extension=False)
            work.start_import_check()
            started = _pids_when_started(pids)
            assert list((tmp_path / "tmp").glob("torchstack-import-check-*"))
            raise KeyboardInterrupt
        assert all(_gone(pid) for pid in started)
        assert "torchstack: import check stopped after" in _messages(caplog)
        assert not list((tmp_path / "tmp").glob("torchstack-import-check-*"))

    def test_stopped_before_it_started(self, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        # the step fails while the thread has not yet started the command: it is ended when
        # it appears, not left running
        caplog.set_level(logging.INFO)
        python, pids = _slow_python(tmp_path)
        block = _block(tmp_path, python=python)
        original = run.run_shell_cmd

        def late(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.3)
            return original(*args, **kwargs)

        monkeypatch.setattr(background, "run_shell_cmd", late)
        with pytest.raises(EasyBuildError), BackgroundWork(block) as work:
            work.start_bytecode_compile()
            raise EasyBuildError("failed at once")
        assert "torchstack: byte-compile stopped after" in _messages(caplog)
        # stopped as soon as it appeared: perhaps before it could write its pids
        started = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        assert all(_gone(pid) for pid in started)

    def test_stopped_with_a_child_whose_parent_has_ended(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        # a worker the command forked just as it was signalled is reparented once the command
        # has ended, and is no longer its descendant; it holds the output pipe run_shell_cmd
        # reads to its end. As a process of the command's group it is ended all the same.
        caplog.set_level(logging.INFO)
        pids = tmp_path / "pids"
        python = _script(tmp_path / "forkingpython", f"""\
            #!/bin/sh
            ( sleep 300 & echo $! > {pids}.orphan )
            sleep 300 &
            echo "$$ $! $(cat {pids}.orphan)" > {pids}.tmp && mv {pids}.tmp {pids}
            wait
            """)
        block = _block(tmp_path, python=python)
        with pytest.raises(EasyBuildError), BackgroundWork(block) as work:
            work.start_bytecode_compile()
            started = _pids_when_started(pids)
            raise EasyBuildError("the post-processing failed")
        assert all(_gone(pid) for pid in started)
        assert "torchstack: byte-compile stopped after" in _messages(caplog)

    def test_given_up_when_a_process_escapes_its_group(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture,
            monkeypatch: pytest.MonkeyPatch) -> None:
        # a process that made a session of its own and whose parent has ended cannot be found:
        # the stop gives up rather than wait for the pipe it holds, and the steps' error goes on
        monkeypatch.setattr(background, "GRACE", 0.2)
        monkeypatch.setattr(background, "GIVE_UP", 0.5)
        pids = tmp_path / "pids"
        python = _script(tmp_path / "escapingpython", f"""\
            #!/bin/sh
            ( setsid sleep 300 & echo $! > {pids}.tmp && mv {pids}.tmp {pids} )
            wait
            """)
        block = _block(tmp_path, python=python)
        try:
            with pytest.raises(EasyBuildError, match="failed"), BackgroundWork(block) as work:
                work.start_bytecode_compile()
                escaped = _pids_when_started(pids)
                raise EasyBuildError("the post-processing failed")
            assert "torchstack: byte-compile did not end 0 s after SIGKILL; left running" in \
                _messages(caplog)
            assert not any(_gone(pid) for pid in escaped)
        finally:
            for pid in _pids_when_started(pids):
                os.kill(pid, 9)

    def test_no_step_failed_work_left_is_waited_for(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        # eb --stop ends the steps before the permissions step: the byte-compile completes
        caplog.set_level(logging.INFO)
        block = _block(tmp_path)
        package = _package(block, "pkg")
        with BackgroundWork(block) as work:
            work.start_bytecode_compile()
        assert (package / "__pycache__" / f"__init__.{TAG}.pyc").is_file()
        assert "torchstack: byte-compile took" in _messages(caplog)
        assert "no step waited for it" in _messages(caplog)

    def test_failure_of_abandoned_work_is_logged_not_raised(
            self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        block = _block(tmp_path)
        os.rmdir(_site(block))
        with BackgroundWork(block) as work:
            work.start_bytecode_compile()
        assert "torchstack: byte-compile failed after" in _messages(caplog)
        assert "(exit code 2), no step waited for it" in _messages(caplog)

    def test_closed_work_is_not_joined_again(self, tmp_path: Path) -> None:
        block = _block(tmp_path)
        work = BackgroundWork(block)
        work.start_bytecode_compile()
        work.start_checks([], extension=False)
        work.close(interrupt=True)
        work.close()
        work.finish_bytecode_compile()
        work.finish_checks()


class TestProcesses:
    def test_command_leads_a_group_of_its_own(self) -> None:
        import subprocess

        argv = ["sleep", "302"]
        with subprocess.Popen(_processes.in_own_group(argv)) as mine:
            try:
                for _ in range(1200):  # until setsid has run: a guard against a hang, a minute
                    if os.getpgid(mine.pid) == mine.pid:
                        break
                    time.sleep(0.05)
                assert os.getpgid(mine.pid) == mine.pid != os.getpgid(0)
                assert list(_processes.children_running(argv, _processes.parents())) == [mine.pid]
            finally:
                mine.kill()

    def test_eb_exits_while_a_thread_is_left_running(self) -> None:
        # a command given up by stop_command must not hold `eb` at its exit
        import subprocess

        code = "import time; from torchstack.install import steps; " \
               "steps.in_thread(lambda: time.sleep(600)); print('exiting')"
        ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, check=True)
        assert ran.stdout == "exiting\n"

    @pytest.mark.parametrize("line, parent", [
        (b"12 (python3) S 7 12 12 0", 7),
        (b"12 (a) b (c)) R 9 12 12 0", 9),  # a name with spaces and parentheses
    ])
    def test_parent_from_stat(self, line: bytes, parent: int) -> None:
        assert _processes._parent_of(line) == parent

    def test_descendants_children_first(self) -> None:
        parent_of = {2: 1, 3: 2, 4: 2, 5: 3, 6: 99}
        assert _processes.descendants(1, parent_of) == [2, 3, 4, 5]

    def test_only_the_command_with_that_argument_list(self, tmp_path: Path) -> None:
        import subprocess

        argv = ["sleep", "301"]
        with subprocess.Popen(argv) as mine, subprocess.Popen(["sleep", "3011"]) as other:
            try:
                assert list(_processes.children_running(argv, _processes.parents())) == [mine.pid]
                assert _processes.end_command(argv) == [mine.pid]
                assert mine.wait() < 0
                assert other.poll() is None
            finally:
                other.kill()
