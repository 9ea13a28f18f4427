"""render: only validated values reach an easyconfig, always as Python literals."""

from __future__ import annotations

import ast

import pytest

from torchstack.index import IndexFile
from torchstack.render import (
    EasyconfigText,
    Extension,
    RenderError,
    Source,
    _py_wrap,
    dependency,
    easyconfig,
    easystack,
    project_name,
    source,
)

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


@pytest.mark.parametrize("value", [
    "https://files.pythonhosted.org/packages/5f/56/" + "0123456789abcdef" * 4,
    "x" * 300,
    "short",
])
def test_wrapped_literals_evaluate_to_the_value(value: str) -> None:
    text = _py_wrap(value, 20)
    assert all(len(line) <= 100 for line in text.splitlines()) or "/" not in value
    assert ast.literal_eval(f"({text})") == value


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
