"""The embedded catalog: index answers recorded for a few releases, for offline generation.

`torchstack catalog refresh` resolves releases against the real indexes through a
`RecordingIndex`, which keeps every answer it passed on (file lists with hashes and sizes,
the Requires-Dist of each metadata read) with the URL it came from and the date. `generate
--offline` replays them through a `CatalogIndex`, which answers exactly as the index did.
"""

from __future__ import annotations

import datetime
import email.message
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from packaging.utils import canonicalize_name

from torchstack.errors import TorchstackError
from torchstack.index import (
    IndexAccessError,
    IndexFile,
    IndexUnreachableError,
    ProjectNotFoundError,
)
from torchstack.release import Index, wheel_name_version

log = logging.getLogger(__name__)

SCHEMA = 1
_ARCH_SUFFIXES = ("x86_64.whl", "aarch64.whl", "-any.whl")


class CatalogError(TorchstackError):
    """A catalog file that is missing, malformed, or lacks an answer generation needs."""


@dataclass
class _Recorded:
    location: str
    recorded: str
    projects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    metadata: dict[str, list[str]] = field(default_factory=dict)  # file URL -> Requires-Dist
    unreachable: str = ""  # why the index did not answer when recorded, if it did not


class RecordingIndex:
    """An index that remembers each answer it gives (Linux and pure wheels only)."""

    def __init__(self, index: Index, today: str | None = None) -> None:
        self.index = index
        self.record = _Recorded(index.location, today or datetime.date.today().isoformat())

    @property
    def location(self) -> str:
        return self.index.location

    def files(self, project: str) -> list[IndexFile]:
        try:
            files = self.index.files(project)
        except IndexAccessError as exc:
            if not isinstance(exc, ProjectNotFoundError):
                self.record.unreachable = str(exc)
            raise
        kept = [f for f in files if f.filename.endswith(_ARCH_SUFFIXES) and not f.yanked]
        self.record.projects[canonicalize_name(project)] = [asdict(f) for f in kept]
        return files

    def touched_only(self) -> None:
        """Keep the files of the versions whose metadata was read: resolution looks at no
        other (it reads each candidate newest first until one fits), so replay chooses alike."""
        read = {_version_key(url.rsplit("/", 1)[-1]) for url in self.record.metadata}
        for project, entries in self.record.projects.items():
            self.record.projects[project] = [
                e for e in entries if _version_key(e["filename"]) in read]

    def download_sha256(self, file: IndexFile) -> str:
        return self.index.download_sha256(file)

    def metadata(self, file: IndexFile) -> email.message.Message:
        message = self.index.metadata(file)
        self.record.metadata[file.url] = list(message.get_all("Requires-Dist") or ())
        return message


class CatalogIndex:
    """Answers of one recorded index, replayed."""

    def __init__(self, record: dict[str, Any], source: str) -> None:
        try:
            self._location = str(record["location"])
            self.recorded = str(record["recorded"])
            self._projects: dict[str, list[dict[str, Any]]] = dict(record["projects"])
            self._metadata: dict[str, list[str]] = dict(record["metadata"])
            self.unreachable = str(record.get("unreachable", ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"{source}: malformed index record: {exc}") from exc
        self.source = source
        # resolution reads one file's metadata per version: any file of it answers alike
        self._by_version = {_version_key(url.rsplit("/", 1)[-1]): lines
                            for url, lines in self._metadata.items()}

    @property
    def location(self) -> str:
        return self._location

    @property
    def projects(self) -> list[str]:
        """The projects whose file lists were recorded."""
        return sorted(self._projects)

    def files(self, project: str) -> list[IndexFile]:
        if self.unreachable:  # replayed as it happened, for the report to say so
            raise IndexUnreachableError(f"{self.unreachable} (recorded {self.recorded})")
        entries = self._projects.get(canonicalize_name(project))
        if entries is None:
            return []  # the catalog recorded no answer: as an index without the project
        try:
            return [IndexFile(**entry) for entry in entries]
        except TypeError as exc:
            raise CatalogError(f"{self.source}: malformed file entry of {project!r}") from exc

    def recorded_requires(self, file: IndexFile) -> list[str]:
        """The Requires-Dist recorded for the version of `file`; [] when none was read."""
        return self._requires(file) or []

    def _requires(self, file: IndexFile) -> list[str] | None:
        found = self._metadata.get(file.url)
        return found if found is not None else self._by_version.get(_version_key(file.filename))

    def download_sha256(self, file: IndexFile) -> str:
        raise CatalogError(f"{file.filename!r}: offline, a missing sha256 cannot be downloaded")

    def metadata(self, file: IndexFile) -> email.message.Message:
        lines = self._requires(file)
        if lines is None:
            raise CatalogError(f"{self.source} has no metadata of {file.filename!r} "
                               f"(recorded {self.recorded}); generate online or refresh")
        message = email.message.Message()
        for line in lines:
            message["Requires-Dist"] = line
        return message


def _version_key(filename: str) -> tuple[str, str]:
    name, version = wheel_name_version(unquote(filename))
    return name, str(version)


def catalog_dir() -> Path:
    """The catalog files shipped with torchstack."""
    return Path(__file__).with_name("catalog_data")


def save(release: str, indexes: Sequence[RecordingIndex], folder: Path) -> Path:
    """Write the answers recorded for `release` as catalog_data/torch-<release>.json."""
    from torchstack.output import write_set

    for index in indexes:
        index.touched_only()
    data = {"schema": SCHEMA, "release": release,
            "indexes": [asdict(index.record) for index in indexes
                        if index.record.projects or index.record.unreachable]}
    name = f"torch-{release}.json"
    write_set(folder, {name: json.dumps(data, indent=0, sort_keys=True) + "\n"}, force=True)
    return folder / name


def load(release: str, folder: Path | None = None) -> list[CatalogIndex]:
    """The recorded indexes of `release`; CatalogError naming the releases there are."""
    folder = folder or catalog_dir()
    path = folder / f"torch-{release}.json"
    if not path.is_file():
        raise CatalogError(f"the catalog has no torch {release!r} (it has: "
                           f"{', '.join(releases(folder)) or 'nothing'}); generate online")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path}: unreadable catalog: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CatalogError(f"{path}: not a catalog of schema {SCHEMA}")
    return [CatalogIndex(record, str(path)) for record in data.get("indexes", [])]


def releases(folder: Path | None = None) -> list[str]:
    """The torch releases the catalog holds, newest first."""
    from packaging.version import InvalidVersion, Version

    found = []
    for path in (folder or catalog_dir()).glob("torch-*.json"):
        try:
            found.append(Version(path.stem[len("torch-"):]))
        except InvalidVersion:
            log.debug("ignoring %s", path)
    return [str(v) for v in sorted(found, reverse=True)]


def describe(indexes: Iterable[CatalogIndex]) -> list[str]:
    """Where each recorded answer came from and when: for the report."""
    return [f"offline: {i.location} did not answer when recorded {i.recorded}" if i.unreachable
            else f"offline: answers of {i.location} recorded {i.recorded}" for i in indexes]
