"""Whether torch and its consumers find what their Requires-Dist asks for on sys.path.

A venv created without --system-site-packages over a PyTorch module sees the module's torch
through $PYTHONPATH, but not sympy or numpy from the Python module under it: `import torch`
then fails. This is `pip check` for the distributions that matter to torch, on the real
sys.path. The CUDA wheels torch pins are left to the library check, which knows whether a
module provides them instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from packaging.requirements import Requirement
from packaging.version import InvalidVersion

from torchstack import cudalibs, markers
from torchstack.distributions import normalize_name
from torchstack.doctor.findings import Finding, problem
from torchstack.doctor.stack import Placed, Stack


def requirement_findings(stack: Stack, python_version: str) -> list[Finding]:
    """A problem for every unmet requirement of torch and of each consumer."""
    owners = ([stack.torch] if stack.torch else []) + [c.placed for c in stack.consumers]
    findings = []
    for owner in owners:
        label = owner.label
        if owner is stack.torch and stack.provider is not None:
            label = f"torch {stack.provider.version}"  # with its local tag, as version.py has it
        for requirement in applicable(owner, python_version):
            finding = _check(label, requirement, stack)
            if finding is not None:
                findings.append(finding)
    return findings


def applicable(owner: Placed, python_version: str) -> Iterator[Requirement]:
    """The unconditional requirements of `owner` that apply to this Python on Linux, minus
    torch itself (the compatibility check covers it) and pinned CUDA wheels."""
    environment = markers.for_interpreter(python_version)
    for line in owner.dist.requires_dist:
        requirement = markers.parse(line, owner.label)
        if requirement is None or not markers.applies(requirement, environment):
            continue
        key = normalize_name(requirement.name)
        if key == "torch" or cudalibs.wheel_projects([key]):
            continue
        yield requirement


def _check(owner: str, requirement: Requirement, stack: Stack) -> Finding | None:
    wanted = f"{requirement.name}{requirement.specifier}"
    found = stack.visible.get(normalize_name(requirement.name))
    install = f"pip install '{wanted}', or load the module that provides {requirement.name}"
    if found is None:
        return problem("requirement-missing",
                       f"{owner} requires {wanted}, which is not on sys.path", install)
    try:
        fits = requirement.specifier.contains(found.dist.version, prereleases=True)
    except InvalidVersion:
        fits = False
    if fits:
        return None
    return problem("requirement-unmet",
                   f"{owner} requires {wanted}, but {found.label} is found first "
                   f"(in {found.folder})", install)
