"""torchstack.symbolcheck and `check` on two paths: libtorch imports looked up in the provider.

Small libraries compiled with g++ stand for two torch releases, one of which dropped a symbol
(as 2.13 dropped c10::impl::cow::materialize_cow_storage), and for consumers that call the
C++ API, register kernels through torch::Library, define some torch-namespace symbols of
their own or import one weakly. The real wheels are in test_real_verdicts.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.symbolwheels import CALLER, COW, build_symbol_wheels, compile_so

from torchstack.cli import main
from torchstack.elf import reader
from torchstack.symbolcheck import SymbolCheck, SymbolCheckError, verify_paths


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_symbol_wheels(tmp_path_factory)


class TestBindings:
    def test_weak_imports_and_own_definitions(self, wheels: dict[str, Path],
                                              tmp_path: Path) -> None:
        so = tmp_path / "_C.so"
        so.write_bytes(compile_so(tmp_path, "x.so", CALLER))
        with reader.map_file(so) as mapped:
            found = reader.bindings(mapped, str(so))
        assert "_ZN3c104keptEi" not in found.exports
        assert "_ZN3c104keptEi" in found.imports
        assert "_ZN3c105maybeEi" not in found.imports  # weak: may stay unresolved
        assert "_Z5entryi" in found.exports


class TestVerifyPaths:
    def test_all_resolved(self, wheels: dict[str, Path]) -> None:
        result = verify_paths(str(wheels["old"]), str(wheels["caller"]), "caller", "torch 2.12")
        # kept, kept_op, aoti_torch_kept, materialize_cow_storage; not the weak c10::maybe,
        # not at::native::own (the consumer's own libown.so defines it)
        assert result == SymbolCheck("torch 2.12", 4, ())
        assert result.line() == "verified: 4 libtorch symbols resolved in torch 2.12"

    def test_missing_is_named_demangled(self, wheels: dict[str, Path]) -> None:
        result = verify_paths(str(wheels["new"]), str(wheels["caller"]), "caller", "torch 2.13")
        assert result.missing == ("_ZN3c104impl3cow23materialize_cow_storageEi",)
        assert result.line() == f"1 of 4 libtorch symbols missing in torch 2.13, e.g. {COW}"

    def test_provider_without_libc10(self, wheels: dict[str, Path]) -> None:
        with pytest.raises(SymbolCheckError, match=re.escape("no torch/lib/libc10.so")):
            verify_paths(str(wheels["nolibc10"]), str(wheels["caller"]), "caller", "torch")


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


class TestCheckCommand:
    def test_unknown_release_decided_by_symbols(self, wheels: dict[str, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = check(capsys, str(wheels["old"]), str(wheels["caller"]))
        assert code == 0
        assert out == ("compatible: caller 1.0 names no torch release and registers no kernels "
                       "through libtorch's dispatcher, so its symbols decide: verified: 4 "
                       "libtorch symbols resolved in torch 2.12.1+cpu")

    def test_missing_symbol_refuses(self, wheels: dict[str, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = check(capsys, str(wheels["new"]), str(wheels["caller"]))
        assert code == 1
        assert out.startswith(f"incompatible: 1 of 4 libtorch symbols missing in torch "
                              f"2.13.0+cpu, e.g. {COW}")

    def test_dispatcher_registration_is_release_bound(
            self, wheels: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
        # every symbol resolves, but kernels registered through torch::Library are bound to
        # the release they were built on, which nothing names
        code, out, _ = check(capsys, str(wheels["old"]), str(wheels["registrar"]))
        assert code == 1
        assert "registers kernels through libtorch's C++ dispatcher" in out

    def test_fingerprint_json_is_not_verified(self, wheels: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["fingerprint", "--json", str(wheels["caller"])]) == 0
        saved = tmp_path / "caller.json"
        saved.write_text(capsys.readouterr().out, encoding="utf-8")
        code, out, _ = check(capsys, str(wheels["old"]), str(saved))
        assert code == 1
        assert "the torch release it was built against is unknown" in out

    @pytest.mark.parametrize(
        ("provider", "consumer", "message"),
        [
            # the provider lacks libc10: nothing to verify against, said in one line
            ("nolibc10", "caller", "no torch/lib/libc10.so"),
            # a consumer library cut short
            ("old", "damaged", "damaged/_C.so"),
        ],
        ids=["no-libc10", "truncated-consumer"],
    )
    def test_bad_input(self, wheels: dict[str, Path], capsys: pytest.CaptureFixture[str],
                       provider: str, consumer: str, message: str) -> None:
        code, out, err = check(capsys, str(wheels[provider]), str(wheels[consumer]))
        assert (code, out) == (2, "")
        assert err.startswith("torchstack: error: ") and message in err
        assert len(err.splitlines()) == 1
