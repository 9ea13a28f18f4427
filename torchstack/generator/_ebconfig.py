"""EasyBuild's own easyconfig machinery, configured for reading a robot path and nothing else.

EasyBuild keeps its configuration in process-wide singletons (build options, configuration
variables) and caches robot look-ups keyed without the robot path. `session` installs a
minimal, quiet configuration for one robot path and puts back whatever was there before, so
reading easyconfigs writes no log file, creates no temporary folder, changes no process-wide
setting (tempfile.tempdir, umask) and leaves an enclosing EasyBuild run as it found it.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from easybuild.tools.build_log import EasyBuildError  # first: it sets up EasyBuild's loggers

from torchstack._files import MAX_EASYCONFIG, FileKindError, read_text

log = logging.getLogger(__name__)
_EB_LOGGER = logging.getLogger("fancyroot")  # the root of EasyBuild's loggers


def _easybuild_propagates() -> bool:
    """Whether EasyBuild's log records may reach the application's handlers: only when
    torchstack itself logs at debug level (EasyBuild logs every error it raises, and warns on
    import about optional modules it lacks)."""
    return log.isEnabledFor(logging.DEBUG)


_propagate = _EB_LOGGER.propagate
_EB_LOGGER.propagate = _propagate and _easybuild_propagates()
try:
    from easybuild.framework.easyconfig import easyconfig as _ec
    from easybuild.tools import LooseVersion
    from easybuild.tools.config import (
        LOCAL_VAR_NAMING_CHECK_LOG,
        BuildOptions,
        ConfigurationVariables,
        init_build_options,
    )
    from easybuild.tools.toolchain.utilities import search_toolchain
finally:
    _EB_LOGGER.propagate = _propagate

__all__ = ["SYSTEM", "EasyBuildError", "EasyconfigFacts", "candidate_files", "compare_versions",
           "find_easyconfig", "parse", "session", "toolchain_hierarchy", "toolchain_names"]

SYSTEM = ("system", "system")
_BUILD_OPTIONS = {
    "silent": True,  # no "== ..." lines on stdout
    "terse": True,  # no "found valid index" line
    "validate": False,
    "check_osdeps": False,
    "add_system_to_minimal_toolchains": True,  # the hierarchy ends with the system toolchain
    "local_var_naming_check": LOCAL_VAR_NAMING_CHECK_LOG,
}
_CONFIG_VARIABLES = {"module_naming_scheme": "EasyBuildMNS"}
_lock = threading.RLock()
_cached_for: tuple[str, ...] | None = None  # the robot path of EasyBuild's look-up caches


@dataclass(frozen=True)
class EasyconfigFacts:
    """What EasyBuild's parser says about one easyconfig file, templates resolved."""

    path: str
    name: str
    version: str
    versionsuffix: str
    toolchain: tuple[str, str]
    easyblock: str | None  # as declared in the file; None when EasyBuild derives it
    extensions: tuple[tuple[str, str], ...]  # (name, version) of exts_list entries
    dependencies: tuple[tuple[str, str, str], ...] = ()  # (name, version, versionsuffix)


@contextmanager
def session(robot_paths: Sequence[str] | None = None) -> Iterator[None]:
    """EasyBuild configured for `robot_paths` inside the block, as it was outside it.

    None: any robot path will do (parsing a named file), so keep the one cached.
    """
    global _cached_for
    with _lock:
        saved = _take_singletons()
        propagate = _EB_LOGGER.propagate
        # the callers log what they skip themselves, in one line
        _EB_LOGGER.propagate = propagate and _easybuild_propagates()
        paths = tuple(robot_paths) if robot_paths is not None else _cached_for or ()
        if saved or paths != _cached_for:
            _clear_robot_caches()
        _cached_for = paths
        try:
            init_build_options(build_options={**_BUILD_OPTIONS, "robot_path": list(paths)})
            ConfigurationVariables(dict(_CONFIG_VARIABLES), ignore_unknown_keys=True)
            yield
        finally:
            _take_singletons()
            if saved:  # an enclosing EasyBuild run must not see look-ups in our robot path
                _put_singletons(saved)
                _clear_robot_caches()
                _cached_for = None
            _EB_LOGGER.propagate = propagate


def _take_singletons() -> dict[type, Any]:
    instances: dict[type, Any] = BuildOptions.__class__._instances
    return {cls: instances.pop(cls) for cls in (BuildOptions, ConfigurationVariables)
            if cls in instances}


def _put_singletons(saved: dict[type, Any]) -> None:
    BuildOptions.__class__._instances.update(saved)


def _clear_robot_caches() -> None:
    """EasyBuild caches look-ups by name and version only, not by robot path."""
    _ec._easyconfig_files_cache.clear()
    _ec._easyconfigs_cache.clear()
    _ec._path_indexes.clear()
    _ec.get_toolchain_hierarchy.clear()


def parse(path: str) -> EasyconfigFacts:
    """One easyconfig file through EasyBuild's parser; EasyBuildError when it cannot be read.

    Needs a `session`. Results are cached per file version (path, size, modification time).
    """
    stat = os.stat(path)
    return _parse(os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _parse(path: str, size: int, mtime_ns: int) -> EasyconfigFacts:
    del size, mtime_ns  # only part of the cache key
    try:  # read here, bounded: EasyBuild's own read_file would wait on a FIFO for ever
        text = read_text(path, MAX_EASYCONFIG)
    except (OSError, FileKindError) as exc:
        raise EasyBuildError("%s", exc) from exc
    ec = _ec.EasyConfig(path, validate=False, rawtxt=text)
    with ec.allow_unresolved_templates():  # %(installdir)s resolves only at build time
        return _facts(path, ec)


def _facts(path: str, ec: Any) -> EasyconfigFacts:
    toolchain = ec["toolchain"]
    return EasyconfigFacts(
        path=path, name=str(ec["name"]), version=str(ec["version"]),
        versionsuffix=str(ec["versionsuffix"] or ""),
        toolchain=(str(toolchain["name"]), str(toolchain["version"])),
        easyblock=None if ec["easyblock"] is None else str(ec["easyblock"]),
        extensions=_extensions(ec["exts_list"]),
        dependencies=tuple((str(d["name"]), str(d["version"]), str(d["versionsuffix"] or ""))
                           for d in ec.dependencies()))


def _extensions(exts_list: Sequence[Any]) -> tuple[tuple[str, str], ...]:
    """(name, version) of each exts_list entry that states a version."""
    found = []
    for entry in exts_list or ():
        if isinstance(entry, (tuple, list)) and len(entry) >= 2 and isinstance(entry[1], str):
            found.append((str(entry[0]), entry[1]))
    return tuple(found)


def find_easyconfig(name: str, version: str) -> str | None:
    """EasyBuild's robot look-up of name-version.eb in the session's robot path."""
    found = _ec.robot_find_easyconfig(name, version)
    return None if found is None else str(found)


def toolchain_hierarchy(name: str, version: str) -> tuple[tuple[str, str], ...]:
    """The toolchain and its subtoolchains, down to system, as EasyBuild determines them.

    Needs a `session`; raises EasyBuildError when a toolchain easyconfig is missing or broken.
    """
    found = _ec.get_toolchain_hierarchy({"name": name, "version": version})
    ordered = [(str(tc["name"]), str(tc["version"]) or "system") for tc in reversed(found)]
    return tuple(SYSTEM if tc[0] == SYSTEM[0] else tc for tc in ordered)


@functools.lru_cache(maxsize=1)
def toolchain_names() -> frozenset[str]:
    """Every toolchain name that this EasyBuild knows."""
    _, classes = search_toolchain("")
    return frozenset(str(cls.NAME) for cls in classes)


def candidate_files(robot_path: str, name: str) -> list[str]:
    """The easyconfig files that EasyBuild's naming convention allows for `name`."""
    found: set[str] = set()
    for pattern in _ec.create_paths(robot_path, name, "*"):
        found.update(glob.glob(glob.escape(pattern[:-len("*.eb")]) + "*.eb"))
    return sorted(found)


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1, as EasyBuild orders versions (9.10.1 after 9.5.1, 2025.06 after 2024.06)."""
    a, b = LooseVersion(left), LooseVersion(right)
    return -1 if a < b else int(a > b)
