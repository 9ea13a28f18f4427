"""Every release of the embedded catalog, generated offline for several toolchains, passes
`eb --check-contrib` and names no dict key twice.

The catalog holds the real PyPI answers (files.pythonhosted.org folder URLs, nvidia wheel
names), which the synthetic indexes of test_generate.py do not have. Releases added to the
catalog later are covered without a change here. All files go through one `eb` call.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.dictkeys import duplicate_keys
from support.ebenv import EasyBuildEnv

from torchstack.cli import main
from torchstack.index import catalog

# Every foss toolchain that generates for some release of the catalog. foss/2023b lacks a
# module torch requires (typing-extensions) for most releases: torchstack skips those sets and
# must say why. gfbf/2025a stands for the gfbf ones, whose output differs from foss/X in the
# toolchain line only.
TOOLCHAINS = ("foss/2025a", "foss/2024a", "foss/2025b", "foss/2026.1", "foss/2023b", "gfbf/2025a")


def _generate(release: str, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`generate --offline` of a release for every toolchain at once: its code and report."""
    code = main(["generate", release, "--offline", "--out", str(out),
                 *(arg for tc in TOOLCHAINS for arg in ("--toolchain", tc))])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_catalog_releases_pass_check_contrib(tmp_path: Path, eb_env: EasyBuildEnv,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    offline_sets = {release: tmp_path / release for release in catalog.releases()}
    assert offline_sets, "the embedded catalog holds no release"
    generated: set[tuple[str, str]] = set()
    for release, out in offline_sets.items():
        code, report = _generate(release, out, capsys)
        assert code == 0, report[-3000:]
        for tc in TOOLCHAINS:
            name, version = tc.split("/")
            if list(out.glob(f"easystack-{name}-{version}-*.yaml")):
                generated.add((release, tc))
                continue
            # a toolchain with no set for this release: torchstack says why, for each set
            skips = re.findall(rf"^(?:  left out: )?skipped {re.escape(tc)}\b[^:]*: (.+)$",
                               report, re.MULTILINE)
            assert skips and all(why.strip() for why in skips), \
                f"{tc} generated nothing for {release} and torchstack does not say why"
        assert any(r == release for r, _ in generated), f"nothing generated for {release}"
    assert {tc for _, tc in generated} >= {"foss/2025a", "foss/2024a", "foss/2025b"}

    files = sorted(p for out in offline_sets.values() for p in out.glob("*.eb"))
    texts = {str(p): p.read_text() for p in files}
    assert {path: keys for path, text in texts.items() if (keys := duplicate_keys(text))} == {}
    # the real folder URLs are too long for one line: the wrapped layout is what is checked
    assert any("'source_urls': [\n" in text for text in texts.values())

    result = eb_env.run_eb("--check-contrib", *texts, cwd=next(iter(offline_sets.values())))
    failed = [line for line in result.stdout.splitlines() if line.startswith("[FAIL]")]
    assert "All contribution checks PASSed!" in result.stdout, \
        "\n".join(failed) + result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0 and result.stdout.count("[PASS]") >= len(files)
