"""Upstream easyconfigs that share a generated file's name, and how they differ.

The printed build commands put the output folder first on the robot path, so a generated
file shadows an upstream file of the same name (upstream's PyTorch-2.9.1-foss-2025a-CUDA-
12.8.0-whl.eb is a PythonBundle with a CUDA-wheel-bundle; torchstack's is not). The report
names each such namesake and what differs, so that nobody is surprised by which one is built.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torchstack.generator import toolchains
from torchstack.generator._ebconfig import EasyconfigFacts


@dataclass(frozen=True)
class Facts:
    """What a generated easyconfig builds: its easyblock, dependencies and extensions."""

    easyblock: str
    dependencies: tuple[str, ...]  # as rendered: "('CUDA', '12.8.0', '', SYSTEM)"
    extensions: tuple[tuple[str, str], ...]  # (name, version)


def report(planned: Iterable[tuple[str, Facts]],
           robot_paths: Sequence[str] | None) -> list[str]:
    """One line per upstream namesake of a generated file, saying how it differs."""
    paths = list(robot_paths) if robot_paths is not None else toolchains.default_robot_paths()
    lines = []
    for filename, facts in planned:
        name = filename.split("-", 1)[0]
        for theirs in toolchains.namesakes(filename, name, paths):
            differences = "; ".join(compare(facts, theirs)) or "same dependencies and extensions"
            lines.append(f"{filename} shadows upstream's {theirs.path} on the robot path "
                         f"(the output folder comes first): {differences}")
    return lines


def compare(ours: Facts, theirs: EasyconfigFacts) -> list[str]:
    """What differs between a generated easyconfig and an upstream one of the same name."""
    found = []
    if theirs.easyblock != ours.easyblock:
        found.append(f"easyblock {theirs.easyblock} -> {ours.easyblock}")
    dependencies = _changes({d[0]: d[1] for d in theirs.dependencies},
                            dict(_dependency(d) for d in ours.dependencies))
    if dependencies:
        found.append(f"dependencies {dependencies}")
    extensions = _changes(dict(theirs.extensions), dict(ours.extensions))
    if extensions:
        found.append(f"extensions {extensions}")
    return found


def _dependency(rendered: str) -> tuple[str, str]:
    """('CUDA', '12.8.0', '', SYSTEM) -> ('CUDA', '12.8.0')."""
    fields = ast.parse(rendered, mode="eval").body
    assert isinstance(fields, ast.Tuple)
    name, version = (ast.literal_eval(field) for field in fields.elts[:2])
    return str(name), str(version)


def _changes(before: dict[str, str], after: dict[str, str]) -> str:
    """'-CUDA-wheel-bundle 12.8.0, +sympy 1.14.0, torch 2.9.1+cu128 -> 2.9.1' style."""
    changes = [f"-{name} {before[name]}" for name in before if name not in after]
    changes += [f"+{name} {after[name]}" for name in after if name not in before]
    changes += [f"{name} {before[name]} -> {after[name]}" for name in after
                if name in before and before[name] != after[name]]
    return ", ".join(changes)
