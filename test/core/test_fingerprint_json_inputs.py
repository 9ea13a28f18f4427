"""Fingerprint JSON files that break the contract: refused with one line and exit 2.

`torchstack check` reads a provider or consumer from a `fingerprint --json` file, and the
easyblocks, hooks and `scan` read an installation's recorded
`easybuild/torchstack-fingerprint.json`. A file nested thousands deep, a field of the wrong
type or a value no fingerprint has (a version that is not PEP 440, a CUDA version 'abc', a
provider whose version and release disagree) must be refused on load, never give a verdict
(exit 0 or 1) and never a traceback. Hypothesis varies the depth, the place and the values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from support.badinput import assert_one_error, run_cli
from support.synthetic import SyntheticWheels

from torchstack.cli import main
from torchstack.fingerprint import compat
from torchstack.fingerprint.fromjson import load_fingerprint
from torchstack.fingerprint.read import FingerprintError, fingerprint_path
from torchstack.guards.record import FINGERPRINT_FILE, read_fingerprint

pytest_plugins = ["support.synthetic"]

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None)
PLACEHOLDER = "@@value@@"
PLACES = ("document", "name", "version", "torch", "torch.release", "torch.cuda",
          "torch_libraries", "cuda_major")


@pytest.fixture(scope="module")
def valid(synthetic_wheels: SyntheticWheels) -> dict[str, dict[str, Any]]:
    """The JSON fingerprints of a synthetic torch and of a consumer that fits it."""
    return {"provider": fingerprint_path(synthetic_wheels["torch-cpu-cxx11"]).to_json(),
            "consumer": fingerprint_path(synthetic_wheels["vision-cxx11"]).to_json()}


def with_value(data: dict[str, Any], place: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with the field at `place` (`torch.cuda`: nested) set to `value`."""
    copy = json.loads(json.dumps(data))
    holder, _, key = place.rpartition(".")
    (copy[holder] if holder else copy)[key] = value
    return copy


def nested_text(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "0" + "}" * depth


def write_check_files(root: Path, provider: str, consumer: str) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "provider.json").write_text(provider, encoding="utf-8")
    (root / "consumer.json").write_text(consumer, encoding="utf-8")
    return ["check", str(root / "provider.json"), str(root / "consumer.json")]


class TestNestedJson:
    @settings(PROPERTY)
    @given(
        depth=st.one_of(st.integers(1, 60), st.integers(60, 3000), st.integers(3000, 400_000)),
        kind=st.sampled_from(["list", "object"]),
        place=st.sampled_from(PLACES),
        slot=st.sampled_from(["provider", "consumer"]),
    )
    def test_refused_at_any_depth_and_place(
        self, valid: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory,
        depth: int, kind: str, place: str, slot: str,
    ) -> None:
        nested = nested_text(depth, kind)
        if place == "document":
            text = nested
        else:
            text = json.dumps(with_value(valid[slot], place, PLACEHOLDER))
            text = text.replace(json.dumps(PLACEHOLDER), nested)
        other = json.dumps(valid["consumer" if slot == "provider" else "provider"])
        root = tmp_path_factory.getbasetemp() / "nested"
        argv = write_check_files(root, *((text, other) if slot == "provider" else (other, text)))
        code, _, err = run_cli(argv)
        line = assert_one_error(code, err, f"{slot}.json")
        assert len(line) < 600, line  # the value is abbreviated, however deep
        # the recorded fingerprint of an installation: the same file, the same refusal
        (root / FINGERPRINT_FILE).parent.mkdir(exist_ok=True)
        (root / FINGERPRINT_FILE).write_text(text, encoding="utf-8")
        with pytest.raises(FingerprintError, match=re.escape(str(root / FINGERPRINT_FILE))):
            read_fingerprint(root)


def plausible(data: dict[str, Any]) -> bool:
    """What any fingerprint that gets a verdict must say: PEP 440 versions, a specifier."""
    try:
        Version(data["version"])
        if data["torch"]["release"] is not None:
            Version(data["torch"]["release"])
        SpecifierSet(data.get("requires_torch") or "")
    except (InvalidVersion, InvalidSpecifier, TypeError, KeyError):
        return False
    return True


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**70) | st.floats() | st.text(max_size=10)
    | st.sampled_from(["2.13.0", "2.13.0+cpu", "garbage", "13.0", "abc", ">=2", "=>2", ""]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6,
)
FIELDS = ("schema", "role", "name", "version", "link", "requires_torch", "cuda_major",
          "abi_tag", "torch_libraries", "torch", "torch.release", "torch.local",
          "torch.cxx11_abi", "torch.cuda", "torch.hip")


class TestFieldValues:
    @pytest.mark.parametrize(
        ("slot", "place", "value", "fragment"),
        [
            ("provider", "version", "garbage", "version 'garbage' is not a PEP 440 version"),
            ("provider", "version", "2.13.0.dev0-", "is not a PEP 440 version"),
            ("provider", "torch.release", "2.x", "torch.release '2.x' is not a PEP 440"),
            ("provider", "torch.release", "2.14.0", "disagrees with torch.release '2.14.0'"),
            ("provider", "torch.local", "cu130", "disagrees with torch.local 'cu130'"),
            ("provider", "torch.local", "c u", "torch.local 'c u' is not a local version"),
            ("provider", "torch.cuda", "abc", "torch.cuda 'abc' is not a CUDA version"),
            ("provider", "torch.cuda", ".13", "torch.cuda '.13' is not a CUDA version"),
            ("provider", "torch.hip", "x", "torch.hip 'x' is not a ROCm version"),
            ("provider", "cuda_major", -1, "cuda_major -1 is negative"),
            ("provider", "name", "", "name '' is empty"),
            ("provider", "schema", True, "fingerprint schema True is not 1"),
            ("provider", "schema", 1.0, "fingerprint schema 1.0 is not 1"),
            ("consumer", "requires_torch", "=>2.13", "'=>2.13' is not a version specifier"),
            ("consumer", "version", "0.1.0 beta", "version '0.1.0 beta' is not a PEP 440"),
            ("consumer", "torch.release", "latest", "torch.release 'latest' is not a PEP 440"),
        ],
    )
    def test_invalid_value(
        self, valid: dict[str, dict[str, Any]], tmp_path: Path, slot: str, place: str,
        value: Any, fragment: str,
    ) -> None:
        files = dict(valid) | {slot: with_value(valid[slot], place, value)}
        argv = write_check_files(tmp_path, json.dumps(files["provider"]),
                                 json.dumps(files["consumer"]))
        code, _, err = run_cli(argv)
        assert_one_error(code, err, f"{slot}.json", fragment)
        with pytest.raises(FingerprintError, match=re.escape(fragment)):
            load_fingerprint(tmp_path / f"{slot}.json")

    @settings(PROPERTY)
    @given(slot=st.sampled_from(["provider", "consumer"]), place=st.sampled_from(FIELDS),
           value=JSON_VALUES)
    def test_any_value(
        self, valid: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory,
        slot: str, place: str, value: Any,
    ) -> None:
        # a verdict only for a fingerprint that is plausible; otherwise one line, exit 2
        data = with_value(valid[slot], place, value)
        files = dict(valid) | {slot: data}
        argv = write_check_files(tmp_path_factory.getbasetemp() / "values",
                                 json.dumps(files["provider"]), json.dumps(files["consumer"]))
        code, out, err = run_cli(argv)
        if code in (0, 1):
            assert err == "" and out.startswith(("compatible: ", "incompatible: ")), out + err
            assert plausible(data), data
        else:
            line = assert_one_error(code, err, f"{slot}.json")
            assert len(line) < 600, line

    def test_size_limit(self, valid: dict[str, dict[str, Any]], tmp_path: Path) -> None:
        # a fingerprint is a few hundred bytes; 2 MiB of padding is no fingerprint
        text = json.dumps(valid["provider"] | {"padding": "x" * (2 << 20)})
        argv = write_check_files(tmp_path, text, json.dumps(valid["consumer"]))
        code, _, err = run_cli(argv)
        assert_one_error(code, err, "provider.json", "is larger than 1048576 bytes")


class TestRecordedForm:
    """`fingerprint --json` prints a consumer as it is recorded: with its guard clauses."""

    def test_consumer_json_carries_guard_clauses(self, synthetic_wheels: SyntheticWheels,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
        wheel = synthetic_wheels["vision-cxx11"]
        assert main(["fingerprint", str(wheel), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["guard_clauses"] == list(compat.guard_clauses(fingerprint_path(wheel)))

    def test_provider_json_has_none(self, synthetic_wheels: SyntheticWheels,
                                    capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["fingerprint", str(synthetic_wheels["torch-cpu-cxx11"]), "--json"]) == 0
        assert "guard_clauses" not in json.loads(capsys.readouterr().out)
