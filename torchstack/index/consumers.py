"""The torch consumers a site carries, each resolved for one torch release and one target.

A site names its projects as requirements (`--with xformers`, `--with 'torchao<0.19'`, or a
file of them, one a line, `#` comments). Each resolves, per target (Python, architecture,
glibc), to the newest release that its own requirement admits, whose Requires-Dist accepts the
torch release and that has a wheel for the target; its class is then predicted from range
reads of that wheel (torchstack.index.wheelelf). A project without such a release is reported
with the reason, before anything is built.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from torchstack import markers, wheeltags
from torchstack.errors import TorchstackError
from torchstack.index import wheelelf
from torchstack.index.protocol import Index, IndexFile, ProjectNotFoundError
from torchstack.index.simple import SimpleIndex

log = logging.getLogger(__name__)


class ProjectListError(TorchstackError):
    """A project list entry that is no requirement, or a list file that cannot be read."""


@dataclass(frozen=True)
class Target:
    """Where a consumer's wheel must install: CPython X.Y on Linux `arch` with `glibc`."""

    python: tuple[int, int]
    arch: str
    glibc: tuple[int, int] = (2, 28)

    def __str__(self) -> str:
        return f"Python {self.python[0]}.{self.python[1]} on {self.arch}"


@dataclass(frozen=True)
class Resolved:
    """One project for one target: its release and wheel and their prediction, or why none."""

    project: str
    target: Target
    version: str | None = None
    file: IndexFile | None = None
    prediction: wheelelf.Prediction | None = None
    reason: str | None = None

    def line(self, torch: Version) -> str:
        """The report line: the predicted class, or why the project cannot be built."""
        if self.prediction is None:
            return f"{self.project} ({self.target}): not built: {self.reason}"
        label = f"{self.project} {self.version}"
        return f"{self.prediction.summary(label, str(torch))} ({self.target})"


def parse_projects(entries: Sequence[str], files: Sequence[Path] = ()) -> list[Requirement]:
    """The requirements of `--with` entries and `--with-file` files, every bad one at once."""
    lines = [(entry, "--with") for entry in entries]
    problems = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{str(path)!r} cannot be read ({exc})")
            continue
        for number, raw in enumerate(text.splitlines(), 1):
            entry = raw.split("#", 1)[0].strip()
            if entry:
                lines.append((entry, f"{path}:{number}"))
    found: dict[str, Requirement] = {}
    for entry, where in lines:
        try:
            requirement = Requirement(entry)
        except InvalidRequirement as exc:
            detail = str(exc).splitlines()[0] if str(exc) else "no detail"
            problems.append(f"{where}: {entry[:80]!r} is not a requirement ({detail})")
            continue
        key = canonicalize_name(requirement.name)
        if key == "torch" or key in found:
            what = "is torch itself" if key == "torch" else "is listed twice"
            problems.append(f"{where}: {entry[:80]!r} {what}")
            continue
        found[key] = requirement
    if problems:
        raise ProjectListError("; ".join(problems))
    return list(found.values())


def resolve(index: Index, requirement: Requirement, torch: Version, target: Target) -> Resolved:
    """The newest fitting release of one project, predicted; or the reason there is none."""
    project = canonicalize_name(requirement.name)
    try:
        files = index.files(project)
    except ProjectNotFoundError:
        return Resolved(project, target, reason=f"{index.location} does not list it")
    reasons: list[str] = []
    for version, wheels in _releases(files, requirement):
        fitting = [w for w in wheels if not wheeltags.target_misfit(
            w.filename, target.python, target.arch, target.glibc)]
        if not fitting:
            reasons.append(f"{version} has no wheel for {target}")
            continue
        refusal = _torch_refusal(index, fitting[0], torch, target)
        if refusal:
            reasons.append(f"{version} {refusal}")
            continue
        return Resolved(project, target, str(version), fitting[0],
                        predict(index, fitting[0]))
    return Resolved(project, target, reason=_why_none(requirement, reasons))


def resolve_all(index: Index, requirements: Iterable[Requirement], torch: Version,
                targets: Iterable[Target]) -> list[Resolved]:
    """Every project for every target, in the order given."""
    return [resolve(index, r, torch, t) for r in requirements for t in targets]


def predict(index: Index, file: IndexFile) -> wheelelf.Prediction:
    """The prediction of one wheel: range reads of a remote one, reads of a local one."""
    if urlsplit(file.url).scheme == "file":
        return wheelelf.predict_file(Path(url2pathname(urlsplit(file.url).path)))
    if not isinstance(index, SimpleIndex):
        raise wheelelf.WheelElfError(f"{index.location} cannot read ranges of {file.filename}")
    read, size, tail = index.ranges(file.url)
    return wheelelf.predict(read, size, tail, file.url)


def _releases(files: list[IndexFile],
              requirement: Requirement) -> list[tuple[Version, list[IndexFile]]]:
    """The project's releases that its requirement admits, newest first, with their wheels."""
    by_version: dict[Version, list[IndexFile]] = {}
    for file in files:
        if file.yanked or not file.filename.endswith(".whl"):
            continue
        try:
            _, version, _, _ = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            log.debug("skipping %s: not a valid wheel filename", file.filename)
            continue
        if requirement.specifier.contains(version, prereleases=False):
            by_version.setdefault(version, []).append(file)
    return sorted(by_version.items(), reverse=True)


def _torch_refusal(index: Index, file: IndexFile, torch: Version, target: Target) -> str | None:
    """Why the wheel's Requires-Dist refuses that torch on the target, or None."""
    environment = markers.for_target(f"{target.python[0]}.{target.python[1]}", target.arch)
    for line in index.metadata(file).get_all("Requires-Dist") or ():
        requirement = markers.parse(line, file.filename)
        if requirement is None or canonicalize_name(requirement.name) != "torch":
            continue
        if markers.applies(requirement, environment) and \
                not requirement.specifier.contains(torch, prereleases=True):
            return f"requires torch{requirement.specifier}, not {torch}"
    return None


def _why_none(requirement: Requirement, reasons: list[str]) -> str:
    if not reasons:
        return f"no wheel of a release that {str(requirement)!r} admits"
    shown = "; ".join(reasons[:3])
    more = f"; and {len(reasons) - 3} older releases" if len(reasons) > 3 else ""
    return f"no release fits: {shown}{more}"
