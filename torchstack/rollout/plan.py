"""What each consumer of the wheel PyTorch module needs before the source build is the default.

FROM is the wheel module, TO the source-built one, same torch release. Every consumer module
that runs on FROM (`scan.plan_swap`, `compat.check` against TO's fingerprint) gets one step:
- installed: a module of the same name and release already runs on TO, and its recorded
  fingerprint (recorded, never read on the fly: nothing assumed) is compatible with TO;
- rebuild: its binaries break on TO (the reasons are compat's); its own easyconfig, switched
  to TO, builds it again from source;
- reinstall: its binaries run on TO as built, but its module loads FROM: the same easyconfig,
  switched to TO, gives it a module of the source stack (nothing to fix in its binaries);
- blocked: no easyconfig can be written (none kept by its installation, prebuilt wheels that
  break on TO, no version suffix that keeps both installations apart), with the reason.

A switched module keeps the consumer's version suffix with FROM's suffix replaced by TO's
(`-CUDA-12.8.0-whl` -> `-CUDA-12.8.0`, as upstream names wheel and source builds), or with
the site's own ending (`--suffix`). The promotion is ready when every step is "installed"
and every module that may run on FROM could be read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from torchstack.errors import TorchstackError
from torchstack.fingerprint import compat
from torchstack.guards.scan import InstalledModule, NotChecked, Scan, SwapOutcome, plan_swap
from torchstack.rollout.recipes import Dependency, Recipe, RecipeError, installed_recipe

log = logging.getLogger(__name__)

Action = Literal["installed", "rebuild", "reinstall", "blocked"]
ReadRecipe = Callable[[Path], Recipe]


class RolloutError(TorchstackError):
    """A promotion that cannot be planned (modules that are no pair of one release)."""


@dataclass(frozen=True)
class Step:
    """One consumer module of FROM and what it needs on TO."""

    module: str  # the consumer module on FROM
    action: Action
    reason: str
    target: str | None = None  # its module on TO: installed, or to build
    recipe: Recipe | None = None  # its own easyconfig (rebuild, reinstall)
    suffix: str | None = None  # the version suffix of the module to build
    on_target: Dependency | None = None  # what a dependency on it becomes

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "action": self.action, "reason": self.reason,
                "target": self.target,
                "easyconfig": str(self.recipe.path) if self.recipe is not None else None}


@dataclass(frozen=True)
class Plan:
    """The steps of one promotion, in the install path's module order."""

    installpath: Path
    source: InstalledModule
    target: InstalledModule
    source_recipe: Recipe
    target_recipe: Recipe
    steps: tuple[Step, ...]
    not_checked: tuple[NotChecked, ...] = ()

    @property
    def missing(self) -> tuple[Step, ...]:
        """The consumers without a safe installation on TO."""
        return tuple(s for s in self.steps if s.action != "installed")

    @property
    def ready(self) -> bool:
        return not self.missing and not self.not_checked

    def to_build(self) -> tuple[Step, ...]:
        """The steps with an easyconfig to build, each after the consumers it loads."""
        pending = [s for s in self.steps if s.action in ("rebuild", "reinstall")]
        done: list[Step] = []
        while pending:
            names = {name for s in pending for name in _names(s)}
            free = [s for s in pending if not names & set(_loads(s))]
            if not free:
                raise RolloutError("the consumers to build load each other in a cycle: "
                                   + ", ".join(sorted(names)))
            done += free
            pending = [s for s in pending if s not in free]
        return tuple(done)

    def replacements(self) -> dict[str, Dependency]:
        """Dependency full module name on FROM's side -> what it becomes on TO's side."""
        found = {name: self.target_recipe.as_dependency()
                 for name in (self.source.name, recipe_module(self.source_recipe))}
        found.update({name: s.on_target for s in self.steps if s.on_target is not None
                      for name in _names(s)})
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "installpath": str(self.installpath),
            "from": {"module": self.source.name, "abi_tag": _tag(self.source)},
            "to": {"module": self.target.name, "abi_tag": _tag(self.target)},
            "ready": self.ready,
            "steps": [s.to_json() for s in self.steps],
            "not_checked": [n.to_json() for n in self.not_checked],
        }


def plan_rollout(scan: Scan, source: str, target: str, suffix: str | None = None,
                 read_recipe: ReadRecipe = installed_recipe) -> Plan:
    """The promotion of PyTorch module `target` over `source` in the scanned install path."""
    report = plan_swap(scan, source, target)
    old, new = report.source, report.target
    _same_release(old, new)
    recipes = [_provider_recipe(m, read_recipe) for m in (old, new)]
    outcomes = (*report.would_break, *report.stays_safe)
    steps = [_step(scan, o, new, recipes[0], recipes[1], suffix, read_recipe)
             for o in sorted(outcomes, key=lambda o: o.module)]
    return Plan(scan.installpath, old, new, recipes[0], recipes[1], _unblocked(steps),
                report.not_checked)


def _unblocked(steps: list[Step]) -> tuple[Step, ...]:
    """Steps to build that load a blocked consumer are blocked too: built as they are, they
    would load that consumer's module on FROM, and FROM with it."""
    while True:
        blocked = {name for s in steps if s.action == "blocked" for name in _names(s)}
        stuck = [i for i, s in enumerate(steps)
                 if s.action in ("rebuild", "reinstall") and blocked & set(_loads(s))]
        if not stuck:
            return tuple(steps)
        for i in stuck:
            step = steps[i]
            names = ", ".join(sorted(blocked & set(_loads(step))))
            steps[i] = Step(step.module, "blocked", f"it loads {names}, blocked itself; "
                            f"{step.reason}", step.target, step.recipe)


def derive_suffix(own: str, source: str, target: str, ending: str | None = None) -> str | None:
    """The version suffix of a consumer's module on TO: its own with FROM's suffix replaced
    by `ending` (TO's suffix by default); None when that changes nothing."""
    base = own[:-len(source)] if source and own.endswith(source) else own
    new = base + (target if ending is None else ending)
    return None if new == own else new


def target_module(module: str, own: str, new: str) -> str:
    """The module name with version suffix `own` replaced by `new` (EasyBuild's naming puts
    the suffix last)."""
    return (module[:-len(own)] if own else module) + new


def _same_release(old: InstalledModule, new: InstalledModule) -> None:
    if old.name == new.name:
        raise RolloutError(f"FROM and TO are the same module {old.name!r}")
    releases = [m.fingerprint.torch.release if m.fingerprint else None for m in (old, new)]
    try:
        same = Version(releases[0] or "") == Version(releases[1] or "")
    except InvalidVersion:
        same = False
    if not same:
        raise RolloutError(f"{old.name} holds torch {releases[0]} and {new.name} torch "
                           f"{releases[1]}: a promotion replaces a wheel stack by a source "
                           f"build of the same release")


def _provider_recipe(module: InstalledModule, read_recipe: ReadRecipe) -> Recipe:
    try:
        return read_recipe(module.software)
    except RecipeError as exc:
        raise RolloutError(f"{module.name}: {exc}") from exc


def _step(scan: Scan, outcome: SwapOutcome, new: InstalledModule, from_recipe: Recipe,
          to_recipe: Recipe, ending: str | None, read_recipe: ReadRecipe) -> Step:
    consumer = scan.get(outcome.module)
    assert consumer is not None and consumer.fingerprint is not None  # from plan_swap
    try:
        recipe: Recipe | None = read_recipe(consumer.software)
    except RecipeError as exc:
        recipe, why = None, str(exc)
    suffix = wanted = None
    if recipe is not None:
        suffix = derive_suffix(recipe.versionsuffix, from_recipe.versionsuffix,
                               to_recipe.versionsuffix, ending)
        wanted = target_module(consumer.name, recipe.versionsuffix, suffix) \
            if suffix is not None else None
    found = _safe_installation(scan, consumer, new, wanted)
    if found is not None:
        module, tag = found
        on = _dependency_on(scan, module, recipe, suffix, wanted, read_recipe)
        return Step(consumer.name, "installed", f"{module} runs on {new.name} (recorded {tag})",
                    module, on_target=on)
    if recipe is None:
        return Step(consumer.name, "blocked", f"{why}; on {new.name}: {outcome.verdict.line()}")
    return _to_build(consumer, outcome.verdict, recipe, suffix)


def _to_build(consumer: InstalledModule, verdict: compat.Verdict, recipe: Recipe,
              suffix: str | None) -> Step:
    """Rebuild or reinstall from the consumer's own easyconfig, or why that cannot work."""
    if suffix is None:
        return Step(consumer.name, "blocked",
                    f"its version suffix {recipe.versionsuffix!r} does not tell the wheel and "
                    f"source builds apart: give one with --suffix", recipe=recipe)
    wanted = target_module(consumer.name, recipe.versionsuffix, suffix)
    if not verdict.compatible and recipe.prebuilt:
        tag = consumer.fingerprint.abi_tag if consumer.fingerprint else "another torch"
        return Step(consumer.name, "blocked",
                    f"{verdict.line()}; its easyconfig installs prebuilt wheels, which stay "
                    f"built against {tag}: build {wanted} from source with an easyconfig of "
                    f"the site's own", wanted, recipe)
    on = Dependency(recipe.version, suffix)
    if not verdict.compatible:
        return Step(consumer.name, "rebuild", verdict.line(), wanted, recipe, suffix, on)
    return Step(consumer.name, "reinstall",
                f"{verdict.line()}; but its module loads {consumer.runs_on}",
                wanted, recipe, suffix, on)


def _safe_installation(scan: Scan, consumer: InstalledModule, provider: InstalledModule,
                       wanted: str | None) -> tuple[str, str] | None:
    """(module, abi tag) of an installation of the consumer's release that runs on
    `provider`, judged by its recorded fingerprint; the planned name first."""
    bare = software_name(consumer.name)
    candidates = sorted((m for m in scan.modules
                         if software_name(m.name) == bare and m.name != consumer.name),
                        key=lambda m: m.name != wanted)
    for module in candidates:
        found = module.fingerprint
        if (found is None or module.source != "recorded" or not module.is_consumer
                or module.runs_on != provider.name or consumer.fingerprint is None
                or not same_version(found.version, consumer.fingerprint.version)):
            log.debug("%s: %s is no recorded installation on %s", consumer.name, module.name,
                      provider.name)
            continue
        assert provider.fingerprint is not None
        verdict = compat.check(provider.fingerprint, found)
        log.debug("%s: %s on %s: %s", consumer.name, module.name, provider.name, verdict.line())
        if verdict.compatible:
            return module.name, found.abi_tag
    return None


def software_name(module: str) -> str:
    """The software of a module's full name: the folder its module file is in, at any level
    of a hierarchical tree (`fakeops` of `fakeops/1.0` and of `Core/fakeops/1.0`)."""
    return (module.rpartition("/")[0] or module).rpartition("/")[2]


def same_version(left: str, right: str) -> bool:
    """One release of a package, local tags and pre-release marks of source builds aside
    (a wheel's 0.21.0+cpu is a source build's 0.21.0 or 0.21.0a0+git1234)."""
    try:
        return Version(left).base_version == Version(right).base_version
    except InvalidVersion:
        return left == right


def _dependency_on(scan: Scan, module: str, recipe: Recipe | None, suffix: str | None,
                   wanted: str | None, read_recipe: ReadRecipe) -> Dependency | None:
    """What a dependency on the consumer becomes: its installed module on TO."""
    if module == wanted and recipe is not None and suffix is not None:
        return Dependency(recipe.version, suffix)
    installed = scan.get(module)
    try:
        return read_recipe(installed.software).as_dependency() if installed else None
    except RecipeError:
        return None


def recipe_module(recipe: Recipe) -> str:
    """The module name that EasyBuild's default naming scheme gives an easyconfig, as
    `Recipe.dependencies` name their modules (`det_full_ec_version`): a hierarchical tree's
    scan names it otherwise (`Core/PyTorch/2.6.0-whl` for `PyTorch/2.6.0-whl`)."""
    name, version = recipe.toolchain
    toolchain = "" if name.lower() == "system" else f"-{name}-{version}"
    return f"{recipe.name}/{recipe.version}{toolchain}{recipe.versionsuffix}"


def _names(step: Step) -> set[str]:
    """The consumer's module name in the scan and in easyconfigs' dependencies."""
    return {step.module, *([recipe_module(step.recipe)] if step.recipe is not None else [])}


def _loads(step: Step) -> tuple[str, ...]:
    return step.recipe.dependencies if step.recipe is not None else ()


def _tag(module: InstalledModule) -> str | None:
    return module.fingerprint.abi_tag if module.fingerprint is not None else None
