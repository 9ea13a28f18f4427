"""Symbol verification against torch wheels on an index, and the torch release a consumer that
names none was built on, inferred from evidence (docs/design.rst, "Symbol verification").

A torch wheel's libraries keep their dynamic symbol tables at the start of each member (torch
links with lld: .dynsym and .dynstr first), so what a library exports costs the packed bytes of
those tables (about 1.8 MB for libtorch_cpu.so of the 2.13.0 CPU wheel), read by ranges and
kept per wheel and library for the run, instead of the wheel (hundreds of MB to GBs).

Bracketing: a consumer that registers kernels through the C++ dispatcher runs only on the
release it was built on. When its metadata names none, the evidence is which torch releases
export every libtorch symbol it imports, among those uploaded before it (a wheel cannot have
been built on a torch published after it). Walking back from the newest such release, the
releases that export everything form the bracket; when they all belong to one minor series
(patch releases keep the ABI), that series is where it was built. Otherwise nothing is picked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from torchstack import wheeltags
from torchstack.errors import TorchstackError
from torchstack.index import _elfprefix, _zipdir
from torchstack.index.protocol import Index, IndexFile
from torchstack.symbolcheck import SymbolCheck

log = logging.getLogger(__name__)

MAX_TABLES = 64 << 20  # the most of one torch library inflated to reach its tables
BRACKET_RELEASES = 6  # the most torch releases read when bracketing one consumer
_ALWAYS = ("libc10.so", "libtorch_cpu.so")
_KNOWN = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so",
          "libtorch_python.so", "libc10_hip.so", "libtorch_hip.so")


class TorchSymbolsError(TorchstackError):
    """A torch wheel whose libraries cannot be read by ranges (an offline catalog, no libc10)."""


@dataclass(frozen=True)
class BuiltOn:
    """The release a consumer was built on as the evidence shows it, or None, and why."""

    release: str | None
    evidence: str


class TorchSymbols:
    """Exports of torch wheels' libraries, read by ranges once per wheel and library."""

    def __init__(self) -> None:
        self._exports: dict[tuple[str, str], frozenset[str] | TorchstackError] = {}
        self._directories: dict[str, list[_zipdir.Member]] = {}  # url -> torch/lib members
        self.fetched: dict[str, int] = {}  # wheel file name -> packed bytes read

    def verify(self, index: Index, torch: IndexFile, imports: Iterable[str],
               libraries: Iterable[str]) -> SymbolCheck:
        """The consumer's libtorch imports looked up in the wheel's libraries."""
        wanted = frozenset(imports)
        exported = self.exports(index, torch, libraries)
        label = f"torch {_version(torch.filename)}"
        return SymbolCheck(label, len(wanted), tuple(sorted(wanted - exported)))

    def exports(self, index: Index, torch: IndexFile, libraries: Iterable[str]) -> frozenset[str]:
        """The union of what the named torch/lib libraries of the wheel export."""
        names = sorted(set(_ALWAYS) | {lib for lib in libraries if lib in _KNOWN})
        self._raise_unreadable(torch, names)  # before reading more of a wheel that fails
        missing = [n for n in names if (torch.url, n) not in self._exports]
        if missing:
            self._read(index, torch, missing)
        found: set[str] = set()
        for name in names:
            known = self._exports[(torch.url, name)]
            if isinstance(known, TorchstackError):  # unreadable: said again, never re-read
                raise known
            found |= known
        return frozenset(found)

    def _raise_unreadable(self, torch: IndexFile, names: list[str]) -> None:
        for name in names:
            known = self._exports.get((torch.url, name))
            if isinstance(known, TorchstackError):
                raise known

    def _read(self, index: Index, torch: IndexFile, names: list[str]) -> None:
        """Read each named library's exports, or remember why it cannot be read."""
        counted: _zipdir.Counted | None = None
        try:
            with _reader(index, torch) as (read, size, tail):
                counted = _zipdir.Counted(read, len(tail))
                members = self._members(torch, counted, size, tail)
                for name in names:
                    self._exports[(torch.url, name)] = self._library(members, name, torch)
        except TorchstackError as exc:
            for name in names:
                self._exports.setdefault((torch.url, name), exc)
        finally:
            if counted is not None:
                self.fetched[torch.filename] = self.fetched.get(torch.filename, 0) \
                    + counted.fetched
                log.debug("%s: %s read %d packed bytes", torch.filename, ", ".join(names),
                          counted.fetched)

    def _members(self, torch: IndexFile, counted: _zipdir.Counted, size: int, tail: bytes
                 ) -> dict[str, tuple[_zipdir._Ranges, _zipdir.Member]]:
        """The wheel's torch/lib members; its zip directory (a MB for torch's 15,000 files)
        is read once per wheel, whichever libraries later consumers ask for."""
        if torch.url in self._directories:
            ranges = _zipdir._Ranges(counted, size, tail)
            entries = self._directories[torch.url]
        else:
            try:
                ranges, entries = _zipdir.open_directory(counted, size, tail)
            except _zipdir.ZipDirectoryError as exc:
                raise TorchSymbolsError(f"{torch.filename!r}: {exc}") from exc
            entries = [m for m in entries if m.name.startswith("torch/lib/")]
            self._directories[torch.url] = entries
        members = {m.name.rsplit("/", 1)[-1]: (ranges, m) for m in entries}
        if "libc10.so" not in members:
            raise TorchSymbolsError(f"{torch.filename!r} has no torch/lib/libc10.so")
        return members

    @staticmethod
    def _library(members: dict[str, tuple[_zipdir._Ranges, _zipdir.Member]], name: str,
                 torch: IndexFile) -> frozenset[str] | TorchstackError:
        if name not in members:
            return frozenset()
        ranges, member = members[name]
        try:
            return _elfprefix.object_exports(_elfprefix.MemberPrefix(ranges, member,
                                                                     MAX_TABLES))
        except TorchstackError as exc:
            log.debug("%s: %s not read: %s", torch.filename, name, exc)
            return exc


def built_on(symbols: TorchSymbols, index: Index, torch_files: Sequence[IndexFile],
             imports: frozenset[str], libraries: Iterable[str], uploaded: str | None,
             wanted: Version) -> BuiltOn:
    """The release a dispatcher-bound consumer was built on, by bracketing (module doc).

    `torch_files`: torch's wheels for the consumer's platform, one per release is read;
    `uploaded`: the consumer wheel's upload time, when the index gives it; `wanted`: the
    release the caller asks about, taken when the bracket holds it.
    """
    releases = _releases(torch_files, uploaded)
    fitting: list[Version] = []
    misses: list[str] = []
    unread: list[str] = []
    for version, file in releases[:BRACKET_RELEASES]:
        try:
            check = symbols.verify(index, file, imports, libraries)
        except TorchstackError as exc:
            log.debug("%s: not read: %s", file.filename, exc)
            unread.append(str(version))
            if fitting:
                break
            continue
        if check.resolved:
            fitting.append(version)
            continue
        misses.append(check.line())
        if fitting:
            break  # older than the bracket
    before = f" out before it ({uploaded[:10]})" if uploaded else ""
    blind = f"; the symbol tables of torch {', '.join(unread)} could not be read by ranges " \
        "(they lie beyond the start of the library, as patchelf leaves them)" if unread else ""
    if not fitting:
        shown = "; ".join(misses[:2]) or "no torch wheel read"
        return BuiltOn(None, f"no torch release{before} is known to export its "
                             f"{len(imports):,} libtorch symbols ({shown}){blind}")
    series = {(v.major, v.minor) for v in fitting}
    names = ", ".join(str(v) for v in fitting)
    if len(series) > 1 or unread:
        return BuiltOn(None, f"its {len(imports):,} libtorch symbols resolve in torch {names}, "
                             f"so the release it was built on is ambiguous{blind}")
    release = wanted if wanted in fitting else max(fitting)
    return BuiltOn(str(release), f"built on torch {fitting[0].major}.{fitting[0].minor} by "
                                 f"its symbols: all {len(imports):,} resolve in {names}, not "
                                 f"in the neighbours{before}")


def _releases(files: Sequence[IndexFile], uploaded: str | None) -> list[tuple[Version, IndexFile]]:
    """One wheel per final torch release, newest first, of those uploaded before `uploaded`."""
    found: dict[Version, IndexFile] = {}
    for file in files:
        version = _version(file.filename)
        if version is None or version.is_prerelease or version.is_devrelease:
            continue
        if uploaded and file.upload_time and file.upload_time > uploaded:
            continue
        public = Version(version.public)
        found.setdefault(public, file)
    return sorted(found.items(), reverse=True)


def platform_wheels(files: Iterable[IndexFile], python: tuple[int, int], arch: str,
                    flavour: str | None) -> list[IndexFile]:
    """torch wheels installable for CPython `python` on `arch`, those of `flavour` (`cpu`,
    `cu13`; None for any) first within each release."""
    fitting = [f for f in files if not f.yanked and f.filename.endswith(".whl")
               and wheeltags.misfit(f.filename, python, arch, (2, 28)) is None]
    return sorted(fitting, key=lambda f: not _of_flavour(f.filename, flavour))


def _of_flavour(filename: str, flavour: str | None) -> bool:
    version = _version(filename)
    local = (version.local or "") if version else ""
    if flavour is None or flavour == "cpu":
        return local == "cpu" or flavour is None
    return local.startswith(flavour) or not local  # PyPI's untagged builds are CUDA


def _version(filename: str) -> Version | None:
    try:
        return parse_wheel_filename(filename)[1]
    except InvalidWheelFilename:
        return None


@contextmanager
def _reader(index: Index, file: IndexFile) -> Iterator[tuple[_zipdir.Reader, int, bytes]]:
    """Range reads of a wheel: from the index, or from disk for a file:// URL."""
    if urlsplit(file.url).scheme == "file":
        path = Path(url2pathname(urlsplit(file.url).path))
        with _zipdir.local_ranges(path, TorchSymbolsError) as local:
            yield local
        return
    ranges = getattr(index, "ranges", None)
    if ranges is None:
        raise TorchSymbolsError(f"{index.location} cannot read ranges of {file.filename}")
    yield ranges(file.url)
