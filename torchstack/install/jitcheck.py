"""A real torch.utils.cpp_extension build of a tiny extension, run at sanity check.

It catches a compiler that cannot build against this torch (headers, ABI, flags) when the
module is installed, instead of at a user's first JIT build. torch's JIT loader needs ninja;
without ninja the same extension is built through setuptools' BuildExtension.
"""

from __future__ import annotations

from pathlib import Path

SUCCESS = "torchstack: C++ extension built against torch and ran"

SCRIPT = f'''\
"""Written by torchstack: build and run a tiny torch C++ extension."""
import shutil
import sys
import tempfile

import torch
from torch.utils import cpp_extension

SOURCE = "torch::Tensor twice(const torch::Tensor& x) {{ return x * 2; }}"
build = tempfile.mkdtemp(prefix="torchstack-jit-")
try:
    if shutil.which("ninja"):
        module = cpp_extension.load_inline(
            name="torchstack_jit_check", cpp_sources=[SOURCE], functions=["twice"],
            build_directory=build)
    else:
        import os
        import setuptools
        binding = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def(\\"twice\\", &twice); }}"
        with open(os.path.join(build, "ext.cpp"), "w") as fh:
            fh.write("#include <torch/extension.h>\\n" + SOURCE + "\\n" + binding + "\\n")
        os.chdir(build)
        setuptools.setup(
            name="torchstack_jit_check", script_args=["build_ext", "--inplace", "-q"],
            ext_modules=[cpp_extension.CppExtension("torchstack_jit_check", ["ext.cpp"])],
            cmdclass={{"build_ext": cpp_extension.BuildExtension}})
        sys.path.insert(0, build)
        import torchstack_jit_check as module
    result = module.twice(torch.ones(2)).tolist()
    assert result == [2.0, 2.0], result
    print("{SUCCESS}")
finally:
    shutil.rmtree(build, ignore_errors=True)
'''


def write_script(folder: str | Path) -> Path:
    """Write the check script into `folder` (the build directory) and return its path."""
    path = Path(folder) / "torchstack_jit_check.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path
