"""Requires-Dist lines: parsed leniently, and the marker environments they are evaluated in.

Generation evaluates a line for a target, a Linux CPython X.Y on one architecture, whatever
host it runs on (`for_target`); the doctor evaluates it for an interpreter on this host, whose
Python version it names (`for_interpreter`). `Marker.evaluate` starts from this host's
environment and overlays the one given, so `for_interpreter` names only what differs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement

__all__ = ["applies", "for_interpreter", "for_target", "parse"]

log = logging.getLogger(__name__)


def parse(line: str, where: str) -> Requirement | None:
    """The requirement of a Requires-Dist line; None (logged at debug level) when it does not
    parse: a wheel's unusable line is skipped, as pip skips it."""
    try:
        return Requirement(line)
    except InvalidRequirement:
        log.debug("%s: ignoring unparsable Requires-Dist %r", where, line)
        return None


def for_target(python_version: str, arch: str, extra: str = "") -> dict[str, str]:
    """Every marker variable of CPython `python_version` (3.13) on Linux `arch`, this host
    aside: what a wheel set for that target must satisfy."""
    return {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
        "platform_machine": arch, "platform_release": "", "platform_version": "",
        "implementation_version": f"{python_version}.0", "extra": extra,
    }


def for_interpreter(python_version: str, extra: str = "") -> dict[str, str]:
    """This host's marker variables with another interpreter's `python_version`."""
    return {"python_version": python_version, "extra": extra}


def applies(requirement: Requirement, environment: Mapping[str, str],
            extras: Iterable[str] = ("",)) -> bool:
    """Whether `requirement` applies in `environment` for one of `extras` ("": the project's
    own requirements, which are the only ones a line without a marker is)."""
    if requirement.marker is None:
        return "" in extras
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras)
