"""Module folders as sites have them: their own defaults, shared rc files, special files, both
syntaxes in one folder, names that hold code. Each checked with the real Lmod where Lmod's
reading is the point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ebenv import LMOD_CMD, LMOD_INIT

from torchstack.rollout.defaults import Default, write_defaults
from torchstack.rollout.plan import RolloutError

WHEEL, SOURCE = "2.6.0-whl", "2.6.0"


def tree(root: Path, syntax: str = "lua", versions: tuple[str, ...] = (WHEEL, SOURCE),
         where: str = "all/PyTorch") -> Path:
    """A module folder whose module files set PICKED to their own version."""
    folder = root / "modules" / where
    folder.mkdir(parents=True, exist_ok=True)
    for version in versions:
        write_module(folder, version, syntax)
    return folder


def write_module(folder: Path, version: str, syntax: str) -> None:
    if syntax == "lua":
        (folder / f"{version}.lua").write_text('setenv("PICKED", myModuleVersion())\n')
    else:
        (folder / version).write_text(f"#%Module\nsetenv PICKED {{{version}}}\n")


def lmod(modulepath: Path, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    full = f"source {LMOD_INIT}\nexport MODULEPATH={modulepath}\n{script}"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "LMOD_CMD": str(LMOD_CMD)}
    return subprocess.run(["bash", "-c", full], env=env, capture_output=True, text=True,
                          check=False, cwd=cwd)


def picked(root: Path, load: str = "PyTorch", modulepath: str = "modules/all") -> str:
    run = lmod(root / modulepath, f"module load {load}\necho PICKED=$PICKED", root)
    assert run.returncode == 0, run.stderr
    return run.stdout.split("PICKED=")[1].strip()


class TestSiteDefaults:
    """Every way Lmod and Environment Modules mark a default is seen and refused by name."""

    def test_lmod_takes_a_default_symlink_over_modulerc_lua(self, tmp_path: Path) -> None:
        """Why the symlink is refused: Lmod ranks it first, ahead of any .modulerc.lua."""
        folder = tree(tmp_path)
        (folder / "default").symlink_to(f"{WHEEL}.lua")
        (folder / ".modulerc.lua").write_text(f'module_version("PyTorch/{SOURCE}", "default")\n')
        assert picked(tmp_path) == WHEEL

    @pytest.mark.parametrize(("name", "make", "fragment"), [
        ("default", lambda p: p.symlink_to(f"{WHEEL}.lua"), "a symlink to '2.6.0-whl.lua'"),
        ("default", lambda p: p.write_text('setenv("PICKED", "x")\n'), "is a file"),
        (".version", lambda p: p.write_text(f'#%Module\nset ModulesVersion "{WHEEL}"\n'),
         "ModulesVersion"),
        (".modulerc", lambda p: p.write_text(f"#%Module\nmodule-version /{WHEEL} default\n"),
         "sets a default of its own"),
        (".modulerc.lua", lambda p: p.write_text(f'module_version("PyTorch/{WHEEL}","default")'),
         "sets a default of its own"),
    ], ids=["default-symlink", "default-file", "version", "modulerc", "modulerc-lua"])
    def test_refused_nothing_written(self, tmp_path: Path, name: str, make: object,
                                     fragment: str) -> None:
        folder = tree(tmp_path)
        other = tree(tmp_path, versions=("1.0",), where="all/fakeops")
        make(folder / name)  # type: ignore[operator]
        before = {p.name: p.read_bytes() for p in folder.iterdir() if not p.is_symlink()}
        with pytest.raises(RolloutError, match=rf"{name}.*{fragment}.*nothing was written"):
            write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}"), Default("fakeops/1.0")])
        assert {p.name: p.read_bytes() for p in folder.iterdir()
                if not p.is_symlink()} == before
        assert not (other / ".modulerc.lua").exists()  # checked all before writing any


    @pytest.mark.parametrize(("name", "text"), [
        (".modulerc.lua", f"module_version('PyTorch/{WHEEL}', 'default')\n"),
        (".modulerc.lua", f'module_version("PyTorch/{WHEEL}", [[default]])\n'),
        (".modulerc", f"#%Module\nmodule-version PyTorch/{WHEEL} {{default}}\n"),
    ], ids=["lua-single-quotes", "lua-long-string", "tcl-braced"])
    def test_every_spelling_is_seen(self, tmp_path: Path, name: str, text: str) -> None:
        folder = tree(tmp_path)
        (folder / name).write_text(text)
        assert picked(tmp_path) == WHEEL  # Lmod takes it as the default
        with pytest.raises(RolloutError, match=rf"{name}.*sets a default of its own"):
            write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")])

    @pytest.mark.parametrize(("name", "text"), [
        (".modulerc.lua", f'hide_version("PyTorch/{WHEEL}-default-build")\n'),
        (".modulerc.lua", f'module_alias("PyTorch/defaults", "PyTorch/{WHEEL}")\n'),
        (".modulerc", f"#%Module\nmodule-alias PyTorch/nodefault PyTorch/{WHEEL}\n"),
    ], ids=["hidden-name", "lua-alias", "tcl-alias"])
    def test_a_line_that_only_mentions_the_word_is_no_default(self, tmp_path: Path, name: str,
                                                              text: str) -> None:
        folder = tree(tmp_path)
        (folder / name).write_text(text)
        write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")])
        assert (folder / name).read_text().startswith(text.splitlines()[0])  # the site's stays
        assert picked(tmp_path) == SOURCE


class TestSpecialFiles:
    """A FIFO or a device where an rc file belongs: refused at once, never read."""

    @pytest.mark.parametrize(("name", "kind"), [
        (".version", "fifo"), (".modulerc.lua", "fifo"), (".modulerc.lua", "zero"),
        (".modulerc", "zero"),
    ])
    def test_refused_without_hanging(self, tmp_path: Path, name: str, kind: str) -> None:
        folder = tree(tmp_path)
        if kind == "fifo":
            os.mkfifo(folder / name)
        else:
            (folder / name).symlink_to("/dev/zero")
        code = ("import sys; from pathlib import Path\n"
                "from torchstack.rollout.defaults import Default, write_defaults\n"
                "from torchstack.errors import TorchstackError\n"
                "try:\n"
                f"    write_defaults(Path({str(tmp_path)!r}), [Default('PyTorch/{SOURCE}')])\n"
                "except TorchstackError as exc:\n"
                "    print(exc); sys.exit(2)\n")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=False)
        assert run.returncode == 2, run.stderr
        assert name in run.stdout
        assert ("a FIFO" if kind == "fifo" else "a character device") in run.stdout
        assert not os.path.exists(folder / ".modulerc.lua") or name == ".modulerc.lua"

    def test_not_utf8(self, tmp_path: Path) -> None:
        folder = tree(tmp_path)
        (folder / ".modulerc.lua").write_bytes(b'hide_version("PyTorch/\xe9")\n')
        with pytest.raises(RolloutError, match=r"not UTF-8 text \(byte 22 is 0xe9\)"):
            write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")])


class TestSharedRcFile:
    def test_symlinked_modulerc_lua_written_through(self, tmp_path: Path) -> None:
        """A site that links .modulerc.lua to one shared file keeps the link; the shared file
        gets the block, its own lines stay."""
        folder = tree(tmp_path)
        shared = tmp_path / "shared" / "PyTorch.modulerc.lua"
        shared.parent.mkdir()
        shared.write_text(f'hide_version("PyTorch/{WHEEL}")\n')
        (folder / ".modulerc.lua").symlink_to(shared)
        write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")])
        assert (folder / ".modulerc.lua").is_symlink()
        text = shared.read_text()
        assert text.startswith(f'hide_version("PyTorch/{WHEEL}")\n')
        assert f'module_version("PyTorch/{SOURCE}", "default")' in text
        assert picked(tmp_path) == SOURCE

    def test_dangling_symlink_refused(self, tmp_path: Path) -> None:
        folder = tree(tmp_path)
        (folder / ".modulerc.lua").symlink_to(tmp_path / "gone")
        with pytest.raises(RolloutError, match="dangling symlink"):
            write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")])


class TestBothSyntaxes:
    """FROM a Tcl module file and TO a Lua one, in one folder."""

    def test_rollback_wins_over_the_stale_lua_block(self, tmp_path: Path) -> None:
        folder = tree(tmp_path, "tcl", (WHEEL,))
        write_module(folder, SOURCE, "lua")
        pair = (f"PyTorch/{WHEEL}", f"PyTorch/{SOURCE}")
        write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")], pair)
        assert picked(tmp_path) == SOURCE
        write_defaults(tmp_path, [Default(f"PyTorch/{WHEEL}")], pair)
        assert picked(tmp_path) == WHEEL
        write_defaults(tmp_path, [Default(f"PyTorch/{SOURCE}")], pair)
        assert picked(tmp_path) == SOURCE
        assert not (folder / ".modulerc").exists()  # it held only torchstack's block

    def test_a_sites_modulerc_lua_does_not_hide_the_tcl_default(self, tmp_path: Path) -> None:
        """Lmod reads only the first rc file of a folder: .modulerc.lua before .modulerc."""
        folder = tree(tmp_path, "tcl")
        (folder / ".modulerc.lua").write_text(f'module_version("PyTorch/{SOURCE}", "new")\n')
        write_defaults(tmp_path, [Default(f"PyTorch/{WHEEL}")])
        assert picked(tmp_path) == WHEEL
        assert picked(tmp_path, "PyTorch/new") == SOURCE  # the site's lines still count


class TestNamesAreNotCode:
    """A module file whose name holds Lua or Tcl: `module avail` must not run it."""

    LUA = '2.6.0") os.execute("touch INJECTED") print("'
    TCL = "2.6.0[exec touch INJECTED]"

    @pytest.mark.parametrize(("syntax", "version"), [("lua", LUA), ("tcl", TCL)])
    def test_module_avail_runs_no_code(self, tmp_path: Path, syntax: str, version: str) -> None:
        tree(tmp_path, syntax, (WHEEL, version))
        write_defaults(tmp_path, [Default(f"PyTorch/{version}", "2.6.0")])
        run = lmod(tmp_path / "modules" / "all", "module avail 2>&1\nmodule -t -d avail 2>&1",
                   tmp_path)
        assert not (tmp_path / "INJECTED").exists(), run.stdout
        assert run.returncode == 0, run.stdout + run.stderr
        # the default, named as it is (Lmod's own Tcl loader cannot load a file name with a
        # space and brackets, so only the Lua one is loaded)
        assert run.stdout.splitlines()[-1] == f"PyTorch/{version}"
        if syntax == "lua":
            assert picked(tmp_path) == version
