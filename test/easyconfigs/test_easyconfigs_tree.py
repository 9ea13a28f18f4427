"""The shipped easyconfigs/ tree: byte for byte what `torchstack easyconfigs regenerate` writes
from the embedded catalog, the releases and toolchains it should hold, and the command itself
(the tree's layout, its refresh from an index, a folder it must not replace, bad usage).

The EasyBuild checks of the tree (`eb --check-contrib`, `eb --dry-run --robot`) are in
test_easyconfigs_eb.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.indexserver import IndexServer
from support.releasewheels import pypi_release

from torchstack.cli import main
from torchstack.generator import toolchains, tree
from torchstack.index import catalog

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "easyconfigs"
CATALOG = REPO / "torchstack" / "index" / "catalog_data"
PROJECTS = ("PyTorch", "Triton", "torchvision", "torchaudio")


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _regenerate(folder: Path, *args: str) -> int:
    return main(["easyconfigs", "regenerate", "--dir", str(folder), *args])


class TestShippedTree:
    def test_is_what_the_command_writes(self, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
        assert _regenerate(tmp_path / "tree", "--catalog", str(CATALOG)) == 0
        written, committed = _files(tmp_path / "tree"), _files(TREE)
        fix = "run scripts/regenerate-easyconfigs and commit easyconfigs/"
        assert sorted(written.keys() - committed.keys()) == [], f"missing from the tree: {fix}"
        assert sorted(committed.keys() - written.keys()) == [], f"stale in the tree: {fix}"
        differ = sorted(p for p in written if written[p] != committed[p])
        assert differ == [], f"differ from what the command writes: {fix}"
        assert f"{len(written)} files written to " in capsys.readouterr().out

    def test_holds_the_newest_releases_for_the_newest_toolchains(self) -> None:
        releases = tree.newest_minors(catalog.releases(CATALOG))
        assert len(releases) == tree.MINORS == 2  # 2.15.0 and 2.14.1 as shipped
        newest_foss = toolchains.versions_of("foss", None)
        stacks = sorted(p.name for p in TREE.glob("easystack-*.yaml"))
        for release in releases:
            found = {m.group(1) for name in stacks
                     if (m := re.match(rf"easystack-torch-{re.escape(release)}-foss-([^-]+)-",
                                       name))}
            # the two newest foss of the installed easybuild-easyconfigs fit both releases
            assert found == set(newest_foss[:tree.TOOLCHAINS]), (release, found)
            for version in found:  # every architecture, every project
                for arch in ("x86_64", "aarch64"):
                    assert any(n.startswith(f"easystack-torch-{release}-foss-{version}-")
                               and n.endswith(f"-{arch}.yaml") for n in stacks)
            torch = list(TREE.glob(f"p/PyTorch/PyTorch-{release}-foss-*-whl.eb"))
            assert len(torch) == len(found)
        for project in PROJECTS:  # upstream's layout, nothing else beside it
            assert list(TREE.glob(f"{project[0].lower()}/{project}/{project}-*-whl.eb"))
        assert {p.relative_to(TREE).parts[0] for p in TREE.iterdir()} == {
            "p", "t", "README.rst", "__init__.py", *stacks}

    def test_easystacks_name_files_of_the_tree(self) -> None:
        names = {p.name for p in TREE.rglob("*.eb")}
        for stack in TREE.glob("easystack-*.yaml"):
            listed = re.findall(r"^  - (\S+\.eb)$", stack.read_text(), re.MULTILINE)
            assert listed and set(listed) <= names, stack.name

    def test_list_prints_a_build_command_per_easystack(
            self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["easyconfigs", "list", "--dir", str(TREE)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == len(list(TREE.glob("easystack-*.yaml")))
        name = sorted(p.name for p in TREE.glob("easystack-*.yaml"))[0]
        assert f"{name}: cd {TREE} && eb --easystack {name} --robot=\"$PWD\" " \
               "--include-easyblocks=\"$(torchstack easyblocks-path)/*.py\" " \
               "--hooks=\"$(torchstack hooks-path)\"" in lines


class TestNewestMinors:
    @pytest.mark.parametrize(("releases", "expected"), [
        (["2.15.0", "2.14.1", "2.14.0", "2.13.0"], ["2.15.0", "2.14.1"]),  # newest patch
        (["2.9.0", "2.10.0", "2.9.1"], ["2.10.0", "2.9.1"]),  # versions, not strings
        (["2.8.0"], ["2.8.0"]),  # fewer series than asked for
        ([], []),
    ], ids=["patches", "order", "one", "none"])
    def test_newest_of_each_series(self, releases: list[str], expected: list[str]) -> None:
        assert tree.newest_minors(releases) == expected


class TestWrite:
    def test_replaces_the_whole_tree(self, tmp_path: Path) -> None:
        folder = tmp_path / "easyconfigs"
        tree.write(folder, {"p/PyTorch/PyTorch-1-whl.eb": "old\n", "easystack-torch-1-x.yaml": ""})
        tree.write(folder, {"p/PyTorch/PyTorch-2-whl.eb": "new\n", "README.rst": "r\n"})
        assert _files(folder) == {"p/PyTorch/PyTorch-2-whl.eb": b"new\n", "README.rst": b"r\n"}
        assert [p.name for p in tmp_path.iterdir()] == ["easyconfigs"]  # no staging left

    @pytest.mark.parametrize("foreign", [
        "notes.txt",  # not a file of a tree
        "p/PyTorch/notes.eb.txt",
        "PyTorch-2.15.0-foss-2025b-whl.eb",  # an easyconfig outside upstream's layout
        "x/PyTorch/PyTorch-2.15.0-foss-2025b-whl.eb",  # under another letter
    ])
    def test_refuses_a_folder_with_other_files(self, tmp_path: Path, foreign: str) -> None:
        path = tmp_path / "tree" / foreign
        path.parent.mkdir(parents=True)
        path.write_text("kept\n")
        with pytest.raises(tree.TreeError, match="belong to no easyconfigs tree"):
            tree.write(tmp_path / "tree", {"README.rst": "r\n"})
        assert _files(tmp_path / "tree") == {foreign: b"kept\n"}

    def test_refuses_a_symlink(self, tmp_path: Path) -> None:
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        with pytest.raises(tree.TreeError, match="is not a folder"):
            tree.write(tmp_path / "link", {"README.rst": "r\n"})


@pytest.fixture(scope="module")
def three_minors(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """PyPI-shaped wheels of torch 2.9.1, 2.7.1 and 2.6.0 with their companions."""
    root = tmp_path_factory.mktemp("three-minors")
    wheels = [*pypi_release(root / "a"),
              *pypi_release(root / "b", torch="2.7.1", vision="0.22.1", audio="2.7.1",
                            triton="3.3.1"),
              *pypi_release(root / "c", torch="2.6.0", vision="0.21.1", audio="2.6.0",
                            triton="3.2.0")]
    return list({w.name: w for w in wheels}.values())  # the nvidia wheels are in each


@pytest.fixture
def index(three_minors: list[Path]) -> Iterator[IndexServer]:
    with IndexServer(three_minors) as server:
        yield server


class TestRegenerateCommand:
    def test_refresh_records_the_newest_minors_then_writes(
            self, tmp_path: Path, index: IndexServer,
            capsys: pytest.CaptureFixture[str]) -> None:
        folder, recorded = tmp_path / "tree", tmp_path / "catalog"
        recorded.mkdir()
        assert _regenerate(folder, "--refresh", "--index", index.index_url,
                           "--catalog", str(recorded)) == 0
        assert sorted(p.name for p in recorded.iterdir()) == ["torch-2.7.1.json",
                                                              "torch-2.9.1.json"]
        out = capsys.readouterr().out
        assert "recorded in the catalog: torch 2.9.1, 2.7.1" in out
        # the wheels are cp312 and cp313: foss/2026.1's Python 3.14 fits neither release
        for release in ("2.9.1", "2.7.1"):
            assert f"torch {release}: foss/2025b, foss/2025a: 4 easystacks" in out
            assert len(list(folder.glob(f"p/PyTorch/PyTorch-{release}-foss-*-whl.eb"))) == 2
        assert not list(folder.rglob("*2.6.0*"))
        # the same tree again, offline, from what was recorded
        assert _regenerate(tmp_path / "again", "--catalog", str(recorded)) == 0
        assert _files(tmp_path / "again") == _files(folder)
        assert list(folder.glob("t/Triton/Triton-3.5.1-gfbf-2025b-CUDA-*-whl.eb"))  # upstream's
        assert "- foss/2025b cu128: Triton-3.5.1, PyTorch-2.9.1, torchvision-0.24.1, " \
               "torchaudio-2.9.1; easystack-torch-2.9.1-foss-2025b-cu128-aarch64.yaml, " \
               "easystack-torch-2.9.1-foss-2025b-cu128-x86_64.yaml\n" \
               in (folder / "README.rst").read_text()

    @pytest.mark.parametrize(("args", "message"), [
        (["easyconfigs", "regenerate"], "easyconfigs regenerate needs --dir DIR"),
        (["easyconfigs", "regenerate", "--dir", "{tmp}/t", "--index", "https://x.org/simple/"],
         "--index is for --refresh"),
        (["easyconfigs", "list", "--dir", "{tmp}"], "holds no easystack"),
        (["easyconfigs", "regenerate", "--dir", "{tmp}/t", "--catalog", "{tmp}/none"],
         "does not exist"),
        (["easyconfigs", "regenerate", "--dir", "{tmp}"], "belong to no easyconfigs tree"),
    ], ids=["no-dir", "index-offline", "no-easystack", "no-catalog", "foreign-folder"])
    def test_bad_usage_is_one_line(self, tmp_path: Path, args: list[str], message: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_path / "kept.txt").write_text("kept\n")
        assert main([a.format(tmp=tmp_path) for a in args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("torchstack: error: ") and err.count("\n") == 1
        assert message in err
        assert (tmp_path / "kept.txt").read_text() == "kept\n"
