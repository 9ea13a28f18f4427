"""The real torch wheels of this machine: fingerprints of wheel files and installed trees."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from torchstack.cli import main
from torchstack.fingerprint.compat import check
from torchstack.fingerprint.read import fingerprint_path

Factory = Callable[[str], Path]

EXPECTED = {
    # The CPU wheel: provider, C++11 ABI, no CUDA.
    "torch-2.13.0": {
        "role": "provider", "name": "torch", "version": "2.13.0+cpu", "cuda_major": None,
        "torch": {"release": "2.13.0", "local": "cpu", "cxx11_abi": True, "cuda": None,
                  "hip": None},
        "link": None, "requires_torch": None, "abi_tag": "torch-2.13.0-cxx11-cpu",
    },
    # The default PyPI build of 2.14.1: CUDA 13.0, libc10_cuda needs libcudart.so.13.
    "torch-2.14.1": {
        "role": "provider", "name": "torch", "version": "2.14.1+cu130", "cuda_major": 13,
        "torch": {"release": "2.14.1", "local": "cu130", "cxx11_abi": True, "cuda": "13.0",
                  "hip": None},
        "link": None, "requires_torch": None, "abi_tag": "torch-2.14.1-cxx11-cu13",
    },
    # Built for CUDA 13 against torch 2.13.0's C++ API: the "nms does not exist" case.
    "torchvision-0.28.0": {
        "role": "consumer", "name": "torchvision", "version": "0.28.0", "cuda_major": 13,
        "torch": {"release": "2.13.0", "local": "cu130", "cxx11_abi": True, "cuda": "13.0",
                  "hip": None},
        "link": "cxx", "requires_torch": "==2.13.0", "abi_tag": "torch-2.13.0-cxx11-cu13",
    },
    # Only the stable C shims of torch 2.14: any newer CUDA 13 torch serves it.
    "torchvision-0.29.1": {
        "role": "consumer", "name": "torchvision", "version": "0.29.1", "cuda_major": 13,
        "torch": {"release": "2.14.0", "local": "cu130", "cxx11_abi": None, "cuda": "13.0",
                  "hip": None},
        "link": "stable", "requires_torch": ">=2.14.0", "abi_tag": "torch-2.14.0-stable-cu13",
    },
}


def _contract(data: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in data.items() if k in EXPECTED["torch-2.13.0"]}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_wheel_file(key: str, real_wheel: Factory, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fingerprint", str(real_wheel(key)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == 1
    assert _contract(data) == EXPECTED[key]


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_installed_tree_agrees_with_wheel(
    key: str, real_wheel: Factory, real_tree: Factory
) -> None:
    from_tree = fingerprint_path(real_tree(key))
    assert from_tree == fingerprint_path(real_wheel(key))
    assert _contract(from_tree.to_json()) == EXPECTED[key]


def test_install_prefix_layout(real_tree: Factory, tmp_path: Path) -> None:
    # An EasyBuild-style prefix: <prefix>/lib/python3.X/site-packages.
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    source = real_tree("torchvision-0.29.1")
    for entry in source.iterdir():
        (site / entry.name).symlink_to(entry)
    assert fingerprint_path(tmp_path).abi_tag == "torch-2.14.0-stable-cu13"


@pytest.mark.parametrize(
    ("provider", "consumer", "compatible", "reason"),
    [
        # torchvision 0.28.0 needs libtorch_cuda: the real "nms does not exist" breakage.
        ("torch-2.13.0", "torchvision-0.28.0", False, "links libtorch_cuda.so"),
        # Another release under a C++ consumer.
        ("torch-2.14.1", "torchvision-0.28.0", False, "built against torch 2.13.0"),
        # Stable ABI on a new enough CUDA 13 torch.
        ("torch-2.14.1", "torchvision-0.29.1", True, "stable ABI"),
        # Stable ABI, but torch too old and CPU-only: all three reasons at once.
        ("torch-2.13.0", "torchvision-0.29.1", False, "requires torch>=2.14.0"),
    ],
    ids=["cpu-under-cuda-cxx", "release-mismatch", "stable-ok", "stable-too-old"],
)
def test_check_real(
    provider: str, consumer: str, compatible: bool, reason: str, real_wheel: Factory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["check", str(real_wheel(provider)), str(real_wheel(consumer))])
    out = capsys.readouterr().out.strip()
    assert code == (0 if compatible else 1)
    assert len(out.splitlines()) == 1
    assert reason in out
    verdict = check(fingerprint_path(real_wheel(provider)), fingerprint_path(real_wheel(consumer)))
    assert verdict.compatible is compatible


def test_stable_too_old_lists_every_reason(real_wheel: Factory) -> None:
    verdict = check(
        fingerprint_path(real_wheel("torch-2.13.0")),
        fingerprint_path(real_wheel("torchvision-0.29.1")),
    )
    assert len(verdict.reasons) == 3
    assert any("CPU-only" in r for r in verdict.reasons)


@pytest.mark.parametrize("key", ["torch-2.13.0", "torchvision-0.29.1", "fbgemm_gpu_cpu-1.9.0"])
def test_undefined_symbols_agree_with_pyelftools(key: str, real_tree: Factory) -> None:
    # reader.undefined_symbols unpacks .dynsym with struct; pyelftools' own walk is the reference
    from elftools.elf.elffile import ELFFile

    from torchstack.elf import loader, reader

    objects = list(loader.iter_shared_objects(real_tree(key)))
    assert objects
    for path in objects:
        with reader.map_file(path) as mapped:
            table = ELFFile(mapped).get_section_by_name(".dynsym")
            expected = frozenset(s.name for s in table.iter_symbols()
                                 if s["st_shndx"] == "SHN_UNDEF" and s.name)
            assert reader.undefined_symbols(mapped, str(path)) == expected, path
