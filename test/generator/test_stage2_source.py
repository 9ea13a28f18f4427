"""Stage 2: PyTorch built from source beside wheel-style builds, with the real eb and Lmod.

The motivating report, reproduced with real binaries: one torch source tree
(test/support/fakelibtorch.py) is built twice by the real eb with the stage-2 easyblock, once with
_GLIBCXX_USE_CXX11_ABI=1 (a source build) and once with =0 (a pre-2.7 wheel), same release 2.6.0. A
C++ extension is built from source against each with EasyBuild's own PythonPackage and recorded
through the hooks file; a pure-Python consumer sits on the C++11 one. Lmod must refuse every swap
and load that would put an extension on the other ABI, `torchstack scan --swap` must name exactly
the extension to rebuild, and the refusal must be no false alarm: forced onto the other ABI, the
extension does not import (undefined symbol).

Only PyTorch's own test suite is stubbed (test/support/easyblocks/fakepytorchsource.py); compile,
install, sanity checks, fingerprint and module are the stage-2 easyblock's, run for real.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from support.ebenv import EasyBuildEnv
from support.fakelibtorch import (
    RELEASE,
    consumer_easyconfig,
    consumer_source,
    run_eb,
    torch_easyconfig,
    torch_source,
    toy_source,
    write_blas_module,
)
from support.synthetic import dynamic_symbols
from support.wheelbuild import sha256

from torchstack.cli import main
from torchstack.elf import symbols
from torchstack.fingerprint.read import Fingerprint
from torchstack.guards.record import FINGERPRINT_FILE, read_fingerprint

ABIS = ("cxx11", "precxx11")
ABI_FLAG = {"cxx11": "1", "precxx11": "0"}
TORCH = {abi: f"PyTorch/{RELEASE}-fake-{abi}" for abi in ABIS}
OPS = {abi: f"fakeops/1.0-fake-{abi}" for abi in ABIS}
TOY = "faketoy/1.0-fake-cxx11"
CALL_OPS = "import fakeops; assert fakeops.schema('add') == 'aten::add', fakeops.schema('add')"
TORCHSTACK_VARS = "env | grep -E '^(LOADEDMODULES|TORCHSTACK_[A-Z_]*)=' | sort"
OTHER = {"cxx11": "precxx11", "precxx11": "cxx11"}


def _eb(env: EasyBuildEnv, easyconfig: Path, *options: str) -> tuple[int, str]:
    return run_eb(env, str(easyconfig), *options)


def _install(env: EasyBuildEnv, easyconfig: Path, module: str) -> str:
    code, output = _eb(env, easyconfig)
    assert code == 0, output
    return module


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stage2-sources")
    return {"torch": torch_source(folder), "ops": consumer_source(folder),
            "toy": toy_source(folder)}


@pytest.fixture(scope="module")
def stage2_env(eb_env: EasyBuildEnv, tmp_path_factory: pytest.TempPathFactory,
               sources: dict[str, Path]) -> EasyBuildEnv:
    """An install path of its own (so that a scan sees exactly this stack), same Python."""
    env = EasyBuildEnv(tmp_path_factory.mktemp("stage2"), eb_env.python_root).setup()
    write_blas_module(env.site_modules)
    env.stage_source("PyTorch", sources["torch"])
    env.stage_source("fakeops", sources["ops"])
    env.stage_source("faketoy", sources["toy"])
    return env


@pytest.fixture(scope="module")
def stack(stage2_env: EasyBuildEnv, sources: dict[str, Path]) -> EasyBuildEnv:
    """Both torch builds, an extension built against each, a pure-Python consumer."""
    env = stage2_env
    for abi in ABIS:
        easyconfig = torch_easyconfig(env.root / f"PyTorch-{RELEASE}-fake-{abi}.eb",
                                      f"-fake-{abi}", sources["torch"], sha256(sources["torch"]),
                                      (f"_GLIBCXX_USE_CXX11_ABI={ABI_FLAG[abi]}",))
        _install(env, easyconfig, TORCH[abi])
    for abi in ABIS:
        easyconfig = consumer_easyconfig(env.root / f"fakeops-1.0-fake-{abi}.eb", "fakeops",
                                         f"-fake-{abi}", sources["ops"], sha256(sources["ops"]),
                                         f"-fake-{abi}")
        _install(env, easyconfig, OPS[abi])
    easyconfig = consumer_easyconfig(env.root / "faketoy-1.0-fake-cxx11.eb", "faketoy",
                                     "-fake-cxx11", sources["toy"], sha256(sources["toy"]),
                                     "-fake-cxx11")
    _install(env, easyconfig, TOY)
    return env


def _software(env: EasyBuildEnv, module: str) -> Path:
    return env.installpath / "software" / module


def _module_text(env: EasyBuildEnv, module: str) -> str:
    return (env.installpath / "modules" / "all" / f"{module}.lua").read_text()


def _recorded(env: EasyBuildEnv, module: str) -> Fingerprint:
    found = read_fingerprint(_software(env, module))
    assert found is not None, f"{module} recorded no fingerprint"
    return found


def _site_packages(env: EasyBuildEnv, module: str) -> Path:
    return next(_software(env, module).glob("lib/python*/site-packages"))


def _tag(abi: str) -> str:
    return f"torch-{RELEASE}-{abi}-cpu"


class TestRecording:
    @pytest.mark.parametrize("abi", ABIS)
    def test_provider_fingerprint_and_guard(self, stack: EasyBuildEnv, abi: str) -> None:
        recorded = _recorded(stack, TORCH[abi])
        assert (recorded.role, recorded.version, recorded.abi_tag) == ("provider", RELEASE,
                                                                        _tag(abi))
        assert recorded.torch.cxx11_abi is (abi == "cxx11")
        text = _module_text(stack, TORCH[abi])
        assert f"torchstack: provider {_tag(abi)}" in text  # the whatis line of stage 1
        # One provider half: the hooks file leaves PyTorchSource's modules to the easyblock.
        assert text.count('setenv("TORCHSTACK_TORCH_ABI", tag)') == 1

    @pytest.mark.parametrize("abi", ABIS)
    def test_consumer_records_the_torch_it_was_built_against(self, stack: EasyBuildEnv,
                                                             abi: str) -> None:
        recorded = _recorded(stack, OPS[abi])
        # Its metadata names no torch release: the release comes from the PyTorch module,
        # the C++ ABI from its own undefined symbols.
        assert (recorded.role, recorded.link, recorded.requires_torch) == ("consumer", "cxx", "")
        assert recorded.abi_tag == _tag(abi)
        text = _module_text(stack, OPS[abi])
        assert text.index("TORCHSTACK_CONSUMERS") < text.index(f'depends_on("{TORCH[abi]}")')

    def test_same_record_as_stage_one(self, stack: EasyBuildEnv) -> None:
        data = json.loads((_software(stack, TORCH["cxx11"]) / FINGERPRINT_FILE).read_text())
        assert data["schema"] == 1
        assert set(data) >= {"role", "name", "version", "torch", "link", "requires_torch",
                             "cuda_major", "abi_tag"}


class TestLmod:
    @pytest.mark.parametrize("abi", ABIS)
    def test_consumer_works_on_its_own_abi(self, stack: EasyBuildEnv, abi: str) -> None:
        run = stack.shell(f"module load {OPS[abi]}\npython -c {shlex.quote(CALL_OPS)}\n"
                          "echo ABI=$TORCHSTACK_TORCH_ABI")
        assert run.returncode == 0, run.stderr
        assert f"ABI={_tag(abi)}" in run.stdout

    @pytest.mark.parametrize("abi", ABIS)
    def test_swap_under_consumer_refused(self, stack: EasyBuildEnv, abi: str) -> None:
        own, other = TORCH[abi], TORCH[OTHER[abi]]
        before = stack.shell(f"module load {OPS[abi]}\n{TORCHSTACK_VARS}")
        assert before.returncode == 0, before.stderr
        swap = stack.shell(f"module load {OPS[abi]}\nmodule swap {own} {other}")
        assert swap.returncode != 0
        assert OPS[abi] in swap.stderr and _tag(abi) in swap.stderr
        after = stack.shell(f"module load {OPS[abi]}\n(module swap {own} {other} || true)\n"
                            f"{TORCHSTACK_VARS}")
        assert after.stdout == before.stdout  # the refused swap changed nothing

    @pytest.mark.parametrize("abi", ABIS)
    def test_consumer_loads_only_on_its_own_abi(self, stack: EasyBuildEnv, abi: str) -> None:
        refused = stack.shell(f"module load {TORCH[OTHER[abi]]}\nmodule load {OPS[abi]}")
        assert refused.returncode != 0
        message = " ".join(refused.stderr.split())  # Lmod wraps long lines
        assert f"torchstack: cannot load {OPS[abi]}: it needs {_tag(abi)}" in message
        assert f"load {TORCH[abi]} instead" in message

    def test_pure_python_consumer_follows_the_swap(self, stack: EasyBuildEnv) -> None:
        run = stack.shell(f"module load {TOY}\nmodule swap {TORCH['cxx11']} {TORCH['precxx11']}\n"
                          "python -c 'import faketoy; print(faketoy.shout(\"mul\"))'")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "ATEN::MUL"


class TestScan:
    @pytest.mark.parametrize("abi", ABIS)
    def test_swap_names_exactly_the_consumers_to_rebuild(
        self, stack: EasyBuildEnv, abi: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code = main(["scan", str(stack.installpath), "--swap", TORCH[abi], TORCH[OTHER[abi]],
                     "--json"])
        report = json.loads(capsys.readouterr().out)
        assert code == 1
        assert [o["module"] for o in report["would_break"]] == [OPS[abi]]
        assert [o["module"] for o in report["stays_safe"]] == ([TOY] if abi == "cxx11" else [])
        names = {"cxx11": "C++11", "precxx11": "pre-C++11"}
        assert report["would_break"][0]["reasons"] == [
            f"fakeops 1.0 uses the {names[abi]} C++ ABI, "
            f"torch {RELEASE} the {names[OTHER[abi]]} one"]


class TestNoFalseAlarm:
    """Forced onto the other ABI (PYTHONPATH, no module guard), the extension does not import."""

    @pytest.mark.parametrize("abi", ABIS)
    def test_import_on_other_abi_fails_with_undefined_symbol(self, stack: EasyBuildEnv,
                                                             abi: str) -> None:
        forced = stack.shell(f"module load {TORCH[OTHER[abi]]}\n"
                             f"export PYTHONPATH={_site_packages(stack, OPS[abi])}:$PYTHONPATH\n"
                             f"python -c {shlex.quote(CALL_OPS)}")
        assert forced.returncode != 0
        match = re.search(r"undefined symbol: (\S+)", forced.stderr)
        assert match is not None, forced.stderr
        missing = match.group(1)
        # The missing symbol is one of libtorch's C++ symbols that the extension needs, defined
        # by its own torch build and absent from the other one: the ABI, nothing else.
        extension = next(_site_packages(stack, OPS[abi]).glob("fakeops/_C*.so"))
        assert missing in symbols.torch_cxx_symbols(dynamic_symbols(extension, defined=False))
        assert missing in _libtorch_symbols(stack, abi)
        assert missing not in _libtorch_symbols(stack, OTHER[abi])


def _libtorch_symbols(env: EasyBuildEnv, abi: str) -> frozenset[str]:
    lib = _site_packages(env, TORCH[abi]) / "torch" / "lib"
    return (dynamic_symbols(lib / "libc10.so", defined=True)
            | dynamic_symbols(lib / "libtorch_cpu.so", defined=True))


class TestDeclaredRelease:
    def test_build_of_another_release_refused(self, stage2_env: EasyBuildEnv,
                                              sources: dict[str, Path]) -> None:
        """custom_opts overrides EB_PyTorch's PYTORCH_BUILD_VERSION: the sanity check sees it."""
        easyconfig = torch_easyconfig(stage2_env.root / "PyTorch-2.6.0-fake-other.eb",
                                      "-fake-other", sources["torch"], sha256(sources["torch"]),
                                      ("PYTORCH_BUILD_VERSION=2.6.1",))
        code, output = _eb(stage2_env, easyconfig)
        assert code != 0
        assert "torchstack: the easyconfig installs torch 2.6.0, the installation holds 2.6.1" \
            in output


class TestModuleOnly:
    def test_regenerated_module_keeps_the_record(self, stack: EasyBuildEnv,
                                                 sources: dict[str, Path]) -> None:
        """`eb --module-only` builds nothing: the guard and whatis come from the record."""
        module_file = stack.installpath / "modules" / "all" / f"{TORCH['cxx11']}.lua"
        before = module_file.read_text()
        module_file.unlink()
        code, output = _eb(stack, stack.root / f"PyTorch-{RELEASE}-fake-cxx11.eb",
                           "--module-only", "--rebuild")
        assert code == 0, output
        text = module_file.read_text()
        assert f"torchstack: provider {_tag('cxx11')}" in text
        assert text.count('setenv("TORCHSTACK_TORCH_ABI", tag)') == 1
        assert text.split("-- Built with")[0] == before.split("-- Built with")[0]
