"""torchstack.install.libraries: installations laid out in tmp trees, with tiny libraries from gcc.

Every library is a real ELF shared object; what differs between cases is where the files lie,
their DT_NEEDED entries and their DT_RUNPATH, as in a real installation:
<prefix>/lib/python3.11/site-packages/<package>/...
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from torchstack.elf import loader
from torchstack.install.libraries import (
    module_library_dirs,
    torch_loaded_libraries,
    unresolved_libraries,
)

SITE = Path("lib/python3.11/site-packages")
STUB_C = "int torchstack_stub(void) { return 0; }\n"


def shared_library(
    out: Path, source: Path, *, soname: str | None = None, needs: Sequence[Path] = (),
    runpath: str | None = None,
) -> Path:
    """gcc -shared: DT_NEEDED on each of `needs` (by its soname), DT_RUNPATH `runpath`."""
    args = ["gcc", "-shared", "-fPIC", "-o", str(out), str(source)]
    if soname:
        args.append(f"-Wl,-soname,{soname}")
    if runpath:
        args += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    args += ["-Wl,--no-as-needed", *map(str, needs)]
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr}")
    return out


@dataclass(frozen=True)
class Libs:
    """Built once a session; tests copy them into their own trees under the names they need."""

    foo: Path  # libfoo.so, soname libfoo.so
    ext_runpath: Path  # needs libfoo.so, DT_RUNPATH $ORIGIN/../pkg.libs
    ext_plain: Path  # needs libfoo.so, no search path of its own
    needs_bar: Path  # needs libbar.so, no search path
    needs_cuda: Path  # needs libcuda.so.1 (and nothing else of ours)
    needs_driver_stub: Path  # needs libnvidia-torchstack-stub.so.1, on no machine at all
    needs_nvx: Path  # needs libnvx.so.1, DT_RUNPATH $ORIGIN/../nvidia/x/lib
    nvx_needs_bar: Path  # libnvx.so.1, soname libnvx.so.1, needs libbar.so
    triton: Path  # libtriton.so, soname libtriton.so
    needs_triton: Path  # needs libtriton.so, no search path (a plugin opened by triton)
    c10: Path  # libc10.so, soname libc10.so
    needs_c10: Path  # a consumer extension: needs libc10.so, no search path
    plain: Path  # no DT_NEEDED of ours at all


@pytest.fixture(scope="session")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Libs:
    root = tmp_path_factory.mktemp("installcheck")
    source = root / "stub.c"
    source.write_text(STUB_C)

    def so(
        name: str, soname: str | None = None, needs: Sequence[Path] = (),
        runpath: str | None = None,
    ) -> Path:
        return shared_library(root / name, source, soname=soname, needs=needs, runpath=runpath)

    foo = so("libfoo.so", soname="libfoo.so")
    bar = so("libbar.so", soname="libbar.so")
    cuda = so("libcuda.so.1", soname="libcuda.so.1")
    driver_stub = so("libnvidia-stub.so", soname="libnvidia-torchstack-stub.so.1")
    nvx = so("libnvx.so.1", soname="libnvx.so.1", needs=[bar])
    triton = so("libtriton.so", soname="libtriton.so")
    c10 = so("libc10.so", soname="libc10.so")
    return Libs(
        foo=foo,
        ext_runpath=so("ext_runpath.so", needs=[foo], runpath="$ORIGIN/../pkg.libs"),
        ext_plain=so("ext_plain.so", needs=[foo]),
        needs_bar=so("needs_bar.so", needs=[bar]),
        needs_cuda=so("needs_cuda.so", needs=[cuda]),
        needs_driver_stub=so("needs_driver_stub.so", needs=[driver_stub]),
        needs_nvx=so("needs_nvx.so", needs=[nvx], runpath="$ORIGIN/../nvidia/x/lib"),
        nvx_needs_bar=nvx,
        triton=triton,
        needs_triton=so("needs_triton.so", needs=[triton]),
        c10=c10,
        needs_c10=so("needs_c10.so", needs=[c10]),
        plain=so("plain.so"),
    )


def place(prefix: Path, relpath: str, library: Path) -> Path:
    """Copy `library` to <prefix>/<site-packages>/<relpath>."""
    target = prefix / SITE / relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(library, target))


def line(prefix: Path, relpath: str, needed: str) -> str:
    return f"{prefix / SITE / relpath}: needs {needed}"


class TestDriverLibrary:
    @pytest.mark.parametrize(
        ("name", "driver"),
        [
            ("libcuda.so.1", True),  # the CUDA driver API
            ("libcuda.so", True),  # the development link name
            ("libnvidia-ml.so.1", True),  # NVML
            ("libnvidia-ptxjitcompiler.so.1", True),  # the driver's PTX JIT
            ("libnvcuvid.so.1", True),  # the video decoder
            ("libcudart.so.13", False),  # the runtime comes with a module or a wheel
            ("libcudnn.so.9", False),  # a library, not the driver
            ("libcuda_stub.so", False),  # only libcuda itself
            ("libcuda.so.1.bak", False),  # not a shared object name
        ],
        ids=[
            "libcuda.so.1", "libcuda.so", "nvml", "ptxjit", "nvcuvid", "cudart", "cudnn",
            "cuda-stub", "backup",
        ],
    )
    def test_match(self, name: str, driver: bool) -> None:
        assert bool(loader.DRIVER_LIBRARY.match(name)) is driver


class TestModuleLibraryDirs:
    def test_lib_then_lib64_of_each_root_in_order(self, tmp_path: Path) -> None:
        first, second, bare = tmp_path / "CUDA", tmp_path / "cuDNN", tmp_path / "Bare"
        for folder in (first / "lib", first / "lib64", second / "lib64", bare / "bin"):
            folder.mkdir(parents=True)
        found = module_library_dirs([first, str(second), bare, tmp_path / "missing"])
        assert found == [str(first / "lib"), str(first / "lib64"), str(second / "lib64")]

    def test_a_file_named_lib_is_not_a_folder(self, tmp_path: Path) -> None:
        (tmp_path / "lib").write_text("")
        assert module_library_dirs([tmp_path]) == []

    def test_no_roots(self) -> None:
        assert module_library_dirs([]) == []


class TestTorchLoadedLibraries:
    def test_torch_lib_and_nvidia_libraries(self, tmp_path: Path, libs: Libs) -> None:
        site = tmp_path / SITE
        c10 = place(tmp_path, "torch/lib/libc10.so", libs.c10)
        nvx = place(tmp_path, "nvidia/x/lib/libnvx.so.1", libs.nvx_needs_bar)
        place(tmp_path, "other/libfoo.so", libs.foo)  # not loaded by importing torch
        assert torch_loaded_libraries([site]) == {"libc10.so": str(c10), "libnvx.so.1": str(nvx)}

    def test_file_name_counts_besides_the_soname(self, tmp_path: Path, libs: Libs) -> None:
        copy = place(tmp_path, "torch/lib/libc10-renamed.so", libs.c10)
        assert torch_loaded_libraries([str(tmp_path / SITE)]) == {
            "libc10.so": str(copy), "libc10-renamed.so": str(copy),
        }

    def test_site_packages_without_torch(self, tmp_path: Path) -> None:
        assert torch_loaded_libraries([tmp_path, tmp_path / "missing"]) == {}


class TestUnresolvedLibraries:
    def test_runpath_origin_resolves(self, tmp_path: Path, libs: Libs) -> None:
        place(tmp_path, "pkg/_ext.so", libs.ext_runpath)
        place(tmp_path, "pkg.libs/libfoo.so", libs.foo)
        assert unresolved_libraries(tmp_path, [], []) == ([], [])

    def test_missing_library_fails(self, tmp_path: Path, libs: Libs) -> None:
        place(tmp_path, "pkg/_ext.so", libs.ext_runpath)
        failures, notes = unresolved_libraries(tmp_path, [], [])
        assert failures == [line(tmp_path, "pkg/_ext.so", "libfoo.so")]
        assert notes == []

    def test_every_failure_is_listed(self, tmp_path: Path, libs: Libs) -> None:
        place(tmp_path, "b/_ext.so", libs.ext_runpath)
        place(tmp_path, "a/_ext.so", libs.needs_bar)
        failures, _ = unresolved_libraries(str(tmp_path), [], [])
        assert failures == [
            line(tmp_path, "a/_ext.so", "libbar.so"), line(tmp_path, "b/_ext.so", "libfoo.so"),
        ]

    def test_nvidia_plugin_missing_library_is_a_note(self, tmp_path: Path, libs: Libs) -> None:
        # opened on demand (NVSHMEM's MPI bootstrap): nothing of the packages needs it
        place(tmp_path, "nvidia/x/lib/libnvx_plugin.so", libs.needs_bar)
        failures, notes = unresolved_libraries(tmp_path, [], [])
        assert failures == []
        assert notes == [line(tmp_path, "nvidia/x/lib/libnvx_plugin.so", "libbar.so")]

    def test_nvidia_library_needed_by_an_extension_fails(self, tmp_path: Path, libs: Libs) -> None:
        # the extension loads libnvx.so.1, which then cannot find libbar.so
        place(tmp_path, "pkg/_ext.so", libs.needs_nvx)
        place(tmp_path, "nvidia/x/lib/libnvx.so.1", libs.nvx_needs_bar)
        failures, notes = unresolved_libraries(tmp_path, [], [])
        assert failures == [line(tmp_path, "nvidia/x/lib/libnvx.so.1", "libbar.so")]
        assert notes == []

    @pytest.mark.parametrize(
        ("attribute", "needed"),
        [
            # the CUDA driver: found on a GPU node's system folders, missing on a build host
            ("needs_cuda", "libcuda.so.1"),
            # a driver-named library that no machine has
            ("needs_driver_stub", "libnvidia-torchstack-stub.so.1"),
        ],
        ids=["libcuda", "nvidia-driver-stub"],
    )
    def test_driver_library_is_ignored(
        self, tmp_path: Path, libs: Libs, attribute: str, needed: str
    ) -> None:
        lib = place(tmp_path, "torch/lib/libc10_cuda.so", getattr(libs, attribute))
        # neither the tree nor the object's own search path holds it ...
        assert (str(lib), needed) in loader.unresolved_in_tree(tmp_path, system_dirs=())
        # ... and the check lets it pass
        assert unresolved_libraries(tmp_path, [], []) == ([], [])

    def test_plugin_needing_its_packages_main_library(self, tmp_path: Path, libs: Libs) -> None:
        # triton opens its plugins after it has loaded libtriton.so itself
        place(tmp_path, "triton/_C/libtriton.so", libs.triton)
        place(tmp_path, "triton/plugins/libplugin.so", libs.needs_triton)
        assert unresolved_libraries(tmp_path, [], []) == ([], [])

    def test_plugin_without_the_main_library_fails(self, tmp_path: Path, libs: Libs) -> None:
        place(tmp_path, "triton/plugins/libplugin.so", libs.needs_triton)
        failures, _ = unresolved_libraries(tmp_path, [], [])
        assert failures == [line(tmp_path, "triton/plugins/libplugin.so", "libtriton.so")]

    def test_consumer_finds_libc10_loaded_by_torch(self, tmp_path: Path, libs: Libs) -> None:
        torch_prefix, prefix = tmp_path / "PyTorch", tmp_path / "torchvision"
        place(torch_prefix, "torch/lib/libc10.so", libs.c10)
        place(prefix, "torchvision/_C.so", libs.needs_c10)
        assert unresolved_libraries(prefix, [], [torch_prefix / SITE]) == ([], [])

    def test_consumer_without_torch_fails(self, tmp_path: Path, libs: Libs) -> None:
        place(tmp_path, "torchvision/_C.so", libs.needs_c10)
        failures, _ = unresolved_libraries(tmp_path, [], [tmp_path / "no-torch"])
        assert failures == [line(tmp_path, "torchvision/_C.so", "libc10.so")]

    def test_search_path_of_module_lib_dirs(self, tmp_path: Path, libs: Libs) -> None:
        module_root, prefix = tmp_path / "Foo", tmp_path / "prefix"
        (module_root / "lib").mkdir(parents=True)
        shutil.copy(libs.foo, module_root / "lib" / "libfoo.so")
        place(prefix, "pkg/_ext.so", libs.ext_plain)
        assert unresolved_libraries(prefix, module_library_dirs([module_root]), []) == ([], [])
        failures, _ = unresolved_libraries(prefix, [], [])
        assert failures == [line(prefix, "pkg/_ext.so", "libfoo.so")]

    def test_nothing_to_check(self, tmp_path: Path, libs: Libs) -> None:
        place(tmp_path, "pkg/_plain.so", libs.plain)
        (tmp_path / SITE / "pkg" / "fake.so").write_text("INPUT(-lfoo)\n")  # a linker script
        assert unresolved_libraries(tmp_path, [], []) == ([], [])
