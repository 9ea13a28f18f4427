"""A consumer wheel's link class and abi_tag before install, from range reads of its ELF files.

Read per wheel: its tail and zip central directory, METADATA and `<package>/version.py`; per
shared object, only the inflated prefix that holds the ELF header, the program headers, the
hash tables, .dynsym and .dynstr. A deflated member cannot be entered in the middle, so
its prefix is inflated as a stream and the reads stop once the tables are in hand.

How one shared object is read, and when it is read whole or not at all: _elfprefix.

The classification itself is the fingerprint's (torchstack.elf.linkclass, fingerprint.py):
the prediction is a `Fingerprint` computed from the same evidence install will see.
"""

from __future__ import annotations

import io
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from torchstack.distributions import (
    Distribution,
    normalize_name,
    parse_headers,
    top_level_modules,
)
from torchstack.elf import linkclass, symbols
from torchstack.fingerprint.read import Fingerprint, built_against_release, consumer_fingerprint
from torchstack.index import _zipdir
from torchstack.index._elfprefix import (
    BeyondBound,
    MemberPrefix,
    WheelElfError,
    object_symbols,
)
from torchstack.index._http import size_text

log = logging.getLogger(__name__)

__all__ = ["BeyondBound", "MemberPrefix", "Prediction", "WheelElfError", "object_symbols",
           "predict", "predict_file"]

MAX_INFLATED = 64 << 20  # the most of one shared object inflated to find its tables


@dataclass(frozen=True)
class ObjectRead:
    """How one shared object was read: `tables` (the prefix only), `whole`, or `beyond`."""

    name: str
    how: str
    inflated: int
    size: int


@dataclass
class Prediction:
    """A consumer wheel's fingerprint as predicted, and what reading it cost."""

    fingerprint: Fingerprint | None
    wheel_size: int
    bytes_read: int
    objects: list[ObjectRead] = field(default_factory=list)
    shim_floor: str | None = None  # the oldest torch with every stable C shim used
    top_level: tuple[str, ...] = ()  # the modules the wheel installs at the top level
    imports: frozenset[str] = frozenset()  # libtorch symbols a torch build must export for it

    @property
    def unread(self) -> list[ObjectRead]:
        return [o for o in self.objects if o.how == "beyond"]

    def _sources(self, fingerprint: Fingerprint) -> str:
        """Where the release floor of a stable consumer comes from, when they differ."""
        required = built_against_release(fingerprint.requires_torch or "", "stable")
        if self.shim_floor is None or (required is not None
                                       and Version(required) == Version(self.shim_floor)):
            return ""
        said = f"Requires-Dist torch{fingerprint.requires_torch}" if required else \
            "no torch in Requires-Dist"
        return f" [{said}; its C shims need torch>={self.shim_floor}]"

    def summary(self, label: str, release: str | None = None) -> str:
        """One report line: `xformers 0.0.35: stable, torch>=2.10 (cu12)` and the like;
        `release`: the torch a C++ consumer naming none is to be built on."""
        fingerprint = self.fingerprint
        if fingerprint is None:
            return f"{label}: does not depend on torch"
        head = f"{fingerprint.name} {fingerprint.version}: {fingerprint.link}"
        if fingerprint.link == "cxx" and fingerprint.torch.release is None and release:
            tag = fingerprint.abi_tag.replace("-unknown-", f"-{release}-", 1)
            text = f"{head}, needs {tag} exactly (no torch release in its metadata: taken " \
                f"as built on {release})"
        elif fingerprint.link == "cxx":
            text = f"{head}, needs {fingerprint.abi_tag} exactly"
        elif fingerprint.link == "stable":
            flavour = fingerprint.abi_tag.rsplit("-", 1)[-1]
            text = f"{head}, torch>={fingerprint.torch.release or '?'} ({flavour})"
            text += self._sources(fingerprint)
        else:
            text = f"{head}, torch{fingerprint.requires_torch or ' (any release)'}"
        if self.unread:
            text += (f"; {len(self.unread)} shared object(s) not read (tables beyond "
                     f"{size_text(self.unread[0].inflated)})")
        return text


# -- whole wheels ----------------------------------------------------------------------


class _RemoteFiles:
    """The small members of a remote wheel that the fingerprint reads (METADATA, version.py)."""

    def __init__(self, ranges: _zipdir._Ranges, entries: list[_zipdir.Member],
                 label: str) -> None:
        self.ranges, self.label = ranges, label
        self._by_name = {m.name: m for m in entries}

    def exists(self, relpath: str) -> bool:
        return relpath in self._by_name

    def text(self, relpath: str) -> str:
        return _zipdir.read_member(self.ranges, self._by_name[relpath]).decode("utf-8", "replace")

    def open_binary(self, relpath: str) -> AbstractContextManager[io.BytesIO]:
        raise WheelElfError(f"{relpath!r}: whole members of a remote wheel are not read")


def predict(read: _zipdir.Reader, size: int, tail: bytes, label: str, *,
            max_inflated: int = MAX_INFLATED) -> Prediction:
    """The predicted consumer fingerprint of the wheel read by `read` (tail: its last bytes).

    Objects whose tables lie beyond `max_inflated` are listed in `Prediction.unread`; the
    fingerprint then stands on the others only.
    """
    counted = _zipdir.Counted(read)
    try:
        ranges, entries = _zipdir.open_directory(counted, size, tail)
        dist = _distribution(ranges, entries, label)
        evidence, objects = _evidence(ranges, entries, max_inflated)
    except _zipdir.ZipDirectoryError as exc:
        raise WheelElfError(f"{label!r}: {exc}") from exc
    if dist.key == "torch":
        raise WheelElfError(f"{label!r} is torch itself, not a consumer")
    fingerprint = consumer_fingerprint(dist, evidence)
    return Prediction(fingerprint, size, counted.fetched + len(tail), objects,
                      evidence.minimum_torch(), tuple(top_level_modules(dist.listing())),
                      evidence.torch_imports)


def predict_file(path: Path, *, max_inflated: int = MAX_INFLATED) -> Prediction:
    """`predict` over a wheel on disk (tests and benchmarks compare it with the fingerprint)."""
    with _zipdir.local_ranges(path, WheelElfError) as (read, size, tail):
        return predict(read, size, tail, str(path), max_inflated=max_inflated)


def _distribution(ranges: _zipdir._Ranges, entries: list[_zipdir.Member],
                  label: str) -> Distribution:
    files = _RemoteFiles(ranges, entries, label)
    names = tuple(m.name for m in entries)
    metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(metadata) != 1:
        raise WheelElfError(f"{label!r} has no single .dist-info/METADATA")
    headers = parse_headers(files.text(metadata[0]))
    name, version = headers.get("name"), headers.get("version")
    if not name or not version:
        raise WheelElfError(f"{metadata[0]!r} in {label!r} has no Name or Version")
    log.debug("%s: %s %s", label, normalize_name(name[0]), version[0])
    return Distribution(name[0], version[0], tuple(headers.get("requires-dist", ())), files,
                        lambda: names)


def _evidence(ranges: _zipdir._Ranges, entries: list[_zipdir.Member],
              max_inflated: int) -> tuple[linkclass.LinkEvidence, list[ObjectRead]]:
    evidence = linkclass.LinkEvidence()
    objects = []
    for member in entries:
        if not symbols.is_shared_object(member.name):
            continue
        if linkclass.is_bundled(member.name):
            evidence.add_bundled(member.name)
            continue
        prefix = MemberPrefix(ranges, member, max_inflated)
        try:
            read, how = object_symbols(prefix)
        except BeyondBound as exc:
            log.debug("%s", exc)
            objects.append(ObjectRead(member.name, "beyond", len(prefix.data), member.uncompressed))
            continue
        evidence.add(read)
        objects.append(ObjectRead(member.name, how, len(prefix.data), member.uncompressed))
    return evidence, objects
