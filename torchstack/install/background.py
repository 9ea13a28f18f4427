"""The work PyTorchWheels runs beside EasyBuild's steps, owned by one object.

Most of a wheel install's time is work that need not hold up the next step: removing the
installer's cache, byte-compiling torch's 2,400 files, resolving every shared object's
libraries, one import of everything the wheels install, a C++ extension build. A
`BackgroundWork` starts each of them in a thread at the step where it can start and waits for
it at the step that needs it done:
- install step: the cache removal (`start_cache_removal`), then the byte-compile
  (`start_bytecode_compile`), which runs beside the post-processing, the sanity check and the
  module step (pip and uv would make them wait);
- sanity check: the library resolution and the C++ extension build (`start_checks`), the import
  once the sanity check has loaded the module (`start_import_check`); `finish_checks` waits for
  the cache removal and every check before it reports all their failures at once;
- permissions step: `finish_bytecode_compile`, so that the compiled files get the
  installation's permissions.
Commands run with EasyBuild's run_shell_cmd, failures are EasyBuildError, and each wait leaves
a timing line in the log (bench/install.py reads them into its breakdown).

Work that no step waits for, because a step failed first (or `eb --stop` ended the steps), is
ended by the object used as a context manager around the steps: on an error the running
commands are stopped with every process they started and their folders removed; otherwise
they are waited for. Either way their outcome is logged and never raised over the steps' own.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.run import run_shell_cmd

from torchstack.install import _processes, jitcheck, steps, wheels
from torchstack.install.steps import EasyBlock

POLL = 0.1  # seconds between attempts to end a command that is being stopped
GRACE = 5.0  # seconds a stopped command has to end on SIGTERM before it gets SIGKILL
# Seconds after SIGKILL until a stopped command is given up: a process that left its group
# and is no longer its descendant (it called setsid itself) can hold the output pipe open.
GIVE_UP = 10.0


@dataclass(frozen=True)
class Command:
    """A command running in a thread (`start_command`): its name in the log, its argument
    list (to find its process), its future (result and seconds), and the folder it runs in
    when that folder is its own, removed once it has ended."""

    what: str
    argv: list[str]
    running: Future[tuple[Any, float]]
    own_dir: str | None = None


def start_command(block: EasyBlock, what: str, argv: list[str], env: dict[str, str] | None = None,
                  work_dir: str | None = None, own_dir: bool = False) -> Command:
    """Run `argv` (no shell) with run_shell_cmd in a thread, beside what the step does next,
    in `work_dir` (default: the build folder); `own_dir`: `work_dir` is the command's alone.
    It leads a process group of its own, so that `stop_command` reaches all it starts."""

    def run() -> tuple[Any, float]:
        start = time.perf_counter()
        result = run_shell_cmd(_processes.in_own_group(argv), env=env, fail_on_error=False,
                               hidden=True, asynchronous=True,
                               work_dir=work_dir or block.builddir, use_bash=False)
        return result, time.perf_counter() - start

    return Command(what, argv, steps.in_thread(run), work_dir if own_dir else None)


def wait_command(block: EasyBlock, command: Command) -> Any:
    """The result of `start_command`, with a timing line; its own folder removed. A command
    that could not run at all (no such program) is an EasyBuildError too."""
    start = time.perf_counter()
    try:
        result, seconds = command.running.result()
    except EasyBuildError:
        raise
    except Exception as err:
        raise EasyBuildError("torchstack: %s did not run: %s", command.what, err) from err
    finally:
        _remove_own_dir(command)
    block.log.info("torchstack: %s took %.3f s, waited for %.3f s", command.what, seconds,
                   time.perf_counter() - start)
    return result


def _remove_own_dir(command: Command) -> None:
    if command.own_dir is not None:
        shutil.rmtree(command.own_dir, ignore_errors=True)


@dataclass(frozen=True)
class Stopped:
    """How `stop_command` left a command: whether any of its processes was signalled, and
    whether its thread has its result (False: given up, the thread is left to its end)."""

    signalled: bool
    ended: bool


def stop_command(command: Command) -> Stopped:
    """End `command`'s process and what it started (see _processes), until its thread has the
    result (the process may not have started yet) and, within the grace period, every process
    signalled has ended (the command's own may end before its workers). SIGKILL after the
    grace period; given up GIVE_UP seconds later."""
    sig = signal.SIGTERM
    signalled: set[int] = set()
    deadline = time.monotonic() + GRACE
    while not command.running.done():
        if time.monotonic() > deadline + GIVE_UP:
            return Stopped(bool(signalled), ended=False)
        signalled.update(_processes.end_command(command.argv, sig))
        wait([command.running], timeout=POLL)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
    # bounded: a number signalled long ago may have been given to another process since
    while _processes.running(sorted(signalled)) and time.monotonic() < deadline:
        time.sleep(POLL / 10)
    return Stopped(bool(signalled), ended=True)


def finish_all(finishers: list[Callable[[], None]]) -> None:
    """Call every finisher, so that no check is left running in its thread unreported; then
    raise the EasyBuildError of the one that failed, or one with the messages of all."""
    errors = []
    for finish in finishers:
        try:
            finish()
        except EasyBuildError as err:
            errors.append(err)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise EasyBuildError("%s", "\n".join(str(err.msg) for err in errors))


def without_bytecode(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` for a check that imports from the installation while it is byte-compiled:
    the import must not write .pyc files of its own (PYTHONDONTWRITEBYTECODE). The byte-compile
    leaves fresh ones alone, and an import's differ: timestamp-based where SOURCE_DATE_EPOCH
    asks for checked hashes, and marshalled from a running program, so that some files (15 of
    the 733 that `import torch` loads) are not compileall's bytes."""
    return dict(environ, PYTHONDONTWRITEBYTECODE="1")


class BackgroundWork:
    """The background work of one PyTorchWheels installation: start each part at its step,
    finish it at the step that needs it; `with` around the steps ends what none waited for."""

    def __init__(self, block: EasyBlock) -> None:
        self._block = block
        self._import_names: list[str] = []
        self._cache_removal: threading.Thread | None = None
        self._bytecode_compile: Command | None = None
        self._library_check: steps.LibraryCheck | None = None
        self._import_check: Command | None = None
        self._extension_check: Command | None = None

    def __enter__(self) -> BackgroundWork:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close(interrupt=exc_type is not None)

    def will_import(self, names: Iterable[str]) -> None:
        """Top-level names for the import check, which runs once the sanity check loaded the
        module."""
        self._import_names.extend(names)

    def start_cache_removal(self) -> None:
        """The installer's leftovers out of the installation now, deleted in a thread."""
        self._cache_removal = wheels.start_removal(self._block.installdir)

    def start_bytecode_compile(self) -> None:
        """Byte-compile the installed site-packages on the cores EasyBuild may use (its parallel
        setting), beside the steps up to the permissions step. It runs in a folder of its own:
        EasyBuild's cleanup step removes the build folder before the permissions step, and the
        thread may not have started the command by then (at once with --skip-sanity-check)."""
        block = self._block
        site_packages = os.path.join(block.installdir, block.pylibdir)
        self._bytecode_compile = start_command(
            block, "byte-compile", wheels.compile_command(block.python_cmd, site_packages,
                                                          block.cfg.parallel),
            work_dir=tempfile.mkdtemp(prefix="torchstack-byte-compile-"), own_dir=True)

    def finish_bytecode_compile(self) -> None:
        """Wait for the byte-compile, if one runs; files that do not compile are logged, as pip
        and uv skip them; any other failure raises."""
        command, self._bytecode_compile = self._bytecode_compile, None
        if command is None:
            return
        result = wait_command(self._block, command)
        if result.exit_code == 1:
            self._block.log.warning("torchstack: some files do not byte-compile, left as "
                                    "sources:\n%s", result.output[-3000:])
        elif result.exit_code != 0:
            raise EasyBuildError("torchstack: byte-compiling the installation failed (exit code "
                                 "%s):\n%s", result.exit_code, result.output[-3000:])

    def start_checks(self, search_path: list[str], extension: bool) -> None:
        """The library resolution (`search_path` stands for LD_LIBRARY_PATH, see
        steps.start_library_check) and, with `extension`, the C++ extension build against the
        installed torch (jitcheck: torch on PYTHONPATH, the toolchain of the build environment)."""
        block = self._block
        self._library_check = steps.start_library_check(block, search_path)
        if extension:
            script = jitcheck.write_script(block.builddir)
            site_packages = os.path.join(block.installdir, block.pylibdir)
            env = dict(without_bytecode(os.environ), PYTHONPATH=os.pathsep.join(
                p for p in (site_packages, os.environ.get("PYTHONPATH")) if p))
            self._extension_check = start_command(block, "C++ extension build",
                                                  [block.python_cmd, str(script)], env)

    def start_import_check(self) -> None:
        """Import every top-level name the wheels install in one Python, in the environment of
        the module the sanity check has just loaded, from an empty folder (as EasyBuild runs its
        sanity check commands); nothing when there is nothing to import or it already runs."""
        if not self._import_names or self._import_check is not None:
            return
        work_dir = tempfile.mkdtemp(prefix="torchstack-import-check-")
        argv = [self._block.python_cmd, "-c", "import " + ", ".join(self._import_names)]
        self._import_check = start_command(self._block, "import check", argv,
                                           env=without_bytecode(os.environ), work_dir=work_dir,
                                           own_dir=True)

    def finish_checks(self) -> None:
        """Wait for the cache removal and for every check that was started; raise with the
        failures of all."""
        if self._cache_removal is not None:
            self._cache_removal.join()
        library, imports, extension = self._library_check, self._import_check, self._extension_check
        self._library_check = self._import_check = self._extension_check = None
        finishers = []
        if library is not None:
            finishers.append(lambda: self._finish_library_check(library))
        if imports is not None:
            finishers.append(lambda: self._finish_import_check(imports))
        if extension is not None:
            finishers.append(lambda: self._finish_extension_check(extension))
        finish_all(finishers)

    def _finish_library_check(self, check: steps.LibraryCheck) -> None:
        try:
            steps.finish_library_check(self._block, check)
        except EasyBuildError:
            raise
        except Exception as err:  # a file that cannot be read, as an error of the step
            raise EasyBuildError("torchstack: library resolution did not run: %s", err) from err

    def _finish_import_check(self, command: Command) -> None:
        result = wait_command(self._block, command)
        text = shlex.join(command.argv)
        if result.exit_code != 0:
            raise EasyBuildError("torchstack: sanity check command %s failed with exit code %s "
                                 "(output: %s)", text, result.exit_code, result.output)
        self._block.log.info("torchstack: sanity check command %s ran successfully (output: %s)",
                             text, result.output)

    def _finish_extension_check(self, command: Command) -> None:
        result = wait_command(self._block, command)
        if result.exit_code != 0 or jitcheck.SUCCESS not in result.output:
            raise EasyBuildError("torchstack: a C++ extension does not build against torch with "
                                 "this toolchain (exit code %s):\n%s", result.exit_code,
                                 result.output[-3000:])

    def close(self, interrupt: bool = False) -> None:
        """End the work that no step waited for: with `interrupt` (a step failed) its commands
        are stopped first; each outcome is logged, none raised. The cache removal and the
        library resolution (Python in a thread, not to be stopped) are waited for."""
        commands = [c for c in (self._bytecode_compile, self._import_check, self._extension_check)
                    if c is not None]
        self._bytecode_compile = self._import_check = self._extension_check = None
        for command in commands:
            stopped = stop_command(command) if interrupt else Stopped(False, ended=True)
            if stopped.ended:
                self._log_abandoned(command, stopped.signalled)
            else:
                self._block.log.warning("torchstack: %s did not end %.0f s after SIGKILL; left "
                                        "running: %s", command.what, GIVE_UP,
                                        shlex.join(command.argv))
        library, self._library_check = self._library_check, None
        if library is not None:
            wait([library])
        if self._cache_removal is not None:
            self._cache_removal.join()
            self._cache_removal = None

    def _log_abandoned(self, command: Command, stopped: bool) -> None:
        """Wait for a command no step waited for, remove its folder, and say how it ended."""
        try:
            result, seconds = command.running.result()
        except Exception as err:  # logged: the steps' own error is the one raised
            self._block.log.warning("torchstack: %s did not run, no step waited for it: %s",
                                    command.what, err)
            return
        finally:
            _remove_own_dir(command)
        if stopped:
            self._block.log.info("torchstack: %s stopped after %.3f s: a step failed before it "
                                 "was waited for", command.what, seconds)
        elif result.exit_code != 0:
            self._block.log.warning("torchstack: %s failed after %.3f s (exit code %s), no step "
                                    "waited for it:\n%s", command.what, seconds, result.exit_code,
                                    result.output[-3000:])
        else:
            self._block.log.info("torchstack: %s took %.3f s, no step waited for it",
                                 command.what, seconds)
