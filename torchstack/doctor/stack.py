"""The torch that `import torch` picks from sys.path, and the distributions that sit beside it.

sys.path is walked in order as the import system walks it: the first folder holding a
`torch` package is where torch comes from; the first distribution of each name is the one
that counts, later ones of the same name are hidden. Consumers are the visible
distributions that require torch or whose binaries link libtorch.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from torchstack.distributions import Distribution, TreeFiles, normalize_name, tree_distributions
from torchstack.doctor._dynstr import may_name_torch
from torchstack.elf import reader, symbols
from torchstack.fingerprint.read import (
    Fingerprint,
    FingerprintError,
    consumer_fingerprint,
    parse_version_py,
    provider_fingerprint,
    shared_objects,
    torch_requirement,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placed:
    """A distribution and the sys.path folder it was found in."""

    dist: Distribution
    folder: str

    @property
    def label(self) -> str:
        return f"{self.dist.name} {self.dist.version}"


@dataclass(frozen=True)
class Consumer:
    """A visible distribution that needs torch, with its fingerprint."""

    placed: Placed
    fingerprint: Fingerprint


@dataclass(frozen=True)
class Stack:
    """Everything importable that matters to torch, in sys.path order."""

    torch: Placed | None
    provider: Fingerprint | None
    provider_error: str | None  # why the active torch could not be fingerprinted
    torch_folders: tuple[str, ...]  # every sys.path folder with a torch package
    visible: dict[str, Placed]  # normalized name -> the distribution that counts
    hidden: tuple[Placed, ...]  # distributions behind a visible one of the same name
    consumers: tuple[Consumer, ...]

    def consumer(self, name: str) -> Consumer | None:
        key = normalize_name(name)
        return next((c for c in self.consumers if c.placed.dist.key == key), None)


def read_stack(path: Iterable[str]) -> Stack:
    """Walk sys.path once: torch, every visible distribution, the consumers among them."""
    folders = [f for f in dict.fromkeys(os.path.abspath(p) for p in path if p) if os.path.isdir(f)]
    torch_folders = tuple(f for f in folders if os.path.isfile(os.path.join(f, "torch",
                                                                             "__init__.py")))
    visible: dict[str, Placed] = {}
    hidden: list[Placed] = []
    for folder in folders:
        for dist in _distributions(folder):
            placed = Placed(dist, folder)
            if dist.key in visible:
                hidden.append(placed)
            else:
                visible[dist.key] = placed
    torch = _torch_at(torch_folders[0], visible) if torch_folders else None
    provider, error = _provider(torch)
    consumers = tuple(_consumers(p for k, p in visible.items() if k != "torch"))
    return Stack(torch, provider, error, torch_folders, visible, tuple(hidden), consumers)


def _provider(torch: Placed | None) -> tuple[Fingerprint | None, str | None]:
    if torch is None:
        return None, None
    try:
        return provider_fingerprint(torch.dist), None
    except (FingerprintError, reader.ElfError, OSError) as exc:
        return None, str(exc)


def _distributions(folder: str) -> list[Distribution]:
    try:
        return tree_distributions(Path(folder))
    except OSError as exc:
        log.debug("cannot list %s: %s", folder, exc)
        return []


def _torch_at(folder: str, visible: dict[str, Placed]) -> Placed:
    """The distribution of the torch package in `folder`; one made from version.py if the
    folder has no torch metadata (a source tree on PYTHONPATH)."""
    placed = visible.get("torch")
    if placed is not None and placed.folder == folder:
        return placed
    for dist in _distributions(folder):
        if dist.key == "torch":
            return Placed(dist, folder)
    return Placed(bare_torch(folder), folder)


def bare_torch(folder: str) -> Distribution:
    """torch without a dist-info: name and version from torch/version.py, no requirements."""
    files = TreeFiles(Path(folder))
    version = "unknown"
    if files.exists("torch/version.py"):
        value = parse_version_py(files.text("torch/version.py")).get("__version__")
        version = value if isinstance(value, str) else version
    return Distribution("torch", version, (), files, lambda: _walk_shared_objects(folder))


def _walk_shared_objects(folder: str) -> tuple[str, ...]:
    """Shared objects under folder/torch, relative to `folder`: the listing RECORD would give."""
    found = []
    for parent, _, names in os.walk(os.path.join(folder, "torch")):
        found += [os.path.relpath(os.path.join(parent, n), folder) for n in sorted(names)
                  if symbols.is_shared_object(n)]
    return tuple(found)


def torch_at(folder: str) -> Placed:
    """The torch installed in `folder` (a hidden one, for comparison with the active one)."""
    return _torch_at(folder, {})


def _consumers(candidates: Iterable[Placed]) -> Iterator[Consumer]:
    for placed in candidates:
        if not _may_need_torch(placed.dist):
            continue
        try:
            found = consumer_fingerprint(placed.dist)
        except (FingerprintError, reader.ElfError, OSError) as exc:
            log.debug("%s: not fingerprinted: %s", placed.label, exc)
            continue
        if found is not None:
            yield Consumer(placed, found)


def _may_need_torch(dist: Distribution) -> bool:
    """Requires-Dist on torch, or a binary with DT_NEEDED on libtorch: cheap tests first."""
    if torch_requirement(dist) is not None:
        return True
    for relpath in shared_objects(dist):
        try:
            with dist.files.open_binary(relpath) as stream:
                if isinstance(stream, mmap.mmap) and not may_name_torch(stream):
                    continue
                needed = reader.read_dynamic(stream, dist.describe(relpath)).needed
        except (reader.ElfError, OSError) as exc:
            log.debug("%s: %s", dist.describe(relpath), exc)
            continue
        if symbols.torch_libraries(needed):
            return True
    return False


