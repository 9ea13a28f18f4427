"""torchstack.install.jitcheck: the sanity-check script is valid Python and announces its success.

Running it needs torch and a compiler; the easyblock tests do that. Here: the text itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

from torchstack.install.jitcheck import SUCCESS, write_script


def string_assignments(tree: ast.Module) -> dict[str, str]:
    """Every `NAME = "constant"` in the script, at any depth."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


class TestWriteScript:
    def test_path_in_the_folder(self, tmp_path: Path) -> None:
        path = write_script(tmp_path)
        assert path == tmp_path / "torchstack_jit_check.py"
        assert path.is_file()

    def test_accepts_a_str_folder(self, tmp_path: Path) -> None:
        assert write_script(str(tmp_path)) == tmp_path / "torchstack_jit_check.py"

    def test_compiles(self, tmp_path: Path) -> None:
        path = write_script(tmp_path)
        compile(path.read_text(encoding="utf-8"), str(path), "exec")

    def test_prints_success(self, tmp_path: Path) -> None:
        text = write_script(tmp_path).read_text(encoding="utf-8")
        assert SUCCESS in text
        calls = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)]
        printed = [
            ast.literal_eval(call.args[0]) for call in calls
            if isinstance(call.func, ast.Name) and call.func.id == "print"
        ]
        assert printed == [SUCCESS]

    def test_braces_of_the_template_are_unescaped(self, tmp_path: Path) -> None:
        # the script is an f-string: doubled braces must come out single, for C++ and dicts
        text = write_script(tmp_path).read_text(encoding="utf-8")
        assert "{{" not in text
        assert "}}" not in text
        strings = string_assignments(ast.parse(text))
        assert strings["SOURCE"] == (
            "torch::Tensor twice(const torch::Tensor& x) { return x * 2; }"
        )
        assert strings["binding"] == (
            'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); }'
        )

    def test_overwrites_an_earlier_script(self, tmp_path: Path) -> None:
        (tmp_path / "torchstack_jit_check.py").write_text("raise SystemExit(1)\n")
        assert SUCCESS in write_script(tmp_path).read_text(encoding="utf-8")
