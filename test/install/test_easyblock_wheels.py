"""PyTorchWheels with the real eb and Lmod: torch 2.13.0+cpu and consumers on top of it."""

from __future__ import annotations

import json
import os
import platform
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.ebmodules import PYTORCH_CPU, consumer_module, stage_wheels
from support.wheelbuild import build_wheel, sha256
from support.wheelcache import uv_cache

from torchstack.fingerprint.read import fingerprint_path
from torchstack.guards.record import FINGERPRINT_FILE
from torchstack.install import ebversions

Factory = Callable[[str], Path]
PYTORCH_DEP = ("PyTorch", "2.13.0", "-whl")
PTH_QUERY = r".*\.pth"  # PythonBundle's search for path configuration files


def _installdir(eb_env: EasyBuildEnv, name: str, version: str) -> Path:
    return eb_env.installpath / "software" / name / version


def _searched(installdir: Path, hits: int) -> str:
    """The log line of PythonBundle's search for .pth files, done by torchstack."""
    where, query = re.escape(str(installdir)), re.escape(repr(PTH_QUERY))
    return rf"torchstack: searched {where} for {query} in [\d.]+ s: {hits} hits"


def _pth_search_once(log: str, installdir: Path, hits: int) -> bool:
    """The .pth search as the installed EasyBuild has it: done once by torchstack on the
    releases that was tested with (True); else PythonBundle's own, said once (False)."""
    fallback = ebversions.fallback(ebversions.PTHSEARCH)
    if fallback is None:
        assert len(re.findall(_searched(installdir, hits), log)) == 1
        assert "No index found for" not in log  # EasyBuild's own search did not run
        return True
    assert log.count(fallback) == 1
    assert "torchstack: searched" not in log
    return False


def _consumer(eb_env: EasyBuildEnv, name: str, version: str, wheel: Path,
              checksum: str | None = None, extra: str = "") -> Path:
    eb_env.stage_source(name, wheel)
    return wheel_easyconfig(
        eb_env.root / f"{name}-{version}-whl.eb", name, version,
        [(name, version, wheel, checksum or sha256(wheel))],
        dependencies=[PYTORCH_DEP], extra=extra,
    )


class TestTorchModule:
    def test_loads_and_imports(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str) -> None:
        result = eb_env.shell(
            f"module load {pytorch_cpu_module}\n"
            "python -c 'import torch; print(torch.__version__, int(torch.ones(3).sum()))'\n"
            "echo ABI=$TORCHSTACK_TORCH_ABI\n"
            f"module whatis {pytorch_cpu_module} 2>&1"
        )
        assert result.returncode == 0, result.stderr
        assert "2.13.0+cpu 3" in result.stdout
        assert "ABI=torch-2.13.0-cxx11-cpu" in result.stdout
        assert "torchstack: provider torch-2.13.0-cxx11-cpu" in result.stdout + result.stderr

    def test_fingerprint_file(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                              real_wheel: Factory) -> None:
        installdir = _installdir(eb_env, "PyTorch", "2.13.0-whl")
        recorded = json.loads((installdir / FINGERPRINT_FILE).read_text())
        assert recorded == fingerprint_path(real_wheel("torch-2.13.0")).to_json()
        assert fingerprint_path(installdir).abi_tag == "torch-2.13.0-cxx11-cpu"

    def test_byte_compiled_beside_the_checks(self, eb_env: EasyBuildEnv,
                                             pytorch_cpu_module: str) -> None:
        # uv installs without compiling; the byte-compile runs in a thread beside the sanity
        # check and the module step, and is waited for before the permissions step
        installdir = _installdir(eb_env, "PyTorch", "2.13.0-whl")
        site = installdir / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        torch = site / "site-packages" / "torch"
        tag = sys.implementation.cache_tag
        assert (torch / "__pycache__" / f"__init__.{tag}.pyc").is_file()
        assert (torch / "nn" / "modules" / "__pycache__" / f"linear.{tag}.pyc").is_file()
        log = next((installdir / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
        assert re.search(r"torchstack: byte-compile took [\d.]+ s, waited for [\d.]+ s", log)
        waited = log.index("torchstack: byte-compile took")
        assert log.index("Starting permissions step") < waited < log.index("Starting package step")
        assert "--compile-bytecode" not in log
        # torchstack.install.bytecode on EasyBuild's parallel cores, not compileall on all
        assert re.search(r"/torchstack/install/bytecode\.py -j [1-9]\d* \S+/site-packages", log)

    def test_import_checked_beside_the_other_checks(self, eb_env: EasyBuildEnv,
                                                   pytorch_cpu_module: str) -> None:
        # one import of everything the wheels install, in a thread once the module is loaded
        installdir = _installdir(eb_env, "PyTorch", "2.13.0-whl")
        log = next((installdir / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
        assert re.search(r"torchstack: import check took [\d.]+ s, waited for [\d.]+ s", log)
        ran = re.search(r"torchstack: sanity check command (\S+) -c '(import [^']+)' ran "
                        r"successfully", log)
        assert ran is not None
        assert ran.group(2) == "import functorch, torch, torchgen"  # the wheel's top levels
        # where EasyBuild ran it, in the words of its newer releases or of 5.0 (through
        # setsid, see torchstack.install._processes)
        started = re.search(r"Running command in (\S+):\n\t\S+/setsid --wait \S+ -c import "
                            r"functorch, |Running shell command '\S+/setsid --wait \S+ -c import "
                            r"functorch, [^']*' in (\S+)", log)
        assert started is not None
        assert "torchstack-import-check-" in (started.group(1) or started.group(2))
        assert log.index("Starting sanitycheck step") < started.start()

    def test_pth_search_done_once(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str) -> None:
        # PythonBundle walks the installation for .pth files for each module it writes (two
        # fake modules, the module twice); from the sanity check on it is walked once
        installdir = _installdir(eb_env, "PyTorch", "2.13.0-whl")
        log = next((installdir / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
        _pth_search_once(log, installdir, 0)
        assert "Found path configuration file" not in log
        module = (eb_env.installpath / "modules" / "all" / "PyTorch" / "2.13.0-whl.lua").read_text()
        # as newer EasyBuild releases write the path, or as 5.0 does
        sites = ['pathJoin(root, "lib", "python3.11", "site-packages")',
                 'pathJoin(root, "lib/python3.11/site-packages")']
        assert any(f'prepend_path("PYTHONPATH", {site})' in module for site in sites)
        assert "EBPYTHONPREFIXES" not in module

    def test_permissions_step_reads_once(self, eb_env: EasyBuildEnv,
                                         pytorch_cpu_module: str) -> None:
        # EasyBuild's permissions step, after the byte-compile, reading the installation once
        installdir = _installdir(eb_env, "PyTorch", "2.13.0-whl")
        log = next((installdir / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
        assert ebversions.fallback(ebversions.PERMISSIONS) is None  # see test_ebversions.py
        line = re.search(r"torchstack: permissions step, reading the installation once, "
                         r"took [\d.]+ s", log)
        assert line is not None
        assert (log.index("torchstack: byte-compile took") < line.start()
                < log.index("Starting package step"))
        checked = 0
        for dirpath, dirnames, filenames in os.walk(installdir / "lib"):
            for name in dirnames + filenames:
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
                if stat.S_ISLNK(mode):
                    continue
                checked += 1
                assert not mode & (stat.S_IWGRP | stat.S_IWOTH), (dirpath, name, oct(mode))
                assert mode & stat.S_IRUSR and mode & stat.S_IRGRP and mode & stat.S_IROTH
                if stat.S_ISDIR(mode):
                    assert mode & stat.S_IXUSR and mode & stat.S_IXGRP and mode & stat.S_IXOTH
        assert checked > 14000  # torch's files, .pyc files among them

    def test_installed_metadata_is_pip_compatible(
        self, eb_env: EasyBuildEnv, pytorch_cpu_module: str
    ) -> None:
        result = eb_env.shell(f"module load {pytorch_cpu_module}\npython -m pip check\n"
                              "python -m pip list 2>/dev/null | grep -i '^torch '")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "2.13.0+cpu" in result.stdout


class TestConsumers:
    def test_pure_python_consumer(self, eb_env: EasyBuildEnv, toy_module: str) -> None:
        run = eb_env.shell(f"module load {toy_module}\n"
                           "python -c 'import torchtoy; print(int(torchtoy.double(21)))'")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "42"
        recorded = fingerprint_path(_installdir(eb_env, "torchtoy", "1.0-whl"))
        assert (recorded.link, recorded.requires_torch) == ("python", ">=2.13")

    def test_cpp_extension_consumer(self, eb_env: EasyBuildEnv, demo_ext_module: str) -> None:
        run = eb_env.shell(
            f"module load {demo_ext_module}\n"
            "python -c 'import torch, torchstack_demo_ext as e; print(e.add_one(torch.zeros(2)))'"
        )
        assert run.returncode == 0, run.stderr
        assert "tensor([1., 1.])" in run.stdout
        installdir = _installdir(eb_env, "torchstack_demo_ext", "0.1-whl")
        recorded = json.loads((installdir / FINGERPRINT_FILE).read_text())
        # No pin in its metadata: the release is the PyTorch module it was installed on.
        assert recorded["link"] == "cxx"
        assert recorded["abi_tag"] == "torch-2.13.0-cxx11-cpu"

    def test_consumer_with_pth_file(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                                    tmp_path: Path) -> None:
        # a .pth file in the installation makes PythonBundle's module use $EBPYTHONPREFIXES:
        # the search done once still finds it, for the fake modules and the module alike
        wheel = build_wheel(tmp_path, "torchpth", "1.0", {"torchpth/__init__.py": b"",
                                                          "torchpth-paths.pth": b"import os\n"})
        module = consumer_module(eb_env, wheel, "torchpth", "1.0")
        installdir = _installdir(eb_env, "torchpth", "1.0-whl")
        log = next((installdir / "easybuild").glob("easybuild-torchpth-*.log")).read_text()
        text = (eb_env.installpath / "modules" / "all" / f"{module}.lua").read_text()
        # found in lib and again through EasyBuild's lib64 link to it, as EasyBuild finds it
        if _pth_search_once(log, installdir, hits=2):
            assert log.count("Found path configuration file in installation directory") >= 3
            # only PythonBundle's search adds it
            assert 'prepend_path("EBPYTHONPREFIXES", root)' in text
        else:  # an EasyBuild whose PythonBundle does not look for .pth files (5.0)
            assert "Found path configuration file" not in log
            assert 'prepend_path("PYTHONPATH"' in text

    def test_cuda_consumer_refused_on_cpu_torch(
        self, eb_env: EasyBuildEnv, pytorch_cpu_module: str, real_wheel: Factory
    ) -> None:
        wheel = real_wheel("torchvision-0.28.0")
        result = eb_env.eb(_consumer(eb_env, "torchvision", "0.28.0", wheel))
        assert result.returncode != 0
        assert "torchvision 0.28.0 links libtorch_cuda.so (cu13)" in result.stdout
        assert "CPU-only" in result.stdout


def _data_wheel(folder: Path, name: str) -> Path:
    """A consumer wheel with a data file of its own: no other install holds the same bytes,
    so only uv can have linked it."""
    return build_wheel(folder, name, "1.0", {f"{name}/__init__.py": b"import torch\n",
                                              f"{name}/data.bin": os.urandom(8192)})


def _uv_leftovers(installdir: Path) -> list[Path]:
    """An install's own uv cache, inside the installation or moved beside it to be deleted."""
    return [*installdir.glob(".torchstack-uv-cache*"),
            *installdir.parent.glob(f"{installdir.name}.torchstack-uv-cache*")]


class TestUvCache:
    """Where uv unpacks: the cache the session's installs share ($TORCHSTACK_UV_CACHE), or by
    default the install's own, removed after it."""

    def test_shared_cache_holds_the_installed_files(self, eb_env: EasyBuildEnv,
                                                    pytorch_cpu_module: str,
                                                    tmp_path: Path) -> None:
        consumer_module(eb_env, _data_wheel(tmp_path, "uvshared"), "uvshared", "1.0")
        installdir = _installdir(eb_env, "uvshared", "1.0-whl")
        installed = next(installdir.rglob("uvshared/data.bin")).stat()
        cached = {p.stat().st_ino for p in uv_cache().glob("archive-v0/*/uvshared/data.bin")}
        assert installed.st_ino in cached and installed.st_nlink >= 2
        assert _uv_leftovers(installdir) == []

    def test_own_cache_removed_after_the_install(self, eb_env: EasyBuildEnv,
                                                 pytorch_cpu_module: str,
                                                 tmp_path: Path) -> None:
        wheel = _data_wheel(tmp_path, "uvown")
        easyconfig = wheel_easyconfig(eb_env.root / "uvown-1.0-whl.eb", "uvown", "1.0",
                                      stage_wheels(eb_env, "uvown", [wheel]), [PYTORCH_CPU])
        result = eb_env.eb(easyconfig, shared_uv_cache=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        installdir = _installdir(eb_env, "uvown", "1.0-whl")
        assert next(installdir.rglob("uvown/data.bin")).stat().st_nlink == 1
        assert _uv_leftovers(installdir) == []
        assert list(uv_cache().glob("archive-v0/*/uvown")) == []


class TestFailures:
    def test_wrong_checksum_then_fixed(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                                       tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "torchsum", "1.0", {"torchsum/__init__.py": b""},
                            requires=("torch",))
        bad = _consumer(eb_env, "torchsum", "1.0", wheel, checksum="0" * 64)
        result = eb_env.eb(bad)
        assert result.returncode != 0
        assert "Checksum verification" in result.stdout
        fixed = _consumer(eb_env, "torchsum", "1.0", wheel)
        assert eb_env.eb(fixed).returncode == 0

    def test_wheel_for_other_python(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                                    tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "torchold", "1.0", {"torchold/__init__.py": b""},
                            tag="cp38-cp38-manylinux_2_28_x86_64")
        result = eb_env.eb(_consumer(eb_env, "torchold", "1.0", wheel))
        assert result.returncode != 0
        assert "torchstack: wheel does not fit" in result.stdout
        assert "cp38-cp38-manylinux_2_28_x86_64" in result.stdout

    def test_unresolved_library_fails_sanity_check(
        self, eb_env: EasyBuildEnv, pytorch_cpu_module: str, tmp_path: Path
    ) -> None:
        # An extension linked against a library that the installation does not bring.
        (tmp_path / "absent.c").write_text("int absent_symbol;\n")
        (tmp_path / "ext.c").write_text("extern int absent_symbol;\nint use(void) "
                                        "{ return absent_symbol; }\n")
        absent = tmp_path / "libtorchstack_absent.so.1"
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libtorchstack_absent.so.1",
                        "-o", str(absent), str(tmp_path / "absent.c")], check=True)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "_ext.so"),
                        str(tmp_path / "ext.c"), str(absent)], check=True)
        tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        wheel = build_wheel(tmp_path, "torchlink", "1.0", {
            "torchlink/__init__.py": b"",
            "torchlink/_ext.so": (tmp_path / "_ext.so").read_bytes(),
        }, requires=("torch",), tag=f"{tag}-{tag}-linux_{platform.machine()}")
        result = eb_env.eb(_consumer(eb_env, "torchlink", "1.0", wheel))
        assert result.returncode != 0
        assert "torchstack: shared libraries do not resolve" in result.stdout
        assert "torchlink/_ext.so: needs libtorchstack_absent.so.1" in result.stdout

    def test_import_failure_fails_sanity_check(self, eb_env: EasyBuildEnv,
                                               pytorch_cpu_module: str, tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "torchbroken", "1.0", {
            "torchbroken/__init__.py": b"import torch\nraise ImportError('torchbroken: no')\n",
        }, requires=("torch",))
        result = eb_env.eb(_consumer(eb_env, "torchbroken", "1.0", wheel))
        assert result.returncode != 0
        assert "torchstack: sanity check command" in result.stdout
        assert "-c 'import torchbroken' failed with exit code 1" in result.stdout
        assert "ImportError: torchbroken: no" in result.stdout

    def test_missing_wheel(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                           tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "torchgone", "1.0", {"torchgone/__init__.py": b""})
        easyconfig = wheel_easyconfig(
            eb_env.root / "torchgone-1.0-whl.eb", "torchgone", "1.0",
            [("torchgone", "1.0", wheel, sha256(wheel))], dependencies=[PYTORCH_DEP],
        )
        result = eb_env.eb(easyconfig)  # the wheel was never staged in the source path
        assert result.returncode != 0
        assert "Couldn't find file torchgone-1.0-py3-none-any.whl" in result.stdout

    def test_unknown_cuda_libs(self, eb_env: EasyBuildEnv, pytorch_cpu_module: str,
                               tmp_path: Path) -> None:
        wheel = build_wheel(tmp_path, "torchbad", "1.0", {"torchbad/__init__.py": b""})
        easyconfig = _consumer(eb_env, "torchbad", "1.0", wheel, extra="cuda_libs = 'conda'\n")
        result = eb_env.eb(easyconfig)
        assert result.returncode != 0
        assert "torchstack: cuda_libs = 'conda' is not one of wheels, modules" in result.stderr


def test_byte_compiled_without_sanity_check(eb_env: EasyBuildEnv, real_wheel: Factory,
                                            tmp_path: Path) -> None:
    # eb --skip-sanity-check: the permissions step still waits for the byte-compile
    env = EasyBuildEnv(tmp_path / "eb", eb_env.python_root).setup()
    wheel = real_wheel("torch-2.13.0")
    env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(env.root / "PyTorch-2.13.0-whl.eb", "PyTorch", "2.13.0",
                                  [("torch", "2.13.0+cpu", wheel, sha256(wheel))])
    result = env.eb(easyconfig, "--skip-sanity-check")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    installdir = env.installpath / "software" / "PyTorch" / "2.13.0-whl"
    log = next((installdir / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
    assert "torchstack: byte-compile took" in log
    assert log.index("torchstack: byte-compile took") < log.index("Starting package step")
    tag = sys.implementation.cache_tag
    pyc = next(installdir.glob(f"lib/python*/site-packages/torch/__pycache__/__init__.{tag}.pyc"))
    assert pyc.is_file()


def test_pyc_files_are_the_byte_compiles_under_source_date_epoch(
        eb_env: EasyBuildEnv, real_wheel: Factory, tmp_path: Path) -> None:
    # As on most sites, Python may write bytecode (no PYTHONDONTWRITEBYTECODE): the sanity
    # import, running beside the byte-compile, must not leave .pyc files of its own, which
    # would be timestamp-based where SOURCE_DATE_EPOCH asks for checked hashes
    env = EasyBuildEnv(tmp_path / "eb", eb_env.python_root).setup()
    wheel = real_wheel("torch-2.13.0")
    env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(env.root / "PyTorch-2.13.0-whl.eb", "PyTorch", "2.13.0",
                                  [("torch", "2.13.0+cpu", wheel, sha256(wheel))])
    environ = {k: v for k, v in env.environ().items() if k != "PYTHONDONTWRITEBYTECODE"}
    environ["SOURCE_DATE_EPOCH"] = "1700000000"
    result = subprocess.run(env.eb_command(str(easyconfig)), env=environ, capture_output=True,
                            text=True, cwd=env.root, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    installdir = env.installpath / "software" / "PyTorch" / "2.13.0-whl"
    log = next((installdir / "easybuild").glob("easybuild-PyTorch-*.log")).read_text()
    assert "torchstack: import check took" in log  # the import ran beside the byte-compile
    site = next(installdir.glob("lib/python*/site-packages"))
    flags = {}
    for pyc in site.rglob("*.pyc"):
        with open(pyc, "rb") as stream:
            flags[pyc] = int.from_bytes(stream.read(8)[4:], "little")
    assert len(flags) > 2000
    timestamped = [str(p.relative_to(site)) for p, f in flags.items() if f != 0b11]
    assert timestamped == []  # every one a checked hash (py_compile.PycInvalidationMode)


def test_byte_compile_ended_when_a_step_fails(eb_env: EasyBuildEnv, real_wheel: Factory,
                                              tmp_path: Path) -> None:
    # The sanity check fails at once (the easyconfig declares another torch) while torch is
    # byte-compiled: eb reports that error alone, and the byte-compile, which no step waited
    # for, is stopped (or has just ended) and logged, none of its processes left behind
    env = EasyBuildEnv(tmp_path / "eb", eb_env.python_root).setup()
    wheel = real_wheel("torch-2.13.0")
    env.stage_source("PyTorch", wheel)
    easyconfig = wheel_easyconfig(env.root / "PyTorch-2.13.0-whl.eb", "PyTorch", "2.13.0",
                                  [("torch", "2.13.0+cpu", wheel, sha256(wheel))],
                                  extra="torchstack_abi_tag = 'torch-2.13.0-cxx11-cu13'\n")
    result = env.eb(easyconfig)
    assert result.returncode != 0
    assert ("installed torch is torch-2.13.0-cxx11-cpu, the easyconfig declares "
            "torch-2.13.0-cxx11-cu13") in result.stdout
    found = re.search(r"Results of the build can be found in the log file\(s\) (\S+)",
                      result.stdout)
    assert found is not None, result.stdout[-3000:]
    log = Path(found.group(1)).read_text()
    assert re.search(r"torchstack: byte-compile (stopped after [\d.]+ s: a step failed before "
                     r"it was waited for|took [\d.]+ s, no step waited for it)", log)
    site = str(env.installpath / "software" / "PyTorch" / "2.13.0-whl" / "lib")
    left = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if proc.name.isdigit() and site.encode() in cmdline:
            left.append(cmdline.replace(b"\0", b" ").decode())
    assert not left
