"""Symbol verification: does a torch build export every libtorch symbol a consumer imports?

The failure this project exists to prevent shows at import as `undefined symbol` (torch 2.13
removed `c10::impl::cow::materialize_cow_storage`, so extensions built on 2.12 stop loading).
That can be checked without loading anything: every symbol that a consumer's binaries import
without a fallback (strong undefined), that binds to libtorch (its C++ API or its stable C
shims, `torchstack.elf.linkclass`) and that none of the consumer's own objects defines, must be
exported by one of the provider's `torch/lib` libraries, looked up in their hash tables.

A resolved check proves that the consumer loads, not that it runs right: kernels registered
through the C++ dispatcher carry the dispatch key numbering of the torch they were built on
(`torchstack.elf.symbols.dispatcher_symbols`), so compat still binds such a consumer to its
release. See docs/design.rst, "Symbol verification".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from torch_abi_audit.demangle import demangle_symbol

from torchstack.distributions import (
    Distribution,
    normalize_name,
    open_wheel,
    site_packages_of,
    tree_distributions,
)
from torchstack.elf import reader, symbols
from torchstack.errors import TorchstackError

log = logging.getLogger(__name__)

_TORCH_LIB_DIR = "torch/lib/"
_LONGEST_EXAMPLE = 160
# libraries looked up first: those that define nearly all of what consumers import
_FIRST = ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so",
          "libc10_cuda.so", "libtorch_cuda.so")


class SymbolCheckError(TorchstackError):
    """A provider whose libraries cannot answer (no libc10.so)."""


@dataclass(frozen=True)
class SymbolCheck:
    """The outcome of verifying one consumer's libtorch imports against one provider."""

    provider: str
    needed: int
    missing: tuple[str, ...]

    @property
    def resolved(self) -> bool:
        return not self.missing

    def line(self) -> str:
        """One line: "verified: ..." or "N of M libtorch symbols missing in ..."."""
        if self.resolved:
            return f"verified: {self.needed:,} libtorch symbols resolved in {self.provider}"
        example = demangle_symbol(self.missing[0])
        if len(example) > _LONGEST_EXAMPLE:  # template arguments can run to a kilobyte
            example = example[:_LONGEST_EXAMPLE - 3] + "..."
        return (f"{len(self.missing):,} of {self.needed:,} libtorch symbols missing in "
                f"{self.provider}, e.g. {example}")


def verify_paths(provider_path: str, consumer_path: str, consumer_name: str,
                 provider_label: str) -> SymbolCheck:
    """Verify the consumer named `consumer_name` at one path (a wheel, a site-packages folder
    or a prefix) against the torch at another."""
    with _distributions(consumer_path) as consumers:
        found = [d for d in consumers if d.key == normalize_name(consumer_name)]
        if not found:
            raise SymbolCheckError(f"{consumer_path!r} holds no {consumer_name!r}")
        needed = consumer_imports(found[0])
    with _distributions(provider_path) as providers:
        torch = [d for d in providers if d.key == "torch"]
        if not torch:
            raise SymbolCheckError(f"{provider_path!r} holds no torch")
        return verify(torch[0], needed, provider_label)


def verify_installation(consumer_root: str | Path, provider_root: str | Path,
                        consumers: Iterable[str], label: str) -> dict[str, SymbolCheck]:
    """The symbol check of each named consumer of an installation (an EasyBuild prefix)
    against the torch of another (or the same) one, by consumer name."""
    with _distributions(str(provider_root)) as providers:
        torch = [d for d in providers if d.key == "torch"]
        if not torch:
            return {}
        with _distributions(str(consumer_root)) as found:
            by_name = {d.key: d for d in found}
            return {name: verify(torch[0], consumer_imports(by_name[normalize_name(name)]),
                                 label)
                    for name in consumers if normalize_name(name) in by_name}


@contextmanager
def _distributions(path: str) -> Iterator[list[Distribution]]:
    target = Path(path)
    if target.is_dir():
        yield [d for sp in site_packages_of(target) for d in tree_distributions(sp)]
        return
    with open_wheel(target) as dist:
        yield [dist]


def consumer_imports(dist: Distribution) -> frozenset[str]:
    """The libtorch symbols a consumer's shared objects import and do not define themselves."""
    from torchstack.fingerprint.read import scan_binaries

    return scan_binaries(dist).torch_imports


def verify(provider: Distribution, needed: Iterable[str], label: str) -> SymbolCheck:
    """Look up each needed symbol in the provider's libraries; `label` names the provider."""
    wanted = set(needed)
    total = len(wanted)
    for relpath in _libraries(provider):
        if not wanted:
            break
        with provider.files.open_binary(relpath) as stream:
            found = reader.defined_symbols(stream, provider.describe(relpath),
                                           tuple(sorted(wanted)))
        log.debug("%s: exports %d of the %d symbols still looked for", relpath, len(found),
                  len(wanted))
        wanted -= found
    return SymbolCheck(label, total, tuple(sorted(wanted)))


def _libraries(provider: Distribution) -> list[str]:
    """The provider's torch/lib shared objects, those that define most first."""
    found = [p for p in provider.listing() if p.startswith(_TORCH_LIB_DIR)
             and p.count("/") == 2 and symbols.is_shared_object(p)]
    if not any(p == _TORCH_LIB_DIR + "libc10.so" for p in found):
        raise SymbolCheckError(f"{provider.files.label!r}: torch has no "
                               f"{_TORCH_LIB_DIR}libc10.so, so no symbol can be verified")
    order = {name: i for i, name in enumerate(_FIRST)}
    return sorted(found, key=lambda p: (order.get(p.rsplit("/", 1)[1], len(order)), p))
