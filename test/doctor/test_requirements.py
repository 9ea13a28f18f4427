"""torchstack.doctor.requirements: the active torch's Requires-Dist against what the Python sees."""

from __future__ import annotations

from support.doctorenv import (
    Diagnosis,
    one,
)


class TestTorchWithoutNvidiaWheels:
    def test_unmet_requirements_of_torch(self, cu13_bare_report: Diagnosis) -> None:
        found = one(cu13_bare_report[1], "requirement-missing", "triton")
        assert found["message"] == ("torch 2.14.1+cu130 requires triton~=3.8.0, which is not "
                                    "on sys.path")
