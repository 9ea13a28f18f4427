"""Python distributions found in a wheel file, a site-packages folder or an install prefix.

A `Distribution` gives a name, a version, its Requires-Dist lines and access to its files,
whether they lie in a folder (memory-mapped) or in a wheel's zip (read member by member).
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol

from torchstack._files import (
    MAX_METADATA,
    MAX_RECORD,
    MAX_SHARED_OBJECT,
    open_regular,
    read_member,
    read_text,
    spool_member,
)
from torchstack.elf.reader import Stream, map_file
from torchstack.errors import TorchstackError

if TYPE_CHECKING:  # zipfile, csv and tempfile are imported where a wheel or a RECORD is read
    import zipfile

log = logging.getLogger(__name__)

# Wheel members larger than this are spooled to a temporary file instead of held in memory.
_IN_MEMORY_LIMIT = 64 * 1024 * 1024
_SITE_PACKAGES_GLOBS = ("lib*/python*/site-packages", "local/lib*/python*/site-packages")


def normalize_name(name: str) -> str:
    """The PEP 503 normalized project name (packaging.utils.canonicalize_name's rule).

    Spelled out here because importing packaging.utils (packaging.tags comes with it) would add
    to every fingerprint's start-up (the figure: bench/README.rst).
    """
    return re.sub(r"[-_.]+", "-", name).lower()


class DistributionError(TorchstackError):
    """A path that holds no Python distribution, or one that cannot be read."""


class Files(Protocol):
    """Read access to the files of one site-packages folder or one wheel."""

    label: str

    def exists(self, relpath: str) -> bool: ...

    def text(self, relpath: str) -> str:
        """A small text file (METADATA, a version.py), undecodable bytes replaced."""
        ...

    def open_binary(self, relpath: str) -> AbstractContextManager[Stream]: ...


@dataclass(frozen=True)
class Distribution:
    """One installed or packed distribution: its core metadata and its files."""

    name: str
    version: str
    requires_dist: tuple[str, ...]
    files: Files = field(repr=False, compare=False)
    lister: Callable[[], tuple[str, ...]] = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return normalize_name(self.name)

    def listing(self) -> tuple[str, ...]:
        """Paths of the distribution's files, read on demand (torch's RECORD is 1 MB)."""
        return self.lister()

    def describe(self, relpath: str) -> str:
        return f"{self.files.label}/{relpath}"


class TreeFiles:
    """Files below a site-packages folder.

    A path that is there but is no regular file (a FIFO, a folder, a symlink loop) exists:
    reading it is an error naming it, never a hang and never taken as absent.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.label = str(root)

    def exists(self, relpath: str) -> bool:
        return os.path.lexists(self.root / relpath)

    def text(self, relpath: str) -> str:
        return read_text(self.root / relpath, MAX_METADATA, DistributionError, replace=True)

    @contextmanager
    def open_binary(self, relpath: str) -> Iterator[Stream]:
        with map_file(self.root / relpath) as mapped:
            yield mapped


class WheelFiles:
    """Members of a wheel's zip archive, read without extracting the wheel."""

    def __init__(self, archive: zipfile.ZipFile, label: str) -> None:
        self.archive = archive
        self.label = label
        self._names = frozenset(archive.namelist())

    def exists(self, relpath: str) -> bool:
        return relpath in self._names

    def text(self, relpath: str) -> str:
        data = read_member(self.archive, relpath, MAX_METADATA, DistributionError, self.label)
        return data.decode("utf-8", "replace")

    @contextmanager
    def open_binary(self, relpath: str) -> Iterator[Stream]:
        if self.archive.getinfo(relpath).file_size <= _IN_MEMORY_LIMIT:
            yield io.BytesIO(read_member(self.archive, relpath, _IN_MEMORY_LIMIT,
                                         DistributionError, self.label))
            return
        import tempfile  # here: only members over the in-memory limit are spooled

        with tempfile.TemporaryFile() as spool:
            spool_member(self.archive, relpath, spool, MAX_SHARED_OBJECT, DistributionError,
                         self.label)
            yield spool


def _parse_metadata(text: str) -> tuple[str, str, tuple[str, ...]]:
    headers = parse_headers(text)
    name, version = headers.get("name"), headers.get("version")
    if not name or not version:
        raise ValueError("no Name or Version")
    return name[0], version[0], tuple(headers.get("requires-dist", ()))


def parse_headers(text: str) -> dict[str, list[str]]:
    """The RFC 822 header block of core metadata, lower-cased names, values in order.

    The header block is all torchstack reads; importing email.parser would add to every
    command's start-up (the figure: bench/README.rst).
    """
    headers: dict[str, list[str]] = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            break
        if line[0] in " \t" and last is not None:  # a folded continuation line
            headers[last][-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if sep:
            last = key.strip().lower()
            headers.setdefault(last, []).append(value.strip())
    return headers


@contextmanager
def open_wheel(path: Path) -> Iterator[Distribution]:
    """The distribution packed in a wheel file; the zip stays open inside the context."""
    with open_regular(path, DistributionError) as handle, _wheel_archive(handle, path) as archive:
        files = WheelFiles(archive, str(path))
        names = tuple(archive.namelist())
        metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(metadata) != 1:
            raise DistributionError(f"{str(path)!r} has no single .dist-info/METADATA")
        try:
            name, version, requires = _parse_metadata(files.text(metadata[0]))
        except ValueError as exc:
            raise DistributionError(f"{metadata[0]!r} in {str(path)!r}: {exc}") from exc
        yield Distribution(name, version, requires, files, lambda: names)


def _wheel_archive(handle: BinaryIO, path: Path) -> zipfile.ZipFile:
    import zipfile  # here: an installation's fingerprint opens no zip

    try:
        return zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise DistributionError(f"{str(path)!r} is not a readable wheel: {exc}") from exc


def site_packages_of(path: Path) -> list[Path]:
    """`path` itself when it holds distributions, else its lib*/python*/site-packages."""
    if not path.is_dir():
        raise DistributionError(f"{str(path)!r} is not a folder")
    if _has_metadata_dirs(path):
        return [path]
    found = sorted(p for g in _SITE_PACKAGES_GLOBS for p in path.glob(g) if _has_metadata_dirs(p))
    if not found:
        raise DistributionError(f"{str(path)!r} holds no Python distributions (no *.dist-info)")
    return found


def _has_metadata_dirs(folder: Path) -> bool:
    return any(e.name.endswith((".dist-info", ".egg-info")) for e in os.scandir(folder))


def tree_distributions(site_packages: Path) -> list[Distribution]:
    """Every distribution in a site-packages folder, in name order."""
    files = TreeFiles(site_packages)
    found = []
    for entry in sorted(os.scandir(site_packages), key=lambda e: e.name):
        if entry.name.endswith((".dist-info", ".egg-info")) and entry.is_dir():
            dist = _tree_distribution(files, Path(entry.path))
            if dist is not None:
                found.append(dist)
    return found


def _tree_distribution(files: TreeFiles, meta_dir: Path) -> Distribution | None:
    meta_file = meta_dir / ("METADATA" if meta_dir.suffix == ".dist-info" else "PKG-INFO")
    try:
        text = read_text(meta_file, MAX_METADATA, DistributionError, replace=True)
        name, version, requires = _parse_metadata(text)
    except (OSError, ValueError, DistributionError) as exc:
        log.debug("skipping %s: %s", meta_dir, exc)
        return None
    return Distribution(
        name, version, requires, files, lambda: tuple(_record_paths(files.root, meta_dir))
    )


def _record_paths(root: Path, meta_dir: Path) -> Iterator[str]:
    """Paths relative to site-packages from RECORD, installed-files.txt or top_level.txt."""
    record = meta_dir / "RECORD"
    if record.is_file():
        import csv  # here: a provider's fingerprint lists no files

        text = read_text(record, MAX_RECORD, DistributionError, replace=True)
        for row in csv.reader(io.StringIO(text, newline="")):
            if row and not row[0].startswith(".."):
                yield row[0]
        return
    installed = meta_dir / "installed-files.txt"
    if installed.is_file():
        text = read_text(installed, MAX_RECORD, DistributionError, replace=True)
        for line in text.splitlines():
            rel = os.path.normpath(os.path.join(meta_dir.name, line.strip()))
            if line.strip() and not rel.startswith(".."):
                yield rel
        return
    yield from _top_level_paths(root, meta_dir)


def _top_level_paths(root: Path, meta_dir: Path) -> Iterator[str]:
    top_level = meta_dir / "top_level.txt"
    if not top_level.is_file():
        return
    for package in read_text(top_level, MAX_RECORD, DistributionError, replace=True).split():
        for dirpath, _, filenames in os.walk(root / package):
            for filename in filenames:
                yield os.path.relpath(os.path.join(dirpath, filename), root)


def importable_top_level(path: Path) -> list[str]:
    """The top-level modules a wheel installs, for an import check (none for a metapackage)."""
    with open_wheel(path) as dist:
        return top_level_modules(dist.listing())


def top_level_modules(names: Iterable[str]) -> list[str]:
    """The top-level modules among a wheel's member names."""
    found = set()
    for name in names:
        top, _, rest = name.partition("/")
        if top.endswith((".dist-info", ".data", ".libs")) or top.startswith("_"):
            continue
        if rest == "__init__.py" or (not rest and top.endswith(".py")):
            found.add(top.removesuffix(".py"))
        elif not rest and ".cpython-" in top and top.endswith(".so"):
            found.add(top.split(".")[0])
    return sorted(found)
