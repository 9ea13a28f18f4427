"""A real torch.utils.cpp_extension build of a tiny operator library, run at sanity check.

It catches a compiler that cannot build against this torch (its headers and language
standard, the C++ ABI of libtorch, torch's flags, the Python headers) when the module is
installed, instead of at a user's first JIT build. The library includes the headers every
extension rests on (c10, ATen's Tensor, torch/library.h, Python.h) rather than the whole
C++ frontend of torch/extension.h: the same compiler, flags and link against libtorch, at a
fraction of the compile time and memory (bench/README.rst; bench/install.py --toolchain
gcccore).
Its operator is registered with TORCH_LIBRARY, loaded with torch.ops.load_library and run, so
a C++ ABI mismatch fails at load as a user's extension would. torch's JIT loader needs
ninja; without ninja the same library is built through setuptools' BuildExtension.
"""

from __future__ import annotations

from pathlib import Path

SUCCESS = "torchstack: C++ extension built against torch and ran"
LIBRARY = "torchstack_jit_check"

SOURCE = f"""\
#include <Python.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

static at::Tensor twice(const at::Tensor& x) {{ return x.mul(2); }}

TORCH_LIBRARY({LIBRARY}, m) {{ m.def("twice(Tensor x) -> Tensor", &twice); }}
"""

SCRIPT = f'''\
"""Written by torchstack: build, load and run a tiny torch operator library."""
import glob
import os
import shutil
import tempfile

import torch
from torch.utils import cpp_extension

SOURCE = {SOURCE!r}
build = tempfile.mkdtemp(prefix="torchstack-jit-")
try:
    source = os.path.join(build, "{LIBRARY}.cpp")
    with open(source, "w") as fh:
        fh.write(SOURCE)
    if shutil.which("ninja"):
        cpp_extension.load(name="{LIBRARY}", sources=[source], is_python_module=False,
                           build_directory=build)
    else:
        import setuptools
        os.chdir(build)
        setuptools.setup(
            name="{LIBRARY}", script_args=["build_ext", "--inplace", "-q"],
            ext_modules=[cpp_extension.CppExtension("{LIBRARY}", [source])],
            cmdclass={{"build_ext": cpp_extension.BuildExtension}})
        torch.ops.load_library(glob.glob(os.path.join(build, "{LIBRARY}*.so"))[0])
    result = torch.ops.{LIBRARY}.twice(torch.ones(2)).tolist()
    assert result == [2.0, 2.0], result
    print("{SUCCESS}")
finally:
    shutil.rmtree(build, ignore_errors=True)
'''


def write_script(folder: str | Path) -> Path:
    """Write the check script into `folder` (the build directory) and return its path."""
    path = Path(folder) / f"{LIBRARY}.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path
