"""torchstack.doctor.placement: where torch comes from, what shadows it, which Python it is for."""

from __future__ import annotations

import sys
from pathlib import Path

from support.doctorenv import (
    SITE,
    Factory,
    clean_environ,
    doctor,
    make_venv,
    module_prefix,
    one,
)

from torchstack.doctor import current
from torchstack.doctor.placement import python_mismatch
from torchstack.doctor.stack import read_stack


class TestVenvOverModule:
    def test_pythonpath_module_hides_venv_torch(self, real_tree: Factory, real_wheel: Factory,
                                                runtime_wheels: list[Path]) -> None:
        venv = make_venv("sys-over-module", [real_wheel("torch-2.14.1"), *runtime_wheels],
                         system_site_packages=True)
        module_site = real_tree("torch-2.13.0")
        _, report = doctor(venv / "bin" / "python", clean_environ(PYTHONPATH=str(module_site)))
        assert report["torch"]["version"] == "2.13.0+cpu"
        found = one(report, "torch-shadowed")
        assert found["severity"] == "problem"
        assert found["message"] == (
            f"torch 2.13.0+cpu from $PYTHONPATH ({module_site}) shadows torch 2.14.1+cu130 "
            f"from the venv {venv} ({venv / SITE})")
        assert found["fix"].startswith(f"the venv's torch is never imported: pip uninstall "
                                       f"torch in the venv {venv}")

    def test_ebpythonprefixes_venv_torch_shadows_module(
            self, eb_python: Path, real_tree: Factory, real_wheel: Factory,
            runtime_wheels: list[Path], tmp_path: Path) -> None:
        venv = make_venv("eb-sys-venv", [real_wheel("torch-2.14.1"), *runtime_wheels],
                         python=str(eb_python), system_site_packages=True)
        prefix = module_prefix(tmp_path, real_tree("torch-2.13.0"))
        environ = clean_environ(EBPYTHONPREFIXES=str(prefix), EBROOTPYTORCH=str(prefix),
                                LOADEDMODULES="Python/3.11:PyTorch/2.13.0-whl")
        _, report = doctor(venv / "bin" / "python", environ)
        assert report["torch"]["version"] == "2.14.1+cu130"
        found = one(report, "torch-shadowed")
        assert found["message"].startswith(
            f"torch 2.14.1+cu130 from the venv {venv} ({venv / SITE}) shadows torch 2.13.0+cpu "
            "from module PyTorch/2.13.0-whl")
        assert found["fix"] == (f"pip uninstall torch in the venv {venv} to use the torch of "
                                "module PyTorch/2.13.0-whl, or unload PyTorch/2.13.0-whl")

    def test_user_site_shadows_module(self, eb_python: Path, real_tree: Factory,
                                      tmp_path: Path) -> None:
        """pip install --user: the user site comes before what $EBPYTHONPREFIXES adds."""
        prefix = module_prefix(tmp_path, real_tree("torch-2.13.0"))
        user_base = module_prefix(tmp_path / "user", real_tree("torch-2.14.1"))  # same layout
        user_site = user_base / SITE
        environ = clean_environ(EBPYTHONPREFIXES=str(prefix), EBROOTPYTORCH=str(prefix),
                                LOADEDMODULES="PyTorch/2.13.0-whl", PYTHONUSERBASE=str(user_base))
        _, report = doctor(eb_python, environ)
        found = one(report, "torch-shadowed")
        assert found["message"].startswith(
            f"torch 2.14.1+cu130 from the user site {user_site} ({user_site}) shadows "
            "torch 2.13.0+cpu from module PyTorch/2.13.0-whl")
        assert found["fix"].endswith("or export PYTHONNOUSERSITE=1")

    def test_venv_without_system_site_packages_cannot_see(
            self, eb_python: Path, real_tree: Factory, tmp_path: Path) -> None:
        venv = make_venv("eb-bare-venv", [], python=str(eb_python))
        prefix = module_prefix(tmp_path, real_tree("torch-2.13.0"))
        environ = clean_environ(EBPYTHONPREFIXES=str(prefix), EBROOTPYTORCH=str(prefix),
                                LOADEDMODULES="PyTorch/2.13.0-whl")
        code, report = doctor(venv / "bin" / "python", environ)
        assert code == 1 and report["torch"] is None
        assert one(report, "torch-missing")["severity"] == "problem"
        found = one(report, "module-torch-invisible")
        assert found["message"].startswith(
            f"module PyTorch/2.13.0-whl provides torch 2.13.0+cpu in {prefix / SITE}, but this "
            f"Python ({venv / 'bin' / 'python'}) does not see it: the venv was created without "
            "--system-site-packages")
        assert found["fix"] == ("recreate the venv from the module's Python with "
                                "python -m venv --system-site-packages")


class TestPlacement:
    def test_torch_built_for_another_python(self, tmp_path: Path) -> None:
        package = tmp_path / "torch"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "version.py").write_text("__version__ = '2.14.1+cpu'\n")
        (package / "_C.cpython-399-x86_64-linux-gnu.so").write_bytes(b"")
        found = python_mismatch(read_stack([str(tmp_path)]), current())
        assert found is not None and found.severity == "problem"
        assert found.message == (
            f"torch 2.14.1+cpu in {tmp_path} is built for another Python "
            f"(_C.cpython-399-x86_64-linux-gnu.so), not Python {sys.version_info[0]}."
            f"{sys.version_info[1]}")

    def test_torch_for_this_python(self, real_tree: Factory) -> None:
        stack = read_stack([str(real_tree("torch-2.13.0"))])
        assert python_mismatch(stack, current()) is None
