"""Tiny real ELF libraries and wheels for fast unit tests, built with g++ and zipfile.

The libraries imitate just enough of libtorch for torchstack to decide on:
- `libc10.so`, built with `_GLIBCXX_USE_CXX11_ABI=0` and `=1`, defining the c10 functions whose
  mangled names `torchstack.elf.symbols` probes (declared in real C++, so g++ mangles them);
- `libc10_cuda.so` and `libtorch_cuda.so` with DT_NEEDED on a stub `libcudart.so.N`;
- consumer extension modules of each link class: `cxx` (C++ symbols of c10 and at, with
  std::string arguments), `stable` (only extern "C" aoti_torch_* / torch_* shims).

Everything is compiled once a test session (`synthetic_libs`), in parallel, and packed into
wheels once a session (`synthetic_wheels`). Tests that damage a wheel copy it first.
Test modules load these fixtures with `pytest_plugins = ["support.synthetic"]` and import its
helpers; since they import it before pytest registers it, it opts out of assertion rewriting
(PYTEST_DONT_REWRITE) and raises its own errors instead of asserting.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import zipfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

PYTHON_SITE = "lib/python3.11/site-packages"
WHEEL_TAG = "cp311-cp311-linux_x86_64"
TORCH_RELEASE = "2.13.0"

# -- C++ sources ---------------------------------------------------------------------------

# The declarations of c10 that libtorch exports, reduced to what the probes need.
C10_HEADER = """\
#include <cstdint>
#include <string>
namespace c10 {
struct SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};
namespace detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, std::uint32_t line,
                                 const std::string& msg);
}  // namespace detail
class Error {
 public:
  Error(SourceLocation source_location, std::string msg);
  virtual ~Error();
  const std::string& msg() const;
 private:
  std::string msg_;
};
class ValueError : public Error {
 public:
  ValueError(SourceLocation source_location, std::string msg);
};
}  // namespace c10
namespace at {
std::string fake_op_schema(const std::string& name);
namespace cuda {
std::string fake_device_name(const std::string& which);
}  // namespace cuda
}  // namespace at
"""

LIBC10 = C10_HEADER + """\
#include <utility>
namespace c10 {
namespace detail {
void torchCheckFail(const char* func, const char* file, std::uint32_t line,
                    const std::string& msg) {
  throw Error({func, file, line}, msg);
}
}  // namespace detail
Error::Error(SourceLocation source_location, std::string msg) : msg_(std::move(msg)) {
  (void)source_location;
}
Error::~Error() = default;
const std::string& Error::msg() const { return msg_; }
ValueError::ValueError(SourceLocation source_location, std::string msg)
    : Error(source_location, std::move(msg)) {}
}  // namespace c10
"""

# A libc10 without any probe symbol: its C++ ABI cannot be told.
LIBC10_NO_PROBES = """\
extern "C" int c10_fake_version() { return 2013; }
"""

LIBTORCH_CPU = C10_HEADER + """\
#include <cstdint>
namespace at {
std::string fake_op_schema(const std::string& name) {
  if (name.empty()) c10::detail::torchCheckFail(__func__, __FILE__, __LINE__, "empty name");
  return "aten::" + name;
}
}  // namespace at
// the stable C shims that CONSUMER_STABLE imports
extern "C" {
typedef struct AtenTensorOpaque* AtenTensorHandle;
int aoti_torch_get_device_type(AtenTensorHandle, std::int32_t* device_type) {
  *device_type = 0;
  return 0;
}
int aoti_torch_delete_tensor_object(AtenTensorHandle) { return 0; }
int torch_call_dispatcher(const char*, const char*, void*, std::uint64_t) { return 0; }
}
"""

LIBCUDART = """\
extern "C" int cudaGetDeviceCount(int* count) { *count = 0; return 0; }
"""

LIBC10_CUDA = """\
extern "C" int cudaGetDeviceCount(int* count);
extern "C" int c10_cuda_device_count() { int n = 0; cudaGetDeviceCount(&n); return n; }
"""

LIBTORCH_CUDA = C10_HEADER + """\
extern "C" int cudaGetDeviceCount(int* count);
namespace at {
namespace cuda {
std::string fake_device_name(const std::string& which) {
  int n = 0;
  cudaGetDeviceCount(&n);
  return which + std::to_string(n);
}
}  // namespace cuda
}  // namespace at
"""

# A consumer of libtorch's C++ API: undefined c10:: and at:: symbols taking std::string,
# and the typeinfo of c10::Error through a catch clause.
CONSUMER_CXX = C10_HEADER + """\
extern "C" int fake_consumer_check(const char* name) {
  if (name == nullptr) c10::detail::torchCheckFail(__func__, __FILE__, __LINE__, "no name");
  try {
    if (at::fake_op_schema(name).size() > 64) throw c10::ValueError({"f", "x.cpp", 1}, name);
  } catch (const c10::Error& error) {
    return static_cast<int>(error.msg().size());
  }
  return 0;
}
"""

CONSUMER_CXX_CUDA = CONSUMER_CXX + """\
extern "C" int cudaGetDeviceCount(int* count);
extern "C" int fake_consumer_cuda(const char* which) {
  int n = 0;
  cudaGetDeviceCount(&n);
  return static_cast<int>(at::cuda::fake_device_name(which).size()) + n;
}
"""

# A consumer of the stable C shims only, like torchvision 0.29's _C_stable.so.
CONSUMER_STABLE = """\
#include <cstdint>
extern "C" {
typedef struct AtenTensorOpaque* AtenTensorHandle;
int aoti_torch_get_device_type(AtenTensorHandle tensor, std::int32_t* device_type);
int aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
int torch_call_dispatcher(const char* op, const char* overload, void* stack, std::uint64_t v);
int fake_stable_kernel(AtenTensorHandle tensor) {
  std::int32_t device = 0;
  aoti_torch_get_device_type(tensor, &device);
  torch_call_dispatcher("aten::abs", "", nullptr, 1);
  return aoti_torch_delete_tensor_object(tensor) + device;
}
}
"""

CONSUMER_STABLE_CUDA = CONSUMER_STABLE + """\
extern "C" int cudaGetDeviceCount(int* count);
extern "C" int fake_stable_cuda() { int n = 0; cudaGetDeviceCount(&n); return n; }
"""


# -- libraries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LibrarySpec:
    """One shared object to build: `key` is `<variant>/<file name>` below the build folder."""

    key: str
    source: str
    cxx11_abi: int | None = None  # _GLIBCXX_USE_CXX11_ABI; None: the compiler's default
    soname: str | None = None
    links: tuple[str, ...] = ()  # keys of libraries to link against (DT_NEEDED)


# In build order: a library only links libraries of an earlier stage.
STAGES: tuple[tuple[LibrarySpec, ...], ...] = (
    (
        LibrarySpec("cudart12/libcudart.so.12", LIBCUDART, soname="libcudart.so.12"),
        LibrarySpec("cudart13/libcudart.so.13", LIBCUDART, soname="libcudart.so.13"),
        LibrarySpec("cxx11/libc10.so", LIBC10, 1, "libc10.so"),
        LibrarySpec("precxx11/libc10.so", LIBC10, 0, "libc10.so"),
        LibrarySpec("noprobe/libc10.so", LIBC10_NO_PROBES, 1, "libc10.so"),
    ),
    (
        LibrarySpec("cxx11/libtorch_cpu.so", LIBTORCH_CPU, 1, "libtorch_cpu.so",
                    ("cxx11/libc10.so",)),
        LibrarySpec("precxx11/libtorch_cpu.so", LIBTORCH_CPU, 0, "libtorch_cpu.so",
                    ("precxx11/libc10.so",)),
        LibrarySpec("cu13/libc10_cuda.so", LIBC10_CUDA, 1, "libc10_cuda.so",
                    ("cxx11/libc10.so", "cudart13/libcudart.so.13")),
        LibrarySpec("cu12/libc10_cuda.so", LIBC10_CUDA, 1, "libc10_cuda.so",
                    ("cxx11/libc10.so", "cudart12/libcudart.so.12")),
        LibrarySpec("cu13/libtorch_cuda.so", LIBTORCH_CUDA, 1, "libtorch_cuda.so",
                    ("cxx11/libc10.so", "cudart13/libcudart.so.13")),
        LibrarySpec("stable/_C_stable.so", CONSUMER_STABLE),
        LibrarySpec("stable-cu13/_C_stable.so", CONSUMER_STABLE_CUDA,
                    links=("cudart13/libcudart.so.13",)),
    ),
    (
        LibrarySpec("cxx11/_C.so", CONSUMER_CXX, 1,
                    links=("cxx11/libc10.so", "cxx11/libtorch_cpu.so")),
        LibrarySpec("precxx11/_C.so", CONSUMER_CXX, 0,
                    links=("precxx11/libc10.so", "precxx11/libtorch_cpu.so")),
        LibrarySpec("cu13/_C.so", CONSUMER_CXX_CUDA, 1,
                    links=("cxx11/libc10.so", "cxx11/libtorch_cpu.so",
                           "cu13/libtorch_cuda.so", "cudart13/libcudart.so.13")),
    ),
)


@dataclass(frozen=True)
class SyntheticLibs:
    """The compiled libraries of a session, by key (`cxx11/libc10.so`, `cu13/_C.so`, ...)."""

    root: Path
    paths: Mapping[str, Path]

    def __getitem__(self, key: str) -> Path:
        return self.paths[key]

    def read(self, key: str) -> bytes:
        return self.paths[key].read_bytes()


def compile_library(spec: LibrarySpec, root: Path, built: Mapping[str, Path]) -> Path:
    """Compile one spec with `g++ -shared -fPIC` below `root`; returns the library's path."""
    output = root / spec.key
    output.parent.mkdir(parents=True, exist_ok=True)
    source = output.with_name(output.name.replace(".so", "") + ".cpp")
    source.write_text(spec.source, encoding="utf-8")
    command = ["g++", "-shared", "-fPIC", "-O0", "-o", str(output), str(source)]
    if spec.cxx11_abi is not None:
        command.insert(1, f"-D_GLIBCXX_USE_CXX11_ABI={spec.cxx11_abi}")
    if spec.soname:
        command.append(f"-Wl,-soname,{spec.soname}")
    command.append("-Wl,--no-as-needed")  # keep every DT_NEEDED, as the real libraries have
    for key in spec.links:
        library = built[key]
        command += [f"-L{library.parent}", f"-Wl,-rpath-link,{library.parent}",
                    f"-l:{library.name}"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"cannot build {spec.key}: {' '.join(command)}\n{result.stderr}")
    return output


def build_libraries(root: Path) -> SyntheticLibs:
    """Compile every library of `STAGES` below `root`, a stage's libraries in parallel."""
    built: dict[str, Path] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for stage in STAGES:
            paths = list(pool.map(lambda s: compile_library(s, root, built), stage))
            built.update(zip((s.key for s in stage), paths))
    return SyntheticLibs(root, built)


def dynamic_symbols(path: Path, *, defined: bool) -> frozenset[str]:
    """The defined (or undefined) dynamic symbols of `path`, read with pyelftools directly."""
    with open(path, "rb") as fh:
        section = ELFFile(fh).get_section_by_name(".dynsym")
        if not isinstance(section, SymbolTableSection):
            raise RuntimeError(f"{path} has no .dynsym")
        return frozenset(
            s.name for s in section.iter_symbols()
            if s.name and (s["st_shndx"] != "SHN_UNDEF") == defined
        )


# -- wheels ---------------------------------------------------------------------------------


def version_py(version: str, cuda: str | None = None, hip: str | None = None) -> str:
    """A `torch/version.py` as the torch build writes it."""
    return (
        "from typing import Optional\n\n"
        "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
        f"__version__ = {version!r}\n"
        "debug = False\n"
        f"cuda: Optional[str] = {cuda!r}\n"
        "git_version = '0123456789abcdef0123456789abcdef01234567'\n"
        f"hip: Optional[str] = {hip!r}\n"
        "xpu: Optional[str] = None\n"
    )


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def write_wheel(
    directory: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    requires: tuple[str, ...] = (),
) -> Path:
    """Pack `files` (path in the wheel -> content) into a wheel with METADATA, WHEEL, RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = "".join(
        ["Metadata-Version: 2.1\n", f"Name: {name}\n", f"Version: {version}\n"]
        + [f"Requires-Dist: {r}\n" for r in requires]
    )
    wheel = f"Wheel-Version: 1.0\nGenerator: torchstack-test\nRoot-Is-Purelib: false\n" \
            f"Tag: {WHEEL_TAG}\n"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = metadata.encode()
    members[f"{dist_info}/WHEEL"] = wheel.encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in members.items():
        writer.writerow([path, _record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    members[f"{dist_info}/RECORD"] = record.getvalue().encode()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{name}-{version}-{WHEEL_TAG}.whl"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in members.items():
            archive.writestr(path, data)
    return target


def install_tree(wheel: Path, site_packages: Path) -> Path:
    """Unpack a wheel into a site-packages folder, as pip would; returns the folder."""
    site_packages.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site_packages)
    return site_packages


def install_prefix(wheel: Path, prefix: Path) -> Path:
    """Unpack a wheel into `prefix/lib/python3.11/site-packages`; returns the prefix."""
    install_tree(wheel, prefix / PYTHON_SITE)
    return prefix


@dataclass(frozen=True)
class TorchBuild:
    """A synthetic torch provider wheel: version.py facts and which libraries it ships."""

    local: str = "cpu"
    cuda: str | None = None
    hip: str | None = None
    libc10: str = "cxx11/libc10.so"
    libc10_cuda: str | None = None
    release: str = TORCH_RELEASE
    libtorch_cpu: str | None = "cxx11/libtorch_cpu.so"
    libtorch_cuda: str | None = None

    @property
    def version(self) -> str:
        return f"{self.release}+{self.local}"


def torch_wheel(directory: Path, libs: SyntheticLibs, build: TorchBuild) -> Path:
    """A torch wheel: torch/version.py, torch/__init__.py and torch/lib/ libraries."""
    files = {
        "torch/__init__.py": b"from torch.version import __version__\n",
        "torch/version.py": version_py(build.version, build.cuda, build.hip).encode(),
        "torch/lib/libc10.so": libs.read(build.libc10),
    }
    for name, key in (("libc10_cuda.so", build.libc10_cuda),
                      ("libtorch_cpu.so", build.libtorch_cpu),
                      ("libtorch_cuda.so", build.libtorch_cuda)):
        if key is not None:
            files[f"torch/lib/{name}"] = libs.read(key)
    return write_wheel(directory, "torch", build.version, files, ("filelock", "sympy>=1.13.3"))


@dataclass(frozen=True)
class ConsumerBuild:
    """A synthetic consumer wheel: requirements, extension modules and vendored libraries."""

    name: str
    version: str
    requires: tuple[str, ...]
    binaries: Mapping[str, str] = field(default_factory=dict)  # file name -> library key
    vendored: Mapping[str, str] = field(default_factory=dict)  # file name -> library key

    @property
    def package(self) -> str:
        return self.name.replace("-", "_")


def consumer_wheel(directory: Path, libs: SyntheticLibs, build: ConsumerBuild) -> Path:
    """A consumer wheel: `<pkg>/version.py`, `<pkg>/*.so` and `<pkg>.libs/` vendored copies."""
    package = build.package
    files = {
        f"{package}/__init__.py": b"import torch\n",
        f"{package}/version.py": f"__version__ = {build.version!r}\n".encode(),
    }
    files.update({f"{package}/{n}": libs.read(k) for n, k in build.binaries.items()})
    files.update({f"{package}.libs/{n}": libs.read(k) for n, k in build.vendored.items()})
    return write_wheel(directory, build.name, build.version, files, build.requires)


VENDORED_CUDART = "libcudart.abcdef12.so.13"

TORCH_BUILDS: dict[str, TorchBuild] = {
    "torch-cpu-cxx11": TorchBuild(),
    "torch-cpu-precxx11": TorchBuild(libc10="precxx11/libc10.so",
                                     libtorch_cpu="precxx11/libtorch_cpu.so"),
    "torch-cpu-noprobe": TorchBuild(libc10="noprobe/libc10.so", libtorch_cpu=None),
    "torch-cu130": TorchBuild("cu130", cuda="13.0", libc10_cuda="cu13/libc10_cuda.so",
                              libtorch_cuda="cu13/libtorch_cuda.so"),
    # version.py says CUDA 13.0 but libc10_cuda needs libcudart.so.12: the ELF decides.
    "torch-cu130-cudart12": TorchBuild("cu130", cuda="13.0", libc10_cuda="cu12/libc10_cuda.so"),
    # No libc10_cuda.so: the CUDA major falls back to version.py's cuda.
    "torch-cu128-nolib": TorchBuild("cu128", cuda="12.8"),
    "torch-rocm": TorchBuild("rocm6.4", hip="6.4.43484-123"),
}

CONSUMER_BUILDS: dict[str, ConsumerBuild] = {
    "vision-cxx11": ConsumerBuild(
        "fakevision", "0.1.0+cpu", ("torch (==2.13.0)",), {"_C.so": "cxx11/_C.so"}),
    "vision-precxx11": ConsumerBuild(
        "fakevision", "0.1.0+cpu", ("torch (==2.13.0)",), {"_C.so": "precxx11/_C.so"}),
    "vision-cu130": ConsumerBuild(
        "fakevision", "0.1.0+cu130", ("torch==2.13.0",), {"_C.so": "cu13/_C.so"}),
    "stable": ConsumerBuild(
        "fakestable", "0.2.0", ("torch>=2.13.0",), {"_C_stable.so": "stable/_C_stable.so"}),
    "stable-cu130": ConsumerBuild(
        "fakestable", "0.2.0+cu130", ("torch>=2.13.0",),
        {"_C_stable.so": "stable-cu13/_C_stable.so"}),
    # No local tag, no DT_NEEDED on libcudart: only the vendored copy tells CUDA 13.
    "stable-vendored": ConsumerBuild(
        "fakestable", "0.2.0", ("torch>=2.13.0",), {"_C_stable.so": "stable/_C_stable.so"},
        {VENDORED_CUDART: "cudart13/libcudart.so.13"}),
    "pure": ConsumerBuild("fake-pure", "1.0.0", ("numpy", "torch>=2.14.0")),
    "pure-any": ConsumerBuild("fake-pure", "1.0.0", ("torch",)),
    # torch only as an extra: not a consumer at all.
    "unrelated": ConsumerBuild("fake-unrelated", "1.0.0", ('torch; extra == "gpu"',)),
}


@dataclass(frozen=True)
class SyntheticWheels:
    """The session's wheels, by the keys of TORCH_BUILDS and CONSUMER_BUILDS."""

    root: Path
    paths: Mapping[str, Path]

    def __getitem__(self, key: str) -> Path:
        return self.paths[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)


def build_wheels(root: Path, libs: SyntheticLibs) -> SyntheticWheels:
    """Every wheel of TORCH_BUILDS and CONSUMER_BUILDS, each in a folder of its own."""
    paths = {k: torch_wheel(root / k, libs, b) for k, b in TORCH_BUILDS.items()}
    paths |= {k: consumer_wheel(root / k, libs, b) for k, b in CONSUMER_BUILDS.items()}
    return SyntheticWheels(root, paths)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def synthetic_libs(tmp_path_factory: pytest.TempPathFactory) -> SyntheticLibs:
    """The synthetic libraries, compiled once a session."""
    if shutil.which("g++") is None:
        pytest.fail("g++ is missing: run scripts/setup, which installs it")
    return build_libraries(tmp_path_factory.mktemp("synthetic-libs"))


@pytest.fixture(scope="session")
def synthetic_wheels(
    tmp_path_factory: pytest.TempPathFactory, synthetic_libs: SyntheticLibs
) -> SyntheticWheels:
    """The synthetic wheels, packed once a session; copy one before changing it."""
    return build_wheels(tmp_path_factory.mktemp("synthetic-wheels"), synthetic_libs)
