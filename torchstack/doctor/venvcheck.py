"""A venv made by `torchstack venv`: its constraints, its modules, and what drifted.

The venv records the modules it was made on and pins every distribution they provide.
Doctor says where the constraints are and whether pip still reads them, warns when the
recorded modules are not loaded, and reports drift: a pinned distribution installed in the
venv at another version, and above all a second torch in the venv, which hides the module's
torch (or hides behind it) and drops the module's guards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion

from torchstack.distributions import normalize_name
from torchstack.doctor.findings import Finding, info, problem, warning
from torchstack.doctor.interpreter import Interpreter
from torchstack.doctor.stack import Placed, Stack
from torchstack.doctor.venvrecord import (
    CONSTRAINTS,
    PIP_CONF,
    RECORD,
    VenvRecord,
    names_file,
    pip_conf_value,
    read_record,
    wired_constraints,
)


def active_venv_python(environ: Mapping[str, str], running_prefix: str) -> str | None:
    """The python of an activated torchstack venv ($VIRTUAL_ENV) that is not the running
    one: `torchstack doctor` installed elsewhere then inspects the venv the user is in."""
    venv = environ.get("VIRTUAL_ENV")
    if not venv or os.path.realpath(venv) == os.path.realpath(running_prefix):
        return None
    python = os.path.join(venv, "bin", "python")
    if not os.path.isfile(os.path.join(venv, RECORD)) or not os.path.isfile(python):
        return None
    return python


def venv_findings(stack: Stack, interpreter: Interpreter, environ: Mapping[str, str]
                  ) -> list[Finding]:
    """Findings about a torchstack venv; none for any other interpreter."""
    if not interpreter.in_venv:
        return []
    prefix = Path(interpreter.prefix)
    try:
        record = read_record(prefix)
    except ValueError as exc:
        return [warning("venv-record-unreadable", str(exc))]
    if record is None:
        return []
    findings = [_constraints_info(prefix, record)]
    findings += _wiring(prefix, environ)
    findings += _modules(record, environ)
    findings += list(_drift(stack, prefix, record))
    return findings


def _constraints_info(prefix: Path, record: VenvRecord) -> Finding:
    torch = record.pins.get("torch", record.torch)
    return info("venv-constraints",
                f"venv made by torchstack on {' '.join(record.modules) or 'no named module'}: "
                f"pip constraints {prefix / CONSTRAINTS} pin {len(record.pins)} distributions "
                f"(torch=={torch})")


def _wiring(prefix: Path, environ: Mapping[str, str]) -> list[Finding]:
    constraints = prefix / CONSTRAINTS
    findings = []
    try:
        wired = names_file(wired_constraints(prefix), constraints)
        why = f"{prefix / PIP_CONF} does not name {constraints}"
    except ValueError as exc:  # a FIFO, not UTF-8, not INI: pip cannot read it either
        wired, why = False, str(exc)
    if not wired:
        findings.append(warning(
            "venv-constraints-unwired",
            f"{why}: pip install may replace the module's torch",
            f"put '[install]' and 'constraint = {pip_conf_value(constraints)}' in "
            f"{prefix / PIP_CONF}"))
    if "PIP_CONSTRAINT" in environ and not names_file(environ["PIP_CONSTRAINT"].split(),
                                                      constraints):
        findings.append(warning(
            "venv-constraints-overridden",
            f"$PIP_CONSTRAINT ({environ['PIP_CONSTRAINT']!r}) replaces the venv's constraints "
            f"{constraints}: pip install may replace the module's torch",
            f"unset PIP_CONSTRAINT, or add {constraints} to it"))
    return findings


def _modules(record: VenvRecord, environ: Mapping[str, str]) -> list[Finding]:
    loaded = set(environ.get("LOADEDMODULES", "").split(":"))
    missing = [m for m in record.modules if m not in loaded]
    if not missing:
        return []
    return [warning("venv-modules-not-loaded",
                    f"the venv was made on {' '.join(record.modules)}; not loaded: "
                    f"{' '.join(missing)}", f"module load {' '.join(missing)}")]


def _drift(stack: Stack, prefix: Path, record: VenvRecord) -> Iterator[Finding]:
    """Pinned distributions installed in the venv itself: another version, or torch."""
    pins = {normalize_name(k): (k, v) for k, v in record.pins.items()}
    root = os.path.realpath(prefix).rstrip("/") + "/"
    for placed in [*stack.visible.values(), *stack.hidden]:
        pin = pins.get(placed.dist.key)
        if pin is None or not os.path.realpath(placed.folder).startswith(root):
            continue
        if not _satisfies(placed.dist.version, pin[1]):
            yield problem("venv-drift",
                          f"{placed.label} in the venv ({placed.folder}) contradicts its "
                          f"constraint {pin[0]}=={pin[1]} from the modules",
                          f"pip uninstall {placed.dist.name} in the venv {prefix}")
        if placed.dist.key == "torch":
            yield _second_torch(placed, prefix, record)


def _second_torch(placed: Placed, prefix: Path, record: VenvRecord) -> Finding:
    return problem("venv-second-torch",
                   f"a second torch, {placed.label}, is installed in the venv "
                   f"({placed.folder}) beside the torch {record.torch} of "
                   f"{' '.join(record.modules) or 'the modules'}",
                   f"pip uninstall torch in the venv {prefix}")


def _satisfies(version: str, pinned: str) -> bool:
    try:
        return SpecifierSet(f"=={pinned}").contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return version == pinned
