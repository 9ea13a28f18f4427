"""How the suite's tests are split between pytest-xdist's workers (scripts/test: --dist loadgroup).

A work unit is one test file, except that the files using a costly fixture that each worker
would make for itself share one unit: the Slurm test cluster (one on the machine at a time),
the stack installed for Environment Modules (a second install path with the CUDA 13 stack) and
the PyTorch modules of the eb install path (torch 2.13.0+cpu and the CUDA 13 stack, with the
consumers built on them). Such a file goes whole into the unit, with its other tests too:
their module fixtures (a file's own PyTorch modules beside the shared ones) would otherwise
be made on both workers. Two shared units that meet in one file become one. The other
session fixtures are made by each worker that needs them: wheels hard-link from the
machine's uv cache, so a second install costs an eb run, not its gigabytes.

Units are handed out longest first, by the durations of this machine's earlier runs under the
same EasyBuild (kept in the tests' cache), so that the workers finish together instead of one
of them starting a long unit when the other is done; a unit never measured goes first when it
uses a slow fixture (assume long), last otherwise. Within a unit, tests keep their collection
order (their module and class fixtures are made once).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from easybuild.tools.version import VERSION as EASYBUILD_VERSION

# fixture -> the unit of every test that uses it
SHARED_UNITS = {"slurm_cluster": "slurm", "em_env": "envmodules",
                "pytorch_cpu_module": "pytorch-modules", "cuda_wheels_module": "pytorch-modules"}
# The durations of each EasyBuild's runs apart: scripts/test runs the real-eb tests again under
# the oldest EasyBuild (scripts/eb-oldest), where they take other times.
RECORD = f"test-durations-easybuild-{EASYBUILD_VERSION}.json"


def shared_units(item: pytest.Item) -> list[str]:
    """The units of the shared fixtures `item` uses."""
    used = getattr(item, "fixturenames", ())
    return [name for fixture, name in SHARED_UNITS.items() if fixture in used]


def file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def units(items: Iterable[pytest.Item]) -> dict[str, str]:
    """The work unit of each test file: the shared unit one of its tests uses, else its own
    name. Files and shared units are joined wherever a file uses a shared fixture, so that a
    file using two of them puts both units, and all their files, into one."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for item in items:
        for shared in shared_units(item):
            # the shared unit's name wins: it names the unit in reports
            parent[root(file_of(item))] = root(shared)
    files = {file_of(item) for item in items}
    return {name: root(name) for name in files}


def plain_id(nodeid: str) -> str:
    """A report's node id without the group suffix pytest-xdist appends (`id@group`); a
    parameter id may hold an @ of its own, before its closing bracket."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


def group_and_order(items: list[pytest.Item], durations: Mapping[str, float]) -> None:
    """Mark each item with its unit (xdist_group) and sort the units longest first."""
    unit_of = units(items)
    members_of: dict[str, list[pytest.Item]] = {}
    for item in items:
        name = unit_of[file_of(item)]
        item.add_marker(pytest.mark.xdist_group(name))
        members_of.setdefault(name, []).append(item)

    def expected(members: list[pytest.Item]) -> float:
        known = [durations[item.nodeid] for item in members if item.nodeid in durations]
        if known:
            return sum(known)
        return math.inf if any(item.get_closest_marker("slow") for item in members) else 0.0

    # sorted is stable: units of equal length keep their order
    ordered = sorted(members_of.values(), key=expected, reverse=True)
    items[:] = [item for members in ordered for item in members]


def load(path: Path) -> dict[str, float]:
    """The recorded durations by test id; none where there is no readable record."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: float(v) for k, v in found.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def save(path: Path, measured: Iterable[tuple[str, float]]) -> None:
    """Merge this run's durations into the record (a partial run keeps the others), atomically:
    two runs may end at once."""
    record = load(path)
    record.update(measured)
    fd, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(record, handle, sort_keys=True, indent=0)
    os.replace(staging, path)
