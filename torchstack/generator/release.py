"""A torch release on the simple indexes: its wheels per variant, Python and architecture.

Resolution reads file lists (with their sha256) and one core-metadata file per project
version and variant, never a wheel. The variant of a file is its local version tag (`+cpu`,
`+cu128`, ...); a file without one (PyPI's default build) takes its variant from the CUDA
pins of its metadata, evaluated for each architecture. Triton is chosen by torch's
Requires-Dist on it; the companions (torchvision, torchaudio) go through the walk-back that
every torch consumer goes through (generator.siteprojects.with_companions).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from torchstack import cudalibs, markers, variants
from torchstack.errors import TorchstackError
from torchstack.generator._releasetypes import (
    ARCHITECTURES,
    Request,
    Resolved,
    Target,
    VariantSet,
)
from torchstack.index import consumers
from torchstack.index.protocol import Index, IndexFile, ProjectNotFoundError
from torchstack.index.torchsymbols import TorchSymbols
from torchstack.index.wheelelf import Prediction

__all__ = ["ARCHITECTURES", "ReleaseError", "Request", "Resolved", "Resolver",
           "Target", "VariantSet", "final_releases", "newest_release", "validate_version",
           "variant_from_pins", "wheel_name_version"]

log = logging.getLogger(__name__)

_CUDA_RUNTIME = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11",
                 cudalibs.TOOLKIT)


class ReleaseError(TorchstackError):
    """A release that the indexes do not offer, or offer in a form that cannot be used."""


@dataclass
class _Candidates:
    """torch files found for the release: variant -> index position -> architecture -> file."""

    by_variant: dict[str, dict[int, dict[str, IndexFile]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def best(self, variant: str) -> tuple[int, dict[str, IndexFile]] | None:
        """The index that offers the variant for the most architectures (the first on a tie):
        one index per variant keeps the wheels of all architectures one build."""
        found = self.by_variant.get(variant)
        if not found:
            return None
        position = min(found, key=lambda i: (-len(found[i]), i))
        return position, found[position]


class Resolver:
    """Resolves releases against indexes, reading each project version's metadata once."""

    def __init__(self, indexes: Sequence[Index]) -> None:
        if not indexes:
            raise ReleaseError("no index to resolve against")
        self.indexes = list(indexes)
        self._metadata: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self._files: dict[tuple[str, str], list[IndexFile]] = {}
        self._yanked: dict[tuple[str, str], list[IndexFile]] = {}
        self._not_listed: dict[tuple[str, str], str] = {}  # (location, project) -> its answer
        self.unreachable: dict[str, str] = {}  # index location -> why, when others answered
        self._predictions: dict[str, Prediction | TorchstackError] = {}
        self.torch_symbols = TorchSymbols()  # torch wheels' exports, read once per library

    def resolve(self, request: Request) -> list[VariantSet]:
        """Every requested variant of the release with torch and triton; ReleaseError if
        none."""
        validate_version(request.release, "torch")
        candidates = self._torch_candidates(request)
        wanted = request.variants or tuple(sorted(candidates.by_variant))
        if not request.variants:
            candidates.notes += [
                f"torch {request.release}: {variant} not checked: {location} did not answer"
                for location, variant in self._unchecked_variants()
                if variant not in candidates.by_variant]
        sets = []
        for variant in wanted:
            found = candidates.best(variant)
            if found is None:
                offered = ", ".join(sorted(candidates.by_variant)) or "none"
                candidates.notes.append(self._missing(
                    variant, f"torch {request.release}",
                    f"{variant} wheel for Python {request.python_version}",
                    f" (offered: {offered})"))
                continue
            index = self.indexes[found[0]]
            sets.append(self._variant_set(request, variant, index, found[1],
                                          list(candidates.notes)))
        if not sets:
            raise ReleaseError("; ".join(candidates.notes) or
                               f"torch {request.release} has no wheel on {self._where()}")
        return sets

    def _where(self) -> str:
        return ", ".join(index.location for index in self.indexes)

    def not_listed_by(self, project: str, indexes: Sequence[Index]) -> str | None:
        """What the indexes answered for `project` when every one said it does not list it
        ('https://.../torch/ answered HTTP 404 for torch'), else None."""
        answers = [self._not_listed.get((index.location, project), "") for index in indexes]
        return "; ".join(answers) if answers and all(answers) else None

    def only_yanked(self, project: str, release: Version | None, targets: Sequence[Target],
                     indexes: Sequence[Index]) -> str | None:
        """'(reason: ...)' when the indexes have wheels of `project` (`release`) for `targets`
        and all are yanked, else None. Called when no wheel that is not yanked fits."""
        yanked = [f for index in indexes for f in self._yanked.get((index.location, project), ())
                  if _fits(f, release, targets)]
        if not yanked:
            return None
        reasons = sorted({repr(f.yanked_reason) for f in yanked if f.yanked_reason})
        return f"(reason: {', '.join(reasons)})" if reasons else "(no reason given)"

    def unchecked(self, variant: str | None = None) -> list[str]:
        """Indexes that did not answer and could have offered `variant` (any, when None)."""
        return [location for location in self.unreachable
                if variant is None or variants.offered_by(location) in (None, variant)]

    def _unchecked_variants(self) -> list[tuple[str, str]]:
        return [(location, variant) for location in self.unreachable
                if (variant := variants.offered_by(location)) is not None]

    def _missing(self, variant: str | None, subject: str, what: str, offered: str = "") -> str:
        """'{subject}: no {what}', unless an index that did not answer might have had it."""
        silent = self.unchecked(variant)
        if silent:
            return f"{subject}: {what} not checked: {', '.join(silent)} did not answer"
        return f"{subject}: no {what}{offered}"

    def files(self, index: Index, project: str) -> list[IndexFile]:
        """The non-yanked wheels of `project` on `index` (cached per resolver)."""
        key = (index.location, project)
        if key not in self._files:
            files = [f for f in self._listed(index, project) if f.filename.endswith(".whl")]
            self._yanked[key] = [f for f in files if f.yanked]
            for yanked in self._yanked[key]:
                log.debug("skipping yanked %s", yanked.filename)
            self._files[key] = [f for f in files if not f.yanked]
        return self._files[key]

    def _listed(self, index: Index, project: str) -> list[IndexFile]:
        """index.files(project); [] from an index of several that did not answer, which is
        remembered (and not asked again) so that the report can name it."""
        if index.location in self.unreachable:
            return []
        try:
            return index.files(project)
        except ProjectNotFoundError as exc:
            log.debug("%s does not list %s", index.location, project)
            self._not_listed[(index.location, project)] = str(exc)
            return []
        except TorchstackError as exc:
            if len(self.indexes) == 1 or isinstance(exc, ReleaseError):
                raise
            log.debug("%s: %s", index.location, exc)
            self.unreachable[index.location] = str(exc)
            return []

    def predict(self, index: Index, file: IndexFile) -> Prediction:
        """A consumer wheel's predicted fingerprint, from range reads (once per wheel)."""
        if file.url not in self._predictions:
            try:
                self._predictions[file.url] = consumers.predict(index, file)
            except TorchstackError as exc:
                self._predictions[file.url] = exc
        found = self._predictions[file.url]
        if isinstance(found, TorchstackError):
            raise found
        return found

    def requires_dist(self, index: Index, file: IndexFile) -> tuple[str, ...]:
        """Requires-Dist of the version `file` belongs to: one metadata read per version."""
        name, version = wheel_name_version(file.filename)
        key = (index.location, name, str(version))
        if key not in self._metadata:
            log.debug("reading metadata of %s %s from %s", name, version, file.filename)
            self._metadata[key] = tuple(index.metadata(file).get_all("Requires-Dist") or ())
        return self._metadata[key]

    def _torch_candidates(self, request: Request) -> _Candidates:
        release = Version(request.release)
        candidates = _Candidates()
        for position, index in enumerate(self.indexes):
            for file in self.files(index, "torch"):
                _, version = wheel_name_version(file.filename)
                if Version(version.public) != Version(release.public):
                    continue
                for target in request.targets():
                    if target.misfit(file.filename) is None:
                        variant = self._variant_of(index, file, version, target)
                        candidates.by_variant.setdefault(variant, {}).setdefault(
                            position, {}).setdefault(target.arch, file)
        missing = [t for t in request.targets()
                   if not any(t.arch in files for per_index in candidates.by_variant.values()
                              for files in per_index.values())]
        subject, python = f"torch {request.release}", f"Python {request.python_version}"
        whole = len(missing) == len(request.targets()) and not self.unchecked()
        not_listed = self.not_listed_by("torch", self.indexes) if whole else None
        yanked = self.only_yanked("torch", release, missing, self.indexes) if whole else None
        if not_listed or yanked:  # nothing at all: say why, once
            why = not_listed or f"every wheel for {python} is yanked {yanked}"
            candidates.notes.append(f"{subject}: {why}")
            return candidates
        for target in missing:
            yanked = self.only_yanked("torch", release, [target], self.indexes)
            candidates.notes.append(
                f"{subject}: every wheel for {python} on {target.arch} is yanked {yanked}"
                if yanked and not self.unchecked() else
                self._missing(None, subject, f"wheel for {python} on {target.arch}"))
        return candidates

    def _variant_of(self, index: Index, file: IndexFile, version: Version, target: Target) -> str:
        if version.local:
            if variants.parse(version.local) is None:
                raise ReleaseError(f"{file.filename!r}: unknown variant tag {version.local!r}")
            return version.local
        return variant_from_pins(self.requires_dist(index, file), target)

    def _variant_set(self, request: Request, variant: str, index: Index,
                     found: dict[str, IndexFile], notes: list[str]) -> VariantSet:
        first = next(iter(found.values()))
        version = str(wheel_name_version(first.filename)[1])
        torch = Resolved("torch", version, dict(sorted(found.items())),
                         self.requires_dist(index, first), index.location)
        targets = [t for t in request.targets() if t.arch in torch.wheels]
        for arch in (a for a in request.architectures if a not in torch.wheels):
            notes.append(self._missing(variant, f"torch {torch.version}",
                                       f"{variant} wheel for Python {request.python_version} "
                                       f"on {arch}"))
        triton = self._triton(torch, index, targets, notes)
        companions = [triton] if triton is not None else []
        used = {r.index for r in (torch, *companions)}
        notes += [f"{i.location}: the credentials of its URL are not written into source_urls; "
                  f"EasyBuild needs its own for that host (eb --http-header-fields-urlpat)"
                  for i in self.indexes if i.location in used and getattr(i, "has_credentials",
                                                                          False)]
        return VariantSet(variant, request.python, torch, tuple(companions), tuple(notes))

    def _triton(self, torch: Resolved, index: Index, targets: list[Target],
                notes: list[str]) -> Resolved | None:
        """The triton version torch's Requires-Dist names, from the first index that has it."""
        pins = [r for t in targets for r in torch.requirements(t) if variants.is_triton(r.name)]
        if not pins:
            return None
        project = canonicalize_name(pins[0].name)
        arches = [t for t in targets if any(canonicalize_name(r.name) == project
                                            for r in torch.requirements(t))]
        for source in [index, *(i for i in self.indexes if i is not index)]:
            for version, wheels in self.versions(source, project, arches, None, False):
                if pins[0].specifier.contains(version, prereleases=True):
                    requires = self.requires_dist(source, next(iter(wheels.values())))
                    why = f"torch {torch.version} requires {project}{pins[0].specifier}"
                    return Resolved(project, str(version), wheels, requires, source.location,
                                    why)
        not_listed = self.not_listed_by(project, self.indexes)
        notes.append(f"{project}{pins[0].specifier}: required by torch {torch.version}, " + (
            not_listed or f"not found with wheels for {', '.join(t.arch for t in arches)}")
            + "; not generated")
        return None

    def versions(self, index: Index, project: str, targets: list[Target], local: str | None,
                 match_local: bool = True) -> list[tuple[Version, dict[str, IndexFile]]]:
        """Versions of `project` (newest first) with a wheel for every target, of the build
        whose local tag is `local` unless `match_local` is off."""
        by_version: dict[Version, dict[str, IndexFile]] = {}
        for file in self.files(index, project):
            _, version = wheel_name_version(file.filename)
            if match_local and version.local != local:
                continue  # a +cpu torch takes +cpu companions; PyPI's untagged ones are CUDA
            for target in targets:
                if target.misfit(file.filename) is None:
                    by_version.setdefault(version, {}).setdefault(target.arch, file)
        complete = [(v, w) for v, w in by_version.items() if len(w) == len(targets)]
        return sorted(complete, reverse=True,
                      key=lambda item: (Version(item[0].public), item[0].local is not None))


def newest_release(indexes: Sequence[Index]) -> str:
    """The newest final torch release that the first index listing torch has wheels of."""
    return final_releases(indexes)[0]


def final_releases(indexes: Sequence[Index]) -> list[str]:
    """The final torch releases, newest first, that the first index listing torch has wheels
    of; ReleaseError when no index lists one."""
    resolver = Resolver(indexes)
    for index in indexes:
        versions = {Version(wheel_name_version(f.filename)[1].public)
                    for f in resolver.files(index, "torch")}
        final = sorted((v for v in versions if not v.is_prerelease and not v.is_devrelease),
                       reverse=True)
        if final:
            log.debug("newest torch on %s: %s", index.location, final[0])
            return [str(v) for v in final]
    raise ReleaseError(resolver.not_listed_by("torch", indexes)
                       or f"no torch release on {', '.join(i.location for i in indexes)}")


def variant_from_pins(requires_dist: Iterable[str], target: Target) -> str:
    """cpu, or cuXYZ from the CUDA runtime pin (nvidia-cuda-runtime-cu12==12.8.90 -> cu128)."""
    for line in requires_dist:
        requirement = markers.parse(line, "torch")
        if requirement is None or not target.applies(requirement):
            continue
        if canonicalize_name(requirement.name) in _CUDA_RUNTIME:
            exact = [s.version for s in requirement.specifier if s.operator in ("==", "~=")]
            if exact:
                return variants.cuda_tag(Version(exact[0]))
    return "cpu"


def wheel_name_version(filename: str) -> tuple[str, Version]:
    """Project name and version of a wheel filename, validated (PEP 427 / PEP 440)."""
    try:
        name, version, _, _ = parse_wheel_filename(filename.replace("%2B", "+").replace("%2b", "+"))
    except InvalidWheelFilename as exc:
        raise ReleaseError(f"invalid wheel filename {filename!r} on the index: {exc}") from exc
    return str(name), version


def _fits(file: IndexFile, release: Version | None, targets: Sequence[Target]) -> bool:
    """Whether a wheel is of `release` (any, when None) and fits one of `targets`."""
    try:
        _, version = wheel_name_version(file.filename)
    except ReleaseError:
        return False
    return (release is None or Version(version.public) == Version(release.public)) \
        and any(target.misfit(file.filename) is None for target in targets)


def validate_version(text: str, what: str) -> Version:
    """A PEP 440 version, or ReleaseError quoting the bad text."""
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ReleaseError(f"{what} version {text!r} is not a valid PEP 440 version") from exc
