"""What torchstack's easyblocks add to EasyBuild's steps, shared by PyTorchWheels and PyTorchSource.

Each function takes the running easyblock (an EasyBuild EasyBlock; EasyBuild has no type
information) and reports problems as EasyBuildError with a `torchstack:` prefix, so that both
easyblocks stay glue and record the same fingerprint file, whatis line and guard halves:
- post-processing: fingerprint the installation, refuse consumers that do not fit the torch
  under them, write `<installdir>/easybuild/torchstack-fingerprint.json` (`record_fingerprint`,
  which the hooks file calls for installations of any other easyblock too);
- sanity check: every shared object finds its libraries, in a thread beside EasyBuild's own
  sanity commands (`start_library_check`, `finish_library_check`), and the installed torch is
  the one the easyconfig declares (`check_declared_torch`); PyTorchWheels' other work beside
  the steps (byte-compile, import and C++ extension checks) is install.background's;
- permissions: EasyBuild's step reading the installation once (`adjust_permissions`), on the
  EasyBuild releases that was tested with (install.ebversions);
- module file: the consumer half before the dependency on PyTorch, the provider half at the
  end (`consumer_module_dep`, `provider_module_extra`); with `eb --module-only` no step has
  fingerprinted the installation, so the one it recorded earlier is used
  (`recorded_fingerprint`); a module that installs torch itself puts torch's CMake config and
  libraries on the module's search paths (`add_libtorch_module_paths`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from easybuild.tools.build_log import EasyBuildError
from easybuild.tools.modules import get_software_root, get_software_version

from torchstack.distributions import DistributionError
from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint
from torchstack.guards import modulefile, record
from torchstack.install import libraries, permissions, torchcheck

EasyBlock = Any  # easybuild.framework.easyblock.EasyBlock
T = TypeVar("T")


def dependency_roots(block: EasyBlock, runtime_only: bool = False) -> list[str]:
    """Install roots of the loaded dependency modules, in the easyconfig's order."""
    names = [dep["name"] for dep in block.cfg.dependencies(runtime_only=runtime_only)]
    return [root for root in (get_software_root(name) for name in names) if root]


def record_fingerprint(block: EasyBlock, any_easyblock: bool = False) -> Fingerprint | None:
    """Fingerprint the installation, refuse consumers that do not fit the torch under them,
    record the fingerprint and add its whatis line; the fingerprint as recorded (with its
    guard clauses), None when the installation holds nothing
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
    if found.fingerprint is None:
        return None
    # as the file records it: the module guards carry the guard clauses written there
    recorded = compat.recorded(found.fingerprint)
    try:
        record.write_fingerprint(block.installdir, recorded)
    except TorchstackError as err:
        raise EasyBuildError("torchstack: %s", err) from err
    _whatis(block, found.fingerprint, any_easyblock)
    return recorded


def recorded_fingerprint(block: EasyBlock, any_easyblock: bool = False) -> Fingerprint | None:
    """The fingerprint the installation recorded before (eb --module-only), with its whatis;
    `any_easyblock` (the hooks file): the whatis line is only logged."""
    try:
        found = record.read_fingerprint(block.installdir)
    except TorchstackError as err:
        raise EasyBuildError("torchstack: %s", err) from err
    if found is not None:
        _whatis(block, found, any_easyblock)
    return found


def _whatis(block: EasyBlock, fingerprint: Fingerprint, any_easyblock: bool) -> None:
    """Log the fingerprint's whatis line; a torchstack easyblock also adds it to its module's
    whatis, the hooks file (`any_easyblock`) only logs it."""
    line = record.whatis_line(fingerprint)
    if not any_easyblock and line not in (block.cfg["whatis"] or []):
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

    return in_thread(resolve)


def in_thread(task: Callable[[], T]) -> Future[T]:
    """Run `task` in a thread of its own, beside what the step does next. A daemon thread:
    every step waits for what it started, and a command that could not be stopped (see
    background.stop_command) must not keep `eb` from exiting, as an executor's thread would."""
    future: Future[T] = Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(task())
            except BaseException as err:  # handed to the waiter, as an executor does
                future.set_exception(err)

    threading.Thread(target=run, name="torchstack", daemon=True).start()
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


def adjust_permissions(block: EasyBlock, permissions_step: Callable[[], None]) -> None:
    """Run EasyBuild's `permissions_step`, reading the installation once
    (`permissions.read_once`, on the EasyBuild releases it was tested with), with a line for
    its own time, apart from the wait for the byte-compile (logged with that)."""
    start = time.perf_counter()
    with permissions.read_once(block.log) as replaced:
        permissions_step()
    how = "reading the installation once" if replaced else "EasyBuild's own"
    block.log.info("torchstack: permissions step, %s, took %.3f s", how,
                   time.perf_counter() - start)


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
