"""The torch consumers of a variant set, resolved by one walk-back: the companions
(torchvision, torchaudio), the projects a site carries (`generate --with`), and `classify`,
which reports what this resolves. Each project's releases are tried newest first until one
whose Requires-Dist accepts the set's torch and whose wheels, predicted from range reads
(index.wheelelf), run on it (compat, with the symbol check and the built-on release inferred
from evidence where the metadata names none), so that a consumer that cannot run on it is
reported before anything is built, never written.
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

from torchstack import markers
from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint
from torchstack.generator import abi
from torchstack.generator._releasetypes import Request, Resolved, Target, VariantSet
from torchstack.generator.projects import About
from torchstack.generator.release import Resolver, wheel_name_version
from torchstack.index.catalog import CatalogIndex
from torchstack.index.protocol import Index, IndexFile
from torchstack.index.torchsymbols import BuiltOn, built_on, platform_wheels
from torchstack.index.wheelelf import Prediction
from torchstack.symbolcheck import SymbolCheck

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


WALK_BACK = 12  # releases of one project tried, newest first, before giving up
COMPANIONS = ("torchvision", "torchaudio")


def with_companions(resolver: Resolver, request: Request) -> list[VariantSet]:
    """The variant sets of the release (Resolver.resolve), each with its companions."""
    sets = []
    for found in resolver.resolve(request):
        targets = [t for t in request.targets() if t.arch in found.torch.wheels]
        chosen, notes = [], list(found.notes)
        for project in COMPANIONS:
            result = resolve(resolver, Requirement(project), found.torch, found.variant,
                             targets, None, companion=True)
            notes += result.notes
            if result.resolved is not None:
                chosen.append(result.resolved)
        sets.append(dataclasses.replace(found, companions=(*chosen, *found.companions),
                                        notes=tuple(notes)))
    return sets


def resolve(resolver: Resolver, requirement: Requirement, torch: Resolved, variant: str,
            targets: Sequence[Target], walk_back: int | None = WALK_BACK,
            companion: bool = False) -> Found:
    """The newest release of the project that fits the set's torch on its architectures.

    Walks back from the newest release its requirement admits, at most `walk_back` releases
    (None: all): a release fits when its Requires-Dist accepts the torch and every wheel of
    it that the architectures take runs on the set's torch as predicted (link class, CUDA,
    symbols). What one wheel shows holds for the release: a refusal on one architecture
    passes the release over on all. The report names the releases passed over and why.
    A `companion` is looked for on torch's index only, in torch's build (a +cpu torch takes
    +cpu companions; PyPI's untagged ones are CUDA), pre-releases included (a torch release
    candidate takes theirs) and with a wheel for every architecture; its releases pin torch
    exactly, so the walk is not bounded: a release passed over costs one metadata read.
    """
    project = canonicalize_name(requirement.name)
    provider = abi.provided(torch.version, variant)
    found = Found()
    passed: list[str] = []
    candidates = (_companion_candidates(resolver, project, torch, targets) if companion
                  else _candidates(resolver, requirement, targets))
    for index, version, wheels in candidates[:walk_back]:
        refusal = _requires_refusal(resolver, index, wheels, torch, targets, companion)
        classes: dict[str, str] = {}
        if refusal is None:
            refusal = _fits(resolver, index, project, version, wheels, torch, provider,
                            classes, found)
        if refusal is not None:
            passed.append(f"{version} ({refusal})")
            continue
        requires = resolver.requires_dist(index, next(iter(wheels.values())))
        why = f"the newest {project} that runs on torch {torch.version}"
        found.resolved = Resolved(project, str(version), dict(wheels), requires, index.location,
                                  why)
        lines = set(classes.values())
        found.abi = lines.pop() if len(lines) == 1 else \
            "; ".join(f"on {arch}: {line}" for arch, line in sorted(classes.items()))
        for target in targets:
            if target.arch not in wheels:
                found.notes.append(f"{project}: not built for {target.arch}: {version} has no "
                                   f"wheel for Python {target.python_version} there")
        if passed:
            found.notes.append(f"{project}: {version} taken; newer releases passed over: "
                               + _shown(passed))
        return found
    why = _why_none(resolver, requirement, targets, torch, passed, len(candidates), walk_back,
                    companion)
    found.notes.append(f"{project}: not built: {why}")
    return found


def _candidates(resolver: Resolver, requirement: Requirement, targets: Sequence[Target]
                ) -> list[tuple[Index, Version, dict[str, IndexFile]]]:
    """The releases the requirement admits with a wheel for at least one target, newest
    first (the first index that has a release wins), each with its wheel per architecture."""
    project = canonicalize_name(requirement.name)
    found: dict[Version, tuple[Index, dict[str, IndexFile]]] = {}
    for index in resolver.indexes:
        for file in resolver.files(index, project):
            version = Version(wheel_name_version(file.filename)[1].public)
            if not requirement.specifier.contains(version, prereleases=False):
                continue
            for target in targets:
                if target.misfit(file.filename) is None:
                    entry = found.setdefault(version, (index, {}))
                    if entry[0] is index:
                        entry[1].setdefault(target.arch, file)
    return [(index, version, wheels) for version, (index, wheels)
            in sorted(found.items(), reverse=True)]


def _companion_candidates(resolver: Resolver, project: str, torch: Resolved,
                          targets: Sequence[Target]
                          ) -> list[tuple[Index, Version, dict[str, IndexFile]]]:
    """A companion's releases of torch's build on torch's index, newest first."""
    index = index_of(resolver, torch)
    local = Version(torch.version).local
    return [(index, version, wheels)
            for version, wheels in resolver.versions(index, project, list(targets), local)]


def _requires_refusal(resolver: Resolver, index: Index, wheels: dict[str, IndexFile],
                      torch: Resolved, targets: Sequence[Target], companion: bool
                      ) -> str | None:
    """Why the release's Requires-Dist refuses the set's torch, or None. A companion must
    name the torch it was built for: one that names none (torchaudio 2.11.0) says nothing
    about the release it fits."""
    release = Version(torch.public_version)
    requires = resolver.requires_dist(index, next(iter(wheels.values())))
    for target in targets:
        spec = _torch_spec(requires, target)
        if spec is None and companion:
            return "names no torch release in its Requires-Dist"
        if spec is not None and not spec.contains(release, prereleases=True):
            return f"requires torch{spec}"
    return None


def _fits(resolver: Resolver, index: Index, project: str, version: Version,
          wheels: dict[str, IndexFile], torch: Resolved, provider: Fingerprint,
          classes: dict[str, str], found: Found) -> str | None:
    """Why one wheel of the release cannot run on the set's torch, or None with the class of
    each wheel in `classes`."""
    label = f"{project} {version}"
    for arch, file in sorted(wheels.items()):
        try:
            prediction = resolver.predict(index, file)
        except TorchstackError as exc:
            log.debug("%s: no prediction: %s", label, exc)
            classes[arch] = f"{label}: class recorded at install ({exc})"
            continue
        found.modulename = found.modulename or own_module(project, prediction.top_level)
        predicted = prediction.fingerprint
        if predicted is None:
            classes[arch] = (f"{label}: does not depend on torch (no torch requirement, no "
                             "libtorch link)")
            continue
        judged = _judged(resolver, index, file, prediction, predicted, torch, provider)
        if isinstance(judged, str):
            return f"on {arch}: {judged}"
        consumer, symbols, note = judged
        verdict = compat.check(provider, consumer, symbols)
        if not verdict.compatible:
            return f"on {arch}: {'; '.join(verdict.reasons)}"
        line = dataclasses.replace(prediction, fingerprint=consumer).summary(label)
        classes[arch] = line + (f" ({note})" if note else "")
    return None


def _judged(resolver: Resolver, index: Index, file: IndexFile, prediction: Prediction,
            predicted: Fingerprint, torch: Resolved, provider: Fingerprint
            ) -> tuple[Fingerprint, SymbolCheck | None, str] | str:
    """The consumer as compat is to judge it, the symbol check, and how its release was found;
    or why it cannot be judged. A C++ consumer whose metadata names no release is never taken
    as built on the set's torch: its symbols decide, or, if it registers kernels through the
    dispatcher, the release they bracket (torchstack.index.torchsymbols)."""
    if predicted.link != "cxx" or predicted.torch.release is not None:
        return predicted, None, ""
    torch_file = torch.wheels.get(_arch_of(file, torch))
    libraries = predicted.torch_libraries
    try:
        if not predicted.registers_kernels and torch_file is not None:
            check = resolver.torch_symbols.verify(index_of(resolver, torch), torch_file,
                                                   prediction.imports, libraries)
            return predicted, check, ""
        if not predicted.registers_kernels:
            return "its libtorch symbols cannot be checked: no torch wheel for its platform"
        built = _bracket(resolver, file, prediction, predicted, torch)
    except TorchstackError as exc:
        return (f"names no torch release, and the symbols that would decide could not be read "
                f"from torch's wheels: {exc}")
    if built.release is None:
        return f"registers kernels through libtorch's dispatcher and names no torch release; " \
            f"{built.evidence}"
    consumer = compat.assume_built_against(
        dataclasses.replace(provider, torch=dataclasses.replace(provider.torch,
                                                                release=built.release)),
        predicted)
    return consumer, None, built.evidence


def _bracket(resolver: Resolver, file: IndexFile, prediction: Prediction,
             predicted: Fingerprint, torch: Resolved) -> BuiltOn:
    """The release a dispatcher-bound consumer was built on, from torch's wheels on the index
    for the consumer's platform."""
    index = index_of(resolver, torch)
    target = _target_of(file, torch)
    flavour = compat.needed_flavour(predicted)
    wheels = platform_wheels(resolver.files(index, "torch"), target[0], target[1],
                             flavour if flavour != "cpu" else None)
    return built_on(resolver.torch_symbols, index, wheels, prediction.imports,
                    predicted.torch_libraries, file.upload_time,
                    Version(torch.public_version))


def index_of(resolver: Resolver, torch: Resolved) -> Index:
    """The index the set's torch came from."""
    return next((i for i in resolver.indexes if i.location == torch.index), resolver.indexes[0])


def _arch_of(file: IndexFile, torch: Resolved) -> str:
    return next((a for a, f in torch.wheels.items() if a in file.filename), "")


def _target_of(file: IndexFile, torch: Resolved) -> tuple[tuple[int, int], str]:
    """The Python and architecture of the set's torch wheel for the consumer's platform."""
    arch = _arch_of(file, torch) or "x86_64"
    torch_file = torch.wheels.get(arch)
    tag = (torch_file.filename if torch_file else file.filename).split("-")[-3]
    digits = tag[2:] if tag.startswith("cp") and tag[2:].isdigit() else "313"
    return (int(digits[0]), int(digits[1:])), arch


def _why_none(resolver: Resolver, requirement: Requirement, targets: Sequence[Target],
              torch: Resolved, passed: list[str], candidates: int, walk_back: int | None,
              companion: bool) -> str:
    if passed:
        more = f" (of {candidates}; raise --walk-back to try older ones)" \
            if walk_back is not None and candidates > walk_back else ""
        return (f"no release among the {len(passed)} newest{more} runs on torch "
                f"{torch.version}: " + _shown(passed))
    if companion:
        return _no_companion(resolver, canonicalize_name(requirement.name), torch, targets)
    unrecorded = _unrecorded(resolver, canonicalize_name(requirement.name))
    if unrecorded:
        return unrecorded
    pythons = sorted({t.python_version for t in targets})
    return (f"no release that {str(requirement)!r} admits has a wheel for Python "
            f"{', '.join(pythons)} on {', '.join(t.arch for t in targets)}")


def _no_companion(resolver: Resolver, project: str, torch: Resolved,
                  targets: Sequence[Target]) -> str:
    """Why torch's index has no release of the companion to try."""
    index = index_of(resolver, torch)
    local = Version(torch.version).local
    build = f"+{local} builds" if local else "untagged builds"
    yanked = resolver.only_yanked(project, None, targets, [index])
    return (resolver.not_listed_by(project, [index])
            or (f"every wheel on {index.location} is yanked {yanked}" if yanked else "")
            or _unrecorded(resolver, project)
            or f"no release on {index.location} has wheels for "
               f"{', '.join(t.arch for t in targets)} ({build} only)")


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


def _shown(passed: list[str], most: int = 3) -> str:
    """The first releases passed over and why, and how many more."""
    more = f"; and {len(passed) - most} older" if len(passed) > most else ""
    return "; ".join(passed[:most]) + more


def own_module(project: str, modules: Sequence[str]) -> str | None:
    """The module named after the project when the wheel installs others beside it (fbgemm-
    gpu-cpu's wheel ships `list_versions`, which needs click): the sanity check imports that
    one only. None when every module is the project's own."""
    name = project.replace("-", "_")
    own = [m for m in modules if name == m or name.startswith(m + "_")]
    if not own or len(own) == len(modules):
        return None
    return max(own, key=len)
