"""How a consumer links libtorch, from the dynamic symbols and DT_NEEDED of its shared objects
(docs/design.rst, "Link classes").

One rule set for both readers: the install-time fingerprint (whole files on disk) and the
prediction before install (torchstack.index.wheelelf, range reads of a remote wheel). Both
hand over `ObjectSymbols` per shared object and get the same `LinkEvidence` back.

Which undefined symbols bind to libtorch's C++ API is decided by two rules together:
torchstack's mangled-name rule (symbols in the namespaces c10::, at::, torch::, caffe2::, but
not torch::stable:: or torch::headeronly::, as torch-abi-audit taught it) and
torch-abi-audit's demangled-name rule (any mention of at::, c10:: or torch:: outside
torch::stable and torch::headeronly, which also catches thread-local wrappers and template
arguments). Neither alone is right on real wheels: torchvision 0.28.0's _C.so imports
`caffe2::TypeMeta` members (libc10's C++ API, missed by torch-abi-audit) and the thread-local
init routine of `c10::impl::raw_local_dispatch_key_set` (missed by the mangled rule). The
stable shims and the torch release that introduced each come from torch-abi-audit's data,
which is regenerated from pytorch's own shim version list.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from torchstack.elf import symbols

log = logging.getLogger(__name__)

Link = Literal["cxx", "stable", "python"]
def is_bundled(relpath: str) -> bool:
    """auditwheel's vendored copies (`<project>.libs/`): only their names count."""
    return ".libs/" in relpath


@dataclass(frozen=True)
class ObjectSymbols:
    """What one shared object says about libtorch: its DT_NEEDED and its undefined symbols
    (`weak` those of them that may stay unresolved), and the symbols it defines itself."""

    name: str
    needed: frozenset[str]
    undefined: frozenset[str]
    weak: frozenset[str] = frozenset()
    exports: frozenset[str] = frozenset()


@dataclass
class LinkEvidence:
    """The libtorch bindings of all shared objects of one distribution."""

    needed: set[str] = field(default_factory=set)
    cxx_symbols: list[str] = field(default_factory=list)
    stable_symbols: list[str] = field(default_factory=list)
    bundled: set[str] = field(default_factory=set)
    libstdcxx_abi: set[bool] = field(default_factory=set)
    weak: set[str] = field(default_factory=set)
    exports: set[str] = field(default_factory=set)

    def add(self, obj: ObjectSymbols) -> None:
        """Take in one shared object's symbols."""
        self.needed.update(obj.needed)
        torch_cxx = cxx_symbols(obj.undefined)
        stable = symbols.stable_shim_symbols(obj.undefined)
        self.cxx_symbols += torch_cxx
        self.stable_symbols += stable
        self.weak.update(obj.weak)
        self.exports.update(obj.exports)
        stdlib_abi = symbols.abi_of_libstdcxx(obj.undefined) if torch_cxx else None
        if stdlib_abi is not None:
            self.libstdcxx_abi.add(stdlib_abi)
        log.debug("%s: %d C++ and %d stable libtorch symbols", obj.name, len(torch_cxx),
                  len(stable))

    def add_bundled(self, relpath: str) -> None:
        self.bundled.add(relpath.rsplit("/", 1)[-1])

    @property
    def link(self) -> Link:
        """cxx when any object uses libtorch's C++ API, stable when only its C shims."""
        if self.cxx_symbols:
            return "cxx"
        return "stable" if self.stable_symbols else "python"

    @property
    def torch_imports(self) -> frozenset[str]:
        """The libtorch symbols (C++ API and C shims) that the objects need a torch build to
        export: imported without a fallback and defined by none of the objects themselves."""
        wanted = set(self.cxx_symbols) | set(self.stable_symbols)
        return frozenset(wanted - self.weak - self.exports)

    @property
    def registers_kernels(self) -> bool:
        """Whether any object registers kernels through libtorch's C++ dispatcher API."""
        return bool(symbols.dispatcher_symbols(self.cxx_symbols))

    @property
    def binds_torch(self) -> bool:
        return bool(self.cxx_symbols or self.stable_symbols or self.torch_libraries)

    @property
    def torch_libraries(self) -> list[str]:
        return symbols.torch_libraries(self.needed)

    @property
    def cuda_major(self) -> int | None:
        return symbols.cuda_major_of(self.needed | self.bundled)

    def cxx11_abi(self) -> bool | None:
        """From libtorch's own symbols if they carry strings, else from std::string imports."""
        abi = symbols.abi_of_cxx_symbols(self.cxx_symbols)
        if abi is None and len(self.libstdcxx_abi) == 1:
            abi = next(iter(self.libstdcxx_abi))
        return abi

    def minimum_torch(self) -> str | None:
        """The oldest torch release that has every stable shim used (torch-abi-audit's data)."""
        # imported here: importing torch-abi-audit is a start-up cost (bench/README.rst), and a
        # provider's fingerprint never asks
        from torch_abi_audit import torch_versions

        version, defining, unknown = torch_versions.minimum_version(self.stable_symbols)
        if version is None:
            return None
        if unknown:
            log.debug("shims newer than torch-abi-audit's data: %s", ", ".join(unknown[:5]))
        log.debug("minimum torch %s set by %s", version, ", ".join(defining[:5]))
        return torch_versions.format_version(version)


def cxx_symbols(undefined: Iterable[str]) -> list[str]:
    """The undefined symbols that bind an object to libtorch's C++ API (both rules)."""
    from torch_abi_audit import torch_abi  # here: only consumers' objects need it
    from torch_abi_audit.demangle import demangle_symbol

    found = set(symbols.torch_cxx_symbols(undefined))
    for name in undefined:
        if name not in found and name.startswith("_Z") \
                and torch_abi.classify_symbol(demangle_symbol(name)) == "unstable":
            found.add(name)
    return sorted(found)


def gather(objects: Iterable[ObjectSymbols], bundled: Iterable[str] = ()) -> LinkEvidence:
    """The evidence of a distribution's shared objects and vendored library names."""
    evidence = LinkEvidence()
    for obj in objects:
        evidence.add(obj)
    for relpath in bundled:
        evidence.add_bundled(relpath)
    return evidence
