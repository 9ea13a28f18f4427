"""torchstack.doctor.findings: severities, the exit code, the JSON form."""

from __future__ import annotations

from torchstack.doctor.findings import by_severity, exit_code, info, problem, warning


class TestFindings:
    def test_exit_code_and_groups(self) -> None:
        found = [info("a", "fine"), warning("b", "odd"), problem("c", "broken", "mend it")]
        assert exit_code(found) == 1 and exit_code(found[:2]) == 0
        assert {k: [f.code for f in v] for k, v in by_severity(found).items()} == \
            {"problem": ["c"], "warning": ["b"], "info": ["a"]}
        assert found[2].to_json() == {"severity": "problem", "code": "c", "message": "broken",
                                      "fix": "mend it"}
