"""The fingerprint of one EasyBuild installation, checked against the torch it runs on.

Shared by the easyblocks and the hooks file: after the install, the installation is
fingerprinted; its consumers are checked against its own torch or, for a module on top of a
PyTorch module, against that module's recorded fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.fingerprint.read import Fingerprint, installation_fingerprints, strongest
from torchstack.guards import record
from torchstack.symbolcheck import SymbolCheck, verify_installation


class InstallationError(TorchstackError):
    """An installation whose consumers do not fit the torch they run on."""


@dataclass(frozen=True)
class Installation:
    """What an installation provides or needs, and the torch that was checked against it."""

    fingerprint: Fingerprint | None
    provider: Fingerprint | None


def provider_of(root: str | Path | None) -> Fingerprint | None:
    """The torch fingerprint of a PyTorch installation: recorded, or read from its files."""
    if not root:
        return None
    return record.fingerprint_of(root, provider_only=True)[0]


def examine(installdir: str | Path, dependency_torch_root: str | Path | None) -> Installation:
    """Fingerprint `installdir`; raise with every reason when a consumer does not fit.

    Every libtorch symbol a consumer imports is looked up in the torch it is checked on; a
    C++ consumer whose metadata names no release is recorded as built on that torch (it was
    installed, verified and import-tested on it), so that the guards hold it to it.
    """
    own_torch, consumers = installation_fingerprints(installdir)
    provider = own_torch or provider_of(dependency_torch_root)
    if provider is not None:
        root = installdir if own_torch is not None else dependency_torch_root
        checks = _symbol_checks(installdir, root, provider, consumers)
        consumers = [compat.assume_built_against(provider, c) for c in consumers]
        verdicts = [compat.check(provider, c, checks.get(c.name)) for c in consumers]
        refusals = [v.line() for v in verdicts if not v.compatible]
        if refusals:
            raise InstallationError("; ".join(refusals))
    return Installation(own_torch or strongest(consumers), provider)


def _symbol_checks(installdir: str | Path, torch_root: str | Path | None, provider: Fingerprint,
                   consumers: list[Fingerprint]) -> dict[str, SymbolCheck]:
    """The symbol check of each consumer that binds libtorch, where torch's files are at hand
    (a recorded fingerprint of a module whose files are gone is checked by its rules only)."""
    names = [c.name for c in consumers if c.link in ("cxx", "stable")]
    if not names or not torch_root:
        return {}
    return verify_installation(installdir, torch_root, names, f"torch {provider.version}")
