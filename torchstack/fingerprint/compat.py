"""Whether a provider (a torch build) satisfies a consumer, with the reasons either way.

The rules are those of docs/design.rst, "Compatibility rules" (link classes, "The flavour
rule", "Symbol verification"), one function a rule, each returning the reason it refuses.
`RULES` pairs each rule with its clause encoding, and `guard_clauses` turns a consumer's rules
into the clauses recorded with its fingerprint, which the Lua and Tcl evaluators and the
SitePackage hook only evaluate (docs/design.rst, "Guard clauses"): this module is the one
place where rules become clauses. A new rule is one entry in `RULES`; a new kind of clause
also enters `CLAUSE` and the `holds` of the two evaluators.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from torchstack.errors import TorchstackError
from torchstack.fingerprint.read import Fingerprint, abi_tag, runtime_flavour

if TYPE_CHECKING:
    from torchstack.symbolcheck import SymbolCheck

Check = Callable[[Fingerprint, Fingerprint], "str | None"]
Encoding = Callable[[Fingerprint], "tuple[str, ...]"]


class CompatError(TorchstackError):
    """Two fingerprints that cannot be compared (wrong roles, unreadable versions)."""


class ClauseError(CompatError):
    """A consumer whose needs cannot be written as guard clauses (an invalid requirement)."""


@dataclass(frozen=True)
class Verdict:
    """The answer for one provider and one consumer: every refusal reason, or why it fits."""

    compatible: bool
    reasons: tuple[str, ...]
    symbols_missing: bool = False  # a reason is libtorch symbols the provider lacks

    def line(self) -> str:
        word = "compatible" if self.compatible else "incompatible"
        return f"{word}: {'; '.join(self.reasons)}"


def check(provider: Fingerprint, consumer: Fingerprint,
          symbols: SymbolCheck | None = None) -> Verdict:
    """Apply the rules of the consumer's link class; collect every reason it fails.

    `symbols`: the consumer's libtorch imports looked up in the provider's libraries, where
    both are at hand. A missing symbol refuses whatever the rules say. A cxx consumer whose
    built-against release is unknown and that registers no kernels through the dispatcher is
    judged on its release by this check instead of being refused as unknown.
    """
    if provider.role != "provider":
        raise CompatError(f"{_who(provider)} is a consumer, not a torch provider")
    if consumer.role != "consumer":
        raise CompatError(f"{_who(consumer)} is a torch provider, not a consumer")
    judged = consumer
    if symbols is not None and _loose_cxx(consumer):
        judged = assume_built_against(provider, consumer)  # its symbols decide its release
    rules = RULES[consumer.link or "python"]
    reasons = [r for r in (rule.check(provider, judged) for rule in rules) if r is not None]
    missing = symbols is not None and not symbols.resolved and consumer.link != "python"
    if symbols is not None and missing:
        # After the rules: a CUDA consumer on a CPU torch misses CUDA symbols, and the
        # flavour is the cause a user can act on; the symbols are the proof.
        reasons.append(symbols.line())
    if reasons:
        return Verdict(False, tuple(reasons), missing)
    if symbols is None or consumer.link == "python":
        return Verdict(True, (_why_compatible(provider, judged),))
    if judged is not consumer:
        return Verdict(True, (f"{_who(consumer)} names no torch release and registers no "
                              f"kernels through libtorch's dispatcher, so its symbols decide: "
                              f"{symbols.line()}",))
    return Verdict(True, (f"{_why_compatible(provider, judged)}; {symbols.line()}",))


def _loose_cxx(consumer: Fingerprint) -> bool:
    """A cxx consumer of unknown release that calls libtorch's C++ API without registering
    kernels through its dispatcher: loading is all it needs, which symbols can prove."""
    return (consumer.link == "cxx" and consumer.torch.release is None
            and consumer.registers_kernels is False)


def assume_built_against(provider: Fingerprint, consumer: Fingerprint) -> Fingerprint:
    """A C++ consumer whose metadata names no torch release, taken as built on `provider`.

    Installing it on that provider is the site's statement; the sanity check's import of its
    extension then tests it, and the module records the assumption from then on.
    """
    if consumer.link != "cxx" or consumer.torch.release is not None:
        return consumer
    torch = replace(
        consumer.torch,
        release=provider.torch.release,
        local=consumer.torch.local or provider.torch.local,
        cuda=consumer.torch.cuda or provider.torch.cuda,
        hip=consumer.torch.hip or provider.torch.hip,
    )
    tag = abi_tag("consumer", consumer.link, torch, consumer.cuda_major)
    return replace(consumer, torch=torch, abi_tag=tag, guard_clauses=None)  # recorded afresh


def disagreements(
    provider: Fingerprint, declared_version: str, declared_cuda: str | None
) -> list[str]:
    """How an installed torch differs from what its easyconfig declares (version, CUDA)."""
    problems = []
    have, wanted = _version(provider.version), _version(declared_version)
    same_public = Version(have.public) == Version(wanted.public)  # 2.13 is 2.13.0 (PEP 440)
    if not same_public or (wanted.local and have.local != wanted.local):
        problems.append(f"the easyconfig installs torch {declared_version}, "
                        f"the installation holds {provider.version}")
    if declared_cuda is not None:
        major = declared_cuda.split(".")[0]
        if provider.torch.flavour != f"cu{major}":
            problems.append(f"the easyconfig declares CUDA {declared_cuda}, "
                            f"the installed torch is {provider.torch.flavour}")
    return problems


def satisfies_requirement(provider: Fingerprint, consumer: Fingerprint) -> str | None:
    if not consumer.requires_torch:
        return None
    try:
        ok = SpecifierSet(consumer.requires_torch).contains(provider.version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion) as exc:
        raise CompatError(f"cannot compare {provider.version!r} with "
                          f"{consumer.requires_torch!r}: {exc}") from exc
    if ok:
        return None
    return f"{_who(consumer)} requires torch{consumer.requires_torch}, not {_who(provider)}"


def not_older(provider: Fingerprint, consumer: Fingerprint) -> str | None:
    built = consumer.torch.release
    if built is None or _version(provider.torch.release) >= _version(built):
        return None
    return (f"{_who(consumer)} uses the stable ABI of torch {built}, "
            f"newer than {_who(provider)}")


def same_release(provider: Fingerprint, consumer: Fingerprint) -> str | None:
    built = consumer.torch.release
    if built is None and consumer.registers_kernels:
        return (f"{_who(consumer)} registers kernels through libtorch's C++ dispatcher, so it "
                "runs only on the torch release it was built against, which is unknown")
    if built is None:
        return (f"{_who(consumer)} links libtorch's C++ API but the torch release it was "
                "built against is unknown")
    if _version(provider.torch.release) == _version(built):
        return None
    return f"{_who(consumer)} was built against torch {built}, not {provider.torch.release}"


def same_abi(provider: Fingerprint, consumer: Fingerprint) -> str | None:
    wanted, have = consumer.torch.cxx11_abi, provider.torch.cxx11_abi
    if wanted is None or have is None or wanted == have:
        return None
    return (f"{_who(consumer)} uses the {_abi_name(wanted)} C++ ABI, "
            f"{_who(provider)} the {_abi_name(have)} one")


def same_flavour(provider: Fingerprint, consumer: Fingerprint) -> str | None:
    wanted, have = needed_flavour(consumer), provider.torch.flavour
    if wanted is None or wanted == have:
        return None
    if have == "cpu" and "libtorch_cuda.so" in consumer.torch_libraries:
        return f"{_who(consumer)} links libtorch_cuda.so ({wanted}), {_who(provider)} is CPU-only"
    return f"{_who(consumer)} needs a {wanted} torch, {_who(provider)} is {have}"


def same_flavour_if_gpu_code(provider: Fingerprint, consumer: Fingerprint) -> str | None:
    if needed_flavour(consumer) in (None, "cpu"):
        return None
    return same_flavour(provider, consumer)


def needed_flavour(consumer: Fingerprint) -> str | None:
    """The flavour (cpu, cuN, rocmX.Y) a consumer's binaries need of torch; None for any.

    A consumer that links no CUDA or HIP library runs on a torch of any flavour; one whose
    libraries were not recorded (older fingerprints) needs the flavour of its torch facts.
    """
    if consumer.links_gpu is False:
        return None
    return runtime_flavour(consumer.torch, consumer.cuda_major)


# -- the clause encoding of the rules -----------------------------------------------------

# every clause the encoding below writes, and nothing else (a recorded clause is checked
# against it when a fingerprint file is read)
CLAUSE = re.compile(r"(?:==|!=|>=|<=|>|<)\d+(?:\.\d+)*|!=\d+(?:\.\d+)*\.\*"
                    r"|release=\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?"
                    r"|flavour=(?:cpu|cu\d+|rocm\d+\.\d+)|abi=(?:cxx11|precxx11)", re.ASCII)


def specifier_clauses(specifier: str) -> tuple[str, ...]:
    """A PEP 440 specifier as guard clauses on release numbers.

    `~=V` and `==V.*` become a `>=` / `<` pair, `!=V.*` stays a prefix clause and `===` is
    `==`. Pre-, post-, dev- and local segments are dropped here and in the provider's release
    (2.14.0a0 counts as 2.14.0): the guards compare releases, compat compares full versions.
    """
    try:
        specs = SpecifierSet(specifier)
    except InvalidSpecifier as exc:
        raise ClauseError(f"invalid torch requirement {specifier!r}") from exc
    return tuple(c for s in sorted(specs, key=str) for c in _clauses(s.operator, s.version))


def _clauses(operator: str, version: str) -> tuple[str, ...]:
    wildcard = version.endswith(".*")
    release = _release(version[:-2] if wildcard else version)
    if operator == "~=" or (operator == "==" and wildcard):
        upper = list(release[:-1] if operator == "~=" else release)
        upper[-1] += 1
        return (">=" + _join(release), "<" + _join(upper))
    if operator == "!=" and wildcard:
        return (f"!={_join(release)}.*",)
    return (("==" if operator == "===" else operator) + _join(release),)


def requirement_clauses(consumer: Fingerprint) -> tuple[str, ...]:
    """satisfies_requirement: the consumer's requires_torch."""
    return specifier_clauses(consumer.requires_torch or "")


def built_release_clauses(consumer: Fingerprint) -> tuple[str, ...]:
    """not_older: at least the release the consumer was built against."""
    built = consumer.torch.release
    return (">=" + _join(_release(built)),) if built else ()


def flavour_clauses(consumer: Fingerprint) -> tuple[str, ...]:
    """same_flavour_if_gpu_code: the consumer's flavour, when its GPU code needs one."""
    flavour = needed_flavour(consumer)
    return () if flavour in (None, "cpu") else (f"flavour={flavour}",)


def by_abi_tag(consumer: Fingerprint) -> tuple[str, ...]:
    """A cxx rule of a GPU-linked consumer: no clause, the guards compare its exact abi tag."""
    return ()


def _any_flavour(encoding: Encoding) -> Encoding:
    """A cxx rule, as a clause when its consumer runs on any flavour.

    Such a consumer fits torch builds of other tags than its own (its release and C++ ABI on
    CUDA), so its rules go out as clauses; the others keep the exact abi tag, which says
    release, ABI and flavour at once, and so do consumers of unknown release.
    """
    def clauses(consumer: Fingerprint) -> tuple[str, ...]:
        if consumer.link == "cxx" and consumer.links_gpu is False and consumer.torch.release:
            return encoding(consumer)
        return ()
    return clauses


def release_clauses(consumer: Fingerprint) -> tuple[str, ...]:
    """same_release: exactly the release the consumer was built against, pre-release too."""
    return ("release=" + _version(consumer.torch.release).public,)


def abi_clauses(consumer: Fingerprint) -> tuple[str, ...]:
    """same_abi: the consumer's C++ ABI, as the provider tag's middle field spells it."""
    abi = consumer.torch.cxx11_abi
    return () if abi is None else ("abi=" + ("cxx11" if abi else "precxx11"),)


@dataclass(frozen=True)
class Rule:
    """One rule: compat's check and the guard clauses that carry it (see the module doc).

    The clauses of a `declared` rule (the consumer's own requirement) follow those of the
    rules about what it was built against.
    """

    check: Check
    clauses: Encoding = by_abi_tag
    declared: bool = False


_REQUIREMENT = Rule(satisfies_requirement, requirement_clauses, declared=True)

RULES: dict[str, tuple[Rule, ...]] = {
    "python": (_REQUIREMENT,),
    "stable": (_REQUIREMENT, Rule(not_older, built_release_clauses),
               Rule(same_flavour_if_gpu_code, flavour_clauses)),
    "cxx": (Rule(satisfies_requirement, _any_flavour(requirement_clauses), declared=True),
            Rule(same_release, _any_flavour(release_clauses)),
            Rule(same_abi, _any_flavour(abi_clauses)), Rule(same_flavour)),
}


def guard_clauses(consumer: Fingerprint) -> tuple[str, ...]:
    """The clauses a consumer's guard registers: its rules, built-against ones first."""
    if consumer.link not in RULES:
        raise ClauseError(f"{_who(consumer)}: link {consumer.link!r} is not cxx/stable/python")
    rules = sorted(RULES[consumer.link], key=lambda rule: rule.declared)
    return tuple(clause for rule in rules for clause in rule.clauses(consumer))


def recorded(fingerprint: Fingerprint) -> Fingerprint:
    """The fingerprint as it is recorded: a consumer with its guard clauses derived afresh
    (None when its needs cannot be written as clauses, which the guards refuse)."""
    if fingerprint.role != "consumer":
        return fingerprint
    try:
        return replace(fingerprint, guard_clauses=guard_clauses(fingerprint))
    except ClauseError:
        return replace(fingerprint, guard_clauses=None)


def _why_compatible(provider: Fingerprint, consumer: Fingerprint) -> str:
    requirement = f"torch{consumer.requires_torch}" if consumer.requires_torch else "any torch"
    if consumer.link == "cxx" and provider.abi_tag != consumer.abi_tag:
        return (f"{_who(consumer)} links libtorch {consumer.abi_tag} and no CUDA library; "
                f"{_who(provider)} ({provider.abi_tag}) has its release and C++ ABI")
    if consumer.link == "cxx":
        return f"{_who(consumer)} links libtorch {consumer.abi_tag}, {_who(provider)} matches it"
    if consumer.link == "stable":
        return (f"{_who(consumer)} uses only the stable ABI of torch {consumer.torch.release} "
                f"and needs {requirement}; {_who(provider)} ({provider.abi_tag}) satisfies it")
    return f"{_who(consumer)} only imports torch and needs {requirement}; {_who(provider)} fits"


def _who(fingerprint: Fingerprint) -> str:
    return f"{fingerprint.name} {fingerprint.version}"


def _abi_name(cxx11: bool) -> str:
    return "C++11" if cxx11 else "pre-C++11"


def _version(text: str | None) -> Version:
    try:
        return Version(text or "")
    except InvalidVersion as exc:
        raise CompatError(f"invalid torch release {text!r}") from exc


def _release(version: str) -> tuple[int, ...]:
    try:
        return Version(version).release
    except InvalidVersion as exc:
        raise ClauseError(f"invalid version {version!r} in a torch requirement") from exc


def _join(numbers: tuple[int, ...] | list[int]) -> str:
    return ".".join(str(n) for n in numbers)
