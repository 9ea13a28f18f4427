"""Fingerprints of synthetic wheels and of the same wheels installed, through the API and the CLI.

The wheels hold real ELF libraries compiled by `synthetic` (g++, both C++ ABIs), so every
decision below is read from real dynamic sections and symbol tables, never mocked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.synthetic import (
    CONSUMER_BUILDS,
    TORCH_BUILDS,
    SyntheticWheels,
    install_prefix,
    install_tree,
)

from torchstack.cli import main
from torchstack.fingerprint.fromjson import from_json
from torchstack.fingerprint.read import TorchFacts, fingerprint_path

pytest_plugins = ["support.synthetic"]

CONTRACT_FIELDS = {"schema", "role", "name", "version", "torch", "link", "requires_torch",
                   "cuda_major", "abi_tag"}
TORCH_FIELDS = {"release", "local", "cxx11_abi", "cuda", "hip"}
FINGERPRINTED = [k for k in (*TORCH_BUILDS, *CONSUMER_BUILDS) if k != "unrelated"]


def layouts(wheel: Path, root: Path) -> dict[str, Path]:
    """The wheel itself, unpacked into a site-packages folder, and into install prefixes."""
    return {
        "wheel": wheel,
        "site-packages": install_tree(wheel, root / "site-packages"),
        "prefix": install_prefix(wheel, root / "prefix"),
        "local-prefix": install_prefix(wheel, root / "local-prefix" / "local").parent,
    }


def fingerprint_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """`torchstack fingerprint PATH --json`, parsed."""
    assert main(["fingerprint", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


class TestLayoutsAgree:
    @pytest.mark.parametrize("key", FINGERPRINTED, ids=FINGERPRINTED)
    def test_wheel_tree_and_prefix(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path, key: str
    ) -> None:
        wheel = synthetic_wheels[key]
        found = {k: fingerprint_path(p) for k, p in layouts(wheel, tmp_path).items()}
        assert found["site-packages"] == found["wheel"]
        assert found["prefix"] == found["wheel"]
        assert found["local-prefix"] == found["wheel"]

    def test_path_as_string(self, synthetic_wheels: SyntheticWheels) -> None:
        wheel = synthetic_wheels["torch-cpu-cxx11"]
        assert fingerprint_path(str(wheel)) == fingerprint_path(wheel)


@dataclass(frozen=True)
class ProviderCase:
    version: str
    torch: TorchFacts
    cuda_major: int | None
    abi_tag: str


class TestProviders:
    @pytest.mark.parametrize(
        ("key", "expected"),
        [
            # libc10 built with _GLIBCXX_USE_CXX11_ABI=1
            ("torch-cpu-cxx11", ProviderCase(
                "2.13.0+cpu", TorchFacts("2.13.0", "cpu", True, None, None), None,
                "torch-2.13.0-cxx11-cpu")),
            # libc10 built with _GLIBCXX_USE_CXX11_ABI=0
            ("torch-cpu-precxx11", ProviderCase(
                "2.13.0+cpu", TorchFacts("2.13.0", "cpu", False, None, None), None,
                "torch-2.13.0-precxx11-cpu")),
            # libc10 without any probe symbol: ABI unknown
            ("torch-cpu-noprobe", ProviderCase(
                "2.13.0+cpu", TorchFacts("2.13.0", "cpu", None, None, None), None,
                "torch-2.13.0-unknownabi-cpu")),
            # libc10_cuda.so needs libcudart.so.13
            ("torch-cu130", ProviderCase(
                "2.13.0+cu130", TorchFacts("2.13.0", "cu130", True, "13.0", None), 13,
                "torch-2.13.0-cxx11-cu13")),
            # libc10_cuda.so needs libcudart.so.12: the ELF wins over version.py's 13.0
            ("torch-cu130-cudart12", ProviderCase(
                "2.13.0+cu130", TorchFacts("2.13.0", "cu130", True, "13.0", None), 12,
                "torch-2.13.0-cxx11-cu13")),
            # no libc10_cuda.so: the major of version.py's cuda
            ("torch-cu128-nolib", ProviderCase(
                "2.13.0+cu128", TorchFacts("2.13.0", "cu128", True, "12.8", None), 12,
                "torch-2.13.0-cxx11-cu12")),
            # ROCm: hip set, no CUDA
            ("torch-rocm", ProviderCase(
                "2.13.0+rocm6.4", TorchFacts("2.13.0", "rocm6.4", True, None, "6.4.43484-123"),
                None, "torch-2.13.0-cxx11-rocm6.4")),
        ],
        ids=["torch-cpu-cxx11", "torch-cpu-precxx11", "torch-cpu-noprobe", "torch-cu130",
             "torch-cu130-cudart12", "torch-cu128-nolib", "torch-rocm"],
    )
    def test_provider(
        self, synthetic_wheels: SyntheticWheels, key: str, expected: ProviderCase
    ) -> None:
        found = fingerprint_path(synthetic_wheels[key])
        assert found.role == "provider"
        assert found.name == "torch"
        assert found.version == expected.version
        assert found.torch == expected.torch
        assert found.cuda_major == expected.cuda_major
        assert found.abi_tag == expected.abi_tag
        assert found.link is None
        assert found.requires_torch is None


@dataclass(frozen=True)
class ConsumerCase:
    name: str
    link: str
    torch: TorchFacts
    requires_torch: str
    cuda_major: int | None
    abi_tag: str
    torch_libraries: tuple[str, ...] = ()


CPU_LIBS = ("libc10.so", "libtorch_cpu.so")


class TestConsumers:
    @pytest.mark.parametrize(
        ("key", "expected"),
        [
            # C++ API, C++11 ABI, pinned with the parenthesised form
            ("vision-cxx11", ConsumerCase(
                "fakevision", "cxx", TorchFacts("2.13.0", "cpu", True, None, None), "==2.13.0",
                None, "torch-2.13.0-cxx11-cpu", CPU_LIBS)),
            # C++ API, old ABI
            ("vision-precxx11", ConsumerCase(
                "fakevision", "cxx", TorchFacts("2.13.0", "cpu", False, None, None), "==2.13.0",
                None, "torch-2.13.0-precxx11-cpu", CPU_LIBS)),
            # C++ API with libtorch_cuda.so and DT_NEEDED libcudart.so.13
            ("vision-cu130", ConsumerCase(
                "fakevision", "cxx", TorchFacts("2.13.0", "cu130", True, "13.0", None),
                "==2.13.0", 13, "torch-2.13.0-cxx11-cu13", (*CPU_LIBS, "libtorch_cuda.so"))),
            # stable shims only; built-against release from the lower bound
            ("stable", ConsumerCase(
                "fakestable", "stable", TorchFacts("2.13.0", None, None, None, None),
                ">=2.13.0", None, "torch-2.13.0-stable-cpu")),
            # stable shims with DT_NEEDED libcudart.so.13
            ("stable-cu130", ConsumerCase(
                "fakestable", "stable", TorchFacts("2.13.0", "cu130", None, "13.0", None),
                ">=2.13.0", 13, "torch-2.13.0-stable-cu13")),
            # stable shims; only a vendored, hash-renamed libcudart tells CUDA 13
            ("stable-vendored", ConsumerCase(
                "fakestable", "stable", TorchFacts("2.13.0", None, None, "13", None),
                ">=2.13.0", 13, "torch-2.13.0-stable-cu13")),
            # no binaries: python link, release unknown from a lower bound
            ("pure", ConsumerCase(
                "fake-pure", "python", TorchFacts(None, None, None, None, None), ">=2.14.0",
                None, "torch-python")),
            # a bare requirement on torch
            ("pure-any", ConsumerCase(
                "fake-pure", "python", TorchFacts(None, None, None, None, None), "",
                None, "torch-python")),
        ],
        ids=["vision-cxx11", "vision-precxx11", "vision-cu130", "stable", "stable-cu130",
             "stable-vendored", "pure", "pure-any"],
    )
    def test_consumer(
        self, synthetic_wheels: SyntheticWheels, key: str, expected: ConsumerCase
    ) -> None:
        found = fingerprint_path(synthetic_wheels[key])
        assert found.role == "consumer"
        assert found.name == expected.name
        assert found.link == expected.link
        assert found.torch == expected.torch
        assert found.requires_torch == expected.requires_torch
        assert found.cuda_major == expected.cuda_major
        assert found.abi_tag == expected.abi_tag
        assert found.torch_libraries == expected.torch_libraries


class TestInstallations:
    @pytest.mark.parametrize(
        ("keys", "name", "role", "link"),
        [
            # torch beside its consumers: the installation provides torch
            (("vision-cxx11", "torch-cpu-cxx11", "pure"), "torch", "provider", None),
            # several consumers: the strongest link class speaks for the installation
            (("pure", "vision-cxx11"), "fakevision", "consumer", "cxx"),
            (("pure", "stable"), "fakestable", "consumer", "stable"),
            # a package that does not depend on torch is ignored
            (("unrelated", "pure"), "fake-pure", "consumer", "python"),
        ],
        ids=["provider-wins", "cxx-wins", "stable-wins", "unrelated-ignored"],
    )
    def test_mixed_site_packages(
        self,
        synthetic_wheels: SyntheticWheels,
        tmp_path: Path,
        keys: tuple[str, ...],
        name: str,
        role: str,
        link: str | None,
    ) -> None:
        for key in keys:
            install_prefix(synthetic_wheels[key], tmp_path)
        found = fingerprint_path(tmp_path)
        assert (found.name, found.role, found.link) == (name, role, link)


class TestFingerprintCommand:
    @pytest.mark.parametrize("key", FINGERPRINTED, ids=FINGERPRINTED)
    def test_json_contract(
        self, synthetic_wheels: SyntheticWheels, capsys: pytest.CaptureFixture[str], key: str
    ) -> None:
        data = fingerprint_json(synthetic_wheels[key], capsys)
        assert set(data) >= CONTRACT_FIELDS
        assert list(data)[:7] == ["schema", "role", "name", "version", "torch", "link",
                                  "requires_torch"]
        torch = data["torch"]
        assert isinstance(torch, dict)
        assert set(torch) == TORCH_FIELDS
        assert data["schema"] == 1
        assert from_json(data) == fingerprint_path(synthetic_wheels[key])

    def test_json_of_provider(
        self, synthetic_wheels: SyntheticWheels, capsys: pytest.CaptureFixture[str]
    ) -> None:
        data = fingerprint_json(synthetic_wheels["torch-cpu-cxx11"], capsys)
        assert {k: data[k] for k in CONTRACT_FIELDS} == {
            "schema": 1,
            "role": "provider",
            "name": "torch",
            "version": "2.13.0+cpu",
            "torch": {"release": "2.13.0", "local": "cpu", "cxx11_abi": True, "cuda": None,
                      "hip": None},
            "link": None,
            "requires_torch": None,
            "cuda_major": None,
            "abi_tag": "torch-2.13.0-cxx11-cpu",
        }

    def test_json_of_consumer(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        site = install_tree(synthetic_wheels["vision-cu130"], tmp_path / "site-packages")
        data = fingerprint_json(site, capsys)
        assert {k: data[k] for k in CONTRACT_FIELDS} == {
            "schema": 1,
            "role": "consumer",
            "name": "fakevision",
            "version": "0.1.0+cu130",
            "torch": {"release": "2.13.0", "local": "cu130", "cxx11_abi": True, "cuda": "13.0",
                      "hip": None},
            "link": "cxx",
            "requires_torch": "==2.13.0",
            "cuda_major": 13,
            "abi_tag": "torch-2.13.0-cxx11-cu13",
        }

    @pytest.mark.parametrize(
        ("key", "lines"),
        [
            # a provider: its torch, CUDA major and tag
            ("torch-cu130", ["torch 2.13.0+cu130: provider",
                             "  torch        2.13.0+cu130, C++11 ABI, CUDA 13.0",
                             "  cuda major   13", "  abi tag      torch-2.13.0-cxx11-cu13"]),
            # a consumer: link class, requirement and the torch it was built for
            ("vision-precxx11", ["fakevision 0.1.0+cpu: consumer", "  links        cxx",
                                 "  requires     torch==2.13.0",
                                 "  built for    torch 2.13.0+cpu, pre-C++11 ABI, CPU",
                                 "  cuda major   -"]),
        ],
        ids=["provider", "consumer"],
    )
    def test_text(
        self, synthetic_wheels: SyntheticWheels, capsys: pytest.CaptureFixture[str],
        key: str, lines: list[str],
    ) -> None:
        assert main(["fingerprint", str(synthetic_wheels[key])]) == 0
        out = capsys.readouterr().out.splitlines()
        assert all(line in out for line in lines)


CHECKS = [
    # C++ consumer of the same torch, ABI and flavour
    ("torch-cpu-cxx11", "vision-cxx11", 0),
    ("torch-cpu-precxx11", "vision-precxx11", 0),
    ("torch-cu130", "vision-cu130", 0),
    # C++ consumer across the two ABIs
    ("torch-cpu-precxx11", "vision-cxx11", 1),
    ("torch-cpu-cxx11", "vision-precxx11", 1),
    # C++ consumer linking libtorch_cuda on a CPU torch
    ("torch-cpu-cxx11", "vision-cu130", 1),
    # stable consumer: any ABI, CUDA only where it has CUDA code
    ("torch-cpu-precxx11", "stable", 0),
    ("torch-cu130", "stable", 0),
    ("torch-cpu-cxx11", "stable-cu130", 1),
    ("torch-cu130", "stable-vendored", 0),
    ("torch-cu128-nolib", "stable-cu130", 1),
    # python consumer: only the requirement
    ("torch-cpu-cxx11", "pure", 1),
    ("torch-rocm", "pure-any", 0),
]
CHECK_IDS = [f"{p}+{c}" for p, c, _ in CHECKS]


class TestCheckCommand:
    @pytest.mark.parametrize(("provider", "consumer", "code"), CHECKS, ids=CHECK_IDS)
    def test_wheels(
        self, synthetic_wheels: SyntheticWheels, capsys: pytest.CaptureFixture[str],
        provider: str, consumer: str, code: int,
    ) -> None:
        assert main(["check", str(synthetic_wheels[provider]),
                     str(synthetic_wheels[consumer])]) == code
        out, err = capsys.readouterr()
        assert err == ""
        assert out.startswith("compatible: " if code == 0 else "incompatible: ")
        assert len(out.splitlines()) == 1

    @pytest.mark.parametrize(("provider", "consumer", "code"), CHECKS, ids=CHECK_IDS)
    def test_json_files_and_trees(
        self, synthetic_wheels: SyntheticWheels, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], provider: str, consumer: str, code: int,
    ) -> None:
        # the provider as the JSON `fingerprint --json` wrote, the consumer installed
        data = fingerprint_json(synthetic_wheels[provider], capsys)
        provider_json = tmp_path / "torchstack-fingerprint.json"
        provider_json.write_text(json.dumps(data), encoding="utf-8")
        prefix = install_prefix(synthetic_wheels[consumer], tmp_path / "consumer")
        assert main(["check", str(provider_json), str(prefix)]) == code
        out = capsys.readouterr().out
        assert out.startswith("compatible: " if code == 0 else "incompatible: ")

    def test_refusal_lists_every_reason(
        self, synthetic_wheels: SyntheticWheels, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # old ABI and CPU-only under a C++11 CUDA consumer: both causes, then the symbols
        # they leave missing (its C++11 at:: and at::cuda:: imports, of the 7 it needs),
        # on one line
        assert main(["check", str(synthetic_wheels["torch-cpu-precxx11"]),
                     str(synthetic_wheels["vision-cu130"])]) == 1
        out = capsys.readouterr().out
        assert out == (
            "incompatible: fakevision 0.1.0+cu130 uses the C++11 C++ ABI, torch 2.13.0+cpu "
            "the pre-C++11 one; fakevision 0.1.0+cu130 links libtorch_cuda.so (cu13), "
            "torch 2.13.0+cpu is CPU-only; 5 of 7 libtorch symbols missing in torch 2.13.0+cpu, "
            "e.g. at::fake_op_schema(std::__cxx11::basic_string<char, std::char_traits<char>, "
            "std::allocator<char>> const&)\n"
        )
