"""A hostile report's value quoted in ``dlwatch verify``'s refusal is bounded: the one line
names the field and stays short however long the value (watchdog/commands/verify_plan.py)."""

from __future__ import annotations

import pytest

from watchdog.commands.verify_plan import VerifyError, origin_from


@pytest.mark.parametrize("field", ["worker_threads", "rlimit_nofile"])
def test_a_megabyte_value_in_remedy_apply_is_refused_in_one_short_line(field):
    doc = {
        "mode": "crash",
        "diagnoses": [{"kind": "worker_init_error", "remedy_apply": {field: "x" * 1_000_000}}],
        "job": {"launch": {"command": ["python", "train.py"], "cwd": "/", "uid": 0}},
    }
    with pytest.raises(ValueError) as err:
        origin_from("/r", doc)
    wrapped = VerifyError("/r/report.json", f"malformed: {err.value}")
    text = str(wrapped)
    assert field in text and "\n" not in text
    assert len(text) < 700, len(text)
    assert "more characters" in text
