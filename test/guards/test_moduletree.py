"""torchstack.guards.moduletree and lmodversion, each case checked against the real Lmod.

Every tree below is walked by `read_tree` and listed by Lmod (`module --show_hidden -t avail`),
and every load is resolved by `ModuleTree.resolve` and loaded by Lmod (`module load`, each
module file setting PICKED to its own name): the two must agree. Lmod's version order is
checked against Lmod's own parseVersion.lua, run by the Lua interpreter Lmod runs on.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.ebenv import LMOD_CMD, LMOD_INIT

from torchstack.guards.lmodversion import parse_version
from torchstack.guards.moduletree import MAX_ENTRIES, ModuleTree, TreeError, read_tree

LMOD_LIBEXEC = Path(LMOD_CMD).parent


def lmod(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`module COMMAND` by the real Lmod with MODULEPATH=root, in a clean shell."""
    script = (f"source {LMOD_INIT}\nexport MODULEPATH={root}\nmodule {command}\n"
              "echo RC=$?\necho PICKED=$PICKED")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root.parent), "LMOD_CMD": str(LMOD_CMD)}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def lmod_loads(root: Path, written: str) -> str | None:
    """The module Lmod loads for `module load WRITTEN`, None when it refuses."""
    out = lmod(root, f"load {written}").stdout
    picked = out.split("PICKED=")[1].strip()
    return picked or None


def lmod_lists(root: Path) -> list[str]:
    """Every module Lmod lists, hidden ones included, without the folder lines."""
    err = lmod(root, "--show_hidden -t avail").stderr
    return sorted(line for line in err.splitlines()[1:] if line and not line.endswith("/"))


def module(root: Path, name: str, syntax: str = "lua") -> Path:
    """A module file that says who it is: `PICKED` is its full name."""
    path = root / (f"{name}.lua" if syntax == "lua" else name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'setenv("PICKED", "{name}")\n' if syntax == "lua"
                    else f"#%Module\nsetenv PICKED {name}\n", encoding="utf-8")
    return path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# -- trees: which files are modules ---------------------------------------------------------


def _symlinked_folder(tmp: Path, root: Path) -> None:
    module(tmp / "shared", "PyTorch/2.9.1")  # modules/all/PyTorch -> a shared folder
    (root / "PyTorch").symlink_to(tmp / "shared" / "PyTorch")


def _symlinked_files(tmp: Path, root: Path) -> None:
    lua, tcl = module(tmp / "ext", "a"), module(tmp / "ext", "b", "tcl")
    (root / "PyTorch").mkdir()
    (root / "PyTorch" / "2.9.1.lua").symlink_to(lua)
    (root / "PyTorch" / "2.10.0").symlink_to(tcl)
    (root / "PyTorch" / "2.11.0.lua").symlink_to(tmp / "nowhere.lua")  # dangling: skipped
    (root / "PyTorch" / "2.12.0").symlink_to("2.12.0")  # a link to itself: skipped


def _loops(tmp: Path, root: Path) -> None:
    module(root, "PyTorch/2.9.1")
    (root / "PyTorch" / "sub").symlink_to("../PyTorch")  # a folder inside itself
    (root / "Loop").symlink_to(root)  # modules/all inside itself


def _leftovers(tmp: Path, root: Path) -> None:
    for version in ("2.9.1", "2.10.0"):
        module(root, f"PyTorch/{version}", "tcl")
    folder = root / "PyTorch"
    tcl = "#%Module\nsetenv PICKED leftover\n"
    for name in (".modulerc.tmp-1a2b3c4d", ".2.9.1.tmp-0badcafe",  # torchstack's staging
                 ".2.9.1.bak_20250101120000",  # EasyBuild's hidden backup of a Tcl module
                 "2.11.0~", "#2.12.0#", ".#2.13.0", "__2.14.0", ".2.15.0.swp",  # Lmod skips
                 ".git", ".svn", ".DS_Store"):
        write(folder / name, tcl)
    write(folder / "2.16.0.lua~", 'setenv("PICKED", "backup")\n')
    write(folder / ".hidden", tcl.replace("leftover", "PyTorch/.hidden"))  # a hidden module
    os.mkfifo(folder / "2.17.0.lua")  # no regular file: Lmod skips it, nothing blocks


LEFTOVERS = ["PyTorch/.2.9.1.bak_20250101120000", "PyTorch/.2.9.1.tmp-0badcafe",
             "PyTorch/.modulerc.tmp-1a2b3c4d"]
TREES: dict[str, tuple[Callable[[Path, Path], None], list[str], list[str]]] = {
    # case: (build, the modules read, the hidden leftovers Lmod lists beside them)
    "symlinked-folder": (_symlinked_folder, ["PyTorch/2.9.1"], []),
    "symlinked-files": (_symlinked_files, ["PyTorch/2.10.0", "PyTorch/2.9.1"], []),
    "leftovers-and-backups": (_leftovers, ["PyTorch/.hidden", "PyTorch/2.10.0",
                                           "PyTorch/2.9.1"], LEFTOVERS),
}


class TestReadTree:
    @pytest.mark.parametrize("case", list(TREES))
    def test_modules_as_lmod_lists_them(self, tmp_path: Path, case: str) -> None:
        root = tmp_path / "all"
        root.mkdir()
        build, expected, leftovers = TREES[case]
        build(tmp_path, root)
        assert sorted(read_tree(root).modules) == expected
        assert lmod_lists(root) == sorted(expected + leftovers)

    def test_leftovers_are_hidden_and_never_a_default(self, tmp_path: Path) -> None:
        # Lmod lists a hidden leftover only with --show_hidden and loads it only by its full
        # name, which nothing writes: for what a load names, it is not there
        root = tmp_path / "all"
        root.mkdir()
        _leftovers(tmp_path, root)
        assert not set(LEFTOVERS) & set(lmod(root, "-t avail").stderr.splitlines())
        assert lmod_loads(root, "PyTorch") == read_tree(root).resolve("PyTorch").module
        assert lmod_loads(root, "PyTorch/2.9") == "PyTorch/2.9.1"

    def test_symlink_loops_walked_once(self, tmp_path: Path) -> None:
        # Lmod follows a loop until the kernel's limit of 40 links, listing each name on the
        # way (Loop/Loop/.../PyTorch/sub/2.9.1); the walk reads each folder once and ends.
        root = tmp_path / "all"
        root.mkdir()
        _loops(tmp_path, root)
        listed = lmod_lists(root)
        assert "PyTorch/2.9.1" in listed and "PyTorch/sub/2.9.1" in listed
        assert len(listed) > 100
        assert list(read_tree(root).modules) == ["PyTorch/2.9.1"]

    def test_a_web_of_links_ends_in_an_error(self, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        # three links to one folder in each of eight levels: 3^8 paths through 8 folders
        root = tmp_path / "all"
        levels = [tmp_path / f"level{i}" for i in range(8)]
        for here, below in zip(levels, levels[1:]):
            here.mkdir()
            for name in "abc":
                (here / name).symlink_to(below)
        levels[-1].mkdir()
        module(levels[-1], "X/1")
        root.symlink_to(levels[0])
        monkeypatch.setattr("torchstack.guards.moduletree.MAX_ENTRIES", 1000)
        with pytest.raises(TreeError, match="more than 1000 entries"):
            read_tree(root)
        assert MAX_ENTRIES >= 100_000  # the real bound: far above any real tree

    def test_unlistable_folder_is_a_problem(self, tmp_path: Path) -> None:
        root = tmp_path / "all"
        module(root, "PyTorch/2.9.1")
        locked = root / "torchvision"
        module(root, "torchvision/0.24.1")
        locked.chmod(0)
        try:
            tree = read_tree(root)
        finally:
            locked.chmod(0o755)
        if os.geteuid() == 0:  # root lists any folder: nothing left out
            assert "torchvision/0.24.1" in tree.modules
        else:
            assert tree.problems and tree.problems[0][0] == str(locked)


# -- resolving a load ---------------------------------------------------------------------------


def _lua_rc(root: Path) -> None:
    for version in ("2.9.0", "2.9.1", "2.10.0", ".2.11.0"):
        module(root, f"PyTorch/{version}")
    write(root / "PyTorch" / ".modulerc.lua",
          'module_alias("torch/2.9", "PyTorch/2.9.1")\n'
          'module_version("PyTorch/2.9.0", "stable")\n'
          '-- module_version("PyTorch/2.10.0", "default")\n'
          'module_version("PyTorch/2.9.0", "default")\n')


def _tcl_rc(root: Path) -> None:
    for version in ("2.9.0", "2.9.1", "2.10.0"):
        module(root, f"PyTorch/{version}", "tcl")
    write(root / "PyTorch" / ".modulerc",
          "#%Module\nmodule-alias torch/latest PyTorch/2.9.1\n"
          "module-version PyTorch/2.9.0 old\nmodule-version /2.9.1 slash default\n")
    write(root / "PyTorch" / ".version", '#%Module\nset ModulesVersion "2.10.0"\n')


def _version_file(root: Path) -> None:
    for version in ("2.9.0", "2.9.1", "2.10.0"):
        module(root, f"PyTorch/{version}", "tcl")
    write(root / "PyTorch" / ".version", '#%Module\nset ModulesVersion "2.9.0"\n')


def _default_link(root: Path) -> None:
    _lua_rc(root)
    (root / "PyTorch" / "default").symlink_to("2.9.1.lua")  # wins over .modulerc.lua


def _dangling_default(root: Path) -> None:
    _lua_rc(root)
    (root / "PyTorch" / "default").symlink_to("3.0.lua")  # marks nothing: the highest


def _rc_without_default(root: Path) -> None:
    _version_file(root)
    write(root / "PyTorch" / ".modulerc", "#%Module\nmodule-alias torch PyTorch/2.9.1\n")


def _easybuild_versions(root: Path) -> None:
    for version in ("2.9.1-foss-2025a-CUDA-12.8.0-whl", "2.9.1-foss-2025a-CUDA-12.8.0",
                    "2.9.1", "2.10.0-rc1", "2.1.2"):
        module(root, f"PyTorch/{version}")
    module(root, "torchvision/0.24.1-foss-2025a-CUDA-12.8.0-whl")


RESOLVE: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "lua-rc": (_lua_rc, ["PyTorch", "torch/2.9", "PyTorch/stable", "PyTorch/default",
                         "PyTorch/2.9", "PyTorch/2.10.0", "PyTorch/.2.11.0", "PyTorch/3",
                         "torch", "Missing"]),
    "tcl-rc": (_tcl_rc, ["PyTorch", "torch/latest", "PyTorch/old", "PyTorch/slash"]),
    "version-file": (_version_file, ["PyTorch", "PyTorch/2.9"]),
    "default-symlink": (_default_link, ["PyTorch", "PyTorch/2.9"]),
    "dangling-default-symlink": (_dangling_default, ["PyTorch"]),
    # .modulerc comes first: Lmod reads no default from .version behind it
    "modulerc-before-version": (_rc_without_default, ["PyTorch", "torch"]),
    "version-order": (_easybuild_versions, ["PyTorch", "PyTorch/2.9", "PyTorch/2.9.1-foss",
                                            "PyTorch/2.1", "PyTorch/2", "torchvision"]),
}


class TestResolve:
    @pytest.mark.parametrize("case", list(RESOLVE))
    def test_as_lmod_loads(self, tmp_path: Path, case: str) -> None:
        root = tmp_path / "all"
        build, loads = RESOLVE[case]
        build(root)
        tree = read_tree(root)
        ours = {written: tree.resolve(written).module for written in loads}
        assert ours == {written: lmod_loads(root, written) for written in loads}

    @pytest.mark.parametrize(
        ("rc", "text", "fragment"),
        [
            pytest.param(".modulerc.lua", 'module_version(name .. "/2.9.1", "default")\n',
                         "marks a default in a way not understood here", id="computed-lua"),
            pytest.param(".modulerc.lua", None, "is a FIFO", id="fifo-rc"),
            pytest.param(".version", "\xff", None, id="not-utf8-version-marks-nothing"),
        ],
    )
    def test_default_that_cannot_be_told(self, tmp_path: Path, rc: str, text: str | None,
                                         fragment: str | None) -> None:
        root = tmp_path / "all"
        _version_file(root)
        (root / "PyTorch" / ".version").unlink()
        if text is None:
            os.mkfifo(root / "PyTorch" / rc)
        else:
            write(root / "PyTorch" / rc, text)
        found = read_tree(root).resolve("PyTorch")
        if fragment is None:  # nothing marked: the highest, as Lmod does
            assert found.module == "PyTorch/2.10.0"
        else:
            assert found.module is None and found.doubt is not None
            assert fragment in found.doubt and "'PyTorch', whose default" in found.doubt
        assert read_tree(root).resolve("PyTorch/2.9.0").module == "PyTorch/2.9.0"

    def test_alias_cycle(self, tmp_path: Path) -> None:
        root = tmp_path / "all"
        module(root, "PyTorch/2.9.1")
        write(root / "PyTorch" / ".modulerc.lua",
              'module_alias("a/1", "b/1")\nmodule_alias("b/1", "a/1")\n')
        found = read_tree(root).resolve("a/1")
        assert found.module is None and found.doubt is not None and "leads back" in found.doubt

    def test_tree_is_a_plain_value(self, tmp_path: Path) -> None:
        tree = ModuleTree(tmp_path, {"A/1": tmp_path / "A" / "1.lua"}, {}, {})
        assert tree.resolve("A").module == "A/1"


# -- Lmod's version order -------------------------------------------------------------------------


def lua_parse_versions(versions: list[str]) -> list[str]:
    """Lmod's own parseVersion of each version, one a line, run by Lua."""
    paths = f"{LMOD_LIBEXEC}/?.lua;{LMOD_LIBEXEC.parent / 'tools'}/?.lua;"
    script = (f'package.path = "{paths}" .. package.path\n'
              'require("parseVersion")\n'
              'for line in io.lines() do print(parseVersion(line)) end\n')
    done = subprocess.run(["lua", "-e", script], input="\n".join(versions) + "\n",
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


VERSIONS = ["2.9.1", "2.10.0", "2.9.1-foss-2025a-CUDA-12.8.0-whl", "2.10.0-rc1", ".2.11.0",
            "1.0-p2", "3.2-0", "2.4a1", "1.0-dev", "0.29.1-PyTorch-2.14.1-CUDA-13.0-whl",
            "a/b.1", "1..2", "-pre", "2.0.0+cpu", "2.6.0-preview", "007"]


class TestLmodVersion:
    def test_examples(self) -> None:
        assert [parse_version(v) for v in VERSIONS] == lua_parse_versions(VERSIONS)

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.text(alphabet="0123456789.-+_/abcdefpvrxyzPRE", max_size=12),
                    min_size=1, max_size=40))
    def test_any_version(self, versions: list[str]) -> None:
        assert [parse_version(v) for v in versions] == lua_parse_versions(versions)
