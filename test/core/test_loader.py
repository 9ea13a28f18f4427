"""torchstack.elf.loader: one class per lookup step, on tiny libraries compiled here with gcc.

Where it can, each test also asks the real glibc (a child Python that dlopens the object and
reads /proc/self/maps) and checks that the model found the very file that ld.so loaded.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from torchstack.elf import loader
from torchstack.elf.loader import ElfKind, Resolution
from torchstack.elf.reader import ElfError

DEP_C = "int dep(void) { return 42; }\n"
USER_C = (  # uses libc too, so that DT_NEEDED is (libdep.so, libc.so.6)
    "#include <string.h>\nint dep(void);\n"
    "int user(const char *s) { return dep() + (int)strlen(s); }\n"
)
DT_SONAME, DT_RUNPATH = 14, 29


def gcc(*args: str | Path) -> None:
    result = subprocess.run(["gcc", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"gcc {args} failed: {result.stderr}")


def retag(path: Path, old: int, new: int) -> None:
    """Rewrite the d_tag of one dynamic entry (ld cannot emit DT_RPATH and DT_RUNPATH together)."""
    with open(path, "r+b") as handle:
        dynamic = ELFFile(handle).get_section_by_name(".dynamic")
        assert dynamic is not None
        offset, size = dynamic["sh_offset"], dynamic["sh_size"]
        for entry in range(offset, offset + size, 16):  # Elf64_Dyn: d_tag, d_val
            handle.seek(entry)
            (tag,) = struct.unpack("<q", handle.read(8))
            if tag == old:
                handle.seek(entry)
                handle.write(struct.pack("<q", new))
                return
    raise RuntimeError(f"no dynamic tag {old} in {path}")


def fake_elf32(path: Path) -> None:
    """A bare ELF32 i386 header: the class is all ld.so needs to reject it."""
    ident = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
    # e_type ET_DYN, e_machine EM_386, e_version, no entry, no headers, e_ehsize 52
    header = struct.pack("<HHIIIIIHHHHHH", 3, 3, 1, 0, 0, 0, 0, 52, 32, 0, 40, 0, 0)
    path.write_bytes(ident + header)


def place(source: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, folder / (name or source.name)))


def glibc_maps(objects: Sequence[Path], ld_library_path: Sequence[Path | str] = ()) -> list[str]:
    """Real paths of the files the real ld.so maps after dlopen of `objects`; [] if it fails."""
    code = (
        "import ctypes, sys\n"
        "for obj in sys.argv[1:]: ctypes.CDLL(obj)\n"
        "print(open('/proc/self/maps').read())\n"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(map(str, ld_library_path)))
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, objects)], env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        return []
    return sorted({line.split()[-1] for line in result.stdout.splitlines() if "/" in line})


def glibc_finds(objects: Sequence[Path], name: str, ld_library_path: Sequence[Path] = ()) -> str:
    """The real path of the file named `name` that the real ld.so loaded, "" when none."""
    found = [p for p in glibc_maps(objects, ld_library_path) if os.path.basename(p) == name]
    return found[0] if found else ""


def real(path: str | Path | None) -> str:
    return os.path.realpath(path) if path else ""


@dataclass(frozen=True)
class Built:
    root: Path
    dep: Path  # libdep.so, soname libdep.so, built once and copied where a test needs it
    dep32: Path  # a 32-bit libdep.so
    rpath: Path  # rpath/app/libuser.so: DT_RPATH $ORIGIN/../lib, with rpath/lib/libdep.so
    runpath: Path  # runpath/app/libuser.so: DT_RUNPATH ${ORIGIN}/../lib, runpath/lib/libdep.so
    both: Path  # both/app/libuser.so: DT_RPATH ../rlib and DT_RUNPATH ../lib, each with libdep
    plain: Path  # plain/libuser.so: no search path of its own
    slash: Path  # slash/libslash.so: DT_NEEDED is the absolute path of nosoname/libnosoname.so
    slash_gone: Path  # slash/libgone.so: DT_NEEDED is the absolute path of a deleted library
    slash_origin: Path  # slash/liborigin.so: DT_NEEDED is $ORIGIN/../dep/libdep.so
    tokens: Path  # tokens/app/libuser.so: DT_RPATH $ORIGIN/$LIB/${PLATFORM}
    ldpath: Path  # a folder with a libdep.so for LD_LIBRARY_PATH


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("loader")
    (root / "dep.c").write_text(DEP_C)
    (root / "user.c").write_text(USER_C)
    dep = root / "dep" / "libdep.so"
    dep.parent.mkdir()
    gcc("-shared", "-fPIC", "-Wl,-soname,libdep.so", "-o", dep, root / "dep.c")
    dep32 = root / "dep32" / "libdep.so"
    dep32.parent.mkdir()
    try:
        gcc("-m32", "-shared", "-fPIC", "-nostdlib", "-o", dep32, root / "dep.c")
    except RuntimeError:  # no 32-bit gcc support on this machine
        fake_elf32(dep32)

    def user(rel: str, *link: str) -> Path:
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        gcc("-shared", "-fPIC", "-o", out, root / "user.c", f"-L{dep.parent}", "-ldep", *link)
        return out

    rpath = user("rpath/app/libuser.so", "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib")
    runpath = user("runpath/app/libuser.so", "-Wl,--enable-new-dtags,-rpath,${ORIGIN}/../lib")
    both = user("both/app/libuser.so", "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../rlib",
                "-Wl,-soname,$ORIGIN/../lib")
    retag(both, DT_SONAME, DT_RUNPATH)
    for folder in ("rpath/lib", "runpath/lib", "both/lib", "both/rlib", "ldpath"):
        place(dep, root / folder)
    nosoname = root / "nosoname" / "libnosoname.so"
    nosoname.parent.mkdir()
    gcc("-shared", "-fPIC", "-o", nosoname, root / "dep.c")
    slash = root / "slash" / "libslash.so"
    slash.parent.mkdir()
    gcc("-shared", "-fPIC", "-o", slash, root / "user.c", nosoname)
    gone = root / "gone" / "libgone.so"
    gone.parent.mkdir()
    gcc("-shared", "-fPIC", "-o", gone, root / "dep.c")
    slash_gone = root / "slash" / "libgone.so"
    gcc("-shared", "-fPIC", "-o", slash_gone, root / "user.c", gone)
    shutil.rmtree(gone.parent)
    gone.parent.mkdir()
    # DT_NEEDED is the soname of the library linked against, so a soname can carry $ORIGIN
    gcc("-shared", "-fPIC", "-Wl,-soname,$ORIGIN/../dep/libdep.so", "-o", gone, root / "dep.c")
    slash_origin = root / "slash" / "liborigin.so"
    gcc("-shared", "-fPIC", "-o", slash_origin, root / "user.c", gone)
    shutil.rmtree(gone.parent)
    tokens = user("tokens/app/libuser.so",
                  "-Wl,--disable-new-dtags,-rpath,$ORIGIN/$LIB/${PLATFORM}")
    return Built(root, dep, dep32, rpath, runpath, both, user("plain/libuser.so"), slash,
                 slash_gone, slash_origin, tokens, root / "ldpath")


@pytest.fixture(scope="session")
def system() -> tuple[str, ...]:
    return loader.default_system_dirs()


VALUES: dict[str, str | None] = {"ORIGIN": "/o", "LIB": "lib64", "PLATFORM": "x86_64"}


class TestExpandTokens:
    @pytest.mark.parametrize(
        ("entry", "expected"),
        [
            ("$ORIGIN/../lib", "/o/../lib"),  # the usual wheel RPATH
            ("${ORIGIN}/../lib", "/o/../lib"),  # braced
            ("$ORIGIN", "/o"),  # the whole entry
            ("/a/$LIB/${PLATFORM}", "/a/lib64/x86_64"),  # several tokens
            ("${ORIGIN}x", "/ox"),  # braced tokens need no slash after them
            ("$ORIGINAL/lib", "$ORIGINAL/lib"),  # not a token: unbraced needs a slash or end
            ("$HOME/lib", "$HOME/lib"),  # unknown names stay literal
            ("/usr/lib", "/usr/lib"),  # nothing to expand
        ],
        ids=["origin", "braced", "alone", "several", "braced-suffix", "longer-name", "unknown",
             "plain"],
    )
    def test_expand(self, entry: str, expected: str) -> None:
        assert loader.expand_tokens(entry, VALUES) == expected

    def test_unknown_value_drops_the_entry(self) -> None:
        # ld.so drops a search path entry whose token has no value
        assert loader.expand_tokens("/x/$PLATFORM", {**VALUES, "PLATFORM": None}) is None


class TestTokenValues:
    def test_origin_is_the_loaded_path_folder_not_the_symlink_target(
        self, built: Built, tmp_path: Path
    ) -> None:
        link = tmp_path / "link" / "libuser.so"
        link.parent.mkdir()
        link.symlink_to(built.rpath)
        values = loader.token_values(loader.read_object(link))
        assert values["ORIGIN"] == str(link.parent)
        # glibc agrees: through the symlink, $ORIGIN/../lib does not exist
        assert loader.resolve_needed(link, system_dirs=())[0].path is None
        assert glibc_maps([link]) == []

    @pytest.mark.parametrize(("multiarch", "lib"), [(True, "lib/{}"), (False, "lib64")],
                             ids=["debian", "other"])
    def test_lib(self, built: Built, tmp_path: Path, multiarch: bool, lib: str) -> None:
        machine = platform.machine()
        triplet = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(machine)
        if triplet is None:
            pytest.skip(f"no multiarch triplet known for {machine}")
        if multiarch:
            (tmp_path / "usr/lib" / triplet).mkdir(parents=True)
        values = loader.token_values(loader.read_object(built.plain), root=str(tmp_path))
        assert values["LIB"] == lib.format(triplet)
        assert values["PLATFORM"] == machine

    def test_lib_and_platform_agree_with_glibc(self, built: Built) -> None:
        values = loader.token_values(loader.read_object(built.tokens))
        folder = built.tokens.parent / str(values["LIB"]) / str(values["PLATFORM"])
        placed = place(built.dep, folder)
        (resolution,) = [r for r in loader.resolve_needed(built.tokens) if r.needed == "libdep.so"]
        assert resolution == Resolution("libdep.so", str(placed), "rpath")
        assert glibc_finds([built.tokens], "libdep.so") == real(placed)


class TestIsCandidate:
    @pytest.mark.parametrize(
        ("which", "expected"),
        [
            ("dep", True),  # same class and machine
            ("dep32", False),  # 32-bit library for a 64-bit object
            ("text", False),  # not ELF
            ("empty", False),  # empty file
            ("folder", False),  # a folder of that name
            ("missing", False),  # nothing there
        ],
        ids=["same-kind", "elf32", "text", "empty", "folder", "missing"],
    )
    def test_candidate(self, built: Built, tmp_path: Path, which: str, expected: bool) -> None:
        (tmp_path / "text").write_text("INPUT(-lc)\n")
        (tmp_path / "empty").touch()
        (tmp_path / "folder").mkdir()
        path = {"dep": str(built.dep), "dep32": str(built.dep32)}.get(which, str(tmp_path / which))
        assert loader.is_candidate(path, loader.read_object(built.plain).kind) is expected

    def test_kind_of_the_32bit_library(self, built: Built) -> None:
        kind = loader.read_object(built.dep32).kind
        assert kind == ElfKind(32, True, "EM_386")


class TestFindInDirs:
    def test_skips_wrong_class_and_goes_on(self, built: Built, tmp_path: Path) -> None:
        kind = loader.read_object(built.plain).kind
        dirs = [str(tmp_path / "none"), str(built.dep32.parent), str(built.dep.parent)]
        assert loader.find_in_dirs("libdep.so", dirs, kind) == str(built.dep)

    def test_first_folder_wins(self, built: Built) -> None:
        kind = loader.read_object(built.plain).kind
        dirs = [str(built.ldpath), str(built.dep.parent)]
        assert loader.find_in_dirs("libdep.so", dirs, kind) == str(built.ldpath / "libdep.so")

    def test_nothing(self, built: Built) -> None:
        kind = loader.read_object(built.plain).kind
        assert loader.find_in_dirs("libdep.so", [], kind) is None


class TestRpath:
    def test_rpath_dirs_expanded(self, built: Built) -> None:
        obj = loader.read_object(built.rpath)
        assert obj.dynamic.rpath == ("$ORIGIN/../lib",)
        assert loader.rpath_dirs(obj) == (f"{built.rpath.parent}/../lib",)

    def test_resolves_with_origin(self, built: Built, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.DEBUG, logger="torchstack.elf.loader"):
            (resolution, _) = loader.resolve_needed(built.rpath, system_dirs=())
        assert resolution.step == "rpath"
        assert f"libdep.so -> {resolution.path} (rpath)" in caplog.text
        assert real(resolution.path) == real(built.root / "rpath/lib/libdep.so")
        assert glibc_finds([built.rpath], "libdep.so") == real(resolution.path)


class TestRunpath:
    def test_runpath_dirs_expanded(self, built: Built) -> None:
        obj = loader.read_object(built.runpath)
        assert obj.dynamic.rpath == ()
        assert loader.runpath_dirs(obj) == (f"{built.runpath.parent}/../lib",)

    def test_resolves_with_origin(self, built: Built) -> None:
        (resolution, _) = loader.resolve_needed(built.runpath, system_dirs=())
        assert resolution.step == "runpath"
        assert real(resolution.path) == real(built.root / "runpath/lib/libdep.so")
        assert glibc_finds([built.runpath], "libdep.so") == real(resolution.path)


class TestRpathIgnoredWithRunpath:
    def test_both_tags_read(self, built: Built) -> None:
        obj = loader.read_object(built.both)
        assert obj.dynamic.rpath == ("$ORIGIN/../rlib",)
        assert obj.dynamic.runpath == ("$ORIGIN/../lib",)
        assert loader.rpath_dirs(obj) == ()

    def test_resolves_through_runpath(self, built: Built) -> None:
        (resolution, _) = loader.resolve_needed(built.both, system_dirs=())
        assert resolution.step == "runpath"
        assert real(resolution.path) == real(built.root / "both/lib/libdep.so")
        assert glibc_finds([built.both], "libdep.so") == real(resolution.path)


class TestLdLibraryPath:
    @pytest.mark.parametrize(
        ("which", "step", "folder"),
        [
            ("rpath", "rpath", "rpath/lib"),  # DT_RPATH comes before LD_LIBRARY_PATH
            ("runpath", "ld_library_path", "ldpath"),  # LD_LIBRARY_PATH before DT_RUNPATH
            ("plain", "ld_library_path", "ldpath"),  # no search path of its own
        ],
        ids=["after-rpath", "before-runpath", "alone"],
    )
    def test_order(self, built: Built, which: str, step: str, folder: str) -> None:
        obj = getattr(built, which)
        (resolution, _) = loader.resolve_needed(obj, [str(built.ldpath)], system_dirs=())
        assert resolution.step == step
        assert real(resolution.path) == real(built.root / folder / "libdep.so")
        assert glibc_finds([obj], "libdep.so", [built.ldpath]) == real(resolution.path)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("/a:/b", ("/a", "/b")),  # colons
            ("/a;/b", ("/a", "/b")),  # ld.so also splits on semicolons
            ("/a::/b:", ("/a", "/b")),  # empty entries left out
            ("", ()),  # unset
        ],
        ids=["colon", "semicolon", "empty-entries", "empty"],
    )
    def test_split_search_path(self, value: str, expected: tuple[str, ...]) -> None:
        assert loader.split_search_path(value) == expected


class TestSystemDirs:
    @pytest.fixture
    def fake_root(self, built: Built, tmp_path: Path) -> Path:
        etc = tmp_path / "etc"
        (etc / "ld.so.conf.d").mkdir(parents=True)
        (etc / "ld.so.conf").write_text(
            "# comment\ninclude ld.so.conf.d/*.conf\nhwcap 0 nosegneg\n/opt/direct/\n"
            "include /etc/extra.conf /etc/ld.so.conf\n"
        )
        (etc / "ld.so.conf.d" / "b.conf").write_text("/opt/b\n")
        (etc / "ld.so.conf.d" / "a.conf").write_text("  /opt/a  # 32-bit libraries\n")
        (etc / "ld.so.conf.d" / "z.txt").write_text("/opt/not-included\n")
        (etc / "extra.conf").write_text("/opt/extra\n")
        for name in ("a", "b", "direct", "extra", "not-included"):
            (tmp_path / "opt" / name).mkdir(parents=True)
        (tmp_path / "usr/lib64").mkdir(parents=True)
        place(built.dep32, tmp_path / "opt/a")
        place(built.dep, tmp_path / "opt/b")
        return tmp_path

    def test_read_ld_so_conf(self, fake_root: Path) -> None:
        conf = loader.read_ld_so_conf(str(fake_root / "etc/ld.so.conf"), str(fake_root))
        # sorted include glob, then the folder line, then absolute includes (loop followed once)
        assert conf == [str(fake_root / "opt" / n) for n in ("a", "b", "direct", "extra")]

    def test_default_system_dirs(self, fake_root: Path) -> None:
        # ld.so.conf's folders first, then the existing trusted ones
        expected = [*(str(fake_root / "opt" / n) for n in ("a", "b", "direct", "extra")),
                    str(fake_root / "usr/lib64")]
        assert loader.default_system_dirs(fake_root) == tuple(expected)

    def test_missing_conf_leaves_trusted_dirs(self, tmp_path: Path) -> None:
        (tmp_path / "lib").mkdir()
        assert loader.default_system_dirs(tmp_path) == (str(tmp_path / "lib"),)

    def test_trusted_dirs(self) -> None:
        dirs = loader.trusted_dirs("/r")
        assert dirs[-4:] == ("/r/lib64", "/r/usr/lib64", "/r/lib", "/r/usr/lib")
        if platform.machine() == "x86_64":
            assert dirs[:2] == ("/r/lib/x86_64-linux-gnu", "/r/usr/lib/x86_64-linux-gnu")

    def test_resolves_through_the_system(self, built: Built, fake_root: Path) -> None:
        # opt/a holds a 32-bit libdep.so, skipped; opt/b the right one
        system = loader.default_system_dirs(fake_root)
        (resolution, _) = loader.resolve_needed(built.plain, system_dirs=system)
        assert resolution == Resolution("libdep.so", str(fake_root / "opt/b/libdep.so"), "system")

    def test_real_system_finds_libc_where_glibc_does(
        self, built: Built, system: tuple[str, ...]
    ) -> None:
        assert any(d.endswith("-linux-gnu") or d.endswith("lib64") for d in system)
        (_, libc) = loader.resolve_needed(built.plain, [str(built.ldpath)])
        assert libc.needed == "libc.so.6"
        assert libc.step == "system"
        assert glibc_finds([built.plain], "libc.so.6", [built.ldpath]) == real(libc.path)


class TestPreloaded:
    def test_preloaded_wins_over_every_search_path(self, built: Built) -> None:
        preloaded = {"libdep.so": str(built.dep)}
        (resolution, _) = loader.resolve_needed(built.rpath, preloaded=preloaded, system_dirs=())
        assert resolution == Resolution("libdep.so", str(built.dep), "preloaded")

    def test_preloaded_satisfies_an_object_without_paths(self, built: Built) -> None:
        (resolution, _) = loader.resolve_needed(
            built.plain, preloaded={"libdep.so": str(built.dep)}, system_dirs=()
        )
        assert resolution.step == "preloaded"
        # glibc agrees: loading libdep.so first lets plain/libuser.so load
        assert glibc_maps([built.plain]) == []
        assert glibc_finds([built.dep, built.plain], "libdep.so") == real(built.dep)


class TestSlashInNeeded:
    def test_path_used_directly(self, built: Built) -> None:
        target = built.root / "nosoname/libnosoname.so"
        (resolution, _) = loader.resolve_needed(built.slash, system_dirs=())
        assert resolution == Resolution(str(target), str(target), "path")
        assert glibc_finds([built.slash], "libnosoname.so") == real(target)

    def test_origin_expanded(self, built: Built) -> None:
        (resolution, _) = loader.resolve_needed(built.slash_origin, system_dirs=())
        assert resolution.needed == "$ORIGIN/../dep/libdep.so"
        assert resolution.step == "path"
        assert real(resolution.path) == real(built.dep)
        assert glibc_finds([built.slash_origin], "libdep.so") == real(built.dep)

    def test_missing_path_unresolved(self, built: Built) -> None:
        (resolution, _) = loader.resolve_needed(built.slash_gone, [str(built.ldpath)])
        assert resolution.path is None
        assert resolution.step == "unresolved"
        assert glibc_maps([built.slash_gone], [built.ldpath]) == []


class TestUnresolved:
    def test_reported_with_none(self, built: Built, system: tuple[str, ...]) -> None:
        (resolution, libc) = loader.resolve_needed(built.plain, system_dirs=system)
        assert resolution == Resolution("libdep.so", None, "unresolved")
        assert libc.path is not None
        assert glibc_maps([built.plain]) == []  # glibc fails to load it too

    def test_damaged_or_missing_object(self, tmp_path: Path) -> None:
        (tmp_path / "text.so").write_text("INPUT(-lc)\n")
        (tmp_path / "empty.so").touch()
        with pytest.raises(loader.LoaderError, match=r"cannot read '.*missing\.so': No such"):
            loader.resolve_needed(tmp_path / "missing.so")
        with pytest.raises(loader.LoaderError, match="Is a directory"):
            loader.resolve_needed(tmp_path)
        with pytest.raises(ElfError, match=r"text\.so' is not an ELF file"):
            loader.resolve_needed(tmp_path / "text.so")
        with pytest.raises(ElfError, match=r"empty\.so' is empty"):
            loader.resolve_needed(tmp_path / "empty.so")


class TestTree:
    @pytest.fixture
    def tree(self, built: Built, tmp_path: Path) -> Path:
        place(built.rpath, tmp_path / "app")
        place(built.dep, tmp_path / "lib")
        (tmp_path / "lib/libdep.so.1").symlink_to("libdep.so")  # same folder: checked once
        place(built.plain, tmp_path / "plain", "libplain.so.1.2")
        (tmp_path / "lib/libc.so").write_text("GROUP ( libc.so.6 )\n")  # a linker script
        (tmp_path / "lib/libdep.so.txt").write_text("not a library name\n")
        return tmp_path

    def test_iter_shared_objects(self, tree: Path, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.DEBUG, logger="torchstack.elf.loader"):
            found = list(loader.iter_shared_objects(tree))
        assert found == [str(tree / "app/libuser.so"), str(tree / "lib/libdep.so"),
                         str(tree / "plain/libplain.so.1.2")]
        assert "libc.so: named like a shared object but not ELF" in caplog.text

    def test_unresolved_in_tree(self, tree: Path, system: tuple[str, ...]) -> None:
        assert loader.unresolved_in_tree(tree, system_dirs=system) == [
            (str(tree / "plain/libplain.so.1.2"), "libdep.so")
        ]

    def test_tree_libraries_preloaded_on_request(
        self, tree: Path, system: tuple[str, ...]
    ) -> None:
        preloaded = loader.sonames_under(tree / "lib")
        assert preloaded == {"libdep.so": str(tree / "lib/libdep.so")}
        assert loader.unresolved_in_tree(tree, extra_preloaded=preloaded, system_dirs=system) == []

    def test_objects_read_before_are_not_read_again(
        self, tree: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        known = {"key": loader.read_object(tree / "lib/libdep.so")}

        def refuse(path: object) -> loader.SharedObject:
            raise AssertionError(f"read again: {path}")

        monkeypatch.setattr(loader, "read_object", refuse)
        assert loader.sonames_under(tree / "lib", known) == {
            "libdep.so": str(tree / "lib/libdep.so")}

    def test_ld_library_path(self, tree: Path, system: tuple[str, ...]) -> None:
        found = loader.unresolved_in_tree(tree, [str(tree / "lib")], system_dirs=system)
        assert found == []

    def test_symlink_from_another_folder_checked_on_its_own(
        self, tree: Path, system: tuple[str, ...]
    ) -> None:
        (tree / "elsewhere").mkdir()
        (tree / "elsewhere/libuser.so").symlink_to(tree / "app/libuser.so")
        # $ORIGIN/../lib from elsewhere/ is tree/lib too, so it resolves
        assert str(tree / "elsewhere/libuser.so") in loader.iter_shared_objects(tree)
        assert loader.unresolved_in_tree(tree / "elsewhere", system_dirs=system) == []


class TestRealTorch:
    def test_every_needed_under_torch_resolves(
        self, real_tree: object, system: tuple[str, ...]
    ) -> None:
        site = real_tree("torch-2.13.0")  # type: ignore[operator]
        objects = list(loader.iter_shared_objects(site / "torch"))
        assert any(p.endswith("libtorch_cpu.so") for p in objects)
        assert loader.unresolved_in_tree(site / "torch", system_dirs=system) == []
        steps = {r.step for p in objects for r in loader.resolve_needed(p, system_dirs=system)}
        assert steps <= {"rpath", "runpath", "system"}
