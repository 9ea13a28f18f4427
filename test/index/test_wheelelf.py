"""torchstack.index.wheelelf: a consumer's link class and abi_tag predicted from range reads.

Real consumer wheels (this machine's pip configuration) are served by the index server on
127.0.0.1; the prediction must equal the fingerprint of the same wheel installed with pip,
and cost a small part of the wheel. Synthetic wheels cover the other layouts and the bounds.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from support.indexserver import IndexServer
from support.synthetic import CONSUMER_BUILDS, SyntheticWheels
from support.wheelcache import install_tree

from torchstack.elf import reader
from torchstack.fingerprint.read import Fingerprint, fingerprint_path
from torchstack.index import _zipdir, wheelelf
from torchstack.index.simple import SimpleIndex

pytest_plugins = ["support.synthetic"]

# key of REAL_WHEELS -> (link, abi_tag) the install-time fingerprint gives
REAL_CONSUMERS = {
    "torchvision-0.28.0": ("cxx", "torch-2.13.0-cxx11-cu13"),
    "torchvision-0.29.1": ("stable", "torch-2.14.0-stable-cu13"),
    # Requires-Dist says torch>=2.11, but libtorchaudio.so imports torch_exception_get_what and
    # torch_new_stable_ivalue, which pytorch's shim manifest dates to 2.13.0: the floor rises
    "torchaudio-2.11.1": ("stable", "torch-2.13.0-stable-cu13"),
    # no torch in its Requires-Dist: the release comes from its C shims (torch-abi-audit's data)
    "torchcodec-0.17.0": ("stable", "torch-2.11.0-stable-cu13"),
    "xformers-0.0.35": ("stable", "torch-2.10-stable-cu12"),
    "torchao-0.18.0": ("stable", "torch-2.11.0-stable-cu13"),
    # .hash before .gnu.hash, no build-id note; no torch release in its metadata
    "fbgemm_gpu_cpu-1.9.0": ("cxx", "torch-unknown-cxx11-cpu"),
}


def contract(fingerprint: Fingerprint | None) -> tuple[Any, ...]:
    """What the guards compare, and what the report prints."""
    assert fingerprint is not None
    return (fingerprint.name, fingerprint.version, fingerprint.link, fingerprint.abi_tag,
            fingerprint.torch, fingerprint.requires_torch, fingerprint.cuda_major)


def served_prediction(server: IndexServer, wheel: Path) -> wheelelf.Prediction:
    index = SimpleIndex(server.index_url)
    project = wheel.name.split("-")[0]
    (file,) = [f for f in index.files(project) if f.filename == wheel.name]
    read, size, tail = index.ranges(file.url)
    return wheelelf.predict(read, size, tail, file.url)


@pytest.fixture(scope="module")
def real_consumers(real_wheel: Any) -> dict[str, Path]:
    return {key: real_wheel(key) for key in REAL_CONSUMERS}


@pytest.fixture(scope="module")
def server(real_consumers: dict[str, Path]) -> Any:
    with IndexServer(real_consumers.values()) as running:
        yield running


class TestRealWheels:
    @pytest.mark.parametrize("key", sorted(REAL_CONSUMERS))
    def test_prediction_is_the_install_fingerprint(
        self, server: IndexServer, real_consumers: dict[str, Path], key: str
    ) -> None:
        wheel = real_consumers[key]
        before = server.bytes_sent
        prediction = served_prediction(server, wheel)
        installed = fingerprint_path(install_tree(wheel))
        assert contract(prediction.fingerprint) == contract(installed)
        assert (installed.link, installed.abi_tag) == REAL_CONSUMERS[key]
        # ranges only: the page, the tail, the directory and prefixes of the shared objects
        assert prediction.bytes_read < wheel.stat().st_size // 5
        assert server.bytes_sent - before < prediction.bytes_read + 64 * 1024
        assert not prediction.unread
        assert {o.how for o in prediction.objects} <= {"tables", "whole"}

    @pytest.mark.parametrize("key", sorted(REAL_CONSUMERS))
    def test_tables_equal_the_whole_file(self, real_consumers: dict[str, Path],
                                         key: str) -> None:
        """Per shared object: the prefix read gives the DT_NEEDED and imports of the file."""
        wheel = real_consumers[key]
        with open(wheel, "rb") as handle, zipfile.ZipFile(wheel) as archive:
            def read(offset: int, length: int) -> bytes:
                handle.seek(offset)
                return handle.read(length)

            size = wheel.stat().st_size
            ranges, entries = _zipdir.open_directory(read, size, read(size - _zipdir.TAIL,
                                                                      _zipdir.TAIL))
            for member in (m for m in entries if m.name.endswith(".so")):
                found, _ = wheelelf.object_symbols(wheelelf.MemberPrefix(ranges, member, 1 << 30))
                stream = io.BytesIO(archive.read(member.name))
                assert found.undefined == reader.undefined_symbols(stream, member.name)
                assert found.needed == set(reader.read_dynamic(stream, member.name).needed)

    def test_patchelf_layout_is_read_whole(self, real_consumers: dict[str, Path]) -> None:
        # auditwheel's patchelf moved image.so's .dynstr to the end: no prefix holds it
        prediction = wheelelf.predict_file(real_consumers["torchvision-0.28.0"])
        how = {o.name: o.how for o in prediction.objects}
        assert how == {"torchvision/_C.so": "tables", "torchvision/image.so": "whole"}

    @pytest.mark.parametrize("key, line", [
        pytest.param("torchvision-0.28.0",
                     "torchvision 0.28.0: cxx, needs torch-2.13.0-cxx11-cu13 exactly", id="cxx"),
        pytest.param("torchvision-0.29.1", "torchvision 0.29.1: stable, torch>=2.14.0 (cu13) "
                     "[Requires-Dist torch>=2.14.0; its C shims need torch>=2.13.0]",
                     id="stable-metadata-above-shims"),
        pytest.param("torchaudio-2.11.1", "torchaudio 2.11.1: stable, torch>=2.13.0 (cu13) "
                     "[Requires-Dist torch>=2.11; its C shims need torch>=2.13.0]",
                     id="stable-shims-above-metadata"),
        pytest.param("torchcodec-0.17.0", "torchcodec 0.17.0: stable, torch>=2.11.0 (cu13) "
                     "[no torch in Requires-Dist; its C shims need torch>=2.11.0]",
                     id="stable-no-requirement"),
        pytest.param("xformers-0.0.35", "xformers 0.0.35: stable, torch>=2.10 (cu12)",
                     id="stable-both-agree"),
    ])
    def test_summary(self, real_consumers: dict[str, Path], key: str, line: str) -> None:
        prediction = wheelelf.predict_file(real_consumers[key])
        assert prediction.summary(key) == line


class TestBounds:
    def test_beyond_the_bound_is_reported(self, real_consumers: dict[str, Path]) -> None:
        prediction = wheelelf.predict_file(real_consumers["xformers-0.0.35"],
                                           max_inflated=64 * 1024)
        assert [o.name for o in prediction.unread] == ["xformers/_C.so"]
        assert prediction.bytes_read < 200 * 1024
        assert "1 shared object(s) not read" in prediction.summary("xformers")

    def test_stored_members(self, synthetic_wheels: SyntheticWheels, tmp_path: Path) -> None:
        source = synthetic_wheels["vision-cxx11"]
        stored = tmp_path / source.name
        with zipfile.ZipFile(source) as packed, \
                zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as plain:
            for info in packed.infolist():
                plain.writestr(info.filename, packed.read(info))
        assert contract(wheelelf.predict_file(stored).fingerprint) == \
            contract(fingerprint_path(stored))

    def test_torch_itself_is_refused(self, synthetic_wheels: SyntheticWheels) -> None:
        with pytest.raises(wheelelf.WheelElfError, match="torch itself"):
            wheelelf.predict_file(synthetic_wheels["torch-cpu-cxx11"])


class TestSyntheticWheels:
    @pytest.mark.parametrize("key", sorted(k for k in CONSUMER_BUILDS if k != "unrelated"))
    def test_agrees_with_fingerprint(self, synthetic_wheels: SyntheticWheels, key: str) -> None:
        wheel = synthetic_wheels[key]
        assert contract(wheelelf.predict_file(wheel).fingerprint) == \
            contract(fingerprint_path(wheel))

    def test_no_torch(self, synthetic_wheels: SyntheticWheels) -> None:
        prediction = wheelelf.predict_file(synthetic_wheels["unrelated"])
        assert prediction.fingerprint is None
        assert prediction.summary("fake-unrelated") == "fake-unrelated: does not depend on torch"
