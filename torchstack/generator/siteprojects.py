"""The torch consumers a site carries beyond the companions (`generate --with`), resolved for
one variant set: per architecture, the newest release its requirement admits whose
Requires-Dist accepts the set's torch and that has a wheel there; then predicted from range
reads of that wheel (index.wheelelf) and checked against the set's torch, so that a consumer
that cannot run on it is reported before anything is built, never written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from torchstack import compat, markers, variants
from torchstack.errors import TorchstackError
from torchstack.fingerprint import Fingerprint, TorchFacts, abi_tag
from torchstack.generator import abi
from torchstack.generator._releasetypes import Resolved, Target
from torchstack.generator.projects import About
from torchstack.generator.release import Resolver
from torchstack.index import consumers
from torchstack.index.catalog import CatalogIndex
from torchstack.index.protocol import Index, IndexFile

log = logging.getLogger(__name__)


@dataclass
class Found:
    """A site project for one variant set: what to write (if anything) and the report lines."""

    resolved: Resolved | None = None
    abi: str = ""  # the predicted class, for the report of the written easyconfig
    modulename: str | None = None  # what the sanity check imports, when not every module
    notes: list[str] = field(default_factory=list)


def dependency_order(found: list[Found], needs: dict[str, set[str]]) -> list[Found]:
    """`found` with each project after the listed projects it requires (the given order
    otherwise; a cycle keeps it)."""
    placed: list[Found] = []
    pending = [f for f in found if f.resolved is not None]
    while pending:
        names = {f.resolved.project for f in pending if f.resolved is not None}
        ready = [f for f in pending if f.resolved is not None
                 and not (needs[f.resolved.project] & names) - {f.resolved.project}]
        step = ready[:1] or pending[:1]  # one at a time keeps the given order among equals
        placed += step
        pending = [f for f in pending if f is not step[0]]
    return placed


def about(project: str) -> About:
    """The module of a site project: its name as its index spells it."""
    return About(project, f"https://pypi.org/project/{project}/",
                 f"{project}: a PyTorch extension, installed from its wheels.")


def resolve(resolver: Resolver, requirement: Requirement, torch: Resolved, variant: str,
            targets: Sequence[Target]) -> Found:
    """The project's release for the set's architectures, its prediction, or why none."""
    project = canonicalize_name(requirement.name)
    found = Found()
    chosen: dict[str, tuple[Index, Version, IndexFile, tuple[str, ...]]] = {}
    for target in targets:
        pick, why = _newest(resolver, requirement, torch, target)
        if pick is None:
            found.notes.append(f"{project}: not built for {target.arch}: {why}")
        else:
            chosen[target.arch] = pick
    if not chosen:
        return found
    version = max((v for _, v, _, _ in chosen.values()),
                  key=lambda v: (sum(c[1] == v for c in chosen.values()), v))
    index, _, _, requires = next(c for c in chosen.values() if c[1] == version)
    for arch, (_, other, _, _) in chosen.items():
        if other != version:
            found.notes.append(f"{project}: not built for {arch}: its newest fitting release "
                               f"{other} differs from {version}, taken for the others")
    wheels = {a: c[2] for a, c in chosen.items() if c[1] == version}
    resolved = Resolved(project, str(version), wheels, requires, index.location,
                        f"the newest {project} whose Requires-Dist accepts torch "
                        f"{torch.version}")
    return _checked(found, resolved, index, torch, variant)


def _newest(resolver: Resolver, requirement: Requirement, torch: Resolved, target: Target
            ) -> tuple[tuple[Index, Version, IndexFile, tuple[str, ...]] | None, str]:
    release = Version(torch.public_version)
    refused: list[str] = []
    for index in resolver.indexes:
        for version, wheels in resolver.versions(index, canonicalize_name(requirement.name),
                                                 [target], None, False):
            if not requirement.specifier.contains(version, prereleases=False):
                continue
            requires = resolver.requires_dist(index, wheels[target.arch])
            spec = _torch_spec(requires, target)
            if spec is not None and not spec.contains(release, prereleases=True):
                refused.append(f"{version} requires torch{spec}")
                continue
            return (index, version, wheels[target.arch], requires), ""
    if refused:
        return None, f"no release accepts torch {torch.version} ({'; '.join(refused[:2])})"
    unrecorded = _unrecorded(resolver, canonicalize_name(requirement.name))
    if unrecorded:
        return None, unrecorded
    return None, (f"no release that {str(requirement)!r} admits has a wheel for Python "
                  f"{target.python_version} on {target.arch}")


def _unrecorded(resolver: Resolver, project: str) -> str:
    """Offline, where no catalog recorded the project (it holds torch and what torch needs):
    say so, instead of reporting that the project has no wheel."""
    catalogs = [index for index in resolver.indexes if isinstance(index, CatalogIndex)]
    if not catalogs or any(project in catalog.projects for catalog in catalogs):
        return ""
    return (f"the catalog recorded no answer for {project} (recorded {catalogs[0].recorded}); "
            f"generate online to include it")


def _torch_spec(requires: tuple[str, ...], target: Target) -> SpecifierSet | None:
    """The specifier of the project's own requirement on torch that applies on `target`."""
    for line in requires:
        requirement = markers.parse(line, "site project")
        if requirement is not None and canonicalize_name(requirement.name) == "torch" \
                and target.applies(requirement):
            return requirement.specifier
    return None


def _checked(found: Found, resolved: Resolved, index: Index, torch: Resolved,
             variant: str) -> Found:
    """The prediction of each architecture's wheel checked against the set's torch: an
    architecture whose wheel cannot run on it is dropped with the reason; the class of each
    kept one goes to the report (once when they agree)."""
    provider = _provider(torch, variant)
    classes: dict[str, str] = {}
    for arch, file in sorted(resolved.wheels.items()):
        line, refusal, modules = _predicted(resolved, index, file, torch, provider)
        found.modulename = found.modulename or own_module(resolved.project, modules)
        if refusal is not None:
            found.notes.append(f"{resolved.project}: not built for {arch}: {refusal}")
        else:
            classes[arch] = line
    if not classes:
        return found
    found.resolved = dataclasses.replace(
        resolved, wheels={a: f for a, f in resolved.wheels.items() if a in classes})
    lines = set(classes.values())
    found.abi = lines.pop() if len(lines) == 1 else \
        "; ".join(f"on {arch}: {line}" for arch, line in classes.items())
    return found


def _predicted(resolved: Resolved, index: Index, file: IndexFile, torch: Resolved,
               provider: Fingerprint) -> tuple[str, str | None, tuple[str, ...]]:
    """The report text of one wheel's predicted class, why it cannot run (or None), and the
    modules it installs at the top level."""
    label = f"{resolved.project} {resolved.version}"
    try:
        prediction = consumers.predict(index, file)
    except TorchstackError as exc:
        log.debug("%s: no prediction: %s", label, exc)
        return f"{label}: class recorded at install ({exc})", None, ()
    predicted = prediction.fingerprint
    if predicted is None:
        return (f"{label}: does not depend on torch (no torch requirement, no libtorch link)",
                None, prediction.top_level)
    assumed = compat.assume_built_against(provider, predicted)
    verdict = compat.check(provider, assumed)
    if not verdict.compatible:
        return "", "; ".join(verdict.reasons), prediction.top_level
    line = dataclasses.replace(prediction, fingerprint=assumed).summary(label)
    if assumed is not predicted:  # what install records too (compat.assume_built_against)
        line += f" (no torch release in its metadata: taken as built on {torch.version})"
    return line, None, prediction.top_level


def own_module(project: str, modules: Sequence[str]) -> str | None:
    """The module named after the project when the wheel installs others beside it (fbgemm-
    gpu-cpu's wheel ships `list_versions`, which needs click): the sanity check imports that
    one only. None when every module is the project's own."""
    name = project.replace("-", "_")
    own = [m for m in modules if name == m or name.startswith(m + "_")]
    if not own or len(own) == len(modules):
        return None
    return max(own, key=len)


def _provider(torch: Resolved, variant: str) -> Fingerprint:
    """The fingerprint the set's official torch wheel will record, from version and variant."""
    release = Version(torch.version)
    parsed = variants.parse(variant)
    facts = TorchFacts(release.public, release.local, abi.cxx11_abi(release, variant),
                       parsed.cuda if parsed else None, parsed.rocm if parsed else None)
    cuda_major = int(facts.cuda.split(".")[0]) if facts.cuda else None
    return Fingerprint("provider", "torch", torch.version, facts, None, None, cuda_major,
                       abi_tag("provider", None, facts))
