"""torchstack.fingerprint.compat: a table per rule, then check() end to end, on Fingerprint
objects."""

from __future__ import annotations

import pytest
from support.fingerprints import (
    CPU,
    CPU_OLD_ABI,
    CU12,
    CU13,
    CUDA_LIBS,
    HIP_LIBS,
    NEWER,
    OLDER,
    ROCM,
    consumer,
    provider,
)

from torchstack.fingerprint import compat
from torchstack.fingerprint.compat import Check, CompatError, Verdict
from torchstack.fingerprint.read import Fingerprint, TorchFacts


def apply(rule: Check, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
    """The rule passes (`expected` None) or refuses with a reason containing `expected`."""
    reason = rule(p, c)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None
        assert expected in reason
        assert "\n" not in reason


class TestSatisfiesRequirement:
    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # an exact pin without local tag accepts the provider's local tag
            (CPU, consumer(requires="==2.13.0"), None),
            (CU13, consumer(requires="==2.13.0"), None),
            # a range that holds the release
            (CPU, consumer(requires="<2.14,>=2.13"), None),
            # no requirement at all: "" or null (from JSON)
            (CPU, consumer("python", requires=""), None),
            (CPU, consumer("python", requires=None), None),
            # a pre-release provider (source build) satisfies a lower bound
            (provider("2.14.0a0+git1234567"), consumer(requires=">=2.13.0"), None),
            # too old for a lower bound
            (CPU, consumer("python", requires=">=2.14.0", name="fake-pure"),
             "fake-pure 0.1.0 requires torch>=2.14.0, not torch 2.13.0+cpu"),
            # another release than the pin
            (NEWER, consumer(requires="==2.13.0"),
             "fakevision 0.1.0 requires torch==2.13.0, not torch 2.14.1+cpu"),
            # a wildcard pin of another minor
            (CPU, consumer(requires="==2.12.*"), "requires torch==2.12.*"),
            # a provider version that is not PEP 440 satisfies nothing
            (provider("garbage"), consumer(requires=">=2.13"),
             "requires torch>=2.13, not torch garbage"),
        ],
        ids=["pin", "pin-local-tag", "range", "none", "null", "prerelease", "too-old",
             "other-pin", "wildcard", "bad-version"],
    )
    def test_rule(self, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
        apply(compat.satisfies_requirement, p, c, expected)

    @pytest.mark.parametrize(
        ("p", "c", "match"),
        [
            # a specifier that is not PEP 440
            (CPU, consumer(requires="=>2.13"), r"cannot compare '2\.13\.0\+cpu' with '=>2\.13'"),
            # a specifier with an unbalanced wildcard
            (CPU, consumer(requires="==2.*.1"), r"cannot compare .* '==2\.\*\.1'"),
        ],
        ids=["bad-specifier", "bad-wildcard"],
    )
    def test_cannot_compare(self, p: Fingerprint, c: Fingerprint, match: str) -> None:
        with pytest.raises(CompatError, match=match):
            compat.satisfies_requirement(p, c)


class TestNotOlder:
    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # the release it was built against
            (CPU, consumer("stable"), None),
            # a newer one: the stable ABI holds forward
            (NEWER, consumer("stable"), None),
            # the same release spelled shorter
            (CPU, consumer("stable", release="2.13"), None),
            # unknown built-against release: nothing to hold against the provider
            (OLDER, consumer("stable", release=None), None),
            # older than the consumer's stable ABI
            (OLDER, consumer("stable"),
             "fakevision 0.1.0 uses the stable ABI of torch 2.13.0, newer than torch 2.12.0+cpu"),
        ],
        ids=["same", "newer", "short-release", "unknown", "older"],
    )
    def test_rule(self, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
        apply(compat.not_older, p, c, expected)

    def test_unreadable_release(self) -> None:
        # a provider without a release (a hand-written JSON fingerprint)
        p = Fingerprint("provider", "torch", "2.13.0", TorchFacts(None, None, True, None, None),
                        None, None, None, "torch-unknown-cxx11-cpu")
        with pytest.raises(CompatError, match=r"invalid torch release None"):
            compat.not_older(p, consumer("stable"))


class TestSameRelease:
    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # same release; the local tag does not count
            (CPU, consumer(), None),
            (CU13, consumer(cuda="13.0"), None),
            # same release spelled shorter
            (CPU, consumer(release="2.13"), None),
            # a newer provider breaks the C++ API
            (NEWER, consumer(), "fakevision 0.1.0 was built against torch 2.13.0, not 2.14.1"),
            # an older one too
            (OLDER, consumer(), "was built against torch 2.13.0, not 2.12.0"),
            # the release is unknown: refuse, a C++ consumer needs the exact one
            (CPU, consumer(release=None),
             "links libtorch's C++ API but the torch release it was built against is unknown"),
        ],
        ids=["same", "same-local-tag", "short-release", "newer", "older", "unknown"],
    )
    def test_rule(self, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
        apply(compat.same_release, p, c, expected)


class TestSameAbi:
    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # both C++11, both pre-C++11
            (CPU, consumer(cxx11_abi=True), None),
            (CPU_OLD_ABI, consumer(cxx11_abi=False), None),
            # unknown on either side: no evidence to refuse on
            (CPU, consumer(cxx11_abi=None), None),
            (provider(cxx11_abi=None), consumer(cxx11_abi=False), None),
            # a C++11 consumer on an old-ABI torch
            (CPU_OLD_ABI, consumer(cxx11_abi=True),
             "fakevision 0.1.0 uses the C++11 C++ ABI, torch 2.13.0+cpu the pre-C++11 one"),
            # an old-ABI consumer on a C++11 torch
            (CPU, consumer(cxx11_abi=False),
             "fakevision 0.1.0 uses the pre-C++11 C++ ABI, torch 2.13.0+cpu the C++11 one"),
        ],
        ids=["cxx11", "precxx11", "consumer-unknown", "provider-unknown", "cxx11-on-old",
             "old-on-cxx11"],
    )
    def test_rule(self, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
        apply(compat.same_abi, p, c, expected)


class TestSameFlavour:
    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # CPU on CPU, CUDA 13 on CUDA 13, ROCm on the same ROCm
            (CPU, consumer(), None),
            (CU13, consumer(cuda="13.0", libraries=CUDA_LIBS), None),
            (ROCM, consumer(hip="6.4", libraries=HIP_LIBS), None),
            # built for CPU torch but links libcudart.so.13 itself: needs cu13
            (CU13, consumer(cuda_major=13), None),
            (CPU, consumer(cuda_major=13), "fakevision 0.1.0 needs a cu13 torch, "
                                           "torch 2.13.0+cpu is cpu"),
            # links libtorch_cuda.so: never on a CPU-only torch
            (CPU, consumer(cuda="13.0", libraries=("libc10.so", "libtorch_cuda.so")),
             "fakevision 0.1.0 links libtorch_cuda.so (cu13), torch 2.13.0+cpu is CPU-only"),
            # another CUDA major
            (CU13, consumer(cuda="12.8", libraries=CUDA_LIBS),
             "needs a cu12 torch, torch 2.13.0+cu130 is cu13"),
            (CU12, consumer(cuda="13.0", libraries=CUDA_LIBS),
             "needs a cu13 torch, torch 2.13.0+cu128 is cu12"),
            # links no GPU library: any flavour of its release (torchcodec 0.9 on CUDA torch),
            # whatever its local tag says
            (CU13, consumer(), None),
            (ROCM, consumer(), None),
            (CU12, consumer(cuda="13.0"), None),
            # libraries not recorded (an older fingerprint): its torch facts' flavour
            (CU13, consumer(libraries=()), "needs a cpu torch, torch 2.13.0+cu130 is cu13"),
            # ROCm against CUDA
            (CU13, consumer(hip="6.4", libraries=HIP_LIBS),
             "needs a rocm6.4 torch, torch 2.13.0+cu130 is cu13"),
        ],
        ids=["cpu", "cu13", "rocm", "own-cudart-on-cuda", "own-cudart-on-cpu",
             "libtorch-cuda-on-cpu", "cu12-on-cu13", "cu13-on-cu12", "gpu-free-on-cu13",
             "gpu-free-on-rocm", "gpu-free-cu13-tag-on-cu12", "unrecorded-cpu-on-cu13",
             "rocm-on-cu13"],
    )
    def test_rule(self, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
        apply(compat.same_flavour, p, c, expected)


class TestSameFlavourIfGpuCode:
    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # no GPU code: any flavour will do
            (CPU, consumer("stable", libraries=()), None),
            (CU13, consumer("stable", libraries=()), None),
            (ROCM, consumer("stable", libraries=()), None),
            # GPU code of the provider's flavour
            (CU13, consumer("stable", cuda="13.0", libraries=()), None),
            (CU13, consumer("stable", cuda_major=13, libraries=()), None),
            # GPU code on a CPU torch
            (CPU, consumer("stable", cuda_major=13, libraries=()),
             "fakevision 0.1.0 needs a cu13 torch, torch 2.13.0+cpu is cpu"),
            # GPU code of another major
            (CU12, consumer("stable", cuda="13.0", cuda_major=13, libraries=()),
             "needs a cu13 torch, torch 2.13.0+cu128 is cu12"),
        ],
        ids=["cpu-on-cpu", "cpu-on-cu13", "cpu-on-rocm", "cu13-local-tag", "cu13-cudart",
             "cu13-on-cpu", "cu13-on-cu12"],
    )
    def test_rule(self, p: Fingerprint, c: Fingerprint, expected: str | None) -> None:
        apply(compat.same_flavour_if_gpu_code, p, c, expected)


class TestRules:
    def test_rules_of_each_link_class(self) -> None:
        # the table of docs/design.rst, "Compatibility rules"
        expected = {
            "python": (compat.satisfies_requirement,),
            "stable": (compat.satisfies_requirement, compat.not_older,
                       compat.same_flavour_if_gpu_code),
            "cxx": (compat.satisfies_requirement, compat.same_release, compat.same_abi,
                    compat.same_flavour),
        }
        assert expected == {link: tuple(r.check for r in rules)
                            for link, rules in compat.RULES.items()}

    @pytest.mark.parametrize(
        ("c", "clauses"),
        [
            # cxx linking GPU code: no clause, the guards compare the exact abi tag
            (consumer("cxx", cuda="13.0", libraries=CUDA_LIBS), ()),
            # cxx linking none: its release and ABI, then its requirement, on any flavour
            (consumer("cxx"), ("release=2.13.0", "abi=cxx11", "==2.13.0")),
            # stable with GPU code: built-against release and flavour, then its requirement
            (consumer("stable", release="2.14.1", requires="<2.16", cuda_major=13),
             (">=2.14.1", "flavour=cu13", "<2.16")),
            # python: its requirement alone
            (consumer("python", release=None, requires="~=2.13.0"), (">=2.13.0", "<2.14")),
        ],
    )
    def test_guard_clauses(self, c: Fingerprint, clauses: tuple[str, ...]) -> None:
        assert compat.guard_clauses(c) == clauses

    def test_guard_clauses_of_an_invalid_requirement(self) -> None:
        with pytest.raises(compat.ClauseError, match="invalid torch requirement 'torch>=2'"):
            compat.guard_clauses(consumer("python", requires="torch>=2"))


class TestCheck:
    @pytest.mark.parametrize(
        ("p", "c", "reason"),
        [
            # C++ consumer of the very torch
            (CPU, consumer(),
             "fakevision 0.1.0 links libtorch torch-2.13.0-cxx11-cpu, torch 2.13.0+cpu matches it"),
            (CU13, consumer(cuda="13.0", cuda_major=13),
             "links libtorch torch-2.13.0-cxx11-cu13, torch 2.13.0+cu130 matches it"),
            # stable consumer on a newer torch
            (NEWER, consumer("stable", requires=">=2.13.0", libraries=()),
             "fakevision 0.1.0 uses only the stable ABI of torch 2.13.0 and needs "
             "torch>=2.13.0; torch 2.14.1+cpu (torch-2.14.1-cxx11-cpu) satisfies it"),
            # python consumer without requirement, and with one
            (CPU, consumer("python", requires="", libraries=()),
             "fakevision 0.1.0 only imports torch and needs any torch; torch 2.13.0+cpu fits"),
            (CU13, consumer("python", requires=">=2.0", libraries=()),
             "needs torch>=2.0; torch 2.13.0+cu130 fits"),
        ],
        ids=["cxx-cpu", "cxx-cu13", "stable-newer", "python-any", "python-range"],
    )
    def test_compatible_has_one_reason(self, p: Fingerprint, c: Fingerprint, reason: str) -> None:
        verdict = compat.check(p, c)
        assert verdict.compatible
        assert len(verdict.reasons) == 1
        assert reason in verdict.reasons[0]
        assert verdict.line() == f"compatible: {verdict.reasons[0]}"

    @pytest.mark.parametrize(
        ("p", "c", "expected"),
        [
            # C++ consumer: requirement, release, ABI and flavour all wrong
            (provider("2.14.1+cpu", cxx11_abi=False),
             consumer(cuda="13.0", libraries=("libc10.so", "libtorch_cuda.so")),
             ["requires torch==2.13.0, not torch 2.14.1+cpu",
              "was built against torch 2.13.0, not 2.14.1",
              "uses the C++11 C++ ABI, torch 2.14.1+cpu the pre-C++11 one",
              "links libtorch_cuda.so (cu13), torch 2.14.1+cpu is CPU-only"]),
            # C++ consumer: only the ABI is wrong
            (CPU_OLD_ABI, consumer(), ["uses the C++11 C++ ABI"]),
            # C++ consumer of unknown release and wrong flavour
            (CU12, consumer(requires="", release=None, cuda="13.0", libraries=CUDA_LIBS),
             ["built against is unknown", "needs a cu13 torch, torch 2.13.0+cu128 is cu12"]),
            # stable consumer: requirement, age and flavour all wrong
            (OLDER, consumer("stable", requires=">=2.13.0", cuda_major=13, libraries=()),
             ["requires torch>=2.13.0, not torch 2.12.0+cpu",
              "uses the stable ABI of torch 2.13.0, newer than torch 2.12.0+cpu",
              "needs a cu13 torch, torch 2.12.0+cpu is cpu"]),
            # python consumer: its one rule
            (CPU, consumer("python", requires=">=2.14.0", libraries=()),
             ["requires torch>=2.14.0, not torch 2.13.0+cpu"]),
        ],
        ids=["cxx-all-four", "cxx-abi-only", "cxx-unknown-release", "stable-all-three",
             "python"],
    )
    def test_refusal_collects_every_reason(
        self, p: Fingerprint, c: Fingerprint, expected: list[str]
    ) -> None:
        verdict = compat.check(p, c)
        assert not verdict.compatible
        assert len(verdict.reasons) == len(expected)
        for reason, fragment in zip(verdict.reasons, expected):
            assert fragment in reason
        assert verdict.line() == "incompatible: " + "; ".join(verdict.reasons)

    def test_consumer_without_link_is_python(self) -> None:
        # a JSON fingerprint with link null: only the requirement counts
        c = Fingerprint("consumer", "fake-pure", "1.0", TorchFacts(None, None, None, None, None),
                        None, ">=2.14", None, "torch-python")
        assert compat.check(CPU, c) == Verdict(False, (
            "fake-pure 1.0 requires torch>=2.14, not torch 2.13.0+cpu",))

    @pytest.mark.parametrize(
        ("p", "c", "match"),
        [
            # a consumer in the provider's place
            (consumer(), consumer(), r"^fakevision 0\.1\.0 is a consumer, not a torch provider$"),
            # a provider in the consumer's place
            (CPU, CU13, r"^torch 2\.13\.0\+cu130 is a torch provider, not a consumer$"),
            # both swapped: the provider slot is checked first
            (consumer(), CPU, r"is a consumer, not a torch provider"),
        ],
        ids=["consumer-as-provider", "provider-as-consumer", "swapped"],
    )
    def test_wrong_roles(self, p: Fingerprint, c: Fingerprint, match: str) -> None:
        with pytest.raises(CompatError, match=match):
            compat.check(p, c)

    def test_unreadable_specifier(self) -> None:
        with pytest.raises(CompatError, match=r"cannot compare .* '~~2'"):
            compat.check(CPU, consumer("python", requires="~~2"))
