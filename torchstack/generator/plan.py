"""Matched easyconfigs for a torch release, per toolchain and variant, and their easystacks.

The plan ties the generator's parts together: the release's wheels (release), what they
require split into toolchain modules and extension wheels (closure), the CUDA modules
(cudamodules), module names and words (projects), version suffixes (suffixes), the abi_tag of
an official wheel (abi) and the text (render). The driver touches neither network nor files:
it asks indexes (anything with the `index.protocol.Index` interface: the HTTP client, a local
folder, the embedded catalog) and the toolchain data of the robot path, and returns the texts
with a report. `output.write_set` puts them on disk.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from torchstack import cudalibs, variants
from torchstack.errors import TorchstackError
from torchstack.generator import (
    abi,
    closure,
    cudamodules,
    namesakes,
    projects,
    render,
    siteprojects,
    stage2,
    suffixes,
    toolchains,
)
from torchstack.generator.release import (
    ARCHITECTURES,
    ReleaseError,
    Request,
    Resolved,
    Resolver,
    Target,
    VariantSet,
)
from torchstack.index.protocol import Index

log = logging.getLogger(__name__)

STAGES = ("whl", "source")
CUDA_LIBS = cudamodules.MODES
ALWAYS = ("SciPy-bundle",)  # numpy interoperability, as upstream's -whl easyconfigs have it


class GenerateError(TorchstackError):
    """Settings that cannot produce any easyconfig."""


@dataclass(frozen=True)
class Settings:
    """What to generate: a release for toolchains, variants, architectures and stages."""

    release: str
    toolchains: tuple[str, ...]
    variants: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ARCHITECTURES
    stages: tuple[str, ...] = ("whl",)
    cuda_libs: str = "auto"
    glibc: tuple[int, int] = (2, 28)
    robot_paths: tuple[str, ...] | None = None
    allow_download_hash: bool = False
    consumers: tuple[str, ...] = ()  # the site's torch consumers, as requirements (--with)
    walk_back: int = siteprojects.WALK_BACK  # releases of each consumer tried, newest first
    # easystack names that carry the torch release (easystack-torch-2.15.0-foss-2025b-...):
    # sets of several releases in one folder (the shipped easyconfigs tree)
    release_in_easystack_names: bool = False


@dataclass(frozen=True)
class Planned:
    """One generated easyconfig: its file, what it builds on and what its module provides."""

    filename: str
    text: str
    architectures: tuple[str, ...]
    abi: str  # "provides torch-2.9.1-cxx11-cu12", "needs torch 2.9.1+cu128 (...)"
    facts: namesakes.Facts | None = None  # what it builds, to compare with a namesake
    resolved: Resolved | None = None  # the project it installs (None: the source stage)
    extensions: tuple[render.Extension, ...] = ()  # its wheels, the project's own last
    module: str = ""  # name-version of the module: PyTorch-2.9.1


@dataclass
class PlannedSet:
    """One variant set of one toolchain: what was written for it, its easystacks (by
    architecture), its notes, and what of it was not written, with why (`skipped`)."""

    toolchain: str  # foss/2025a
    variant: VariantSet
    easyconfigs: list[Planned] = field(default_factory=list)
    easystacks: dict[str, str] = field(default_factory=dict)  # architecture -> file name
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.toolchain} {self.variant.variant}"


@dataclass
class Generated:
    """The texts of a generated set (by file name), each variant set's record, and the lines
    of the report that belong to no one variant set."""

    easyconfigs: list[Planned] = field(default_factory=list)
    easystacks: dict[str, str] = field(default_factory=dict)
    sets: list[PlannedSet] = field(default_factory=list)
    report: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # index -> why it did not answer

    def files(self) -> dict[str, str]:
        return {**{p.filename: p.text for p in self.easyconfigs}, **self.easystacks}


def generate(settings: Settings, indexes: Sequence[Index]) -> Generated:
    """Plan and render every easyconfig of the set; GenerateError when nothing results."""
    _check(settings)
    resolver = Resolver(indexes)
    result = Generated()
    for spec in settings.toolchains:
        toolchain = toolchains.load_toolchain(spec, settings.robot_paths)
        python = tuple(int(p) for p in toolchain.python.version.split(".")[:2])
        request = Request(settings.release, (python[0], python[1]), settings.architectures,
                          settings.variants, settings.glibc)
        try:
            sets = siteprojects.with_companions(resolver, request)
        except ReleaseError as exc:
            result.report.append(f"skipped {spec}: {exc}")
            continue
        for variant_set in sets:
            for stage in settings.stages:
                _plan_stage(stage, variant_set, toolchain, settings, resolver, result)
    for location, why in resolver.unreachable.items():
        variant = variants.offered_by(location)
        if settings.variants and variant is not None and variant not in settings.variants:
            result.report.append(f"index {location} did not answer ({why}); it offers only "
                                 f"{variant}, which was not asked for")
        else:
            result.unreachable[location] = why
    if not result.easyconfigs:
        raise GenerateError("nothing generated: " + "; ".join(
            [*result.report, *(skipped_line(s, why) for s in result.sets
                               for why in s.skipped),
             *unreachable_lines(result.unreachable)]))
    result.report += namesakes.report(
        [(p.filename, p.facts) for p in result.easyconfigs if p.facts is not None],
        settings.robot_paths)
    return result


def newest_toolchain(settings: Settings, indexes: Sequence[Index],
                     candidates: Sequence[str], count: int = 1) -> Generated:
    """The set for the first `count` of `candidates` (newest first) that it can be generated
    for (fewer when fewer fit; GenerateError when none does)."""
    passed: list[str] = []
    fit: list[tuple[str, Generated]] = []
    for spec in candidates:
        try:
            fit.append((spec, generate(dataclasses.replace(settings, toolchains=(spec,)),
                                       indexes)))
        except GenerateError as exc:
            passed.append(f"{spec} ({exc})")
            continue
        if len(fit) == count:
            break
    if not fit:
        raise GenerateError(f"no toolchain of {', '.join(candidates) or 'none'} fits torch "
                            f"{settings.release}: " + "; ".join(passed))
    specs = tuple(spec for spec, _ in fit)
    if len(fit) == 1:
        result = fit[0][1]
        head = f"toolchain {specs[0]}: the newest of the robot path that fits"
    else:  # one set of them all, so that the report and the files are those of one run
        result = generate(dataclasses.replace(settings, toolchains=specs), indexes)
        head = f"toolchains {', '.join(specs)}: the {len(specs)} newest of the robot path that fit"
    result.report[:0] = [f"{head} torch {settings.release}",
                         *(f"passed over {p}" for p in passed)]
    return result


def skipped_line(record: PlannedSet, why: str) -> str:
    """'skipped foss/2025a cu128: why' (a source stage names its set itself)."""
    if why.startswith("source stage for "):
        return f"skipped {why}"
    return f"skipped {record.label}: {why}"


def unreachable_lines(unreachable: dict[str, str]) -> list[str]:
    """The indexes that did not answer, each with its error, and what to do about it."""
    if not unreachable:
        return []
    return [*(f"index {location} did not answer: {why}" for location, why in unreachable.items()),
            "incomplete: what only those indexes offer was not checked; name the indexes to "
            "use with --index (a mirror, or only those that answer), or leave their variants "
            "out with --variant"]


def _check(settings: Settings) -> None:
    render.pep440(settings.release, "torch release")
    for stage in settings.stages:
        if stage not in STAGES:
            raise GenerateError(f"stage {stage!r} is not one of {', '.join(STAGES)}")
    if settings.cuda_libs not in CUDA_LIBS:
        raise GenerateError(f"cuda_libs {settings.cuda_libs!r} is not one of "
                            f"{', '.join(CUDA_LIBS)}")
    for arch in settings.architectures:
        if arch not in ARCHITECTURES:
            raise GenerateError(f"architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}")
    if not settings.toolchains:
        raise GenerateError("no toolchain given")


def _plan_stage(stage: str, variant_set: VariantSet, toolchain: toolchains.Toolchain,
                settings: Settings, resolver: Resolver, result: Generated) -> None:
    spec = f"{toolchain.name}/{toolchain.version}"
    record = next((s for s in result.sets if s.toolchain == spec and s.variant is variant_set),
                  None)
    if record is None:
        record = PlannedSet(spec, variant_set, notes=list(variant_set.notes))
        result.sets.append(record)
    if stage == "source":
        _plan_source(variant_set, toolchain, record, result)
        return
    try:
        planned = _WheelSet(variant_set, toolchain, settings, resolver).plan()
    except TorchstackError as exc:
        record.skipped.append(str(exc))
        return
    result.easyconfigs.extend(planned.easyconfigs)
    record.easyconfigs.extend(planned.easyconfigs)
    record.notes.extend(planned.notes)
    for arch in variant_set.architectures:
        names = [p.filename for p in planned.easyconfigs if arch in p.architectures]
        stack = easystack_name(toolchain, variant_set.variant, arch,
                               settings.release if settings.release_in_easystack_names else None)
        result.easystacks[stack] = render.easystack(
            f"torch {variant_set.torch.version} for {toolchain.name}/{toolchain.version} "
            f"on {arch}", build_command(stack), names)
        record.easystacks[arch] = stack


def easystack_name(toolchain: toolchains.Toolchain, variant: str, arch: str,
                   release: str | None = None) -> str:
    """easystack-foss-2025a-cu128-x86_64.yaml, or with the release:
    easystack-torch-2.9.1-foss-2025a-cu128-x86_64.yaml."""
    named = f"torch-{release}-" if release else ""
    return f"easystack-{named}{toolchain.name}-{toolchain.version}-{variant}-{arch}.yaml"


def build_command(easystack: str) -> str:
    """How to build an easystack of the set with torchstack's easyblocks and hooks, run in
    the set's folder: that folder first on the robot path, so that the generated files win
    over upstream namesakes and subtoolchain variants."""
    return (f'eb --easystack {shlex.quote(easystack)} --robot="$PWD" '
            f'--include-easyblocks="$(torchstack easyblocks-path)/*.py" '
            f'--hooks="$(torchstack hooks-path)"')


@dataclass
class _Planned:
    easyconfigs: list[Planned] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _WheelSet:
    """The -whl easyconfigs of one variant set for one toolchain."""

    def __init__(self, variant_set: VariantSet, toolchain: toolchains.Toolchain,
                 settings: Settings, resolver: Resolver) -> None:
        self.set = variant_set
        self.toolchain = toolchain
        self.settings = settings
        self.resolver = resolver
        self.targets = [Target(variant_set.python, arch, settings.glibc)
                        for arch in variant_set.architectures]
        self.out = _Planned()
        self.cuda = self._cuda_choice()
        self.suffix = suffixes.wheels(self.cuda.cuda.version if self.cuda else None)
        self._providers: dict[tuple[str, str], list[closure.Provider]] = {}
        self.excluded = self._excluded()

    def plan(self) -> _Planned:
        triton = next((c for c in self.set.companions if variants.is_triton(c.project)), None)
        torch_deps: list[str] = []
        if triton is not None:
            triton_ec = self._easyconfig(triton, self._cuda_deps(False),
                                         f"needs CUDA {self.set.cuda} at run time ({triton.why})",
                                         toolchain=self._placement(projects.TRITON))
            torch_deps.append(render.dependency(projects.TRITON, triton_ec.version, self.suffix))
        provides = abi.provided_tag(self.set.torch.version, self.set.variant)
        torch_ec = self._easyconfig(self.set.torch, [*self._cuda_deps(True), *torch_deps],
                                    f"provides {provides}", provides)
        on_torch = render.dependency(projects.TORCH, torch_ec.version, self.suffix)
        modules: dict[str, str] = {}  # project -> its dependency line, for site projects
        for companion in self.set.companions:
            if companion is not triton:
                text = self._easyconfig(companion, [*self._cuda_deps(False), on_torch],
                                        f"needs torch {self.set.torch.version}: {companion.why}"
                                        f" (link class and abi_tag recorded at install)")
                modules[companion.project] = render.dependency(text.name, text.version,
                                                               self.suffix)
        self._site_projects(on_torch, modules)
        return self.out

    def _site_projects(self, on_torch: str, modules: dict[str, str]) -> None:
        """The consumers the site carries, after torch and each after the companions and
        site projects it requires (their modules, not wheels of them): written when a release
        fits and its predicted class runs on this set's torch; otherwise reported with the
        reason, before any build."""
        found = []
        for line in self.settings.consumers:
            requirement = Requirement(line)
            project = canonicalize_name(requirement.name)
            if project in modules:
                self.out.notes.append(f"{project}: a companion of torch "
                                      f"{self.set.torch.version}, generated as such")
                continue
            result = siteprojects.resolve(self.resolver, requirement, self.set.torch,
                                          self.set.variant, self.targets,
                                          self.settings.walk_back)
            self.out.notes.extend(result.notes)
            if result.resolved is not None:
                found.append(result)
        needs: dict[str, set[str]] = {
            f.resolved.project: {str(canonicalize_name(r.name))
                                 for r in self._requirements(f.resolved)}
            for f in found if f.resolved is not None}
        for result in siteprojects.dependency_order(found, needs):
            self._site_project(result, on_torch, modules, needs)

    def _site_project(self, found: siteprojects.Found, on_torch: str, modules: dict[str, str],
                      needs: dict[str, set[str]]) -> None:
        resolved = found.resolved
        assert resolved is not None
        on = [modules[p] for p in sorted(needs[resolved.project] & modules.keys())]
        try:
            text = self._easyconfig(resolved, [*self._cuda_deps(False), on_torch, *on],
                                    found.abi, about=siteprojects.about(resolved.project),
                                    exclude=needs[resolved.project] & modules.keys(),
                                    modulename=found.modulename)
        except TorchstackError as exc:
            self.out.notes.append(f"{resolved.project}: not built: {exc}")
            return
        modules[resolved.project] = render.dependency(text.name, text.version, self.suffix)

    def _easyconfig(self, resolved: Resolved, own_deps: list[str], abi: str,
                    provides: str | None = None,
                    toolchain: toolchains.Toolchain | None = None,
                    about: projects.About | None = None,
                    exclude: Iterable[str] = (),
                    modulename: str | None = None) -> render.EasyconfigText:
        """Render one easyconfig; `provides` is the abi_tag of a torch provider; `exclude`:
        projects whose modules `own_deps` already names."""
        provider = provides is not None
        toolchain = toolchain or self.toolchain
        about = about or projects.about(resolved.project)
        providers = self._providers_of(toolchain)
        found = closure.close(self._requirements(resolved), self.targets, providers,
                              self.resolver, [*self.excluded, *exclude])
        if found.unmet:  # the module would fail `pip check` at install: not written at all
            raise GenerateError("; ".join(found.unmet))
        self.out.notes.extend(found.notes)
        modules = [p for p in providers if p.module in found.modules
                   or p.module == "Python" or (provider and p.module in ALWAYS)]
        cuda_first = [d for d in own_deps if d.startswith("('CUDA',")]
        dependencies = [*cuda_first, *(p.dependency for p in modules),
                        *(d for d in own_deps if d not in cuda_first)]
        exts = (*(render.extension(self._hashed(r)) for r in found.extensions),
                dataclasses.replace(render.extension(self._hashed(resolved)),
                                    modulename=modulename))
        text = render.EasyconfigText(
            about.module, Version(resolved.version).public, self.suffix,
            (toolchain.name, toolchain.version), about.homepage, about.description,
            tuple(dependencies), exts,
            cuda_libs=self.cuda.cuda_libs if self.cuda and provider else None,
            abi_tag=provides)
        facts = namesakes.Facts("PyTorchWheels", tuple(dependencies),
                                tuple((e.name, e.version) for e in exts))
        self.out.easyconfigs.append(Planned(text.filename, render.easyconfig(text),
                                            tuple(sorted(resolved.wheels)), abi, facts,
                                            resolved, exts, f"{text.name}-{text.version}"))
        return text

    def _placement(self, module: str) -> toolchains.Toolchain:
        """The toolchain upstream builds `module` with (Triton on gfbf for foss)."""
        name, version = self.toolchain.placement(module)
        if (name, version) == (self.toolchain.name, self.toolchain.version):
            return self.toolchain
        return toolchains.load_toolchain(f"{name}/{version}", self.toolchain.robot_paths)

    def _hashed(self, resolved: Resolved) -> Resolved:
        """`resolved` with every sha256 known: from the index, or downloaded when allowed."""
        missing = [arch for arch, file in resolved.wheels.items() if file.sha256 is None]
        if not missing:
            return resolved
        if not self.settings.allow_download_hash:
            raise GenerateError(f"{resolved.wheels[missing[0]].filename!r}: {resolved.index} "
                                f"gives no sha256 (use --allow-download-hash to download it)")
        index = next(i for i in self.resolver.indexes if i.location == resolved.index)
        wheels = dict(resolved.wheels)
        for arch in missing:
            file = wheels[arch]
            wheels[arch] = dataclasses.replace(file, sha256=index.download_sha256(file))
            self.out.notes.append(f"downloaded {file.filename} to hash it: {resolved.index} "
                                  f"gives no sha256")
        return dataclasses.replace(resolved, wheels=wheels)

    def _requirements(self, resolved: Resolved) -> list[Requirement]:
        seen: dict[str, Requirement] = {}
        for target in self.targets:
            for requirement in resolved.requirements(target):
                seen.setdefault(str(requirement), requirement)
        return list(seen.values())

    def _excluded(self) -> list[str]:
        excluded = ["torch", *variants.TRITON_PROJECTS]
        if self.cuda is not None and self.cuda.cuda_libs == "modules":
            excluded += [p.project for p in self._pins()] + [cudalibs.TOOLKIT]
        return excluded

    def _pins(self) -> list[cudalibs.Pin]:
        pins: dict[str, cudalibs.Pin] = {}
        for target in self.targets:
            for pin in cudalibs.cuda_pins(self.set.torch.requires_dist, target.python_version,
                                          target.arch):
                pins.setdefault(pin.project, pin)
        return list(pins.values())

    def _cuda_choice(self) -> cudamodules.CudaChoice | None:
        """The CUDA module and where the libraries come from; the verdicts go to the report."""
        if self.set.cuda is None:
            return None
        cuda = cudamodules.cuda_module(self.toolchain, self.set.cuda)
        choice = cudamodules.choose(self.toolchain, self._pins(), cuda, self.settings.cuda_libs)
        how = "asked for" if self.settings.cuda_libs == choice.cuda_libs else "auto"
        self.out.notes.append(f"cuda_libs='{choice.cuda_libs}' ({how}), CUDA {cuda.version}")
        if self.settings.cuda_libs == "auto":
            self.out.notes.extend(f"  {reason}" for reason in choice.reasons)
        return choice

    def _cuda_deps(self, provider: bool) -> list[str]:
        return self.cuda.dependencies(provider) if self.cuda else []

    def _providers_of(self, toolchain: toolchains.Toolchain) -> list[closure.Provider]:
        key = (toolchain.name, toolchain.version)
        if key not in self._providers:
            self._providers[key] = closure.module_providers(toolchain)
        return self._providers[key]


def _plan_source(variant_set: VariantSet, toolchain: toolchains.Toolchain, record: PlannedSet,
                 result: Generated) -> None:
    try:
        filename, text = stage2.source_easyconfig(variant_set, toolchain)
    except TorchstackError as exc:
        record.skipped.append(f"source stage for {record.label}: {exc}")
        return
    planned = Planned(filename, text, variant_set.architectures,
                      "source build: abi_tag recorded at install")
    result.easyconfigs.append(planned)
    record.easyconfigs.append(planned)
