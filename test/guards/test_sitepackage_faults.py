"""The SitePackage.lua hook on fingerprint files it cannot read, with the real Lmod.

A loaded module whose fingerprint file exists but cannot be read is refused (LmodError naming
the module, the file and what to do), never taken as "no fingerprint": otherwise a damaged
record would let an unsafe mix load. The tree: an unguarded PyTorch module on CUDA 13, a
cxx consumer built for a CPU torch (the victim, which does not fit it), its fingerprint file
damaged in every way below. Every command runs under a timeout (a FIFO must not block Lmod)
and a refused command leaves the environment exactly as it was.

Whole families run in one shell, one `module load` each: a refused command changes nothing,
so each starts from the same state. The decoder of the hook is also checked on its own with
Lmod's Lua interpreter against Python's json module (hypothesis).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.lmodrun import CU13, LMOD_INIT, Step, consumer, read_environment, write_module

from torchstack.fingerprint import compat
from torchstack.guards import halves, record
from torchstack.guards.sitepackage import (
    MAX_FINGERPRINT_BYTES,
    MAX_JSON_DEPTH,
    SITEPACKAGE_READER,
)

LUA = "/usr/bin/lua5.3"  # the interpreter Lmod 8.6 runs (its lmod script's #!)
TORCH = "PyTorch/b"
VICTIM_FP = consumer("cxx", "2.13.0", "==2.13.0", name="victim")  # needs CPU, not CU13
GOOD = json.dumps(compat.recorded(VICTIM_FP).to_json(), indent=2) + "\n"
REFUSED = "torchstack: cannot check the torch of loaded modules"


def run(tmp_path: Path, modulepath: Path, site: Path | None, *commands: str,
        timeout: float = 90, as_nobody: bool = False) -> list[Step]:
    """`module <command>` steps in one clean shell under a timeout; steps[0] is the start."""
    out = tmp_path / "out"
    out.mkdir(parents=True)
    user = []
    if as_nobody:
        out.chmod(0o777)
        user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    lines = [f"source {LMOD_INIT}", f"env -0 > {out}/env0"]
    for i, command in enumerate(commands, 1):
        lines.append(f"module {command} 2> {out}/err{i}; echo $? > {out}/rc{i}; "
                     f"env -0 > {out}/env{i}")
    env = {"HOME": str(out), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "MODULEPATH": str(modulepath)}
    if site is not None:
        env["LMOD_PACKAGE_PATH"] = str(site)
    shell([*user, "bash", "--noprofile", "--norc", "-c", "\n".join(lines)], env, timeout)
    steps = [Step(0, "", read_environment(out / "env0"))]
    for i in range(1, len(commands) + 1):
        steps.append(Step(int((out / f"rc{i}").read_text()),
                          (out / f"err{i}").read_text(errors="replace"),
                          read_environment(out / f"env{i}")))
    return steps


def shell(argv: list[str], env: dict[str, str], timeout: float) -> str:
    """Run in a session of its own; on timeout the whole session is killed (a blocked Lmod
    would otherwise outlive the test), then the timeout fails the test."""
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    assert process.returncode == 0
    return out


class Tree:
    """PyTorch/b (CU13, unguarded) and victim modules, each with its own installation."""

    def __init__(self, tmp_path: Path) -> None:
        self.root, self.software = tmp_path / "modules", tmp_path / "software"
        self.site = tmp_path / "site"
        self.site.mkdir()
        (self.site / "SitePackage.lua").write_text(halves.sitepackage_lua(), encoding="utf-8")
        prefix = self.software / TORCH
        record.write_fingerprint(prefix, CU13)
        write_module(self.root, TORCH, "lua", f'setenv("EBROOTPYTORCH", "{prefix}")\n')

    def victim(self, version: str) -> Path:
        """A victim module; returns where its fingerprint file goes (not written)."""
        prefix = self.software / "victim" / version
        (prefix / "easybuild").mkdir(parents=True)
        write_module(self.root, f"victim/{version}", "lua",
                     f'setenv("EBROOTVICTIM", "{prefix}")\n')
        return prefix / record.FINGERPRINT_FILE


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def assert_all_refused(tree: Tree, tmp_path: Path, cases: dict[str, Path],
                       timeout: float = 90) -> None:
    """With PyTorch/b loaded, `module load victim/<case>` is refused for every case."""
    names = list(cases)
    steps = run(tmp_path, tree.root, tree.site, f"load {TORCH}",
                *(f"load victim/{name}" for name in names), timeout=timeout)
    loaded = steps[1]
    assert loaded.rc == 0, loaded.err
    wrong = []
    for name, step in zip(names, steps[2:]):
        refused = (step.rc != 0 and REFUSED in step.message and str(cases[name]) in step.message
                   and f"victim/{name}" in step.message and "--record" in step.message
                   and step.env == loaded.env)
        if not refused:
            wrong.append(f"{name}: rc {step.rc}: {step.message[:300]}")
    assert not wrong, "\n".join(wrong)


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _with(**fields: object) -> str:
    data = compat.recorded(VICTIM_FP).to_json()
    data.update(fields)
    return json.dumps({k: v for k, v in data.items() if v is not _DROP})


_DROP = object()
CONTENT = {
    # not JSON at all
    "empty": "",
    "whitespace": " \n",
    "binary-elf": b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)),
    "nul-bytes": b"\0" * 100,
    "gzip": b"\x1f\x8b\x08\x00" + bytes(40),
    "latin1": GOOD.replace("victim", "v\u00efctim").encode("latin-1"),
    # JSON, but not strictly: the lenient json.lua of Lmod reads these
    "comment": "/* x */" + GOOD,
    "single-quotes": GOOD.replace('"', "'"),
    "no-commas": GOOD.replace(",\n", "\n"),
    "trailing-data": GOOD + "{}",
    "two-documents": GOOD + GOOD,
    "nan": _with(cuda_major=float("nan")),
    # nested far too deep, alone and inside a fingerprint
    "nested-arrays-10000": _nested(10_000),
    "nested-objects-10000": '{"a":' * 10_000 + "1" + "}" * 10_000,
    "nested-field-10000": GOOD.replace('"torch_libraries": [', '"x": ' + _nested(10_000)
                                       + ', "torch_libraries": ['),
    "nested-just-over": _with(torch_libraries=json.loads(_nested(MAX_JSON_DEPTH))),
    # JSON, wrong types or values
    "array": "[]",
    "string": '"torch-2.13.0-cxx11-cpu"',
    "number": "1",
    "null": "null",
    "schema-2": _with(schema=2),
    "schema-string": _with(schema="1"),
    "no-role": _with(role=_DROP),
    "role-number": _with(role=1),
    "role-other": _with(role="both"),
    "no-abi-tag": _with(abi_tag=_DROP),
    "abi-tag-null": _with(abi_tag=None),
    "abi-tag-list": _with(abi_tag=["torch-2.13.0-cxx11-cpu"]),
    "abi-tag-garbage": _with(abi_tag="torch-2.13.0\ncxx11"),
    "torch-string": _with(torch="2.13.0"),
    "torch-array": _with(torch=[]),
    "release-number": _with(torch={"release": 2.13}),
    "link-other": _with(link="cuda"),
    "link-null": _with(link=None),
    "requires-number": _with(requires_torch=2),
}


class TestBrokenContent:
    def test_every_kind_is_refused(self, tree: Tree, tmp_path: Path) -> None:
        cases = {}
        for name, text in CONTENT.items():
            path = tree.victim(name)
            path.write_bytes(text.encode() if isinstance(text, str) else text)
            cases[name] = path
        assert_all_refused(tree, tmp_path, cases)

    def test_truncated_at_every_offset(self, tree: Tree, tmp_path: Path) -> None:
        # every proper prefix of the document (without its final newline, still whole)
        whole = GOOD.rstrip("\n")
        cases = {}
        for offset in range(len(whole)):
            path = tree.victim(f"cut{offset}")
            path.write_text(whole[:offset], encoding="utf-8")
            cases[f"cut{offset}"] = path
        assert_all_refused(tree, tmp_path, cases, timeout=300)

    def test_random_bytes(self, tree: Tree, tmp_path: Path) -> None:
        rng = random.Random(13)
        cases = {}
        for i in range(60):
            path = tree.victim(f"random{i}")
            size = rng.choice([1, 7, 100, 1000, MAX_FINGERPRINT_BYTES])
            path.write_bytes(bytes(rng.randrange(256) for _ in range(size)))
            cases[f"random{i}"] = path
        assert_all_refused(tree, tmp_path, cases)

    def test_structure_bytes_replaced(self, tree: Tree, tmp_path: Path) -> None:
        # each quote, brace, bracket, colon and comma of the document replaced by a space
        whole = GOOD.encode()
        cases = {}
        for offset, byte in enumerate(whole):
            if chr(byte) in '"{}[]:,':
                path = tree.victim(f"hole{offset}")
                path.write_bytes(whole[:offset] + b" " + whole[offset + 1:])
                cases[f"hole{offset}"] = path
        assert_all_refused(tree, tmp_path, cases, timeout=300)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "inside.json").write_text(GOOD, encoding="utf-8")


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


def _dangling(path: Path) -> None:
    path.symlink_to("gone.json")


def _oversized(path: Path) -> None:
    # a valid fingerprint padded with whitespace past the bound
    path.write_text(GOOD + " " * MAX_FINGERPRINT_BYTES, encoding="utf-8")


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _socket(path: Path) -> None:
    server, here = socket.socket(socket.AF_UNIX), os.getcwd()
    os.chdir(path.parent)  # a relative name: the full path is too long for AF_UNIX
    try:
        server.bind(path.name)
    finally:
        os.chdir(here)
        server.close()


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("fifo"))
    path.symlink_to("fifo")


def _not_a_folder(path: Path) -> None:
    # <prefix>/easybuild is a file: the fingerprint cannot be looked for
    path.parent.rmdir()
    path.parent.write_text(GOOD, encoding="utf-8")


KINDS = {"fifo": _fifo, "folder": _folder, "symlink-loop": _loop, "dangling-symlink": _dangling,
         "oversized": _oversized, "dev-zero": _device, "socket": _socket,
         "symlink-to-fifo": _link_to_fifo, "easybuild-is-a-file": _not_a_folder}


class TestNotARegularFile:
    @pytest.mark.parametrize("kind", list(KINDS))
    def test_refused_without_blocking(self, tree: Tree, tmp_path: Path, kind: str) -> None:
        path = tree.victim(kind)
        KINDS[kind](path)
        assert_all_refused(tree, tmp_path, {kind: path}, timeout=30)


class TestPermissionDenied:
    @pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run Lmod as nobody")
    def test_unreadable_installation(self) -> None:
        assert shutil.which("setpriv"), "setpriv is not installed: run scripts/setup"
        # Lmod run as nobody; the victim's installation folder is root's alone
        top = Path(tempfile.mkdtemp(prefix="h-guard-"))
        try:
            top.chmod(0o755)
            tree = Tree(top)
            path = tree.victim("private")
            record.write_fingerprint(path.parents[1], VICTIM_FP)
            path.parents[1].chmod(0o700)
            steps = run(top, tree.root, tree.site, f"load {TORCH}", "load victim/private",
                        timeout=30, as_nobody=True)
            assert steps[1].rc == 0, steps[1].err
            assert steps[2].rc != 0 and REFUSED in steps[2].message, steps[2].err
            assert "Permission denied" in steps[2].message
            assert steps[2].env == steps[1].env
        finally:
            shutil.rmtree(top)


class TestStillAllowed:
    def test_good_files_no_file_and_repair(self, tree: Tree, tmp_path: Path) -> None:
        fits = consumer("stable", "2.14.1", ">=2.14", cuda_major=13, name="victim")
        record.write_fingerprint(tree.victim("fits").parents[1], fits)
        link = tree.victim("symlinked")  # a symlink to a good file is read through
        (link.parent / "real.json").write_text(
            json.dumps(compat.recorded(fits).to_json()), encoding="utf-8")
        link.symlink_to("real.json")
        tree.victim("no-record")  # modules that predate torchstack have no file
        write_module(tree.root, "victim/gone", "lua", 'setenv("EBROOTVICTIM", "/nonexistent")\n')
        record.write_fingerprint(tree.victim("misfit").parents[1], VICTIM_FP)
        steps = run(tmp_path, tree.root, tree.site, f"load {TORCH}", "load victim/fits",
                    "load victim/symlinked", "load victim/no-record", "load victim/gone",
                    "load victim/misfit", "unload PyTorch/b", timeout=60)
        assert [s.rc for s in steps[1:7]] == [0, 0, 0, 0, 0, 1], [s.err for s in steps]
        assert "would leave loaded modules on a torch they cannot use" in steps[6].message
        assert REFUSED not in steps[6].message
        assert steps[7].rc == 0

    def test_unload_and_list_with_an_unreadable_file_loaded(self, tree: Tree,
                                                           tmp_path: Path) -> None:
        # loaded without the hook; then read-only and repairing commands work, loads not
        os.mkfifo(tree.victim("fifo"))
        steps = run(tmp_path, tree.root, None, "load victim/fifo", timeout=30)
        assert steps[1].rc == 0
        inherited = {k: v for k, v in steps[1].env.items()
                     if k in ("LOADEDMODULES", "_LMFILES_", "EBROOTVICTIM")
                     or k.startswith(("_ModuleTable", "__LMOD"))}
        commands = {"list": True, "show victim/fifo": True, "unload victim": True,
                    "purge": True, f"load {TORCH}": False}
        for command, allowed in commands.items():
            again = tmp_path / command.replace(" ", "-").replace("/", "-")
            again.mkdir()
            script = f"source {LMOD_INIT}\nmodule {command} 2>&1\necho rc=$?\n"
            env = {"HOME": str(again), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                   "MODULEPATH": str(tree.root), "LMOD_PACKAGE_PATH": str(tree.site),
                   **inherited}
            done = shell(["bash", "--noprofile", "--norc", "-c", script], env, 30)
            assert ("rc=0" in done) == allowed, (command, done)
            assert (REFUSED in " ".join(done.split())) != allowed, (command, done)


# -- the hook's JSON decoder alone, in Lmod's Lua ------------------------------------------

_HARNESS = """
local function run()
%s
   return decode_json, fingerprint_problem
end
local decode, problem = run()
local text = io.read("a")
local v, why = decode(text)
if v == nil then io.write("REJECT ", why) return end
local function dump(x)
   if type(x) == "table" then
      local keys = {}
      for k in pairs(x) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      local out = {}
      for _, k in ipairs(keys) do out[#out + 1] = tostring(k) .. "=" .. dump(x[k]) end
      return "{" .. table.concat(out, ",") .. "}"
   end
   return type(x) .. ":" .. tostring(x)
end
io.write("ACCEPT ", problem(v) or "fingerprint", " ", dump(v))
"""


def decode_in_lua(data: bytes) -> str:
    done = subprocess.run([LUA, "-e", _HARNESS % SITEPACKAGE_READER], input=data,
                          capture_output=True, timeout=30, check=True)
    return done.stdout.decode("utf-8", errors="replace")


def _lua_dump(value: object) -> str:
    """The harness's dump of what Python's json decoded (strings: text; null: a table)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_lua_dump(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "{" + ",".join(f"{i}={_lua_dump(v)}" for i, v in
                              sorted(enumerate(value, 1), key=lambda p: str(p[0]))) + "}"
    if value is None:
        return "{}"
    if isinstance(value, bool):
        return f"boolean:{str(value).lower()}"
    if isinstance(value, int):
        return f"number:{value}"
    return f"string:{value}"


_SCALARS = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
            | st.text(st.characters(min_codepoint=1, max_codepoint=0x7ff), max_size=8))
_KEYS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=5)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(_KEYS, inner, max_size=3), max_leaves=12)
_LUA_SETTINGS = settings(max_examples=120, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow])


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


class TestDecoderAgreesWithPython:
    @_LUA_SETTINGS
    @given(value=_VALUES, indent=st.sampled_from([None, 2]))
    def test_valid_json_reads_as_python_reads_it(self, value: object, indent: int | None) -> None:
        text = json.dumps(value, indent=indent, ensure_ascii=indent is None)
        got = decode_in_lua(text.encode())
        assert got.startswith("ACCEPT "), (text, got)
        assert got.endswith(" " + _lua_dump(json.loads(text))), (text, got)

    @_LUA_SETTINGS
    @given(data=st.binary(max_size=200) | st.text(alphabet='{}[]":,0123456789tfrue -\\',
                                                  max_size=40).map(str.encode))
    def test_what_lua_accepts_python_accepts(self, data: bytes) -> None:
        got = decode_in_lua(data)
        if got.startswith("ACCEPT "):
            value = json.loads(data.decode("utf-8"))  # must not raise
            assert _depth(value) <= MAX_JSON_DEPTH

    @pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 100_000])
    def test_depth_bound(self, depth: int) -> None:
        got = decode_in_lua(_nested(depth).encode())
        if depth <= MAX_JSON_DEPTH:
            assert got.startswith("ACCEPT "), got
        else:
            assert got.startswith("REJECT ") and f"nested deeper than {MAX_JSON_DEPTH}" in got

    def test_the_good_fingerprint_is_one(self) -> None:
        assert decode_in_lua(GOOD.encode()).startswith("ACCEPT fingerprint ")
