"""What libtorch's dynamic symbols say: the C++ ABI, and how a consumer links libtorch.

Pure functions over symbol names and library names; no file access.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

# std::string in the two manglings of GCC's dual ABI (_GLIBCXX_USE_CXX11_ABI=1 / =0).
_CXX11_STRING = "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
_OLD_STRING = "Ss"

# Functions that libc10 has exported for many releases, each taking a std::string, so the
# mangled name says which ABI the library was built with. Format slots take the string type.
_C10_SIGNATURES = (
    "_ZN3c106detail14torchCheckFailEPKcS2_jRK{}",
    "_ZN3c105ErrorC1ENS_14SourceLocationE{}",
    "_ZN3c105ErrorC2ENS_14SourceLocationE{}",
    "_ZN3c1010ValueErrorC1ENS_14SourceLocationE{}",
)
CXX11_PROBES = tuple(s.format(_CXX11_STRING) for s in _C10_SIGNATURES)
PRECXX11_PROBES = tuple(s.format(_OLD_STRING) for s in _C10_SIGNATURES)
ABI_PROBES = CXX11_PROBES + PRECXX11_PROBES

# Undefined C++ symbols in the namespaces of libtorch (c10::, at::, torch::, caffe2::),
# including nested names with qualifiers, typeinfo and vtables, and operators declared at
# namespace scope (c10::operator<< mangles as _ZN3c10ls...: an operator code, not a length).
# torch::stable and torch::headeronly are the stable ABI's own C++ wrappers, not libtorch's API.
# The patterns are compiled on first use (`_regex`): a provider's fingerprint, which needs
# none of them, does not compile them at import.
_TORCH_CXX = (
    r"^_Z(?:N[KVRO]*|T[ISV]N|TS)(?:3c10|2at|5torch(?!6stable|10headeronly)|6caffe2)"
    r"(?:\d|[a-z][a-zA-Z])"
)
# The stable C shims: torch/csrc/stable and the AOTInductor C ABI.
_STABLE_SHIM = r"^(?:aoti_torch_|torch_)"
# The C++ dispatcher API through which an extension registers its kernels (TORCH_LIBRARY,
# TORCH_LIBRARY_IMPL, RegisterOperators): c10::Dispatcher, c10::RegisterOperators,
# torch::Library and torch::detail::TorchLibraryInit. Kernels so registered carry the
# dispatch key numbering of the torch they were compiled against, which changes between
# releases (2.12 to 2.13), so such an extension is bound to its release even where every
# symbol resolves.
_DISPATCHER = (r"N3c1010Dispatcher|N3c1017RegisterOperators|N5torch7Library|"
               r"N5torch6detail16TorchLibraryInit")
# libfoo.so, libfoo.so.1, libfoo.so.1.2.3, _C.cpython-311-x86_64-linux-gnu.so
_SHARED_OBJECT = r"\.so(?:\.\d+)*$"
_CUDART = r"^libcudart(?:[-.][0-9a-f]{8})?\.so\.(\d+)"
# torch's own libraries (libc10_cuda.so, libtorch_cpu.so, libcaffe2_nvrtc.so), not those of
# projects whose names start alike (torchcodec's libtorchcodec_core8.so, libtorchaudio.so)
_TORCH_LIB = r"^lib(?:c10|torch|caffe2)(?:_[a-z0-9_]+)?\.so(?:\.[\d.]+)?$"
_GPU_TORCH_LIB = r"_(?:cuda|hip)(?:_|\.)"

# re.compile, remembered without re's own cache look-up (a third of a call per file name)
_regex = functools.cache(re.compile)


def abi_from_probes(defined: Iterable[str]) -> bool | None:
    """True for the C++11 ABI, False for the old one, None when no probe symbol was found."""
    found = set(defined)
    if found & set(CXX11_PROBES):
        return True
    if found & set(PRECXX11_PROBES):
        return False
    return None


def torch_cxx_symbols(undefined: Iterable[str]) -> list[str]:
    """The undefined symbols that bind a consumer to libtorch's C++ API."""
    match = _regex(_TORCH_CXX).match
    return sorted(s for s in undefined if match(s))


def stable_shim_symbols(undefined: Iterable[str]) -> list[str]:
    """The undefined symbols that bind a consumer only to libtorch's stable C shims."""
    match = _regex(_STABLE_SHIM).match
    return sorted(s for s in undefined if match(s))


def dispatcher_symbols(undefined: Iterable[str]) -> list[str]:
    """The undefined symbols of the C++ dispatcher's registration API (see _DISPATCHER)."""
    search = _regex(_DISPATCHER).search
    return sorted(s for s in undefined if search(s))


def abi_of_cxx_symbols(torch_symbols: Iterable[str]) -> bool | None:
    """The C++ ABI that consumer's torch symbols were compiled for, None without evidence.

    Under the old ABI std::string mangles as the substitution `Ss`; under the new one it is
    spelled out in namespace std::__cxx11, or, where only the return type is a string, shows
    as GCC's `[abi:cxx11]` tag `B5cxx11`.
    """
    symbols = list(torch_symbols)
    if any("St7__cxx11" in s or "B5cxx11" in s for s in symbols):
        return True
    if any(_OLD_STRING in s for s in symbols):
        return False
    return None


def abi_of_libstdcxx(undefined: Iterable[str]) -> bool | None:
    """The C++ ABI a binary was compiled with, from the std::string uses it imports.

    torch.utils.cpp_extension compiles with torch's own _GLIBCXX_USE_CXX11_ABI, so this is the
    evidence of last resort for an extension whose torch symbols pass no strings, e.g.
    std::runtime_error(const std::string&) as `..._ZNSt13runtime_errorC1ERKNSt7__cxx1112...`.
    """
    names = list(undefined)
    if any("St7__cxx11" in s or "B5cxx11" in s for s in names):
        return True
    if any(s.startswith(("_ZNSs", "_ZNKSs")) or "ERKSs" in s for s in names):
        return False
    return None


def is_shared_object(path: str) -> bool:
    """Whether a file name or path names a shared object: `x.so`, `libx.so.1.2`,
    `_C.cpython-311-x86_64-linux-gnu.so`; not `libx.so.1.2.bak` or `libx.so.debug`. The one
    name rule of the fingerprint, the wheel prediction, the loader and the doctor."""
    return bool(_regex(_SHARED_OBJECT).search(path))


def cuda_major_of(needed: Iterable[str]) -> int | None:
    """The CUDA major from a DT_NEEDED libcudart.so.N (auditwheel may hash-rename it)."""
    match = _regex(_CUDART).match
    majors = {int(m.group(1)) for n in needed if (m := match(n))}
    return max(majors) if majors else None


def is_gpu_library(name: str) -> bool:
    """Whether a libtorch library carries torch's CUDA or HIP code (libtorch_cuda.so,
    libc10_hip.so, libtorch_cuda_linalg.so)."""
    return bool(_regex(_GPU_TORCH_LIB).search(name))


def torch_libraries(needed: Iterable[str]) -> list[str]:
    """The libtorch libraries (libc10*, libtorch*) among DT_NEEDED entries."""
    match = _regex(_TORCH_LIB).match
    return sorted({n for n in needed if match(n)})
