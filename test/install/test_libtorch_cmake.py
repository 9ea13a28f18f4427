"""libtorch from C++ with nothing but `module load`: the search paths a PyTorch module sets.

The unit tests check `easyblock_steps.libtorch_module_paths` / `add_libtorch_module_paths` on
EasyBuild's own ModuleLoadEnvironment (and its merge of the easyconfig's modextrapaths); the
real-eb tests build and run a CMake `find_package(Torch REQUIRED)` program against the
PyTorch/2.13.0-whl module (torch 2.13.0+cpu), in a shell that only loaded that module.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from easybuild.framework.easyblock import EasyBlock
from easybuild.tools.modules import ModuleLoadEnvironment
from support.ebenv import EasyBuildEnv

from torchstack.install.steps import add_libtorch_module_paths, libtorch_module_paths

PYSHORTVER = f"{sys.version_info[0]}.{sys.version_info[1]}"
TORCH_DIR = f"lib/python{PYSHORTVER}/site-packages/torch"
LIBTORCH_VARS = ("CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH")

# -- the paths, on EasyBuild's ModuleLoadEnvironment ------------------------------------------


def _block(modextrapaths: dict[str, Any] | None = None) -> Any:
    """What add_libtorch_module_paths and EasyBlock.inject_module_extra_paths use of a block."""
    return SimpleNamespace(module_load_environment=ModuleLoadEnvironment(),
                           cfg={"modextrapaths": modextrapaths or {}},
                           log=SimpleNamespace(debug=lambda *a, **k: None))


@pytest.fixture
def python_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EBVERSIONPYTHON", "3.12.3")


def test_paths_relative_to_the_install_dir() -> None:
    assert libtorch_module_paths("3.12") == {
        "CMAKE_PREFIX_PATH": ["lib/python3.12/site-packages/torch"],
        "LD_LIBRARY_PATH": ["lib/python3.12/site-packages/torch/lib"],
        "LIBRARY_PATH": ["lib/python3.12/site-packages/torch/lib"],
    }


def test_provider_gets_them_beside_easybuilds_defaults(python_loaded: None) -> None:
    block = _block()
    add_libtorch_module_paths(block, SimpleNamespace(role="provider"))
    add_libtorch_module_paths(block, SimpleNamespace(role="provider"))  # fake module, then real
    env = block.module_load_environment
    assert env.CMAKE_PREFIX_PATH.contents == ["", "lib/python3.12/site-packages/torch"]
    torch_lib = "lib/python3.12/site-packages/torch/lib"
    assert env.LD_LIBRARY_PATH.contents == ["lib", "lib64", torch_lib]
    assert env.LIBRARY_PATH.contents == ["lib", "lib64", torch_lib]
    # no torch/include on CPATH: it would shadow the site's pybind11, protobuf and fmt headers
    assert not any("torch/include" in path for _, var in env.items() for path in var)


@pytest.mark.parametrize("fingerprint", [None, SimpleNamespace(role="consumer")])
def test_consumer_or_nothing_recorded_gets_none(python_loaded: None, fingerprint: Any) -> None:
    block = _block()
    env = block.module_load_environment
    before = {name: list(var.contents) for name, var in env.items()}
    add_libtorch_module_paths(block, fingerprint)
    assert {name: list(var.contents) for name, var in env.items()} == before


def test_easyconfig_modextrapaths_win(python_loaded: None) -> None:
    """An upstream -whl easyconfig's own entries: not doubled, their options kept by EasyBuild."""
    site = "lib/python3.12/site-packages/torch"
    block = _block({
        "CMAKE_PREFIX_PATH": site + "/",
        "LD_LIBRARY_PATH": {"paths": [f"{site}/lib"], "var_type": "PATH_WITH_FILES"},
        "LIBRARY_PATH": ["extra/lib"],
    })
    add_libtorch_module_paths(block, SimpleNamespace(role="provider"))
    EasyBlock.inject_module_extra_paths(block)  # what make_module_req does next
    env = block.module_load_environment
    assert env.CMAKE_PREFIX_PATH.contents == ["", site + "/"]
    assert env.LD_LIBRARY_PATH.contents == ["lib", "lib64", f"{site}/lib"]
    assert env.LD_LIBRARY_PATH.type.name == "PATH_WITH_FILES"  # the easyconfig's option
    assert env.LIBRARY_PATH.contents == ["lib", "lib64", f"{site}/lib", "extra/lib"]


# -- the real module ----------------------------------------------------------------------------

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.18)
project(torchsum CXX)

# No Torch_DIR, no -DCMAKE_PREFIX_PATH: the module's CMAKE_PREFIX_PATH finds TorchConfig.cmake.
# The CPU wheel's config needs nothing else (it warns "library kineto not found": kineto is
# linked into libtorch_cpu.so, the warning is harmless).
find_package(Torch REQUIRED)

# No build RPATH, as for a program installed without one: it runs through the module's
# LD_LIBRARY_PATH.
set(CMAKE_SKIP_BUILD_RPATH ON)

add_library(torchsum_main OBJECT main.cpp)
target_link_libraries(torchsum_main PUBLIC torch)

# As CMake users link: the libraries by full path, from TorchConfig.cmake.
add_executable(torchsum $<TARGET_OBJECTS:torchsum_main>)
target_link_libraries(torchsum PRIVATE "${TORCH_LIBRARIES}")

# As a Makefile (or EasyBuild's RPATH wrappers) links: by name, through LIBRARY_PATH.
add_executable(torchsum_byname $<TARGET_OBJECTS:torchsum_main>)
target_link_libraries(torchsum_byname PRIVATE -ltorch -ltorch_cpu -lc10)
"""

MAIN_CPP = """\
#include <torch/torch.h>
#include <iostream>

int main() {
  torch::Tensor t = torch::ones({2, 3});
  std::cout << "sum=" << t.sum().item<float>() << std::endl;
  return 0;
}
"""


def _module_file(eb_env: EasyBuildEnv, module: str) -> str:
    return (eb_env.installpath / "modules" / "all" / f"{module}.lua").read_text()


def _sets(text: str, var: str, path: str) -> bool:
    """The Lua line of EasyBuild's module generator: pathJoin(root, "lib", "python3.11", ...)."""
    parts = ", ".join(f'"{part}"' for part in path.split("/"))
    return f'prepend_path("{var}", pathJoin(root, {parts}))' in text


def test_provider_module_file_sets_the_paths(eb_env: EasyBuildEnv,
                                             pytorch_cpu_module: str) -> None:
    text = _module_file(eb_env, pytorch_cpu_module)
    assert _sets(text, "CMAKE_PREFIX_PATH", TORCH_DIR), text
    assert _sets(text, "LD_LIBRARY_PATH", f"{TORCH_DIR}/lib"), text
    assert _sets(text, "LIBRARY_PATH", f"{TORCH_DIR}/lib"), text
    assert text.count('"site-packages", "torch"') == 3, text  # once each, nothing else (no CPATH)


def test_consumer_module_file_does_not(eb_env: EasyBuildEnv, toy_module: str) -> None:
    text = _module_file(eb_env, toy_module)
    assert '"site-packages", "torch"' not in text, text
    for var in LIBTORCH_VARS:
        assert f'prepend_path("{var}", pathJoin(root, "lib", "python' not in text, text


def test_find_package_torch_builds_and_runs(eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                                            tmp_path: Path) -> None:
    if shutil.which("cmake") is None:
        pytest.fail("cmake is not installed: run scripts/setup (apt-get install cmake)")
    source = tmp_path / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(CMAKELISTS)
    (source / "main.cpp").write_text(MAIN_CPP)
    build = tmp_path / "build"
    # Whatever the test runner's environment holds, only the module may provide torch.
    result = eb_env.shell(textwrap.dedent(f"""\
        unset LD_LIBRARY_PATH LIBRARY_PATH CMAKE_PREFIX_PATH CPATH Torch_DIR TORCH_INSTALL_PREFIX
        module load {pytorch_cpu_module}
        cmake -S {source} -B {build}
        cmake --build {build}
        {build}/torchsum
        {build}/torchsum_byname
        """))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Found Torch" in output, output[-4000:]
    assert result.stdout.splitlines()[-2:] == ["sum=6", "sum=6"], output[-4000:]
    # The build found torch in the module's install dir, not somewhere else.
    installdir = eb_env.installpath / "software" / "PyTorch" / "2.13.0-whl"
    cache = (build / "CMakeCache.txt").read_text()
    assert f"Torch_DIR:PATH={installdir}/{TORCH_DIR}/share/cmake/Torch" in cache, cache
