"""The module defaults of `torchstack rollout` as the real Lmod reads them: Lua and Tcl trees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.ebenv import LMOD_CMD, LMOD_INIT

from torchstack.rollout.defaults import Default, write_defaults


class TestDefaultsWithLmod:
    """The written defaults as the real Lmod reads them, in a Lua and in a Tcl module tree."""

    @staticmethod
    def _tree(root: Path, syntax: str) -> None:
        folder = root / "modules" / "all" / "PyTorch"
        folder.mkdir(parents=True)
        for version in ("2.6.0-foss-2024a-whl", "2.6.0-foss-2024a"):
            text = (f'setenv("PICKED", "{version}")\n' if syntax == "lua"
                    else f"#%Module\nsetenv PICKED {version}\n")
            (folder / (f"{version}.lua" if syntax == "lua" else version)).write_text(text)

    @staticmethod
    def _picked(root: Path, load: str) -> str:
        script = (f"source {LMOD_INIT}\nexport MODULEPATH={root / 'modules' / 'all'}\n"
                  f"module load {load}\necho PICKED=$PICKED")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "LMOD_CMD": str(LMOD_CMD)}
        run = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                             check=False)
        assert run.returncode == 0, run.stderr
        return run.stdout.split("PICKED=")[1].strip()

    @pytest.mark.parametrize("syntax", ["lua", "tcl"])
    @pytest.mark.parametrize("version", ["2.6.0-foss-2024a-whl", "2.6.0-foss-2024a"])
    def test_default_and_release_alias(self, tmp_path: Path, syntax: str, version: str) -> None:
        self._tree(tmp_path, syntax)
        write_defaults(tmp_path, [Default(f"PyTorch/{version}", "2.6.0")])
        assert self._picked(tmp_path, "PyTorch") == version
        assert self._picked(tmp_path, "PyTorch/2.6.0") == version
