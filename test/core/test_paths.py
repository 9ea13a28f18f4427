"""easyblocks-path, hooks-path and easyconfigs-path, in this checkout and after a non-editable
install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchstack.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "expected"),
    [("easyblocks-path", REPO / "easyblocks"), ("hooks-path", REPO / "torchstack" / "install"),
     ("easyconfigs-path", REPO / "easyconfigs")],
    ids=["easyblocks", "hooks", "easyconfigs"],
)
def test_paths_in_checkout(
    command: str, expected: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.exists()
    assert printed == expected or printed.parent == expected


def test_paths_after_non_editable_install(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(REPO)],
        check=True, cwd=tmp_path,
    )
    env = dict(os.environ, PYTHONPATH=str(target))

    def run(command: str) -> Path:
        out = subprocess.run(
            [sys.executable, "-m", "torchstack", command],
            check=True, cwd=tmp_path, env=env, capture_output=True, text=True,
        ).stdout
        return Path(out.strip())

    easyblocks = run("easyblocks-path")
    assert easyblocks == target / "torchstack" / "easyblocks"
    assert (easyblocks / "README.rst").is_file()
    assert run("hooks-path") == target / "torchstack" / "install" / "hooks.py"
    assert (run("hooks-path")).is_file()
    assert (target / "torchstack" / "templates" / "README.rst").is_file()
    # the whole shipped tree, in its layout, for eb --robot
    easyconfigs = run("easyconfigs-path")
    assert easyconfigs == target / "torchstack" / "easyconfigs"
    shipped = {p.relative_to(REPO / "easyconfigs") for p in (REPO / "easyconfigs").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    installed = {p.relative_to(easyconfigs) for p in easyconfigs.rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    assert shipped == installed and any(p.suffix == ".eb" for p in installed)
