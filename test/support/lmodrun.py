"""`module` commands run by the real Lmod in a clean shell, and fingerprints for guarded trees."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchstack.fingerprint.read import Fingerprint, Link, TorchFacts, abi_tag
from torchstack.guards import halves

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"


def provider(version: str, *, cuda: str | None = None, cxx11_abi: bool | None = True,
             hip: str | None = None) -> Fingerprint:
    release, _, local = version.partition("+")
    torch = TorchFacts(release, local or None, cxx11_abi, cuda, hip)
    major = int(cuda.split(".")[0]) if cuda else None
    return Fingerprint("provider", "torch", version, torch, None, None, major,
                       abi_tag("provider", None, torch))


def consumer(link: Link, release: str | None, requires: str, *, cuda: str | None = None,
             cuda_major: int | None = None, name: str = "fakevision",
             libraries: tuple[str, ...] = (), cxx11_abi: bool = True) -> Fingerprint:
    local = f"cu{cuda.replace('.', '')}" if cuda else None
    torch = TorchFacts(release, local, cxx11_abi if link == "cxx" else None, cuda, None)
    return Fingerprint("consumer", name, "0.1.0", torch, link, requires, cuda_major,
                       abi_tag("consumer", link, torch, cuda_major), libraries)


CU13 = provider("2.14.1+cu130", cuda="13.0")


@dataclass(frozen=True)
class Step:
    """The outcome of one `module` command: status, stderr, the environment after it."""

    rc: int
    err: str
    env: dict[str, str]

    @property
    def message(self) -> str:
        return " ".join(self.err.split())  # Lmod wraps its messages to the terminal width

    @property
    def loaded(self) -> set[str]:
        return set(filter(None, self.env.get("LOADEDMODULES", "").split(":")))

    @property
    def consumers(self) -> list[str]:
        return self.env.get(halves.CONSUMERS_VARIABLE, "").split(";")

    def torchstack(self) -> dict[str, str]:
        return {k: v for k, v in self.env.items() if k.startswith("TORCHSTACK_")}


def read_environment(path: Path) -> dict[str, str]:
    pairs = path.read_bytes().decode().split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def write_module(root: Path, name: str, syntax: str, body: str) -> None:
    path = root / (name + (".lua" if syntax == "lua" else ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body if syntax == "lua" else "#%Module\n" + body, encoding="utf-8")
