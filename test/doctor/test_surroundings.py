"""torchstack.doctor.surroundings: loaded modules, their folders and the site folders they add."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.doctorenv import (
    SITE,
)

from torchstack.doctor.surroundings import Surroundings, eb_variable


class TestSurroundings:
    @pytest.mark.parametrize(("name", "variable"), [
        ("cuDNN", "CUDNN"), ("PyTorch", "PYTORCH"), ("Py-Foo", "PYMINFOO"), ("gc++", "GCPLUSPLUS"),
    ])
    def test_eb_variable(self, name: str, variable: str) -> None:
        assert eb_variable(name) == variable

    def test_modules_and_their_folders(self, tmp_path: Path) -> None:
        torch_root, cudnn_root = tmp_path / "PyTorch", tmp_path / "cuDNN"
        (torch_root / SITE).mkdir(parents=True)
        (cudnn_root / "lib").mkdir(parents=True)
        prefixes = tmp_path / "prefix"
        (prefixes / SITE).mkdir(parents=True)
        environ = {"EBROOTPYTORCH": str(torch_root), "EBROOTCUDNN": str(cudnn_root),
                   "EBROOTNOLOAD": str(tmp_path / "x"), "EBPYTHONPREFIXES": str(prefixes),
                   "LOADEDMODULES": "cuDNN/9.24.0.43-CUDA-13.0.2:PyTorch/2.14.1-whl",
                   "PYTHONPATH": f"{tmp_path / 'pp'}:"}
        found = Surroundings.from_environ(environ)
        assert [m.name for m in found.modules] == ["cuDNN/9.24.0.43-CUDA-13.0.2", "$EBROOTNOLOAD",
                                                   "PyTorch/2.14.1-whl"]
        owner = found.owner(str(cudnn_root / "lib" / "libcudnn.so.9"))
        assert owner is not None and owner.name.startswith("cuDNN/")
        sites = found.site_dirs(f"{sys.version_info[0]}.{sys.version_info[1]}")
        assert [(s.path, s.via) for s in sites] == [
            (str(tmp_path / "pp"), "PYTHONPATH"),
            (str(prefixes / SITE), "EBPYTHONPREFIXES"),
            (str(torch_root / SITE), "$EBROOT of PyTorch/2.14.1-whl"),
        ]
