"""Whether each consumer on sys.path can run on the torch that `import torch` picks.

The verdicts are compat's; this module words them as findings with a fix.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from torchstack.doctor.findings import Finding, info, problem, warning
from torchstack.doctor.stack import Consumer, Stack
from torchstack.errors import TorchstackError
from torchstack.fingerprint.compat import CompatError, Verdict, check
from torchstack.fingerprint.read import Fingerprint, runtime_flavour
from torchstack.symbolcheck import SymbolCheck, consumer_imports, verify

log = logging.getLogger(__name__)

_INDEX = "https://download.pytorch.org/whl/"


def torch_findings(stack: Stack) -> list[Finding]:
    """Which torch is active, or why there is none."""
    if stack.torch is None:
        needers = ", ".join(c.placed.label for c in stack.consumers)
        message = "no torch on sys.path" + (f", but {needers} need it" if needers else "")
        return [problem("torch-missing", message, "load a PyTorch module, or pip install torch")]
    if stack.provider is None:
        return [problem("torch-unreadable",
                        f"torch in {stack.torch.folder} cannot be read: {stack.provider_error}",
                        "reinstall torch")]
    provider = stack.provider
    return [info("torch", f"torch {provider.version} ({provider.abi_tag}) "
                          f"from {stack.torch.folder}")]


def consumer_findings(stack: Stack, verdicts: Sequence[Verdict | str | None]) -> list[Finding]:
    """One finding per consumer (`verdicts`: `verdicts_of(stack)`): compatible (info),
    unknown (warning) or not (problem)."""
    if stack.provider is None:
        return []
    return [consumer_finding(stack.provider, c, v)
            for c, v in zip(stack.consumers, verdicts) if v is not None]


def verdicts_of(stack: Stack) -> list[Verdict | str | None]:
    """compat's verdict on each consumer, with its symbols looked up in the active torch;
    None for each when there is no readable torch."""
    provider = stack.provider
    if provider is None:
        return [None for _ in stack.consumers]
    return [verdict_of(provider, c, symbols_of(stack, c)) for c in stack.consumers]


def symbols_of(stack: Stack, consumer: Consumer) -> SymbolCheck | None:
    """The consumer's libtorch imports looked up in the active torch's libraries; None for a
    consumer that binds no libtorch symbol, or when they cannot be read (said by the rules)."""
    if stack.torch is None or stack.provider is None \
            or consumer.fingerprint.link not in ("cxx", "stable"):
        return None
    try:
        return verify(stack.torch.dist, consumer_imports(consumer.placed.dist),
                      f"torch {stack.provider.version}")
    except TorchstackError as exc:
        log.debug("%s: symbols not verified: %s", consumer.placed.label, exc)
        return None


def verdict_of(provider: Fingerprint, consumer: Consumer,
               symbols: SymbolCheck | None = None) -> Verdict | str:
    """compat's verdict, or why the two cannot be compared."""
    try:
        return check(provider, consumer.fingerprint, symbols)
    except CompatError as exc:
        return str(exc)


def consumer_finding(provider: Fingerprint, consumer: Consumer,
                     verdict: Verdict | str) -> Finding:
    found = consumer.fingerprint
    where = f"{consumer.placed.label} (in {consumer.placed.folder})"
    if isinstance(verdict, str):
        return warning("consumer-unknown", f"{where}: cannot compare with torch: {verdict}")
    if verdict.compatible:
        return info("consumer-compatible", f"{consumer.placed.label}: {verdict.line()}")
    if found.link == "cxx" and found.torch.release is None and not verdict.symbols_missing:
        return warning("consumer-unknown",
                       f"{where} links libtorch's C++ API; the torch it was built against "
                       "is unknown, so it may or may not load",
                       f"if importing it fails, rebuild {found.name} against torch "
                       f"{provider.version}")
    return problem("consumer-incompatible",
                   f"{where} cannot run on torch {provider.version}: "
                   f"{'; '.join(verdict.reasons)}",
                   consumer_fix(provider, found))


def consumer_fix(provider: Fingerprint, consumer: Fingerprint) -> str:
    """Install the consumer's build for this torch, or the torch the consumer was built for."""
    have = provider.torch.flavour
    wanted = runtime_flavour(consumer.torch, consumer.cuda_major)
    same_release = consumer.torch.release == provider.torch.release
    other_torch = f"torch {consumer.torch.release or consumer.requires_torch or ''}".strip()
    if wanted != "cpu":
        other_torch += f" ({wanted})"
    if same_release and wanted != have and consumer.requires_torch:
        variant = provider.torch.local or have
        return (f"pip install {consumer.name}=={consumer.version} --index-url {_INDEX}{variant} "
                f"(its {variant} build), or use {other_torch}")
    return (f"install a {consumer.name} built for torch {provider.version}, "
            f"or use {other_torch} instead of torch {provider.version}")
