"""render: only validated values reach an easyconfig, always as Python literals."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pycodestyle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.dictkeys import duplicate_keys

from torchstack.cli import main
from torchstack.generator.render import (
    EasyconfigText,
    Extension,
    RenderError,
    Source,
    _py_lines,
    dependency,
    easyconfig,
    easystack,
    module_dependency,
    project_name,
    source,
)
from torchstack.generator.toolchains import Dependency
from torchstack.index import catalog
from torchstack.index.protocol import IndexFile

SHA = "a" * 64


def _file(url: str, sha256: str | None = SHA) -> IndexFile:
    return IndexFile(project="torch", filename=url.rsplit("/", 1)[-1], url=url, sha256=sha256,
                     size=1, requires_python=None, yanked=False, core_metadata=False)


class TestSource:
    def test_plus_spelled_as_percent_2b(self) -> None:
        found = source(_file("https://download.pytorch.org/whl/cpu/"
                             "torch-2.9.1%2Bcpu-cp313-cp313-manylinux_2_28_x86_64.whl"))
        assert found == Source("torch-2.9.1+cpu-cp313-cp313-manylinux_2_28_x86_64.whl",
                               "https://download.pytorch.org/whl/cpu", SHA,
                               "torch-2.9.1%2Bcpu-cp313-cp313-manylinux_2_28_x86_64.whl")

    @pytest.mark.parametrize("url", [
        "https://h/x/torch-1-py3-none-any.whl?token=1",   # a query
        "https://h/x/torch'-1-py3-none-any.whl",          # a quote
        "https://h/x'/torch-1-py3-none-any.whl",          # a quote in the folder
        "https://h/x/torch-1-py3-none-any.whl%0A",        # an encoded newline
        "ftp://h/x/torch-1-py3-none-any.whl",             # another scheme
    ], ids=["query", "quote", "folder-quote", "newline", "scheme"])
    def test_unsafe_urls(self, url: str) -> None:
        with pytest.raises(RenderError, match="not a plain file URL"):
            source(_file(url))

    @pytest.mark.parametrize("sha256", [None, "A" * 64, "a" * 63, "'" + "a" * 63])
    def test_bad_hashes(self, sha256: str | None) -> None:
        with pytest.raises(RenderError, match="no valid sha256"):
            source(_file("https://h/x/torch-1-py3-none-any.whl", sha256))


class TestNames:
    @pytest.mark.parametrize("name", ["torch'", "a\nb", "-torch", ""])
    def test_project_names(self, name: str) -> None:
        with pytest.raises(RenderError, match="not a valid project name"):
            project_name(name)

    def test_dependency_forms(self) -> None:
        assert dependency("Python", "3.13.1") == "('Python', '3.13.1')"
        assert dependency("CUDA", "12.8.0", system=True) == "('CUDA', '12.8.0', '', SYSTEM)"
        assert dependency("cuDNN", "9.10.1.4", "-CUDA-%(cudaver)s", system=True) == \
            "('cuDNN', '9.10.1.4', '-CUDA-%(cudaver)s', SYSTEM)"

    @pytest.mark.parametrize(("module", "suffix", "expected"), [
        (Dependency("Python", "3.13.1", "", ("GCCcore", "14.2.0"), "x.eb"), None,
         "('Python', '3.13.1')"),
        (Dependency("CUDA", "12.8.0", "", ("system", "system"), "x.eb"), "",
         "('CUDA', '12.8.0', '', SYSTEM)"),  # the system toolchain is named
        (Dependency("NCCL", "2.26.6", "-CUDA-12.8.0", ("GCCcore", "14.2.0"), "x.eb"), None,
         "('NCCL', '2.26.6', '-CUDA-12.8.0')"),  # its own suffix
        (Dependency("cuDNN", "9.10.1.4", "-CUDA-12.8.0", ("system", "system"), "x.eb"),
         "-CUDA-%(cudaver)s", "('cuDNN', '9.10.1.4', '-CUDA-%(cudaver)s', SYSTEM)"),
    ], ids=["plain", "system", "own-suffix", "other-suffix"])
    def test_module_dependency(self, module: Dependency, suffix: str | None,
                               expected: str) -> None:
        assert module_dependency(module, suffix) == expected

    @pytest.mark.parametrize(("args", "match"), [
        (("Py'thon", "3"), "cannot be part of a module name"),
        (("Python", "3\n"), "cannot be part of a module name"),
        (("Python", "3", "-x'"), "is not a version suffix"),
    ])
    def test_dependency_refuses(self, args: tuple[str, ...], match: str) -> None:
        with pytest.raises(RenderError, match=match):
            dependency(*args)

    def test_easystack_refuses_odd_names(self) -> None:
        with pytest.raises(RenderError, match="not a plain easyconfig file name"):
            easystack("t", "c", ["a.eb\n- b.eb"])


# -- layout: what `eb --check-contrib` accepts -------------------------------------------------

# A PyPI folder as the real index gives it (107 characters) and the longest wheel name of the
# embedded catalog (90), which a per-arch dict puts at column 16.
PYPI_URL = ("https://files.pythonhosted.org/packages/bb/fe/"
            "1bcba1dfbfb8d01be8d93f07bfc502c93fa23afa6fd5ab3fc7c1df71038a")
LONG_WHEEL = ("nvidia_cuda_runtime_cu12-12.8.90-py3-none-"
              "manylinux2014_aarch64.manylinux_2_17_aarch64.whl")
MAX_LINE = 120  # easybuild.framework.easyconfig.style.MAX_LINE_LENGTH


class _Collect(pycodestyle.BaseReport):
    def __init__(self, options: object) -> None:
        super().__init__(options)
        self.found: list[str] = []

    def error(self, line_number: int, offset: int, text: str, check: object) -> str | None:
        code: str | None = super().error(line_number, offset, text, check)
        if code:
            self.found.append(f"{line_number}:{offset + 1}: {text}")
        return code


def style_errors(text: str) -> list[str]:
    """pycodestyle's complaints about an easyconfig's text, configured as `eb --check-contrib`
    does (easybuild/framework/easyconfig/style.py: 120 columns, the ignore list replaced, so
    E121/E123/E126 count too). W291 stays on here: EasyBuild swaps it for W299, its own
    trailing-whitespace check that spares the description."""
    guide = pycodestyle.StyleGuide(quiet=True, config_file=None, reporter=_Collect)
    guide.options.max_line_length = MAX_LINE
    guide.options.ignore = ("E741",)
    guide.input_file("easyconfig.eb", lines=text.splitlines(keepends=True))
    report = guide.options.report
    assert isinstance(report, _Collect)
    return report.found


def _dict_values(text: str, key: str) -> list[object]:
    """The value of every `key` entry of the dict literals in `text`."""
    return [ast.literal_eval(v) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Dict)
            for k, v in zip(node.keys, node.values)
            if isinstance(k, ast.Constant) and k.value == key]


def _checksum_keys(text: str) -> list[str]:
    return [key for checksums in _dict_values(text, "checksums")
            for entry in checksums for key in entry]  # type: ignore[attr-defined]


def _render(*exts: Extension) -> str:
    return easyconfig(EasyconfigText("PyTorch", "2.9.1", "-whl", ("foss", "2025a"),
                                     "https://pytorch.org/", "PyTorch.",
                                     ("('Python', '3.13.1')",), exts))


def _single(url: str, filename: str = "torch-2.9.1-py3-none-any.whl",
            download: str | None = None) -> Extension:
    return Extension("torch", "2.9.1", (("x86_64", Source(filename, url, SHA, download)),))


def _per_arch(url: str, filename: str = LONG_WHEEL, download: str | None = None) -> Extension:
    other = Source("torch-2.9.1-cp313-cp313-manylinux_2_28_x86_64.whl", "https://h/x", "b" * 64)
    return Extension("torch", "2.9.1", (("aarch64", Source(filename, url, SHA, download)),
                                        ("x86_64", other)))


def _cut_at_slashes(pieces: list[str], width: int) -> bool:
    """Every piece but the last ends at a '/', or holds none and fills its line (a segment
    longer than a line is cut where the line ends)."""
    return all(p.endswith("/") or ("/" not in p and len(repr(p)) == width) for p in pieces[:-1])


def _pieces(text: str) -> list[str]:
    """The string literals of a text in order, as written (before implicit concatenation)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [ast.literal_eval(t.string) for t in tokens if t.type == tokenize.STRING]


URLS = {
    "short": "https://download.pytorch.org/whl/cpu",
    "pypi": PYPI_URL,
    "pypi-long-segment": "https://files.pythonhosted.org/packages/" + "0123456789abcdef" * 7,
    "no-slash": "x" * 300,
}


@pytest.mark.parametrize(("position", "indent"), [(_single, 12), (_per_arch, 16)],
                         ids=["single", "per-arch"])
@pytest.mark.parametrize("url", URLS.values(), ids=URLS.keys())
def test_source_urls_pass_the_style_check(position: object, indent: int, url: str) -> None:
    text = _render(position(url))  # type: ignore[operator]
    assert style_errors(text) == []
    assert _dict_values(text, "source_urls")[0] == [url]
    fits = indent + len(f"'source_urls': [{url!r}],") <= MAX_LINE
    assert (f"'source_urls': [{url!r}]," in text) == fits  # one line wherever it fits


@pytest.mark.parametrize("position", [_single, _per_arch], ids=["single", "per-arch"])
@pytest.mark.parametrize("filename", [
    LONG_WHEEL, "torch-2.9.1%2Bcpu-" + "cp313-" * 20 + "manylinux_2_28_aarch64.whl",
    "n" * 200 + ".whl"], ids=["nvidia", "long", "no-dash"])
def test_long_file_names_pass_the_style_check(position: object, filename: str) -> None:
    stored = filename.replace("%2B", "+")
    download = filename if "%2B" in filename else None
    text = _render(position(PYPI_URL, stored, download))  # type: ignore[operator]
    assert style_errors(text) == []
    assert stored in _dict_values(text, "filename")
    assert stored in _checksum_keys(text)
    assert _dict_values(text, "download_filename") == ([download] if download else [])


@pytest.mark.parametrize("url", URLS.values(), ids=URLS.keys())
@pytest.mark.parametrize("indent", [12, 16, 20, 24])
def test_urls_are_cut_at_slashes(url: str, indent: int) -> None:
    text = _py_lines(url, indent, ",")
    lines = text.splitlines()
    assert all(len(line) + (indent if i == 0 else 0) <= MAX_LINE for i, line in enumerate(lines))
    assert all(line.startswith(" " * indent + "'") for line in lines[1:])
    pieces = _pieces(text)
    assert "".join(pieces) == url and ast.literal_eval(f"({text[:-1]})") == url
    assert _cut_at_slashes(pieces, MAX_LINE - indent - 1)
    if url == PYPI_URL:
        assert pieces == ["https://files.pythonhosted.org/packages/bb/fe/", PYPI_URL[46:]]


def test_easybuilds_own_style_check_agrees(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """EasyBuild's check_easyconfigs_style itself on the hardest layouts: the helper above is
    configured as it is."""
    from easybuild.framework.easyconfig.style import check_easyconfigs_style

    path = tmp_path / "PyTorch-2.9.1-foss-2025a-whl.eb"
    path.write_text(_render(_per_arch(PYPI_URL), _single(URLS["no-slash"], LONG_WHEEL)))
    assert check_easyconfigs_style([str(path)]) == 0, capsys.readouterr().out
    bad = tmp_path / "bad.eb"  # the layout of issue 12: a continuation under the visual indent
    bad.write_text("x = [{\n    'source_urls': ['https://h/a/'\n        'b'],\n}]\n")
    assert check_easyconfigs_style([str(bad)]) == 1
    assert style_errors(bad.read_text()) == [
        "3:9: E128 continuation line under-indented for visual indent"]


_URL_SEGMENT = st.text("abcdefXYZ0123456789._+%~:@-", min_size=0, max_size=130)
_FILE_NAME = st.text("abcdefXYZ0123456789._+~-", min_size=1, max_size=180)


@settings(max_examples=150, deadline=None)
@given(segments=st.lists(_URL_SEGMENT, min_size=1, max_size=6), filename=_FILE_NAME,
       per_arch=st.booleans())
def test_any_url_and_file_name_pass_the_style_check(segments: list[str], filename: str,
                                                    per_arch: bool) -> None:
    url = "https://" + "/".join(["files.pythonhosted.org", *segments])
    filename += ".whl"
    text = _render((_per_arch if per_arch else _single)(url, filename))
    assert style_errors(text) == []
    assert _dict_values(text, "source_urls")[0] == [url]
    assert _dict_values(text, "filename")[0] == filename
    assert duplicate_keys(text) == []
    pieces = _pieces(_py_lines(url, 20, ","))
    assert "".join(pieces) == url and _cut_at_slashes(pieces, MAX_LINE - 20 - 1)


# -- no key twice --------------------------------------------------------------------------------

def test_duplicate_keys_are_found() -> None:
    assert duplicate_keys("x = [{'a': 1, 'b': {'c': 2, 'c': 3}}]\ny = {'ab': 1,\n 'a' 'b': 2}") \
        == ["1: 'c'", "3: 'ab'"]
    assert duplicate_keys("x = {'a': 1, **y, 'b': 2}") == []


def test_a_pure_wheel_for_both_architectures_has_one_checksum() -> None:
    wheel = Source("cuda_pathfinder-1.3.3-py3-none-any.whl", PYPI_URL, SHA)
    ext = Extension("cuda-pathfinder", "1.3.3", (("aarch64", wheel), ("x86_64", wheel)))
    text = _render(ext, _per_arch(PYPI_URL))
    assert duplicate_keys(text) == []
    assert text.count("'cuda_pathfinder-1.3.3-py3-none-any.whl':") == 1
    assert _dict_values(text, "checksums")[0] == [{wheel.filename: SHA}]


def test_one_file_with_two_hashes_is_refused() -> None:
    one = Source("cuda_pathfinder-1.3.3-py3-none-any.whl", PYPI_URL, SHA)
    other = Source(one.filename, PYPI_URL, "b" * 64)
    with pytest.raises(RenderError, match="two sha256 for one file"):
        _render(Extension("cuda-pathfinder", "1.3.3", (("aarch64", one), ("x86_64", other))))


@pytest.mark.parametrize("release", ["2.9.1", catalog.releases()[0]])
def test_offline_output_has_no_key_twice_and_passes_the_style_check(tmp_path: Path,
                                                                     release: str) -> None:
    """The embedded catalog's real PyPI answers: long folder URLs and nvidia wheel names, and
    in the newest release per-arch dicts and pure wheels that serve both architectures."""
    out = tmp_path / "out"
    assert main(["generate", release, "--offline", "--toolchain", "foss/2025a",
                 "--toolchain", "foss/2024a", "--out", str(out)]) == 0
    texts = {path.name: path.read_text() for path in sorted(out.glob("*.eb"))}
    assert len(texts) >= 4
    assert any("'source_urls': [\n" in text for text in texts.values())  # wrapped ones too
    assert {name: keys for name, text in texts.items() if (keys := duplicate_keys(text))} == {}
    assert {name: errors for name, text in texts.items() if (errors := style_errors(text))} == {}


def test_easyconfig_is_python() -> None:
    ext = Extension("torch", "2.9.1", (("x86_64", Source("t.whl", "https://h/x", SHA)),))
    text = easyconfig(EasyconfigText("PyTorch", "2.9.1", "-whl", ("foss", "2025a"),
                                     "https://pytorch.org/", "PyTorch.",
                                     ("('Python', '3.13.1')",), (ext,), abi_tag="torch-x"))
    tree = ast.parse(text)
    names = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name)]
    assert names[:4] == ["easyblock", "name", "version", "versionsuffix"]
    assert "torchstack_abi_tag" in names and "exts_list" in names
