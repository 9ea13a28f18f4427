"""Small torch releases and consumers compiled with g++, packed as wheels, for the symbol
checks (test_symbolcheck.py on files, test_torchsymbols.py through an index).

Two releases stand for 2.12.1 and 2.13.0, the second without a symbol the first has (as 2.13
dropped c10::impl::cow::materialize_cow_storage); `caller` calls the C++ API and the C shims,
imports one symbol weakly and takes another from a library of its own; `registrar` registers
kernels through torch::Library.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.synthetic import version_py
from support.wheelbuild import build_wheel

C10 = """
namespace c10 { int kept(int x) { return x; } }
namespace c10 { namespace impl { namespace cow {
int materialize_cow_storage(int x) { return x; } } } }
"""
C10_NEW = "namespace c10 { int kept(int x) { return x; } }\n"
TORCH_CPU = """
namespace at { int kept_op(int x) { return x + 1; } }
namespace torch { struct Library { Library(int); }; Library::Library(int) {} }
extern "C" int aoti_torch_kept(int x) { return x; }
"""
CALLER = """
namespace c10 { int kept(int); namespace impl { namespace cow {
int materialize_cow_storage(int); } } }
namespace c10 { int maybe(int) __attribute__((weak)); }
namespace at { int kept_op(int); namespace native { int own(int); } }
extern "C" int aoti_torch_kept(int);
int entry(int x) {
    return c10::kept(x) + at::kept_op(x) + aoti_torch_kept(x)
        + c10::impl::cow::materialize_cow_storage(x) + at::native::own(x)
        + (c10::maybe ? c10::maybe(x) : 0);
}
"""
OWN = "namespace at { namespace native { int own(int x) { return x; } } }\n"
REGISTRAR = """
namespace c10 { int kept(int); }
namespace torch { struct Library { Library(int); }; }
int entry(int x) { torch::Library lib(x); return c10::kept(x); }
"""
COW = "c10::impl::cow::materialize_cow_storage(int)"


def compile_so(root: Path, name: str, source: str, *links: Path) -> bytes:
    src = root / f"{name}.cpp"
    src.write_text(source, encoding="utf-8")
    out = root / name
    command = ["g++", "-shared", "-fPIC", "-O0", "-o", str(out), str(src), "-Wl,--no-as-needed"]
    for lib in links:
        command += [f"-L{lib.parent}", f"-l:{lib.name}"]
    subprocess.run(command, check=True, capture_output=True)
    return out.read_bytes()


def build_symbol_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheels by key: old, new (torch), caller, registrar, nolibc10, damaged."""
    root = tmp_path_factory.mktemp("symbolwheels")
    libs = {}
    for key, c10 in (("old", C10), ("new", C10_NEW)):
        folder = root / key
        folder.mkdir()
        libs[key] = (compile_so(folder, "libc10.so", c10),
                     compile_so(folder, "libtorch_cpu.so", TORCH_CPU))
    c10_path, cpu_path = root / "old" / "libc10.so", root / "old" / "libtorch_cpu.so"
    own = compile_so(root, "libown.so", OWN)
    caller = compile_so(root, "_C.so", CALLER, c10_path, cpu_path, root / "libown.so")
    registrar = compile_so(root, "_R.so", REGISTRAR, c10_path, cpu_path)
    out = root / "wheels"
    out.mkdir()
    found = {}
    for key, release in (("old", "2.12.1"), ("new", "2.13.0")):
        c10, cpu = libs[key]
        files = {"torch/version.py": version_py(f"{release}+cpu").encode(),
                 "torch/lib/libc10.so": c10, "torch/lib/libtorch_cpu.so": cpu}
        found[key] = build_wheel(out, "torch", f"{release}+cpu", files,
                                 tag=f"{key}-none-any")
    found["caller"] = build_wheel(out, "caller", "1.0", {"caller/_C.so": caller,
                                                        "caller/libown.so": own})
    found["registrar"] = build_wheel(out, "registrar", "1.0", {"registrar/_R.so": registrar})
    found["nolibc10"] = build_wheel(out, "torch", "2.13.0+cpu", {
        "torch/version.py": version_py("2.13.0+cpu").encode(),
        "torch/lib/libtorch_cpu.so": libs["new"][1]}, tag="nolib-none-any")
    found["damaged"] = build_wheel(out, "damaged", "1.0", {"damaged/_C.so": caller[:3000]})
    return found
