"""torchstack.elf.symbols: one class per function, and the probe manglings checked against g++."""

from __future__ import annotations

import pytest
from support.synthetic import SyntheticLibs, dynamic_symbols

from torchstack.elf import symbols

pytest_plugins = ["support.synthetic"]

CXX11_STRING = "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
CHECK_FAIL_CXX11 = f"_ZN3c106detail14torchCheckFailEPKcS2_jRK{CXX11_STRING}"
CHECK_FAIL_OLD = "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"
STD_STRING_CTOR = "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EPKcRKS3_"


class TestProbeManglings:
    """The probes are the names g++ gives real c10 declarations under each ABI."""

    @pytest.mark.parametrize(
        ("key", "probes", "other"),
        [
            # _GLIBCXX_USE_CXX11_ABI=1: std::string spelled out in std::__cxx11
            ("cxx11/libc10.so", symbols.CXX11_PROBES, symbols.PRECXX11_PROBES),
            # _GLIBCXX_USE_CXX11_ABI=0: std::string as the substitution Ss
            ("precxx11/libc10.so", symbols.PRECXX11_PROBES, symbols.CXX11_PROBES),
        ],
        ids=["cxx11", "precxx11"],
    )
    def test_libc10_defines_exactly_its_abis_probes(
        self,
        synthetic_libs: SyntheticLibs,
        key: str,
        probes: tuple[str, ...],
        other: tuple[str, ...],
    ) -> None:
        defined = dynamic_symbols(synthetic_libs[key], defined=True)
        probe_like = {
            s for s in defined
            if "torchCheckFail" in s or "ErrorC1ENS_14SourceLocation" in s
            or "ErrorC2ENS_14SourceLocation" in s
        }
        assert set(probes) <= probe_like
        assert not set(other) & defined
        # C2 of ValueError is not probed; every other probe-like name is a probe.
        assert probe_like - set(probes) == {
            probes[3].replace("ValueErrorC1", "ValueErrorC2")
        }

    def test_abi_probes_are_both_sets(self) -> None:
        assert symbols.ABI_PROBES == symbols.CXX11_PROBES + symbols.PRECXX11_PROBES
        assert len(set(symbols.ABI_PROBES)) == 8


class TestAbiFromProbes:
    @pytest.mark.parametrize(
        ("defined", "expected"),
        [
            # every C++11 probe, as a C++11 libc10 defines them
            (symbols.CXX11_PROBES, True),
            # every old-ABI probe, as libc10 of the pre-2.7 wheels
            (symbols.PRECXX11_PROBES, False),
            # a single probe is evidence enough
            ((CHECK_FAIL_CXX11,), True),
            ((CHECK_FAIL_OLD,), False),
            # nothing found (stripped or unrelated library)
            ((), None),
            # unrelated symbols only
            (("c10_fake_version", "_ZN3c106Device8validateEv"), None),
            # both found: the C++11 one wins
            ((CHECK_FAIL_OLD, CHECK_FAIL_CXX11), True),
        ],
        ids=["cxx11-all", "precxx11-all", "cxx11-one", "precxx11-one", "empty",
             "unrelated", "both"],
    )
    def test_abi(self, defined: tuple[str, ...], expected: bool | None) -> None:
        assert symbols.abi_from_probes(defined) is expected

    def test_takes_any_iterable(self) -> None:
        # a frozenset, as elf.defined_symbols returns, or a generator
        assert symbols.abi_from_probes(frozenset(symbols.CXX11_PROBES)) is True
        assert symbols.abi_from_probes(s for s in symbols.PRECXX11_PROBES) is False


class TestTorchCxxSymbols:
    @pytest.mark.parametrize(
        ("symbol", "is_torch"),
        [
            # a c10 function with a std::string argument
            (CHECK_FAIL_CXX11, True),
            # an at:: function
            ("_ZN2at4_ops3add4callERKNS_6TensorES4_RKN3c106ScalarE", True),
            # torch:: and caffe2::
            ("_ZN5torch3jit6tracer9warn_pathEv", True),
            ("_ZN6caffe28TypeMeta12_typeMetaDataIfEEtv", True),
            # a const member function (N K ...)
            ("_ZNK3c1010TensorImpl5sizesEv", True),
            # typeinfo, typeinfo name and vtable of c10 classes
            ("_ZTIN3c105ErrorE", True),
            ("_ZTSN3c105ErrorE", True),
            ("_ZTVN3c1011StorageImplE", True),
            # operators at namespace scope: c10::operator<<, at::operator==
            ("_ZN3c10lsERSoNS_10DeviceTypeE", True),
            ("_ZN2ateqERKNS_6TensorES2_", True),
            # torchvision's own namespace is not torch's
            ("_ZN11torchvision3ops4nmsERKN2at6TensorES4_d", False),
            # libstdc++ (std::__cxx11::basic_string constructor)
            (STD_STRING_CTOR, False),
            # plain C symbols, including the stable shims
            ("aoti_torch_get_device_type", False),
            ("memcpy", False),
            # a free function that merely takes an at::Tensor is the consumer's own
            ("_Z3nmsRKN2at6TensorE", False),
        ],
        ids=["c10-function", "at-function", "torch-namespace", "caffe2-namespace",
             "const-member", "typeinfo", "typeinfo-name", "vtable", "c10-operator",
             "at-operator", "torchvision", "libstdcxx", "stable-shim", "libc",
             "own-function"],
    )
    def test_classifies(self, symbol: str, is_torch: bool) -> None:
        assert symbols.torch_cxx_symbols([symbol]) == ([symbol] if is_torch else [])

    def test_sorted_and_filtered(self) -> None:
        undefined = {"memcpy", "_ZTIN3c105ErrorE", CHECK_FAIL_OLD, "aoti_torch_abs"}
        assert symbols.torch_cxx_symbols(undefined) == sorted([CHECK_FAIL_OLD, "_ZTIN3c105ErrorE"])

    def test_real_consumer(self, synthetic_libs: SyntheticLibs) -> None:
        # the synthetic cxx consumer imports c10:: and at:: names, and libstdc++ ones
        undefined = dynamic_symbols(synthetic_libs["cxx11/_C.so"], defined=False)
        found = symbols.torch_cxx_symbols(undefined)
        assert CHECK_FAIL_CXX11 in found
        assert "_ZTIN3c105ErrorE" in found
        assert all("3c10" in s or "2at" in s for s in found)
        assert not [s for s in found if s.startswith(("__cxa", "_ZdlPv"))]


class TestStableShimSymbols:
    @pytest.mark.parametrize(
        ("symbol", "is_shim"),
        [
            # the AOTInductor C ABI
            ("aoti_torch_get_device_type", True),
            # torch/csrc/stable
            ("torch_call_dispatcher", True),
            # a mangled torch:: symbol is C++ API, not a shim
            ("_ZN5torch3jit6tracer9warn_pathEv", False),
            # prefixes must be at the start
            ("my_aoti_torch_thing", False),
            ("torchvision_nms", False),
            # CUDA runtime
            ("cudaGetDeviceCount", False),
        ],
        ids=["aoti", "torch-stable", "mangled-torch", "infix", "torchvision", "cudart"],
    )
    def test_classifies(self, symbol: str, is_shim: bool) -> None:
        assert symbols.stable_shim_symbols([symbol]) == ([symbol] if is_shim else [])

    def test_real_stable_consumer(self, synthetic_libs: SyntheticLibs) -> None:
        undefined = dynamic_symbols(synthetic_libs["stable/_C_stable.so"], defined=False)
        assert symbols.stable_shim_symbols(undefined) == [
            "aoti_torch_delete_tensor_object", "aoti_torch_get_device_type",
            "torch_call_dispatcher",
        ]
        assert symbols.torch_cxx_symbols(undefined) == []


class TestAbiOfCxxSymbols:
    @pytest.mark.parametrize(
        ("torch_symbols", "expected"),
        [
            # std::string spelled in std::__cxx11
            ((CHECK_FAIL_CXX11,), True),
            # std::string as Ss
            ((CHECK_FAIL_OLD,), False),
            # returning std::string by value or reference: only the [abi:cxx11] tag says it
            (("_ZNK3c105Error3msgB5cxx11Ev",), True),
            (("_ZNK3c106Device3strB5cxx11Ev", "_ZTIN3c105ErrorE"), True),
            # no std::string anywhere: no evidence
            (("_ZTIN3c105ErrorE", "_ZNK3c1010TensorImpl5sizesEv"), None),
            ((), None),
            # mixed evidence: the C++11 spelling wins
            ((CHECK_FAIL_OLD, CHECK_FAIL_CXX11), True),
        ],
        ids=["cxx11-argument", "old-argument", "abi-tag", "abi-tag-among-others",
             "no-string", "empty", "mixed"],
    )
    def test_abi(self, torch_symbols: tuple[str, ...], expected: bool | None) -> None:
        assert symbols.abi_of_cxx_symbols(torch_symbols) is expected

    @pytest.mark.parametrize(
        ("key", "expected"),
        [("cxx11/_C.so", True), ("precxx11/_C.so", False)],
        ids=["cxx11", "precxx11"],
    )
    def test_real_consumer(self, synthetic_libs: SyntheticLibs, key: str, expected: bool) -> None:
        undefined = dynamic_symbols(synthetic_libs[key], defined=False)
        assert symbols.abi_of_cxx_symbols(symbols.torch_cxx_symbols(undefined)) is expected


class TestCudaMajorOf:
    @pytest.mark.parametrize(
        ("needed", "expected"),
        [
            # the soname of the CUDA 13 runtime
            (("libc10.so", "libcudart.so.13"), 13),
            (("libcudart.so.12",), 12),
            # a full version after the major
            (("libcudart.so.12.8.90",), 12),
            # auditwheel's hash-renamed copies, with '-' or '.'
            (("libcudart-abcdef12.so.13",), 13),
            (("libcudart.abcdef12.so.13",), 13),
            # two runtimes: the newest
            (("libcudart.so.12", "libcudart.so.13"), 13),
            # no runtime, or one without a major
            (("libc10.so", "libstdc++.so.6"), None),
            (("libcudart.so",), None),
            ((), None),
            # other CUDA libraries do not count
            (("libcudnn.so.9", "libcublas.so.13"), None),
            # a hash of the wrong length is not auditwheel's
            (("libcudart-abc.so.13",), None),
        ],
        ids=["cudart13", "cudart12", "full-version", "hashed-dash", "hashed-dot", "two",
             "none", "no-major", "empty", "other-cuda", "bad-hash"],
    )
    def test_major(self, needed: tuple[str, ...], expected: int | None) -> None:
        assert symbols.cuda_major_of(needed) == expected


class TestTorchLibraries:
    @pytest.mark.parametrize(
        ("needed", "expected"),
        [
            # the libraries of libtorch, sorted
            (("libtorch_cpu.so", "libc10.so", "libstdc++.so.6"), ["libc10.so", "libtorch_cpu.so"]),
            # CUDA parts
            (("libc10_cuda.so", "libtorch_cuda.so", "libcudart.so.13"),
             ["libc10_cuda.so", "libtorch_cuda.so"]),
            # libtorch.so and libtorch_python.so
            (("libtorch.so", "libtorch_python.so"), ["libtorch.so", "libtorch_python.so"]),
            # duplicates collapse
            (("libc10.so", "libc10.so"), ["libc10.so"]),
            # no torch library
            (("libcudart.so.13", "libm.so.6"), []),
            ((), []),
        ],
        ids=["cpu", "cuda", "torch-python", "duplicates", "none", "empty"],
    )
    def test_libraries(self, needed: tuple[str, ...], expected: list[str]) -> None:
        assert symbols.torch_libraries(needed) == expected


class TestIsSharedObject:
    """The one shared-object name rule (fingerprint, wheel prediction, loader, doctor)."""

    @pytest.mark.parametrize(("path", "shared"), [
        ("pkg/_C.so", True),  # an extension
        ("_C.cpython-311-x86_64-linux-gnu.so", True),  # an extension with its ABI tag
        ("torch/lib/libc10.so", True),
        ("libx.so.1.2", True),  # a versioned name
        ("pkg.libs/libcudart-1a2b3c4d.so.12", True),  # auditwheel's vendored copy
        ("pkg/so.py", False),
        ("libx.so.1.2.bak", False),  # a backup beside the library: the doctor took it once
        ("libx.so.debug", False),
        ("libx.so.1a", False),
        ("pkg.so/readme", False),  # a folder named like one
    ], ids=["extension", "abi-tagged", "libc10", "versioned", "vendored", "python-file",
            "backup", "debug", "letter-version", "folder"])
    def test_names(self, path: str, shared: bool) -> None:
        assert symbols.is_shared_object(path) is shared
