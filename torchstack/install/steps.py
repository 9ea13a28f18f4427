"""What torchstack's easyblocks add to EasyBuild's steps, shared by PyTorchWheels and PyTorchSource.

Each function takes the running easyblock (an EasyBuild EasyBlock; EasyBuild has no type
information) and reports problems as EasyBuildError with a `torchstack:` prefix, so that both
easyblocks stay glue and record the same fingerprint file, whatis line and guard halves:
- post-processing: fingerprint the installation, refuse consumers that do not fit the torch
  under them, write `<installdir>/easybuild/torchstack-fingerprint.json` (`record_fingerprint`,
  which the hooks file calls for installations of any other easyblock too);
- install: byte-compile the installation after the installer, in a thread beside the
  post-processing, the sanity check and the module step (`start_bytecode_compile`);
- sanity check: every shared object finds its libraries, the installed torch is the one the
  easyconfig declares, everything the wheels install imports in the module's environment, a
  C++ extension builds against it (`start_library_check`, `check_declared_torch`,
  `start_import_check`, `start_extension_check`; the slow ones run beside EasyBuild's own
  sanity commands, and `finish_all` waits for every one of them before reporting);
- permissions: EasyBuild's step reading the installation once (`adjust_permissions`);
- module file: the consumer half before the dependency on PyTorch, the provider half at the
  end (`consumer_module_dep`, `provider_module_extra`); with `eb --module-only` no step has
  fingerprinted the installation, so the one it recorded earlier is used
  (`recorded_fingerprint`); a module that installs torch itself puts torch's CMake config and
  libraries on the module's search paths (`add_libtorch_module_paths`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.modules import get_software_root, get_software_version
from easybuild.tools.run import run_shell_cmd

from torchstack.distributions import DistributionError
from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint
from torchstack.guards import modulefile, record
from torchstack.install import jitcheck, libraries, permissions, torchcheck, wheels

EasyBlock = Any  # easybuild.framework.easyblock.EasyBlock
T = TypeVar("T")


def dependency_roots(block: EasyBlock, runtime_only: bool = False) -> list[str]:
    """Install roots of the loaded dependency modules, in the easyconfig's order."""
    names = [dep["name"] for dep in block.cfg.dependencies(runtime_only=runtime_only)]
    return [root for root in (get_software_root(name) for name in names) if root]


def record_fingerprint(block: EasyBlock, any_easyblock: bool = False) -> Fingerprint | None:
    """Fingerprint the installation, refuse consumers that do not fit the torch under them,
    record the fingerprint and add its whatis line; None when the installation holds nothing
    torch-related or nothing was installed (eb --extended-dry-run).

    `any_easyblock` (the hooks file): an installation without Python distributions is left
    alone, and the module file keeps the easyblock's whatis lines (the line is only logged).
    """
    if block.dry_run:
        return None
    start = time.perf_counter()
    try:
        found = torchcheck.examine(block.installdir, get_software_root("PyTorch"))
    except DistributionError as err:
        if not any_easyblock:
            raise EasyBuildError("torchstack: %s", err) from err
        block.log.info("torchstack: no Python distributions in %s, nothing to record",
                       block.installdir)
        return None
    except TorchstackError as err:
        raise EasyBuildError("torchstack: %s", err) from err
    # bench/install.py reads these timing lines into its breakdown.
    block.log.info("torchstack: fingerprint took %.3f s", time.perf_counter() - start)
    if found.fingerprint is not None:
        record.write_fingerprint(block.installdir, found.fingerprint)
        if any_easyblock:
            block.log.info("%s", record.whatis_line(found.fingerprint))
        else:
            _add_whatis(block, found.fingerprint)
    return found.fingerprint


def recorded_fingerprint(block: EasyBlock) -> Fingerprint | None:
    """The fingerprint the installation recorded before (eb --module-only), with its whatis."""
    try:
        found = record.read_fingerprint(block.installdir)
    except TorchstackError as err:
        raise EasyBuildError("torchstack: %s", err) from err
    if found is not None:
        _add_whatis(block, found)
    return found


def _add_whatis(block: EasyBlock, fingerprint: Fingerprint) -> None:
    line = record.whatis_line(fingerprint)
    if line not in (block.cfg["whatis"] or []):
        block.cfg["whatis"] = (block.cfg["whatis"] or []) + [line]
    block.log.info("%s", line)


LibraryCheck = Future[tuple[list[str], list[str], float]]


def start_library_check(block: EasyBlock, search_path: list[str]) -> LibraryCheck:
    """Every loadable shared object of the installation finds its libraries, checked in a
    thread, so that it overlaps the sanity check's commands (which wait on their own
    processes); `finish_library_check` reports it.

    `search_path` stands for LD_LIBRARY_PATH (see `libraries.search_path`); torch's own
    libraries, of the installation or of the PyTorch dependency, count as loaded.
    """
    roots = [block.installdir, get_software_root("PyTorch")]
    site_packages = [os.path.join(root, block.pylibdir) for root in roots if root]

    def resolve() -> tuple[list[str], list[str], float]:
        start = time.perf_counter()
        failures, notes = libraries.unresolved_libraries(block.installdir, search_path,
                                                            site_packages)
        return failures, notes, time.perf_counter() - start

    return _in_thread(resolve)


def _in_thread(task: Callable[[], T]) -> Future[T]:
    """Run `task` in a thread of its own, beside what the step does next."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchstack")
    future = pool.submit(task)
    pool.shutdown(wait=False)  # the thread ends with its one task
    return future


def finish_library_check(block: EasyBlock, check: LibraryCheck) -> None:
    """Wait for `start_library_check`; log its notes, raise with its failures."""
    start = time.perf_counter()
    failures, notes, seconds = check.result()
    # bench/install.py reads these timing lines into its breakdown.
    block.log.info("torchstack: library resolution took %.3f s, waited for %.3f s", seconds,
                   time.perf_counter() - start)
    for note in notes:
        block.log.warning("torchstack: optional plugin does not resolve: %s", note)
    if failures:
        raise EasyBuildError("torchstack: shared libraries do not resolve:\n%s",
                             "\n".join(failures[:20]))


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


def start_command(block: EasyBlock, command: list[str], env: dict[str, str] | None = None,
                  work_dir: str | None = None) -> Future[tuple[Any, float]]:
    """Run `command` (no shell) with run_shell_cmd in a thread, beside what the step does next,
    in `work_dir` (default: the build folder); the future holds its result and its seconds."""

    def run() -> tuple[Any, float]:
        start = time.perf_counter()
        result = run_shell_cmd(command, env=env, fail_on_error=False, hidden=True,
                               asynchronous=True, work_dir=work_dir or block.builddir,
                               use_bash=False)
        return result, time.perf_counter() - start

    return _in_thread(run)


def _waited(block: EasyBlock, what: str, command: Future[tuple[Any, float]]) -> Any:
    """The result of `start_command`, with a timing line (bench/install.py reads these)."""
    start = time.perf_counter()
    result, seconds = command.result()
    block.log.info("torchstack: %s took %.3f s, waited for %.3f s", what, seconds,
                   time.perf_counter() - start)
    return result


def start_bytecode_compile(block: EasyBlock) -> Future[tuple[Any, float]]:
    """Byte-compile the installed site-packages on the cores EasyBuild may use (its parallel
    setting), beside the post-processing, the sanity check and the module step (which pip and
    uv would make wait); `finish_bytecode_compile` waits, before the permissions step."""
    site_packages = os.path.join(block.installdir, block.pylibdir)
    return start_command(block, wheels.compile_command(block.python_cmd, site_packages,
                                                       block.cfg.parallel))


def finish_bytecode_compile(block: EasyBlock, command: Future[tuple[Any, float]]) -> None:
    """Wait for `start_bytecode_compile`; files that do not compile are logged, as pip and uv
    skip them; any other failure raises."""
    result = _waited(block, "byte-compile", command)
    if result.exit_code == 1:
        block.log.warning("torchstack: some files do not byte-compile, left as sources:\n%s",
                          result.output[-3000:])
    elif result.exit_code != 0:
        raise EasyBuildError("torchstack: byte-compiling the installation failed (exit code "
                             "%s):\n%s", result.exit_code, result.output[-3000:])


def adjust_permissions(block: EasyBlock, permissions_step: Callable[[], None]) -> None:
    """Run EasyBuild's `permissions_step`, reading the installation once
    (`permissions.read_once`), with a line for its own time, apart from the wait for the
    byte-compile (logged with that)."""
    start = time.perf_counter()
    with permissions.read_once():
        permissions_step()
    block.log.info("torchstack: permissions step, reading the installation once, took %.3f s",
                   time.perf_counter() - start)


def without_bytecode(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` for a check that imports from the installation while it is byte-compiled:
    the import must not write .pyc files of its own (PYTHONDONTWRITEBYTECODE). The byte-compile
    leaves fresh ones alone, and an import's differ: timestamp-based where SOURCE_DATE_EPOCH
    asks for checked hashes, and marshalled from a running program, so that some files (15 of
    the 733 that `import torch` loads) are not compileall's bytes."""
    return dict(environ, PYTHONDONTWRITEBYTECODE="1")


@dataclass(frozen=True)
class ImportCheck:
    """A running `start_import_check`: the command's future, its folder, its text."""

    running: Future[tuple[Any, float]]
    work_dir: str
    text: str


def start_import_check(block: EasyBlock, names: list[str]) -> ImportCheck:
    """Import `names` in one Python, in the environment of the module the sanity check has
    just loaded, from an empty folder (as EasyBuild runs its sanity check commands), in a
    thread beside the rest of the sanity check; `finish_import_check` reports it."""
    work_dir = tempfile.mkdtemp(prefix="torchstack-import-check-")
    command = [block.python_cmd, "-c", "import " + ", ".join(names)]
    return ImportCheck(start_command(block, command, env=without_bytecode(os.environ),
                                     work_dir=work_dir),
                       work_dir, shlex.join(command))


def finish_import_check(block: EasyBlock, check: ImportCheck) -> None:
    """Wait for `start_import_check`; raise with its output if the import failed."""
    try:
        result = _waited(block, "import check", check.running)
    finally:
        shutil.rmtree(check.work_dir, ignore_errors=True)
    if result.exit_code != 0:
        raise EasyBuildError("torchstack: sanity check command %s failed with exit code %s "
                             "(output: %s)", check.text, result.exit_code, result.output)
    block.log.info("torchstack: sanity check command %s ran successfully (output: %s)",
                   check.text, result.output)


def start_extension_check(block: EasyBlock) -> Future[tuple[Any, float]]:
    """The C++ extension check (`jitcheck`) in a thread, beside the sanity check's commands:
    torch from the installation (PYTHONPATH), the toolchain from the build environment;
    `finish_extension_check` reports it."""
    script = jitcheck.write_script(block.builddir)
    site_packages = os.path.join(block.installdir, block.pylibdir)
    env = dict(without_bytecode(os.environ), PYTHONPATH=os.pathsep.join(
        p for p in (site_packages, os.environ.get("PYTHONPATH")) if p))
    return start_command(block, [block.python_cmd, str(script)], env)


def finish_extension_check(block: EasyBlock, check: Future[tuple[Any, float]]) -> None:
    """Wait for `start_extension_check`; raise with the end of its output if it failed."""
    result = _waited(block, "C++ extension build", check)
    if result.exit_code != 0 or jitcheck.SUCCESS not in result.output:
        raise EasyBuildError("torchstack: a C++ extension does not build against torch with "
                             "this toolchain (exit code %s):\n%s", result.exit_code,
                             result.output[-3000:])


def check_declared_torch(fingerprint: Fingerprint | None, version: str | None,
                         cuda: str | None, abi_tag: str | None) -> None:
    """A provider must be the torch `version` (and CUDA, and abi tag) the easyconfig declares."""
    if fingerprint is None or fingerprint.role != "provider":
        return
    problems = compat.disagreements(fingerprint, version, cuda) if version else []
    if abi_tag and abi_tag != fingerprint.abi_tag:
        problems.append(f"installed torch is {fingerprint.abi_tag}, "
                        f"the easyconfig declares {abi_tag}")
    if problems:
        raise EasyBuildError("torchstack: %s", "; ".join(problems))


def consumer_module_dep(block: EasyBlock, text: str, fingerprint: Fingerprint | None) -> str:
    """The dependency lines with the consumer half before the one that loads PyTorch."""
    torch_module = modulefile.torch_module(block.cfg.dependencies())
    if fingerprint is None or fingerprint.role != "consumer" or torch_module is None:
        return text
    try:
        return modulefile.guard_module_text(text, fingerprint, block.short_mod_name, torch_module,
                                            block.module_generator.SYNTAX)
    except TorchstackError as err:
        raise EasyBuildError("torchstack: %s", err) from err


def provider_module_extra(block: EasyBlock, fingerprint: Fingerprint | None) -> str:
    """The provider half, for a module that installs torch itself; "" for any other."""
    if fingerprint is None or fingerprint.role != "provider":
        return ""
    return modulefile.provider_block(fingerprint, block.short_mod_name,
                                     block.module_generator.SYNTAX)


def libtorch_module_paths(pyshortver: str) -> dict[str, list[str]]:
    """Search paths, relative to the install dir, that make libtorch usable from C++.

    What upstream's PyTorch easyblock and `-whl` easyconfigs set: CMAKE_PREFIX_PATH for
    `find_package(Torch)` (torch/share/cmake/Torch/TorchConfig.cmake), LIBRARY_PATH for
    linking against torch's libraries by name (EasyBuild's RPATH wrappers), LD_LIBRARY_PATH for
    programs linked without an RPATH to them. No CPATH: TorchConfig.cmake and
    torch.utils.cpp_extension give torch's include folders themselves, and torch/include
    carries its own copies of pybind11, protobuf (google/), fmt and oneDNN, which on CPATH
    would shadow the headers of the site's modules of those.
    """
    torch_dir = f"lib/python{pyshortver}/site-packages/torch"
    return {
        "CMAKE_PREFIX_PATH": [torch_dir],
        "LD_LIBRARY_PATH": [f"{torch_dir}/lib"],
        "LIBRARY_PATH": [f"{torch_dir}/lib"],
    }


def add_libtorch_module_paths(block: EasyBlock, fingerprint: Fingerprint | None) -> None:
    """In a module that installs torch itself, add `libtorch_module_paths` to the module load
    environment; paths the easyconfig's modextrapaths already gives for a variable are left
    to it (EasyBuild adds those next, with the easyconfig's options)."""
    if fingerprint is None or fingerprint.role != "provider":
        return
    pyshortver = ".".join(get_software_version("Python").split(".")[:2])
    environment = block.module_load_environment
    for name, paths in libtorch_module_paths(pyshortver).items():
        own = {os.path.normpath(p) for p in _easyconfig_paths(block.cfg["modextrapaths"].get(name))}
        new = [p for p in paths if os.path.normpath(p) not in own]
        if not new:
            continue
        if name in environment:
            getattr(environment, name).extend(new)
        else:
            setattr(environment, name, new)


def _easyconfig_paths(value: object) -> list[str]:
    """The paths of one modextrapaths entry: a path, a list of them, or a dict with 'paths'."""
    if isinstance(value, dict):
        value = value.get("paths")
    if isinstance(value, str):
        return [value]
    return [str(p) for p in value] if isinstance(value, (list, tuple)) else []
