"""A small libtorch built from source with g++, and consumers built against it.

A real source build of PyTorch does not fit a test machine, so the stage-2 tests build this
one instead, through EasyBuild's own EB_PyTorch steps (`pip install .` of a source tree):
- `pytorch-v2.6.0.tar.gz`: a torch source tree whose setup.py compiles `libc10.so` and
  `libtorch_cpu.so` (the c10/at functions of `synthetic.py`, with std::string arguments, so
  the C++ ABI shows in their mangled names) and a CPython extension `torch._C` linked to them,
  honouring the environment variables a real PyTorch build reads: PYTORCH_BUILD_VERSION and
  _GLIBCXX_USE_CXX11_ABI (EB_PyTorch passes `custom_opts` as such). Built with =1 it stands for
  a source build, with =0 for a pre-2.7 wheel, same release.
- `fakeops-1.0.tar.gz`: a consumer whose extension `fakeops._C` calls `at::fake_op_schema`
  (std::string in, std::string out) and catches `c10::Error`; like torch.utils.cpp_extension
  it compiles with the `_GLIBCXX_USE_CXX11_ABI` of the torch it is built against
  (`torch._C._GLIBCXX_USE_CXX11_ABI`) and links torch/lib's libraries. Its metadata requires
  `torch` with no version, as source builds often do.
- `faketoy-1.0.tar.gz`: a pure-Python consumer that requires torch>=2.6.

Helpers write the easyconfigs: torch with the stage-2 easyblock (through a test subclass that
stubs only PyTorch's test suite, see test/support/easyblocks/), consumers with EasyBuild's own
PythonPackage (recorded through the hooks file).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Mapping
from pathlib import Path

from support.cudastack import write_module
from support.ebenv import PYTHON_VERSION, EasyBuildEnv
from support.synthetic import C10_HEADER, LIBC10, LIBTORCH_CPU
from torchstack.paths import easyblocks_path, hooks_path

RELEASE = "2.6.0"
EASYBLOCK = "FakePyTorchSource"
# EB_PyTorch's configure step insists on a BLAS among the dependencies (upstream's easyconfigs
# get FlexiBLAS from the foss toolchain); the small libtorch needs none, a stand-in module does.
BLAS = ("FlexiBLAS", "3.4.5")
TEST_EASYBLOCKS = Path(__file__).parent / "easyblocks"

TORCH_SETUP_PY = '''\
"""setup.py of a small torch: libc10, libtorch_cpu and torch._C, compiled with g++."""
import os
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
# The variables a real PyTorch build reads, as EB_PyTorch sets them.
VERSION = os.environ.get("PYTORCH_BUILD_VERSION", "@RELEASE@a0")
ABI = os.environ.get("_GLIBCXX_USE_CXX11_ABI", "1")
LIBRARIES = (("libc10.so", "c10/c10.cpp", ()), ("libtorch_cpu.so", "aten/torch_cpu.cpp", ("c10",)))


class BuildLibtorch(build_ext):
    """Build torch/lib first, then the extension against it."""

    def run(self):
        libdir = Path(self.build_lib).resolve() / "torch" / "lib"
        libdir.mkdir(parents=True, exist_ok=True)
        for name, source, links in LIBRARIES:
            command = ["g++", "-shared", "-fPIC", "-O1", f"-D_GLIBCXX_USE_CXX11_ABI={ABI}",
                       f"-I{HERE / 'torch' / 'include'}", "-o", str(libdir / name),
                       str(HERE / source), f"-Wl,-soname,{name}", "-Wl,-rpath,$ORIGIN",
                       f"-L{libdir}", *(f"-l{lib}" for lib in links)]
            print(" ".join(command), flush=True)
            subprocess.run(command, check=True)
        for extension in self.extensions:
            extension.library_dirs.append(str(libdir))
        super().run()


(HERE / "torch" / "version.py").write_text(
    f"__version__ = {VERSION!r}\\ndebug = False\\ncuda = None\\n"
    f"git_version = 'Unknown'\\nhip = None\\nxpu = None\\n")
setup(
    name="torch",
    version=VERSION,
    packages=["torch"],
    package_data={"torch": ["include/*.h"]},
    ext_modules=[Extension(
        "torch._C", ["torch/csrc/module.cpp"], include_dirs=["torch/include"],
        libraries=["torch_cpu", "c10"], define_macros=[("_GLIBCXX_USE_CXX11_ABI", ABI)],
        extra_link_args=["-Wl,-rpath,$ORIGIN/lib"], language="c++")],
    cmdclass={"build_ext": BuildLibtorch},
)
'''.replace("@RELEASE@", RELEASE)

TORCH_INIT_PY = '''\
"""A small torch: importing it loads libc10.so and libtorch_cpu.so through torch._C."""
from torch import _C
from torch.version import __version__  # noqa: F401


def op_schema(name):
    return _C.op_schema(name)


def compiled_with_cxx11_abi():
    return _C._GLIBCXX_USE_CXX11_ABI
'''

# torch._C: a CPython extension module linked to libtorch_cpu.so and libc10.so.
TORCH_MODULE_CPP = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "c10.h"

static PyObject* op_schema(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (name == nullptr) return nullptr;
  try {
    return PyUnicode_FromString(at::fake_op_schema(name).c_str());
  } catch (const c10::Error& error) {
    PyErr_SetString(PyExc_RuntimeError, error.msg().c_str());
    return nullptr;
  }
}

static PyMethodDef methods[] = {
    {"op_schema", op_schema, METH_O, "the schema of an operator"},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch._C", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__C() {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr) {
    PyModule_AddObject(m, "_GLIBCXX_USE_CXX11_ABI", PyBool_FromLong(_GLIBCXX_USE_CXX11_ABI));
  }
  return m;
}
"""

CONSUMER_SETUP_PY = """\
import os

import torch
from setuptools import Extension, setup

TORCH = os.path.dirname(torch.__file__)
# As torch.utils.cpp_extension does: the C++ ABI of the torch the extension is built against.
ABI = str(int(torch._C._GLIBCXX_USE_CXX11_ABI))

setup(
    name="fakeops",
    version="1.0",
    packages=["fakeops"],
    install_requires=["torch"],
    ext_modules=[Extension(
        "fakeops._C", ["fakeops/ops.cpp"], include_dirs=[os.path.join(TORCH, "include")],
        library_dirs=[os.path.join(TORCH, "lib")], libraries=["torch_cpu", "c10"],
        define_macros=[("_GLIBCXX_USE_CXX11_ABI", ABI)], language="c++")],
)
"""

CONSUMER_INIT_PY = """\
import torch  # noqa: F401  (loads libc10.so and libtorch_cpu.so, which _C needs)

from fakeops._C import schema  # noqa: F401
"""

# fakeops._C: calls libtorch's C++ API with std::string, as real extensions do.
CONSUMER_CPP = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "c10.h"

static PyObject* schema(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (name == nullptr) return nullptr;
  try {
    std::string text = at::fake_op_schema(std::string(name));
    return PyUnicode_FromString(text.c_str());
  } catch (const c10::Error& error) {
    PyErr_SetString(PyExc_ValueError, error.msg().c_str());
    return nullptr;
  }
}

static PyMethodDef methods[] = {
    {"schema", schema, METH_O, "libtorch's schema of an operator"},
    {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "fakeops._C", nullptr, -1, methods};

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&module); }
"""

TOY_SETUP_PY = """\
from setuptools import setup

setup(name="faketoy", version="1.0", packages=["faketoy"], install_requires=["torch>=2.6"])
"""

TOY_INIT_PY = """\
import torch


def shout(name):
    return torch.op_schema(name).upper()
"""


def write_tarball(dest: Path, top: str, files: Mapping[str, str]) -> Path:
    """`dest/<top>.tar.gz` holding `files` (path below `top` -> text), reproducibly."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / f"{top}.tar.gz"
    with tarfile.open(target, "w:gz") as archive:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return target


def torch_source(dest: Path) -> Path:
    """The torch source tarball (one tree for both ABIs, as for a real source build)."""
    header = "#pragma once\n" + C10_HEADER
    return write_tarball(dest, f"pytorch-v{RELEASE}", {
        "setup.py": TORCH_SETUP_PY,
        "torch/__init__.py": TORCH_INIT_PY,
        "torch/include/c10.h": header,
        "torch/csrc/module.cpp": TORCH_MODULE_CPP,
        "c10/c10.cpp": LIBC10,
        "aten/torch_cpu.cpp": LIBTORCH_CPU,
    })


def consumer_source(dest: Path) -> Path:
    """The fakeops source tarball: a C++ extension of libtorch."""
    return write_tarball(dest, "fakeops-1.0", {
        "setup.py": CONSUMER_SETUP_PY,
        "fakeops/__init__.py": CONSUMER_INIT_PY,
        "fakeops/ops.cpp": CONSUMER_CPP,
    })


def toy_source(dest: Path) -> Path:
    """The faketoy source tarball: pure Python, torch>=2.6."""
    return write_tarball(dest, "faketoy-1.0", {
        "setup.py": TOY_SETUP_PY,
        "faketoy/__init__.py": TOY_INIT_PY,
    })


def write_blas_module(site_modules: Path) -> tuple[str, str]:
    """A stand-in FlexiBLAS module (an empty install root) for EB_PyTorch's BLAS choice."""
    name, version = BLAS
    root = site_modules.parent / "flexiblas-root"
    (root / "lib").mkdir(parents=True, exist_ok=True)
    write_module(site_modules, name, version, root)
    return BLAS


def torch_easyconfig(path: Path, suffix: str, tarball: Path, checksum: str,
                     custom_opts: tuple[str, ...] = ()) -> Path:
    """A stage-2 PyTorch easyconfig of the fake tree; `custom_opts` as EB_PyTorch takes them."""
    path.write_text(textwrap.dedent(f"""\
        easyblock = {EASYBLOCK!r}

        name = 'PyTorch'
        version = {RELEASE!r}
        versionsuffix = {suffix!r}

        homepage = 'https://pytorch.org/'
        description = "A small libtorch built from source (torchstack test)"

        toolchain = SYSTEM

        sources = [{tarball.name!r}]
        checksums = [{checksum!r}]

        dependencies = [('Python', {PYTHON_VERSION!r}), {BLAS!r}]

        custom_opts = {list(custom_opts)!r}

        moduleclass = 'ai'
        """))
    return path


def consumer_easyconfig(path: Path, name: str, suffix: str, tarball: Path, checksum: str,
                        torch_suffix: str) -> Path:
    """A PythonPackage easyconfig of a consumer built from source on PyTorch `torch_suffix`."""
    dependencies = [("Python", PYTHON_VERSION), ("PyTorch", RELEASE, torch_suffix)]
    path.write_text(textwrap.dedent(f"""\
        easyblock = 'PythonPackage'

        name = {name!r}
        version = '1.0'
        versionsuffix = {suffix!r}

        homepage = 'https://pytorch.org/'
        description = "A consumer of torch built from source (torchstack test)"

        toolchain = SYSTEM

        sources = [{tarball.name!r}]
        checksums = [{checksum!r}]

        dependencies = {dependencies!r}

        moduleclass = 'ai'
        """))
    return path


def run_eb(env: EasyBuildEnv, *args: str, cwd: Path | None = None) -> tuple[int, str]:
    """The real eb with torchstack's easyblocks, the test stub and the hooks file.

    Not `env.eb`, which names only torchstack's own easyblocks.
    """
    included = [*sorted(easyblocks_path().glob("*.py")), *sorted(TEST_EASYBLOCKS.glob("*.py"))]
    paths = ",".join(str(p) for p in included if p.name != "__init__.py")
    command = [sys.executable, "-m", "easybuild.main", *args,
               "--allow-use-as-root-and-accept-consequences", f"--include-easyblocks={paths}",
               f"--hooks={hooks_path()}"]
    result = subprocess.run(command, env=env.environ(), capture_output=True, text=True,
                            cwd=cwd or env.root, check=False)
    return result.returncode, result.stdout[-4000:] + result.stderr[-2000:]
