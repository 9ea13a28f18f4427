"""linkclass: one rule set for the fingerprint and the prediction, cross-checked with
torch-abi-audit on real wheels."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from torch_abi_audit import torch_abi
from torch_abi_audit.demangle import demangle_symbol

from torchstack.elf import linkclass, reader, symbols

CAFFE2_TYPEMETA = "_ZN6caffe28TypeMeta26error_unsupported_typemetaES0_"
C10_TLS_INIT = "_ZTHN3c104impl26raw_local_dispatch_key_setE"


class TestCxxSymbols:
    @pytest.mark.parametrize("name, cxx", [
        pytest.param("_ZN3c1010ValueErrorC1ENS_14SourceLocationESs", True, id="c10-function"),
        # libc10's caffe2::TypeMeta: torch-abi-audit's rule does not know the namespace
        pytest.param(CAFFE2_TYPEMETA, True, id="caffe2-typemeta"),
        # a thread-local init routine: only the demangled rule sees c10:: in it
        pytest.param(C10_TLS_INIT, True, id="c10-tls-init"),
        # std::vector<at::Tensor> instantiated in libtorch: at:: as a template argument
        pytest.param("_ZNSt6vectorIN2at6TensorESaIS1_EE17_M_realloc_insertIJRKS1_EEEvN9__gnu_cxx"
                     "17__normal_iteratorIPS1_S3_EEDpOT_", True, id="at-template-argument"),
        pytest.param("_ZN5torch6stable6detail4fromEv", False, id="torch-stable-wrapper"),
        pytest.param("aoti_torch_get_data_ptr", False, id="stable-shim"),
        pytest.param("_ZNSt6vectorIiSaIiEE9push_backERKi", False, id="plain-std"),
    ])
    def test_rule(self, name: str, cxx: bool) -> None:
        assert (linkclass.cxx_symbols([name]) == [name]) is cxx


class TestRealDisagreement:
    """torchvision 0.28.0's _C.so: per symbol, each rule alone misses one binding."""

    @pytest.fixture(scope="class")
    def undefined(self, real_wheel: Any) -> frozenset[str]:
        wheel: Path = real_wheel("torchvision-0.28.0")
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read("torchvision/_C.so")
        return reader.undefined_symbols(io.BytesIO(data), "torchvision/_C.so")

    def test_caffe2_missed_by_torch_abi_audit(self, undefined: frozenset[str]) -> None:
        assert CAFFE2_TYPEMETA in undefined
        assert torch_abi.classify_symbol(demangle_symbol(CAFFE2_TYPEMETA)) == "other"
        assert CAFFE2_TYPEMETA in symbols.torch_cxx_symbols(undefined)
        assert CAFFE2_TYPEMETA in linkclass.cxx_symbols(undefined)

    def test_tls_init_missed_by_mangled_rule(self, undefined: frozenset[str]) -> None:
        assert C10_TLS_INIT in undefined
        assert torch_abi.classify_symbol(demangle_symbol(C10_TLS_INIT)) == "unstable"
        assert C10_TLS_INIT not in symbols.torch_cxx_symbols(undefined)
        assert C10_TLS_INIT in linkclass.cxx_symbols(undefined)


class TestEvidence:
    def test_link_order(self) -> None:
        stable = linkclass.ObjectSymbols("a.so", frozenset(), frozenset({"aoti_torch_empty"}))
        cxx = linkclass.ObjectSymbols("b.so", frozenset({"libc10.so"}),
                                      frozenset({"_ZN3c106detail14torchCheckFailEPKcS2_jS2_"}))
        assert linkclass.gather([stable]).link == "stable"
        assert linkclass.gather([stable, cxx]).link == "cxx"
        assert linkclass.gather([]).link == "python"

    def test_minimum_torch_from_shims(self) -> None:
        # aoti_torch_cpu_grid_sampler_3d came in torch 2.13.0 (torch-abi-audit's data)
        shims = frozenset({"aoti_torch_empty_strided", "aoti_torch_cpu_grid_sampler_3d"})
        evidence = linkclass.gather([linkclass.ObjectSymbols("a.so", frozenset(), shims)])
        assert evidence.minimum_torch() == "2.13.0"

    def test_cuda_major_from_bundled_names(self) -> None:
        evidence = linkclass.gather([], bundled=["x.libs/libcudart-1a2b3c4d.so.12"])
        assert evidence.cuda_major == 12

    @pytest.mark.parametrize("relpath, shared, bundled", [
        pytest.param("pkg/_C.so", True, False, id="extension"),
        pytest.param("pkg/lib/libx.so.1.2", True, False, id="versioned"),
        pytest.param("pkg.libs/libcudart-1a2b3c4d.so.12", True, True, id="vendored"),
        pytest.param("pkg/so.py", False, False, id="python-file"),
    ])
    def test_member_kinds(self, relpath: str, shared: bool, bundled: bool) -> None:
        assert symbols.is_shared_object(relpath) is shared
        assert linkclass.is_bundled(relpath) is bundled
