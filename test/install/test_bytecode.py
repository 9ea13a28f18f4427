"""torchstack.install.bytecode writes compileall's .pyc files, byte for byte, on synthetic
trees and on the real torch wheel's sources."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchstack.install import bytecode

TAG = sys.implementation.cache_tag


def compileall_run(folder: Path,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compileall", "-q", "-j0", str(folder)],
                          capture_output=True, text=True, env=env)


def bytecode_run(folder: Path, *options: str,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, bytecode.__file__, *options, str(folder)],
                          capture_output=True, text=True, env=env)


def pycs(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.pyc"))}


def drop_pycs(folder: Path) -> None:
    for cache in list(folder.rglob("__pycache__")):
        if not cache.is_symlink():
            shutil.rmtree(cache)


def compare(folder: Path, *options: str, env: dict[str, str] | None = None) -> tuple[
        subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Compile `folder` with compileall, then again with bytecode (same paths, so the same
    co_filename); both sets of .pyc files must be equal."""
    theirs = compileall_run(folder, env)
    expected = pycs(folder)
    drop_pycs(folder)
    ours = bytecode_run(folder, *options, env=env)
    assert pycs(folder) == expected
    assert expected, "nothing was compiled"
    return theirs, ours


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "site-packages"
    files = {
        "pkg/__init__.py": "from . import sub\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/mod.py": "def f(x):\n    return x * 2\n",
        "pkg/tests/broken.py": "def (:\n",  # torch ships a few such test inputs
        "pkg/data.txt": "not python\n",
        "top.py": "VALUE = 1\n",
        **{f"many/m{i}.py": f"N = {i}\n" * (i % 7 + 1) for i in range(40)},
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "linked.py").write_text("X = 1\n")
    (root / "pkg" / "link").symlink_to(outside, target_is_directory=True)
    return root


def test_same_pycs_and_exit_code_as_compileall(tree: Path) -> None:
    theirs, ours = compare(tree)
    assert theirs.returncode == ours.returncode == 1  # broken.py
    assert "broken.py" in ours.stdout and "broken.py" in theirs.stdout
    assert f"pkg/sub/__pycache__/mod.{TAG}.pyc" in pycs(tree)
    assert not (tree / "pkg" / "tests" / "__pycache__" / f"broken.{TAG}.pyc").exists()


def test_links_to_folders_are_not_followed(tree: Path) -> None:
    assert bytecode_run(tree).returncode == 1
    assert not (tree.parent / "outside" / "__pycache__").exists()


def test_one_job_compiles_the_same(tree: Path) -> None:
    _, ours = compare(tree, "-j", "1")
    assert ours.returncode == 1


def test_checked_hashes_under_source_date_epoch(tree: Path) -> None:
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    compare(tree, env=env)
    flags = int.from_bytes((tree / "__pycache__" / f"top.{TAG}.pyc").read_bytes()[4:8],
                           "little")
    assert flags == 0b11  # hash-based, checked


def test_fresh_pycs_are_left_alone(tree: Path) -> None:
    bytecode_run(tree)
    pyc = tree / "pkg" / "sub" / "__pycache__" / f"mod.{TAG}.pyc"
    before = pyc.stat().st_mtime_ns
    pyc.write_bytes(pyc.read_bytes())  # same header, so still fresh
    os.utime(pyc, ns=(before, before))
    bytecode_run(tree)
    assert pyc.stat().st_mtime_ns == before


def test_not_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    result = bytecode_run(tmp_path / "missing")
    assert result.returncode == 2
    assert "not a folder" in result.stderr


def test_real_torch_sources(real_tree: object, tmp_path: Path) -> None:
    """All 2,371 sources of the torch 2.13.0 wheel, including the ones that need a newer
    Python (py312_intrinsics.py): the same .pyc files and failures as compileall."""
    source = Path(real_tree("torch-2.13.0"))  # type: ignore[operator]
    folder = tmp_path / "site-packages"
    for path in source.rglob("*.py"):
        target = folder / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    theirs, ours = compare(folder)
    assert len(pycs(folder)) > 2000
    assert ours.returncode == theirs.returncode
    assert ours.stdout.replace(str(folder), "") == theirs.stdout.replace(str(folder), "")


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_import_order_follows_module_level_imports(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "site-packages", {
        "pkg/__init__.py": ("import os\n"
                            "from . import core\n"
                            "from .io import (read,  # the reader\n"
                            "    write as put)\n"
                            "from pkg.extra.deep import thing\n"
                            "from .star import *\n"
                            "def later():\n"
                            "    from . import lazy  # runs only when called\n"),
        "pkg/core.py": "from .util import helper\n",
        "pkg/util.py": "",
        "pkg/io/__init__.py": "from ..util import helper\n",
        "pkg/io/read.py": "",
        "pkg/io/write.py": "",
        "pkg/io/other.py": "",
        "pkg/extra/__init__.py": "",
        "pkg/extra/deep.py": "import pkg.util as u, top\n",
        "pkg/lazy.py": "",
        "pkg/star.py": "",
        "pkg/tests/test_x.py": "import pkg\n",
        "top.py": "",
        "unused/__init__.py": "",
        "unused/mod.py": "",
    })
    files = sorted(bytecode.sources(str(root)))
    order = [str(Path(p).relative_to(root)) for p in bytecode.import_order(str(root), files)]
    # each module before the ones it imports, those in statement order; each once
    assert order == ["pkg/__init__.py", "pkg/core.py", "pkg/util.py", "pkg/io/__init__.py",
                     "pkg/io/read.py", "pkg/io/write.py", "pkg/extra/__init__.py",
                     "pkg/extra/deep.py", "top.py", "pkg/star.py", "unused/__init__.py"]


def test_imported_modules_are_compiled_first(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_tree(tmp_path / "site-packages", {
        "a_first.py": "", "pkg/__init__.py": "from . import z_mod\n", "pkg/z_mod.py": "",
        "pkg/b_unused.py": "",
    })
    compiled: list[str] = []
    monkeypatch.setattr(bytecode, "compile_files", lambda paths: compiled.extend(paths) or [])
    assert bytecode.compile_folder(str(root), 1) == []
    assert [str(Path(p).relative_to(root)) for p in compiled] == [
        "a_first.py", "pkg/__init__.py", "pkg/z_mod.py", "pkg/b_unused.py"]


def test_import_order_of_real_torch(real_tree: object) -> None:
    """On the torch 2.13.0 wheel the walk finds files that `import torch` loads, most of them."""
    site = Path(real_tree("torch-2.13.0"))  # type: ignore[operator]
    order = bytecode.import_order(str(site), sorted(bytecode.sources(str(site))))
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, torch\nfor m in list(sys.modules.values()):\n"
         "    f = getattr(m, '__file__', None)\n    print(f) if f and f.endswith('.py') else None"],
        capture_output=True, text=True, env=env, cwd=site.parent, check=True).stdout.split()
    loaded_here = [path for path in loaded if path.startswith(str(site))]
    found = [path for path in order if path.startswith(str(site / "torch"))]
    assert len(set(found) - set(loaded_here)) <= len(found) // 100  # nearly all are loaded
    assert len(set(found) & set(loaded_here)) > len(loaded_here) // 2  # and most of those
    assert found[0] == str(site / "torch" / "__init__.py")


def test_unreadable_modules_are_left_to_compileall(tmp_path: Path) -> None:
    # a module the walk cannot read (here a dangling link) is compileall's to report, as before
    root = write_tree(tmp_path / "site-packages", {"pkg/__init__.py": "from . import gone\n"})
    (root / "pkg" / "gone.py").symlink_to(tmp_path / "nowhere.py")
    (root / "top.py").symlink_to(tmp_path / "nowhere.py")
    files = sorted(bytecode.sources(str(root)))
    assert len(bytecode.import_order(str(root), files)) == 3
    theirs, ours = compare(root)
    assert ours.returncode == theirs.returncode
