"""A tiny real torch C++ extension, built with torch.utils.cpp_extension against a torch tree."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

SETUP_PY = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="torchstack_demo_ext",
    version="0.1",
    packages=["torchstack_demo_ext"],
    ext_modules=[CppExtension("torchstack_demo_ext._C", ["torchstack_demo_ext/ext.cpp"])],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch"],
)
"""
# cholesky() is in torch 2.13's C++ API and gone from 2.14's: like most real extensions, this
# one is bound to the release it was built against, and fails to load on another.
EXT_CPP = """\
#include <torch/extension.h>

torch::Tensor add_one(const torch::Tensor& x) { return x + 1; }

torch::Tensor lower_factor(const torch::Tensor& x) { return at::cholesky(x, false); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_one", &add_one);
  m.def("lower_factor", &lower_factor);
}
"""
INIT_PY = "import torch  # noqa: F401\n\nfrom torchstack_demo_ext._C import add_one  # noqa: F401\n"


def build_extension_wheel(cache: Path, python: Path, torch_site_packages: Path) -> Path:
    """Build (once, cached by source and torch) the wheel of the demo extension."""
    key = hashlib.sha256((SETUP_PY + EXT_CPP + str(torch_site_packages)).encode()).hexdigest()
    out = cache / f"demo-ext-{key[:12]}"
    wheels = sorted(out.glob("torchstack_demo_ext-*.whl"))
    if wheels:
        return wheels[0]
    src = out / "src"
    (src / "torchstack_demo_ext").mkdir(parents=True, exist_ok=True)
    (src / "setup.py").write_text(SETUP_PY)
    (src / "torchstack_demo_ext" / "ext.cpp").write_text(EXT_CPP)
    (src / "torchstack_demo_ext" / "__init__.py").write_text(INIT_PY)
    env = dict(os.environ, PYTHONPATH=str(torch_site_packages), MAX_JOBS="2")
    subprocess.run(
        [str(python), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(out), str(src)],
        check=True, env=env,
    )
    return sorted(out.glob("torchstack_demo_ext-*.whl"))[0]


def write_old_abi_compiler(path: Path) -> Path:
    """A g++ that builds for the old C++ ABI whatever torch asks (-D_GLIBCXX_USE_CXX11_ABI=1):
    what it builds against a cxx11 libtorch references std::string symbols libtorch lacks."""
    path.write_text('#!/bin/sh\nexec /usr/bin/g++ "$@" -U_GLIBCXX_USE_CXX11_ABI '
                    '-D_GLIBCXX_USE_CXX11_ABI=0\n')
    path.chmod(0o755)
    return path
