"""One index of the cases (issue #36, section 4): ``probes.cases.CASES`` says which case stands
for a failure kind in ``dlwatch probe repro``'s catalogue (``Case.repro_as``), and the catalogue
is built from it, never from a second table of names."""

from __future__ import annotations

import pytest

from probes import cases, repro


def test_each_case_that_stands_for_a_kind_is_that_kinds_scenario_in_the_catalogue():
    assert cases.REPRO_AS, "no case stands for a kind"
    for kind, name in cases.REPRO_AS.items():
        case = cases.BY_NAME[name]
        scenario = repro.BY_NAME[kind]
        assert scenario.module == case.module and scenario.job == case.args, kind
        assert kind == case.kind or kind in case.also
        assert scenario.expected == case.kind and scenario.also == case.also
    # a kind a probes.train fault reproduces is not run again from a case
    trained = {s.name for s in repro.SCENARIOS if not s.module.startswith("probes.cases.")}
    assert not trained & set(cases.REPRO_AS)
    assert len(repro.SCENARIOS) == len(repro.BY_NAME)  # no scenario name twice


def test_a_case_cannot_stand_for_a_kind_it_does_not_get():
    with pytest.raises(ValueError, match="repro_as"):
        cases.Case("x", "worker_deadlock", "hang", repro_as="main_killed")
    assert cases.Case("x", "main_killed", "crash", also=("shm_leaked",), repro_as="shm_leaked").repro_as
