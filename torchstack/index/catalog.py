"""The embedded catalog: index answers recorded for a few releases, for offline generation.

`torchstack catalog refresh` resolves releases against the real indexes through a
`RecordingIndex`, which keeps every answer it passed on (file lists with hashes and sizes,
the Requires-Dist of each metadata read) with the URL it came from and the date. `generate
--offline` replays them through a `CatalogIndex`, which answers exactly as the index did.

A catalog file is checked whole when loaded (every field's type, with its path in the message);
URLs are recorded without their credentials (user:token@).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.message
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from torchstack._files import MAX_CATALOG, read_text
from torchstack.errors import TorchstackError
from torchstack.index._userinfo import redact, without_userinfo
from torchstack.index.pages import TYPE_NAMES, kind_of
from torchstack.index.protocol import (
    Index,
    IndexAccessError,
    IndexFile,
    IndexUnreachableError,
    ProjectNotFoundError,
)

log = logging.getLogger(__name__)

SCHEMA = 1
_ARCH_SUFFIXES = ("x86_64.whl", "aarch64.whl", "-any.whl")
_NONE = type(None)
_ENTRY = {"project": (str,), "filename": (str,), "url": (str,), "sha256": (str, _NONE),
          "size": (int, _NONE), "requires_python": (str, _NONE), "yanked": (bool,),
          "core_metadata": (bool,), "metadata_sha256": (str, _NONE),
          "yanked_reason": (str, _NONE), "upload_time": (str, _NONE)}  # the fields of IndexFile
_OPTIONAL = {f.name for f in dataclasses.fields(IndexFile)
             if f.default is not dataclasses.MISSING}


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
        self.record = _Recorded(without_userinfo(index.location),
                                today or datetime.date.today().isoformat())

    @property
    def location(self) -> str:
        return self.index.location

    def files(self, project: str) -> list[IndexFile]:
        try:
            files = self.index.files(project)
        except IndexAccessError as exc:
            if not isinstance(exc, ProjectNotFoundError):
                self.record.unreachable = redact(str(exc))
            raise
        kept = [f for f in files if f.filename.endswith(_ARCH_SUFFIXES) and not f.yanked]
        self.record.projects[canonicalize_name(project)] = [_entry(f) for f in kept]
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
        self.record.metadata[without_userinfo(file.url)] = list(
            message.get_all("Requires-Dist") or ())
        return message


def _entry(file: IndexFile) -> dict[str, Any]:
    """A file as the catalog records it: no credentials, no yanked reason (none is kept)."""
    entry = asdict(file)
    entry["url"] = without_userinfo(file.url)
    del entry["yanked_reason"]
    return entry


class CatalogIndex:
    """Answers of one recorded index, replayed."""

    def __init__(self, record: dict[str, Any], source: str, where: str = "index") -> None:
        _check_record(record, source, where)
        self._location = without_userinfo(record["location"])
        self.recorded: str = record["recorded"]
        self._projects: dict[str, list[dict[str, Any]]] = dict(record["projects"])
        self._metadata: dict[str, list[str]] = dict(record["metadata"])
        self.unreachable: str = record.get("unreachable", "")
        self.source = source
        # resolution reads one file's metadata per version: any file of it answers alike
        self._by_version = {}
        for url, lines in self._metadata.items():
            try:
                self._by_version[_version_key(url.rsplit("/", 1)[-1])] = lines
            except CatalogError as exc:
                raise CatalogError(f"{source}: {where}.metadata[{url!r:.200}]: {exc}") from exc

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
        return [IndexFile(**entry) for entry in entries]  # checked when loaded

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
    """Project and version of a wheel filename (percent-quoted or not); CatalogError if invalid."""
    try:
        name, version, _, _ = parse_wheel_filename(unquote(filename))
    except InvalidWheelFilename as exc:
        raise CatalogError(f"invalid wheel filename {unquote(filename)!r} on the index: {exc}") \
            from exc
    return str(name), str(version)


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
    if not os.path.lexists(path):  # one that is there but no file (a FIFO) is read and refused
        raise CatalogError(f"the catalog has no torch {release!r} (it has: "
                           f"{', '.join(releases(folder)) or 'nothing'}); generate online")
    try:
        data = json.loads(read_text(path, MAX_CATALOG, CatalogError))
    except CatalogError as exc:
        raise CatalogError(f"unreadable catalog: {exc}") from None
    except RecursionError:
        raise CatalogError(f"{path}: unreadable catalog: JSON nested too deeply") from None
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path}: unreadable catalog: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CatalogError(f"{path}: not a catalog of schema {SCHEMA}")
    _typed(data.get("release", release), (str,), str(path), "release")
    records = _typed(data.get("indexes", []), (list,), str(path), "indexes")
    return [CatalogIndex(record, str(path), f"indexes[{number}]")
            for number, record in enumerate(records)]


def _check_record(record: Any, source: str, where: str) -> None:
    """CatalogError naming the file and the field, for anything of another type than
    `CatalogIndex` reads and replays."""
    _typed(record, (dict,), source, where)
    for key in ("location", "recorded"):
        _typed(record.get(key, ...), (str,), source, f"{where}.{key}")
    _typed(record.get("unreachable", ""), (str,), source, f"{where}.unreachable")
    projects = _typed(record.get("projects", ...), (dict,), source, f"{where}.projects")
    for project, entries in projects.items():
        at = f"{where}.projects[{project!r:.80}]"
        for number, entry in enumerate(_typed(entries, (list,), source, at)):
            _check_entry(entry, source, f"{at}[{number}]")
    metadata = _typed(record.get("metadata", ...), (dict,), source, f"{where}.metadata")
    for url, lines in metadata.items():
        at = f"{where}.metadata[{url!r:.200}]"
        for number, line in enumerate(_typed(lines, (list,), source, at)):
            _typed(line, (str,), source, f"{at}[{number}]")


def _check_entry(entry: Any, source: str, where: str) -> None:
    _typed(entry, (dict,), source, where)
    unknown = sorted(set(entry) - set(_ENTRY))
    if unknown:
        raise CatalogError(f"{source}: {where}: unknown field {unknown[0]!r:.80}")
    for key, types in _ENTRY.items():
        if key in entry or key not in _OPTIONAL:
            _typed(entry.get(key, ...), types, source, f"{where}.{key}")


def _typed(value: Any, types: tuple[type, ...], source: str, where: str) -> Any:
    if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
        return value
    found = "missing" if value is ... else kind_of(value)
    raise CatalogError(f"{source}: {where}: {found}, not "
                       f"{' or '.join(TYPE_NAMES[t] for t in types)}")


def releases(folder: Path | None = None) -> list[str]:
    """The torch releases the catalog holds, newest first; CatalogError when the folder is
    not there."""
    from packaging.version import InvalidVersion, Version

    folder = folder or catalog_dir()
    if not folder.is_dir():
        raise CatalogError(f"the catalog folder {str(folder)!r} "
                           f"{'is not a folder' if folder.exists() else 'does not exist'}")
    found = []
    for path in folder.glob("torch-*.json"):
        try:
            found.append(Version(path.stem[len("torch-"):]))
        except InvalidVersion:
            log.debug("ignoring %s", path)
    return [str(v) for v in sorted(found, reverse=True)]


def describe(indexes: Iterable[CatalogIndex]) -> list[str]:
    """Where each recorded answer came from and when: for the report."""
    return [f"offline: {i.location} did not answer when recorded {i.recorded}" if i.unreachable
            else f"offline: answers of {i.location} recorded {i.recorded}" for i in indexes]
