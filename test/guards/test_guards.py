"""torchstack.guards.halves: guard halves and SitePackage.lua, run by the real Lmod on trees.

Every module body comes from torchstack.guards.halves; the fingerprints are built directly. Each
scenario runs one clean `bash` (no inherited LOADEDMODULES, _LMFILES_ or __LMOD* variables,
MODULEPATH on the tree) and snapshots the whole environment after every `module` command, so
"a refused command leaves the environment as it was" is checked byte for byte.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import scantree
from support.lmodrun import (
    CU13,
    LMOD_INIT,
    Step,
    consumer,
    provider,
    read_environment,
    write_module,
)

from torchstack.cli import main
from torchstack.fingerprint import compat
from torchstack.fingerprint.fromjson import from_json
from torchstack.fingerprint.read import Fingerprint, FingerprintError
from torchstack.guards import halves, record
from torchstack.guards.halves import GuardError
from torchstack.guards.lua import EVALUATOR as LUA_EVALUATOR
from torchstack.guards.sitepackage import SITEPACKAGE_READER
from torchstack.guards.tcl import EVALUATOR as TCL_EVALUATOR

# the libtorch libraries of a consumer that links no GPU code (torchcodec 0.9's), and of one
# that does (torchvision 0.28's CUDA build)
CPU_LIBS = ("libc10.so", "libtorch.so", "libtorch_cpu.so")
CUDA_LIBS = (*CPU_LIBS, "libc10_cuda.so", "libtorch_cuda.so")


CPU = provider("2.13.0+cpu")
CU13_213 = provider("2.13.0+cu130", cuda="13.0")
PROVIDERS = {"PyTorch/a": CPU, "PyTorch/b": CU13, "PyTorch/c": provider("2.13.0+cpu"),
             "PyTorch/d": CU13_213}
# module -> (fingerprint, the torch module it was built with)
CONSUMERS = {
    "codec-cxx/cpu": (consumer("cxx", "2.13.0", "", libraries=CPU_LIBS), "PyTorch/a"),
    "vision-cxx/cu13-linked": (consumer("cxx", "2.13.0", "==2.13.0", cuda="13.0",
                                        libraries=CUDA_LIBS), "PyTorch/d"),
    "vision-cxx/cpu": (consumer("cxx", "2.13.0", "==2.13.0"), "PyTorch/a"),
    "vision-cxx/cu13": (consumer("cxx", "2.14.1", "==2.14.1", cuda="13.0"), "PyTorch/b"),
    "vision-stable/cpu": (consumer("stable", "2.13.0", ">=2.13"), "PyTorch/a"),
    "vision-stable/cu13": (consumer("stable", "2.14.1", ">=2.14", cuda_major=13), "PyTorch/b"),
    "pyonly/compatible": (consumer("python", None, "~=2.13.0"), "PyTorch/a"),
    "pyonly/any": (consumer("python", None, ""), "PyTorch/a"),
    "pyonly/not214": (consumer("python", None, "!=2.14.*"), "PyTorch/a"),
}


# -- running Lmod ------------------------------------------------------------------------


def run_module(tmp_path: Path, modulepath: Path, *commands: str,
               site_package: Path | None = None,
               inherited: dict[str, str] | None = None) -> list[Step]:
    """Steps of `module <command>` in one clean shell; steps[0] is the state before them.

    The shell inherits nothing but `inherited` (module state of an earlier shell).
    """
    out = tmp_path / "out"
    out.mkdir(parents=True)
    lines = [f"source {LMOD_INIT}", f"env -0 > {out}/env0"]
    for i, command in enumerate(commands, 1):
        lines.append(f"module {command} 2> {out}/err{i}; echo $? > {out}/rc{i}; "
                     f"env -0 > {out}/env{i}")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
           "MODULEPATH": str(modulepath), **(inherited or {})}
    if site_package is not None:
        env["LMOD_PACKAGE_PATH"] = str(site_package)
    subprocess.run(["bash", "--noprofile", "--norc", "-c", "\n".join(lines)], env=env,
                   check=True, timeout=120)
    steps = [Step(0, "", read_environment(out / "env0"))]
    for i in range(1, len(commands) + 1):
        rc = int((out / f"rc{i}").read_text())
        err = (out / f"err{i}").read_text(errors="replace")
        steps.append(Step(rc, err, read_environment(out / f"env{i}")))
    return steps


def provider_module(fp: Fingerprint, name: str, syntax: str) -> str:
    return halves.provider_lua(fp, name) if syntax == "lua" else halves.provider_tcl(fp, name)


def consumer_module(fp: Fingerprint, name: str, home: str, syntax: str) -> str:
    if syntax == "lua":
        return halves.consumer_lua(fp, name, home) + f'depends_on("{home}")\n'
    return halves.consumer_tcl(fp, name, home) + f"depends-on {home}\n"


SYNTAXES = [
    pytest.param(("lua", "lua"), id="lua"),
    pytest.param(("tcl", "tcl"), id="tcl"),
    pytest.param(("lua", "tcl"), id="lua-provider-tcl-consumer"),
    pytest.param(("tcl", "lua"), id="tcl-provider-lua-consumer"),
]


@pytest.fixture(params=SYNTAXES)
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The providers and consumers above, in the provider and consumer syntax of the param."""
    provider_syntax, consumer_syntax = request.param
    root = tmp_path / "modules"
    for name, fp in PROVIDERS.items():
        write_module(root, name, provider_syntax, provider_module(fp, name, provider_syntax))
    for name, (fp, home) in CONSUMERS.items():
        write_module(root, name, consumer_syntax, consumer_module(fp, name, home, consumer_syntax))
    return root


def assert_refused(before: Step, after: Step, *parts: str) -> None:
    """A refusal: non-zero status, every part in the message, the environment unchanged."""
    assert after.rc != 0
    for part in parts:
        assert part in after.message
    assert after.env == before.env
    assert after.torchstack() == before.torchstack()


# -- Lmod scenarios ----------------------------------------------------------------------


class TestPlainLoads:
    @pytest.mark.parametrize("name", list(CONSUMERS))
    def test_consumer_loads_its_torch_and_registers(self, tree: Path, tmp_path: Path,
                                                    name: str) -> None:
        fp, home = CONSUMERS[name]
        _, step = run_module(tmp_path, tree, f"load {name}")
        assert step.rc == 0, step.err
        assert step.loaded == {name, home}
        assert step.consumers == [halves.registration(fp, name, home)]
        assert step.env["TORCHSTACK_TORCH_ABI"] == PROVIDERS[home].abi_tag
        assert step.env["TORCHSTACK_TORCH_MODULE"] == home

    @pytest.mark.parametrize("name", list(PROVIDERS))
    def test_provider_alone(self, tree: Path, tmp_path: Path, name: str) -> None:
        _, step = run_module(tmp_path, tree, f"load {name}")
        assert step.rc == 0, step.err
        assert step.torchstack() == {"TORCHSTACK_TORCH_ABI": PROVIDERS[name].abi_tag,
                                     "TORCHSTACK_TORCH_MODULE": name}


# (consumer, torch it is loaded with, torch to change to, allowed)
SWAPS = [
    # cxx: another release and flavour, either direction
    pytest.param("vision-cxx/cpu", "PyTorch/a", "PyTorch/b", False, id="cxx-cpu-to-cu13"),
    pytest.param("vision-cxx/cu13", "PyTorch/b", "PyTorch/a", False, id="cxx-cu13-to-cpu"),
    # another installation with the same abi tag
    pytest.param("vision-cxx/cpu", "PyTorch/a", "PyTorch/c", True, id="cxx-same-tag"),
    # cxx linking no GPU library: its release and ABI on any flavour, never another release
    pytest.param("codec-cxx/cpu", "PyTorch/a", "PyTorch/d", True, id="cxx-gpu-free-to-cu13"),
    pytest.param("codec-cxx/cpu", "PyTorch/a", "PyTorch/b", False, id="cxx-gpu-free-release"),
    # cxx linking libtorch_cuda: not the CPU torch of its release
    pytest.param("vision-cxx/cu13-linked", "PyTorch/d", "PyTorch/a", False,
                 id="cxx-cuda-linked-to-cpu"),
    # stable, CPU only: any newer torch of any flavour
    pytest.param("vision-stable/cpu", "PyTorch/a", "PyTorch/b", True, id="stable-cpu-newer"),
    # stable with CUDA code: not an older CPU torch
    pytest.param("vision-stable/cu13", "PyTorch/b", "PyTorch/a", False, id="stable-cu13-older"),
    # python: the requirement decides
    pytest.param("pyonly/compatible", "PyTorch/a", "PyTorch/b", False, id="python-tilde"),
    pytest.param("pyonly/compatible", "PyTorch/a", "PyTorch/c", True, id="python-tilde-fits"),
    pytest.param("pyonly/not214", "PyTorch/a", "PyTorch/b", False, id="python-not-wildcard"),
    pytest.param("pyonly/any", "PyTorch/a", "PyTorch/b", True, id="python-any"),
]


class TestSwap:
    @pytest.mark.parametrize("how", ["swap", "load"])
    @pytest.mark.parametrize(("name", "old", "new", "allowed"), SWAPS)
    def test_swap(self, tree: Path, tmp_path: Path, how: str, name: str, old: str, new: str,
                  allowed: bool) -> None:
        command = f"swap {old} {new}" if how == "swap" else f"load {new}"  # load: auto-swap
        _, loaded, step = run_module(tmp_path, tree, f"load {name}", command)
        assert loaded.rc == 0 and loaded.loaded == {name, old}, loaded.err
        if allowed:
            assert step.rc == 0, step.err
            assert step.loaded == {name, new}
            assert step.env["TORCHSTACK_TORCH_ABI"] == PROVIDERS[new].abi_tag
            assert step.env["TORCHSTACK_TORCH_MODULE"] == new
            assert step.consumers == loaded.consumers
        else:
            fp = CONSUMERS[name][0]
            assert_refused(loaded, step, f"cannot load {new} ({PROVIDERS[new].abi_tag})",
                           f"{name} needs {fp.abi_tag}", f"use {old} instead",
                           f"or unload {name} first")


class TestConsumerRefusal:
    @pytest.mark.parametrize(
        ("torch", "name"),
        [
            # cxx consumer of the CPU torch, CUDA torch loaded
            pytest.param("PyTorch/b", "vision-cxx/cpu", id="cxx"),
            # GPU-free cxx consumer, a CUDA torch of another release loaded
            pytest.param("PyTorch/b", "codec-cxx/cpu", id="cxx-gpu-free"),
            # stable consumer with CUDA code, older CPU torch loaded
            pytest.param("PyTorch/a", "vision-stable/cu13", id="stable"),
            # python consumer whose requirement excludes the loaded release
            pytest.param("PyTorch/b", "pyonly/compatible", id="python"),
        ],
    )
    def test_refused(self, tree: Path, tmp_path: Path, torch: str, name: str) -> None:
        fp, home = CONSUMERS[name]
        _, loaded, step = run_module(tmp_path, tree, f"load {torch}", f"load {name}")
        assert loaded.rc == 0, loaded.err
        assert_refused(loaded, step, f"cannot load {name}: it needs {fp.abi_tag}",
                       f"but {torch} ({PROVIDERS[torch].abi_tag}) is loaded",
                       f"load {home} instead (module swap {torch} {home})")

    def test_same_tag_loaded_is_accepted(self, tree: Path, tmp_path: Path) -> None:
        # PyTorch/c has PyTorch/a's tag; depends_on then swaps c for a, which the guard allows
        _, _, step = run_module(tmp_path, tree, "load PyTorch/c", "load vision-cxx/cpu")
        assert step.rc == 0, step.err
        assert step.loaded == {"vision-cxx/cpu", "PyTorch/a"}
        assert step.env["TORCHSTACK_TORCH_ABI"] == CPU.abi_tag


class TestSeveralConsumers:
    def test_refusal_names_each_incompatible_consumer(self, tree: Path, tmp_path: Path) -> None:
        names = ["vision-cxx/cpu", "pyonly/compatible", "vision-stable/cpu"]
        *_, before, step = run_module(tmp_path, tree, *(f"load {n}" for n in names),
                                      "swap PyTorch/a PyTorch/b")
        assert before.rc == 0 and len(before.consumers) == 3, before.err
        assert_refused(before, step, "vision-cxx/cpu needs", "pyonly/compatible needs")
        assert "vision-stable/cpu needs" not in step.message  # it can use PyTorch/b

    def test_unload_reverses_registration(self, tree: Path, tmp_path: Path) -> None:
        cxx, stable = CONSUMERS["vision-cxx/cpu"], CONSUMERS["vision-stable/cpu"]
        steps = run_module(tmp_path, tree, "load vision-cxx/cpu", "load vision-stable/cpu",
                           "unload vision-cxx/cpu", "swap PyTorch/a PyTorch/b",
                           "unload vision-stable/cpu", "purge")
        assert [s.rc for s in steps] == [0] * 7, [s.err for s in steps]
        assert steps[2].consumers == [halves.registration(stable[0], "vision-stable/cpu",
                                                          stable[1]),
                                      halves.registration(cxx[0], "vision-cxx/cpu", cxx[1])]
        assert steps[3].consumers == [steps[2].consumers[0]]
        assert steps[4].loaded == {"vision-stable/cpu", "PyTorch/b"}  # cxx gone: swap allowed
        assert halves.CONSUMERS_VARIABLE not in steps[5].env
        assert steps[6].torchstack() == {} and steps[6].loaded == set()

    def test_registration_outlives_its_torch(self, tree: Path, tmp_path: Path) -> None:
        # no torch loaded at all: the provider half alone still refuses
        *_, before, step = run_module(tmp_path, tree, "load vision-cxx/cpu",
                                      "unload PyTorch/a", "load PyTorch/b")
        assert before.rc == 0 and "TORCHSTACK_TORCH_ABI" not in before.env, before.err
        assert_refused(before, step, "vision-cxx/cpu needs", "use PyTorch/a instead")

    @pytest.mark.parametrize("command", ["show PyTorch/b", "list", "avail", "spider PyTorch"])
    def test_read_only_commands_pass(self, tree: Path, tmp_path: Path, command: str) -> None:
        *_, before, step = run_module(tmp_path, tree, "load vision-cxx/cpu", command)
        assert step.rc == 0, step.err
        assert step.loaded == before.loaded  # avail may refresh its cache times in Lmod's table
        assert step.torchstack() == before.torchstack()


# -- escaping ----------------------------------------------------------------------------

NASTY = [
    pytest.param('say "hi"', id="double-quotes"),
    pytest.param("back\\slash\\", id="backslashes"),
    pytest.param("]] ]=] [[x]] [==[", id="brackets"),
    pytest.param("$HOME ${x} $(id) `id`", id="dollars"),
    pytest.param("{unbalanced { } }}", id="braces"),
    pytest.param("two\nlines\tand tab", id="newline-tab"),
    pytest.param("\x01\x7f bell\a", id="control"),
    pytest.param("100% %d é ü 😀", id="percent-unicode"),
    pytest.param("", id="empty"),
]


class TestLuaString:
    @pytest.mark.parametrize("text", NASTY)
    def test_lua_reads_back_the_text(self, text: str) -> None:
        out = subprocess.run(["lua5.3", "-e", f"io.write({halves.lua_string(text)})"],
                             capture_output=True, check=True).stdout
        assert out.decode() == text


class TestTclString:
    @pytest.mark.parametrize("text", NASTY)
    def test_tcl_reads_back_the_text(self, text: str, tmp_path: Path) -> None:
        # inside a braced body, where an unescaped brace would break the script
        script = tmp_path / "t.tcl"
        script.write_text("fconfigure stdout -translation binary -encoding utf-8\n"
                          f"if {{1}} {{ puts -nonewline {halves.tcl_string(text)} }}\n",
                          encoding="utf-8")
        out = subprocess.run(["tclsh", str(script)], capture_output=True, check=True).stdout
        assert out.decode() == text


class TestEscapingThroughLmod:
    @pytest.mark.parametrize("syntax", ["lua", "tcl"])
    def test_nasty_tag_and_name_reach_the_environment(self, tmp_path: Path,
                                                      syntax: str) -> None:
        # not here: newlines (Lmod cuts a value at the first); through Lmod's Tcl reader, tabs
        # (written as an invalid Lua escape), trailing blanks (trimmed), characters beyond the
        # BMP (passed on as CESU-8)
        tag = 'torch-2.13.0-cxx11-cpu "q" \\ $x [y] {z} ]==] %d é'
        name = "PyTorch/odd $(id) `id` [x] {y};| ü"
        fp = Fingerprint("provider", "torch", "2.13.0", CPU.torch, None, None, None, tag)
        root = tmp_path / "modules"
        write_module(root, "PyTorch/odd", syntax, provider_module(fp, name, syntax))
        _, step = run_module(tmp_path, root, "load PyTorch/odd")
        assert step.rc == 0, step.err
        assert step.torchstack() == {"TORCHSTACK_TORCH_ABI": tag, "TORCHSTACK_TORCH_MODULE": name}


# -- the requirement encodings -----------------------------------------------------------


class TestSpecifierClauses:
    @pytest.mark.parametrize(
        ("specifier", "expected"),
        [
            ("", ()),
            # an exact pin, local tag dropped
            ("==2.13.0+cpu", ("==2.13.0",)),
            # compatible release: a >= / < pair, for 3 and 2 components
            ("~=2.13.0", (">=2.13.0", "<2.14")),
            ("~=2.13", (">=2.13", "<3")),
            # prefix match
            ("==2.13.*", (">=2.13", "<2.14")),
            ("!=2.14.*", ("!=2.14.*",)),
            # plain comparisons, sorted; pre-release segments dropped
            ("<2.15,>=2.13.0rc1", ("<2.15", ">=2.13.0")),
            ("!=2.13.1,>2.12", ("!=2.13.1", ">2.12")),
            # arbitrary equality
            ("===2.13.0", ("==2.13.0",)),
        ],
    )
    def test_clauses(self, specifier: str, expected: tuple[str, ...]) -> None:
        assert halves.specifier_clauses(specifier) == expected

    @pytest.mark.parametrize("specifier", ["~=2", ">=two", "torch>=2"])
    def test_invalid(self, specifier: str) -> None:
        with pytest.raises(GuardError, match="invalid torch requirement"):
            halves.specifier_clauses(specifier)


class TestRequirement:
    @pytest.mark.parametrize(
        ("fp", "payload"),
        [
            # cxx: the exact tag (GPU code linked, or libraries not recorded)
            (consumer("cxx", "2.13.0", "==2.13.0"), "torch-2.13.0-cxx11-cpu"),
            (consumer("cxx", "2.13.0", "", cuda="13.0", libraries=CUDA_LIBS),
             "torch-2.13.0-cxx11-cu13"),
            # cxx linking no GPU library: release and ABI as clauses, any flavour
            (consumer("cxx", "2.13.0", ">=2.13", libraries=CPU_LIBS),
             "torch-2.13.0-cxx11-cpu,release=2.13.0,abi=cxx11,>=2.13"),
            (consumer("cxx", "2.13.0", "", cxx11_abi=False, libraries=CPU_LIBS),
             "torch-2.13.0-precxx11-cpu,release=2.13.0,abi=precxx11"),
            # ... of unknown release: the exact tag, which no torch has
            (consumer("cxx", None, "", libraries=CPU_LIBS), "torch-unknown-cxx11-cpu"),
            # stable without GPU code: newer release, any flavour, then its requirement
            (consumer("stable", "2.13.0", ">=2.13"), "torch-2.13.0-stable-cpu,>=2.13.0,>=2.13"),
            # stable with GPU code: the flavour too
            (consumer("stable", "2.14.1", "", cuda_major=13),
             "torch-2.14.1-stable-cu13,>=2.14.1,flavour=cu13"),
            # python: only the requirement
            (consumer("python", None, "~=2.13.0"), "torch-python,>=2.13.0,<2.14"),
        ],
    )
    def test_payload(self, fp: Fingerprint, payload: str) -> None:
        assert halves.requirement(fp).payload == payload

    def test_provider_is_refused(self) -> None:
        with pytest.raises(GuardError, match=re.escape("torch 2.13.0+cpu is a torch provider")):
            halves.requirement(CPU)


class TestRegistration:
    def test_entry(self) -> None:
        fp = consumer("cxx", "2.13.0", "==2.13.0")
        assert halves.registration(fp, "tv/0.28.0", "PyTorch/2.13.0") == (
            "tv/0.28.0|cxx|torch-2.13.0-cxx11-cpu|PyTorch/2.13.0")

    @pytest.mark.parametrize(
        "module",
        [
            pytest.param("tv 1", id="blank"),
            pytest.param("tv;1", id="delimiter"),
            pytest.param("tv|1", id="field-separator"),
            pytest.param('tv"1', id="quote"),
            pytest.param("tv\\1", id="backslash"),
            pytest.param("tv//1", id="double-slash"),
            pytest.param("./tv", id="dot-component"),
            pytest.param("~tv/1", id="tilde"),
            pytest.param("tv/", id="trailing-slash"),
            pytest.param("", id="empty"),
        ],
    )
    def test_names_lmod_would_alter(self, module: str) -> None:
        fp = consumer("cxx", "2.13.0", "==2.13.0")
        with pytest.raises(GuardError, match=re.escape(f"module {module!r}")):
            halves.registration(fp, module, "PyTorch/a")

    def test_every_problem_at_once(self) -> None:
        fp = consumer("cxx", "2.13.0", "==2.13.0")
        with pytest.raises(GuardError, match=r"module 'a b'.*provider module 'P;1'"):
            halves.consumer_lua(fp, "a b", "P;1")

    def test_roles(self) -> None:
        with pytest.raises(GuardError, match="not a provider"):
            halves.provider_tcl(consumer("python", None, ""), "x/1")
        with pytest.raises(GuardError, match="not a consumer"):
            halves.consumer_tcl(CPU, "x/1", "PyTorch/a")


# -- the evaluators agree with compat ----------------------------------------------------

MATRIX_PROVIDERS = [CPU, CU13, CU13_213, provider("2.13.0+cpu", cxx11_abi=False),
                    provider("2.12.0+cpu"), provider("2.13.0+rocm6.4", hip="6.4.1"),
                    provider("2.14.0a0+git1234567")]
MATRIX_CONSUMERS = [fp for fp, _ in CONSUMERS.values()] + [
    consumer("python", None, "==2.13.*"),
    consumer("python", None, ">2.13.0,<=2.14.1"),
    consumer("stable", "2.13.0", ">=2.13", cuda="13.0"),
    consumer("stable", "2.13.0", ">=2.13", cuda="13.0", libraries=("libtorch.so",)),
    consumer("cxx", "2.13.0", "", cxx11_abi=False, libraries=CPU_LIBS),
    consumer("cxx", "2.14.0", "<2.15", libraries=CPU_LIBS),
    consumer("cxx", None, "", libraries=CPU_LIBS),
    consumer("cxx", "2.14.0a0", "", libraries=CPU_LIBS),
]


def _matrix() -> list[tuple[Fingerprint, Fingerprint]]:
    return [(p, c) for p in MATRIX_PROVIDERS for c in MATRIX_CONSUMERS]


def _verdicts(command: list[str], program: str, tmp_path: Path) -> list[bool]:
    script = tmp_path / "evaluate"
    script.write_text(program, encoding="utf-8")
    lines = "".join(f"{p.abi_tag}\t{c.link}\t{halves.requirement(c).payload}\n"
                    for p, c in _matrix())
    out = subprocess.run([*command, str(script)], input=lines, capture_output=True,
                         text=True, check=True).stdout
    return [v == "1" for v in out.split()]


class TestEvaluatorsAgreeWithCompat:
    @pytest.mark.parametrize(
        ("command", "program"),
        [
            pytest.param(["lua5.3"], LUA_EVALUATOR + (
                'for line in io.lines() do\n'
                '   local tag, kind, payload = line:match("^(.-)\\t(.-)\\t(.*)$")\n'
                '   print(fits(tag, kind, payload) and "1" or "0")\n'
                'end\n'), id="lua"),
            pytest.param(["tclsh"], TCL_EVALUATOR + (
                "while {[gets stdin line] >= 0} {\n"
                "    lassign [split $line \\t] tag kind payload\n"
                "    puts [torchstack_fits $tag $kind $payload]\n"
                "}\n"), id="tcl"),
        ],
    )
    def test_matrix(self, command: list[str], program: str, tmp_path: Path) -> None:
        expected = [compat.check(p, c).compatible for p, c in _matrix()]
        got = _verdicts(command, program, tmp_path)
        wrong = [f"{p.version} / {c.abi_tag} {c.requires_torch}"
                 for (p, c), e, g in zip(_matrix(), expected, got) if e != g]
        assert len(got) == len(expected) and not wrong

    def test_local_segment_of_a_requirement_is_ignored(self, tmp_path: Path) -> None:
        # the one known difference: compat refuses 2.13.0+rocm6.4 for ==2.13.0+cpu, the guards
        # compare releases only
        rocm, pinned = provider("2.13.0+rocm6.4", hip="6.4.1"), consumer("python", None,
                                                                          "==2.13.0+cpu")
        assert not compat.check(rocm, pinned).compatible
        assert halves.requirement(pinned).payload == "torch-python,==2.13.0"


# The SitePackage hook's path: a consumer's recorded JSON, read by the hook's reader, its payload
# joined from the recorded clauses, evaluated by the shared evaluator.
_SITEPACKAGE_DRIVER = """
local function run()
%s
%s
   return decode_json, fingerprint_problem, payload_of, fits
end
local decode, problem, payload_of, fits = run()
for line in io.lines() do
   local tag, text = line:match("^(.-)\t(.*)$")
   local fp = decode(text)
   local why = problem(fp)
   if why then print("refused:" .. why:gsub(" ", "_"))
   else print(fits(tag, fp.link, payload_of(fp)) and "1" or "0") end
end
"""


def _hook_verdicts(pairs: list[tuple[str, dict[str, object]]], tmp_path: Path) -> list[str]:
    """What the SitePackage hook's code says of each (provider tag, consumer JSON)."""
    script = tmp_path / "hook.lua"
    script.write_text(_SITEPACKAGE_DRIVER % (LUA_EVALUATOR, SITEPACKAGE_READER),
                      encoding="utf-8")
    lines = "".join(f"{tag}\t{json.dumps(data)}\n" for tag, data in pairs)
    out = subprocess.run(["lua5.3", str(script)], input=lines, capture_output=True,
                         text=True, check=True).stdout
    return out.split()


class TestRecordedClauses:
    """The guard clauses are recorded with a consumer's fingerprint; the hook only evaluates."""

    def test_sitepackage_agrees_with_compat(self, tmp_path: Path) -> None:
        expected = ["1" if compat.check(p, c).compatible else "0" for p, c in _matrix()]
        got = _hook_verdicts([(p.abi_tag, compat.recorded(c).to_json()) for p, c in _matrix()],
                             tmp_path)
        wrong = [f"{p.version} / {c.abi_tag} {c.requires_torch}: {g}"
                 for (p, c), e, g in zip(_matrix(), expected, got) if e != g]
        assert len(got) == len(expected) and not wrong

    def test_the_hook_evaluates_the_recorded_clauses_not_the_rules(self, tmp_path: Path) -> None:
        # a python consumer needing ~=2.13.0, recorded with clauses that say 2.12 only: the
        # hook follows the record (it derives nothing), so 2.12 fits and 2.13 does not
        pinned = consumer("python", None, "~=2.13.0").to_json() | {"guard_clauses": ["<2.13"]}
        old, cpu = provider("2.12.0+cpu"), CPU
        assert _hook_verdicts([(old.abi_tag, pinned), (cpu.abi_tag, pinned)],
                              tmp_path) == ["1", "0"]

    def test_the_guards_carry_the_recorded_clauses(self) -> None:
        recorded = from_json(consumer("python", None, "~=2.13.0").to_json()
                             | {"guard_clauses": ["<2.13"]})
        assert halves.requirement(recorded).payload == "torch-python,<2.13"

    def test_a_file_without_them_is_derived_in_python(self) -> None:
        for fp, _ in CONSUMERS.values():
            older = from_json(fp.to_json())  # as a file from before guard clauses
            assert older.guard_clauses is None
            assert halves.requirement(older) == halves.requirement(fp)
            assert halves.requirement(fp).clauses == compat.guard_clauses(fp)

    def test_a_file_without_them_is_refused_by_the_hook(self, tmp_path: Path) -> None:
        data = CONSUMERS["vision-cxx/cpu"][0].to_json()
        assert "guard_clauses" not in data
        assert _hook_verdicts([(CPU.abi_tag, data)], tmp_path) == [
            "refused:records_no_guard_clauses_(an_older_torchstack_wrote_it)"]

    @pytest.mark.parametrize(
        ("clauses", "why"),
        [
            pytest.param(["release=2.13.0,abi=cxx11"], "not a guard clause", id="separator"),
            pytest.param(["python>=2"], "not a guard clause", id="unknown"),
            pytest.param(["flavour=cu13;x"], "not a guard clause", id="delimiter"),
            pytest.param("release=2.13.0", "mistypes a field: guard_clauses", id="string"),
            pytest.param([3], "mistypes a field: guard_clauses", id="number"),
        ],
    )
    def test_malformed_clauses_are_refused(self, clauses: object, why: str,
                                           tmp_path: Path) -> None:
        data = CONSUMERS["vision-cxx/cpu"][0].to_json() | {"guard_clauses": clauses}
        with pytest.raises(FingerprintError, match=why):
            from_json(data)
        refused = _hook_verdicts([(CPU.abi_tag, data)], tmp_path)
        assert refused == ["refused:has_a_malformed_guard_clauses"]

    def test_a_provider_records_none(self) -> None:
        assert "guard_clauses" not in CPU.to_json()
        with pytest.raises(FingerprintError, match="a provider records no guard_clauses"):
            from_json(CPU.to_json() | {"guard_clauses": []})


# -- SitePackage.lua ---------------------------------------------------------------------

# Modules without guards: EasyBuild's $EBROOT<NAME> and the fingerprint file only.
UNGUARDED_PROVIDERS = {"PyTorch/a": CPU, "PyTorch/b": CU13, "PyTorch/c": provider("2.13.0+cpu"),
                       "PyTorch/d": CU13_213}
UNGUARDED_CONSUMERS = {
    "torchcodec/0.9": (consumer("cxx", "2.13.0", "", libraries=CPU_LIBS), "EBROOTTORCHCODEC"),
    "torchvision/0.28.0": (consumer("cxx", "2.13.0", "==2.13.0"), "EBROOTTORCHVISION"),
    "PyTorch-Geometric/2.7": (consumer("python", None, "~=2.13.0"),
                              "EBROOTPYTORCHMINGEOMETRIC"),
    "tensordict/0.9": (consumer("stable", "2.14.1", ">=2.14", cuda_major=13), "EBROOTTENSORDICT"),
}


@pytest.fixture()
def site_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A tree of unguarded modules (plus one guarded consumer), and the SitePackage folder."""
    root, installs = tmp_path / "modules", tmp_path / "software"
    for name, fp in UNGUARDED_PROVIDERS.items():
        prefix = installs / name
        record.write_fingerprint(prefix, fp)
        write_module(root, name, "lua", f'setenv("EBROOTPYTORCH", "{prefix}")\n')
    homes = {"torchvision/0.28.0": "PyTorch/a", "PyTorch-Geometric/2.7": "PyTorch/a",
             "tensordict/0.9": "PyTorch/b", "torchcodec/0.9": "PyTorch/a"}
    for name, (fp, variable) in UNGUARDED_CONSUMERS.items():
        prefix = installs / name
        record.write_fingerprint(prefix, fp)
        body = f'setenv("{variable}", "{prefix}")\ndepends_on("{homes[name]}")\n'
        write_module(root, name, "lua", body)
    write_module(root, "other/1.0", "lua", 'setenv("OTHER", "1")\n')
    guarded = consumer("cxx", "2.13.0", "==2.13.0", name="guarded")
    write_module(root, "guarded/1.0", "lua", consumer_module(guarded, "guarded/1.0",
                                                             "PyTorch/a", "lua"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "SitePackage.lua").write_text(halves.sitepackage_lua(), encoding="utf-8")
    return root, site


class TestSitePackage:
    @pytest.mark.parametrize(
        ("name", "command", "allowed"),
        [
            # cxx consumer: swap, auto-swap, same tag
            pytest.param("torchvision/0.28.0", "swap PyTorch/a PyTorch/b", False, id="cxx-swap"),
            pytest.param("torchvision/0.28.0", "load PyTorch/b", False, id="cxx-autoswap"),
            pytest.param("torchvision/0.28.0", "swap PyTorch/a PyTorch/c", True, id="cxx-same"),
            # cxx consumer that links no GPU library: the CUDA torch of its release, not another
            pytest.param("torchcodec/0.9", "swap PyTorch/a PyTorch/d", True, id="cxx-gpu-free"),
            pytest.param("torchcodec/0.9", "swap PyTorch/a PyTorch/b", False,
                         id="cxx-gpu-free-release"),
            # python consumer: '-' in the name ($EBROOTPYTORCHMINGEOMETRIC), ~= requirement
            pytest.param("PyTorch-Geometric/2.7", "load PyTorch/b", False, id="python"),
            pytest.param("PyTorch-Geometric/2.7", "load PyTorch/c", True, id="python-fits"),
            # stable consumer with CUDA code
            pytest.param("tensordict/0.9", "load PyTorch/a", False, id="stable"),
            # a guarded consumer on an unguarded torch: its registration is checked
            pytest.param("guarded/1.0", "load PyTorch/b", False, id="registration"),
        ],
    )
    def test_finalize(self, site_tree: tuple[Path, Path], tmp_path: Path, name: str,
                      command: str, allowed: bool) -> None:
        root, site = site_tree
        _, loaded, step = run_module(tmp_path, root, f"load {name}", command,
                                     site_package=site)
        assert loaded.rc == 0, loaded.err
        if allowed:
            assert step.rc == 0, step.err
        else:
            assert_refused(loaded, step, "torchstack: this command would leave",
                           f"{name} needs")

    def test_without_it_the_unguarded_swap_passes(self, site_tree: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
        root, _ = site_tree
        *_, step = run_module(tmp_path, root, "load torchvision/0.28.0", "load PyTorch/b")
        assert step.rc == 0 and step.loaded == {"torchvision/0.28.0", "PyTorch/b"}

    def test_message_names_both_tags(self, site_tree: tuple[Path, Path],
                                     tmp_path: Path) -> None:
        root, site = site_tree
        *_, step = run_module(tmp_path, root, "load torchvision/0.28.0", "load PyTorch/b",
                              site_package=site)
        assert (f"torchvision/0.28.0 needs {CPU.abi_tag}, not PyTorch/b ({CU13.abi_tag})"
                in step.message)

    @pytest.mark.parametrize(
        ("command", "allowed"),
        [
            pytest.param("list", True, id="list"),
            pytest.param("avail", True, id="avail"),
            pytest.param("spider PyTorch", True, id="spider"),
            pytest.param("show PyTorch/a", True, id="show"),
            pytest.param("unload torchvision", True, id="unload"),
            # a command that loads is refused while the mix stays broken...
            pytest.param("load other/1.0", False, id="load-while-broken"),
            # ...and allowed when it repairs it (depends_on swaps back to PyTorch/a)
            pytest.param("load guarded/1.0", True, id="load-that-repairs"),
        ],
    )
    def test_in_a_broken_environment(self, site_tree: tuple[Path, Path], tmp_path: Path,
                                     command: str, allowed: bool) -> None:
        # the mix is made without the SitePackage, then each command runs with it
        root, site = site_tree
        out = run_module(tmp_path, root, "load torchvision/0.28.0", "load PyTorch/b")
        broken = out[-1]
        assert broken.rc == 0
        inherited = {k: v for k, v in broken.env.items()
                     if k in ("LOADEDMODULES", "_LMFILES_", "EBROOTTORCHVISION",
                              "EBROOTPYTORCH") or k.startswith(("_ModuleTable", "__LMOD"))}
        _, step = run_module(tmp_path / "again", root, command, site_package=site,
                             inherited=inherited)
        assert (step.rc == 0) == allowed, step.err


class TestOlderRecords:
    def test_refused_until_recorded_again(self, tmp_path: Path) -> None:
        """A consumer recorded before fingerprints carried guard clauses: the hook refuses
        it and says how to repair it; `torchstack scan --record` writes the clauses."""
        root = tmp_path / "easybuild"
        software = root / "software"
        for name, fp in {"PyTorch/2.13.0": CPU, "PyTorch/2.14.1": CU13}.items():
            scantree.write_module(root, name, "lua",
                                  f'setenv("EBROOTPYTORCH", "{software / name}")\n')
            record.write_fingerprint(software / name, fp)
        vision = "torchvision/0.28.0"
        fp = CONSUMERS["vision-cxx/cpu"][0]
        scantree.write_module(root, vision, "lua",
                              f'setenv("EBROOTTORCHVISION", "{software / vision}")\n'
                              'depends_on("PyTorch/2.13.0")\n')
        older = fp.to_json()  # no guard clauses, as before they were recorded
        (software / vision / record.FINGERPRINT_FILE).parent.mkdir(parents=True)
        (software / vision / record.FINGERPRINT_FILE).write_text(json.dumps(older),
                                                                   encoding="utf-8")
        site = tmp_path / "site"
        site.mkdir()
        (site / "SitePackage.lua").write_text(halves.sitepackage_lua(), encoding="utf-8")
        modules = root / "modules" / "all"

        before, step = run_module(tmp_path / "older", modules, f"load {vision}",
                                  site_package=site)
        assert_refused(before, step, "records no guard_clauses (an older torchstack wrote it): "
                       "record it again (torchstack scan INSTALLPATH --record)")

        done = subprocess.run([sys.executable, "-m", "torchstack", "scan", str(root),
                               "--record"], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert f"recorded {vision}" in done.stdout
        again = record.read_fingerprint(software / vision)
        assert again == fp and again.guard_clauses == compat.guard_clauses(fp)

        _, loaded, swapped = run_module(tmp_path / "again", modules, f"load {vision}",
                                        "swap PyTorch/2.13.0 PyTorch/2.14.1",
                                        site_package=site)
        assert loaded.rc == 0, loaded.err
        assert_refused(loaded, swapped, f"{vision} needs {CPU.abi_tag}")


class TestCli:
    def test_prints_the_sitepackage(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["lmod-sitepackage"]) == 0
        out = capsys.readouterr().out
        assert out == halves.sitepackage_lua()
        assert 'hook.register("finalize"' in out
