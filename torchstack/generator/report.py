"""What `torchstack generate` reports, as data, and its two printed forms.

`build` turns a generated set (plan.Generated) into a `Report`: per variant set, the toolchain,
variant, Python, torch, each project with its wheels (file name, URL, sha256), the easyconfigs
and easystacks written, what was left out and why, the notes, and the build commands. `text`
prints it: a short summary first (per set: what was written, one line for each thing left out,
the build command), the detail (each wheel, its index, why it was chosen, the notes) only when
asked for; `as_json` is the whole report as one JSON document. Both read the same `Report`, so
they cannot disagree.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchstack.generator import plan, render

# A note saying that something of a set was not written (a variant, an architecture, a
# companion, a site project) or could not be checked, or that an index's credentials were not
# written: shown in the summary, one line each. Every other note is detail.
_LEFT_OUT = re.compile(r"\bnot (generated|built|checked|written)\b|\bno \S+ wheel\b|: no |"
                       r"\bis yanked\b|^skipped |\bdid not answer\b")


def left_out(note: str) -> bool:
    """Whether a note of the report says what was left out (else it is detail)."""
    return bool(_LEFT_OUT.search(note))


@dataclass(frozen=True)
class Wheel:
    arch: str
    filename: str
    url: str  # of the file, without credentials
    sha256: str


@dataclass(frozen=True)
class Project:
    """One project installed by a written easyconfig: its own wheels, the extension wheels
    that come with it, and why this version."""

    project: str
    version: str
    index: str
    why: str
    easyconfig: str  # path of the easyconfig that installs it
    abi: str
    wheels: tuple[Wheel, ...]
    extensions: tuple[dict[str, Any], ...]  # {"name", "version", "wheels": [Wheel as dict]}


@dataclass(frozen=True)
class Easyconfig:
    path: str
    module: str  # PyTorch-2.9.1
    architectures: tuple[str, ...]
    abi: str


@dataclass(frozen=True)
class Easystack:
    arch: str
    path: str
    build_command: str  # on this host
    submit_command: str | None  # as Slurm jobs (None: not asked for)


@dataclass(frozen=True)
class Set:
    toolchain: str
    variant: str
    python: str
    torch: str
    architectures: tuple[str, ...]
    projects: tuple[Project, ...]
    easyconfigs: tuple[Easyconfig, ...]
    easystacks: tuple[Easystack, ...]
    left_out: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    release: str
    folder: str
    offline: bool
    sources: tuple[str, ...]  # where the answers come from (offline: the catalog's records)
    sets: tuple[Set, ...]
    left_out: tuple[str, ...]  # what no one set holds: toolchains skipped, indexes not asked
    notes: tuple[str, ...]  # the toolchain chosen, upstream namesakes shadowed
    replaced: tuple[str, ...]  # files of the folder that were replaced
    unreachable: tuple[tuple[str, str], ...]  # (index, why) of indexes that did not answer
    incomplete: tuple[str, ...]  # the unreachable indexes as report lines, with the advice

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["unreachable"] = [{"index": i, "why": why} for i, why in self.unreachable]
        return data


def build(generated: plan.Generated, release: str, folder: Path, *, offline: bool = False,
          sources: Sequence[str] = (), replaced: Iterable[str] = (),
          submit: Callable[[str], str] | None = None) -> Report:
    """The report of a written set; `submit(easystack)` gives the command that submits an
    easystack as jobs, when those are wanted."""
    where = folder.absolute()
    cd = f"cd {shlex.quote(str(where))} && "
    sets = []
    for record in generated.sets:
        stacks = tuple(Easystack(arch, str(where / name), cd + plan.build_command(name),
                                 cd + submit(name) if submit else None)
                       for arch, name in record.easystacks.items())
        notes = [*(plan.skipped_line(record, why) for why in record.skipped), *record.notes]
        sets.append(Set(
            record.toolchain, record.variant.variant,
            "{}.{}".format(*record.variant.python), record.variant.torch.version,
            record.variant.architectures,
            tuple(_project(p, where) for p in record.easyconfigs if p.resolved is not None),
            tuple(Easyconfig(str(where / p.filename), _module(p), p.architectures, p.abi)
                  for p in record.easyconfigs),
            stacks, tuple(n for n in notes if left_out(n)),
            tuple(n for n in notes if not left_out(n))))
    unreachable = tuple(generated.unreachable.items())
    return Report(
        release, str(where), offline,
        tuple(sources),
        tuple(sets), tuple(n for n in generated.report if left_out(n)),
        tuple(n for n in generated.report if not left_out(n)), tuple(replaced), unreachable,
        tuple(plan.unreachable_lines(generated.unreachable)))


def _module(planned: plan.Planned) -> str:
    return planned.module or planned.filename.removesuffix(".eb")


def _wheels(extension: render.Extension) -> tuple[Wheel, ...]:
    return tuple(Wheel(arch, s.filename, f"{s.url}/{s.download_filename or s.filename}",
                       s.sha256) for arch, s in extension.sources)


def _project(planned: plan.Planned, where: Path) -> Project:
    resolved = planned.resolved
    assert resolved is not None
    *extensions, own = planned.extensions
    return Project(
        resolved.project, resolved.version, resolved.index, resolved.why,
        str(where / planned.filename), planned.abi, _wheels(own),
        tuple({"name": e.name, "version": e.version,
               "wheels": [dataclasses.asdict(w) for w in _wheels(e)]} for e in extensions))


def as_json(report: Report) -> str:
    """The whole report as one JSON document."""
    return json.dumps(report.as_dict(), indent=2)


def text(report: Report, verbose: bool = False) -> list[str]:
    """The summary (a few lines a set); with `verbose`, each set's detail after it."""
    lines: list[str] = []
    written = sum(len(s.easyconfigs) for s in report.sets)
    stacks = sum(len(s.easystacks) for s in report.sets)
    lines.append(f"torch {report.release}: {written} easyconfigs and {stacks} easystacks "
                 f"written to {report.folder}" + (f" ({len(report.replaced)} replaced)"
                                                  if report.replaced else ""))
    if verbose:
        lines += [*report.sources, *report.notes]
    else:  # an index that did not answer is named once, in the lines of `incomplete`
        lines += [line for line in report.sources
                  if not any(index in line for index, _ in report.unreachable)]
        lines += [note for note in report.notes if note.startswith("toolchain ")]
    for s in report.sets:
        lines += _set_lines(s, verbose)
    lines += report.left_out
    if verbose:
        lines += [f"replaced {name}" for name in report.replaced]
    return lines


def _set_lines(s: Set, verbose: bool) -> list[str]:
    head = f"{s.toolchain} {s.variant} (torch {s.torch}, Python {s.python}; " \
           f"{', '.join(s.architectures)}): "
    if not s.easyconfigs:
        lines = [head + "nothing written"]
    else:
        lines = [head + f"{len(s.easyconfigs)} easyconfigs: "
                 + ", ".join(e.module for e in s.easyconfigs)]
    lines += [f"  left out: {note}" for note in s.left_out]
    if verbose:
        lines += _detail(s)
    for stack in s.easystacks:
        lines.append(f"  build {stack.arch}: {stack.build_command}")
        if stack.submit_command:
            lines.append(f"  submit {stack.arch} as Slurm jobs: {stack.submit_command}")
    return lines


def _detail(s: Set) -> list[str]:
    label = f"{s.toolchain} {s.variant}"
    by_path = {p.easyconfig: p for p in s.projects}
    lines = []
    for easyconfig in s.easyconfigs:
        lines.append(f"  generated {Path(easyconfig.path).name} "
                     f"({', '.join(easyconfig.architectures)}): {easyconfig.abi}")
        project = by_path.get(easyconfig.path)
        if project is None:
            continue
        lines.append(f"    {project.project} {project.version} from {project.index}"
                     + (f": {project.why}" if project.why else ""))
        lines += [f"    {w.arch}: {w.filename} sha256 {w.sha256}" for w in project.wheels]
        lines += [f"    with {e['name']} {e['version']}" for e in project.extensions]
    lines += [f"  {label}: {note}" for note in s.notes]
    return lines
