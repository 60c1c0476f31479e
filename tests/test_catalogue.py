"""The diagnosis catalogue: one real reproduction per kind that a CPU machine can produce (run
under ``dlwatch`` by ``probes.repro``, bounded, process groups killed), fixture tests for the
kinds that need a GPU or have no known CPU reproduction, and a coverage meta-test."""

from __future__ import annotations

import os
import re

import pytest

from probes import repro
from tests.test_units import MAIN_PID, _facts, _proc, _sample, fixture
from watchdog.collect import pyspy
from watchdog.diagnose import RULES, diagnose
from watchdog.diagnose.hangs import feeder_failures
from watchdog.types import MODE_CRASH, ROLE_MAIN, ROLE_WORKER, Facts, HangVerdict, ProcessStack, Stall

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNABLE = [s.name for s in repro.SCENARIOS if not s.skip]


@pytest.mark.parametrize("name", RUNNABLE)
def test_reproduction_is_diagnosed(name, tmp_path):
    s = repro.BY_NAME[name]
    outcome = repro.run_scenario(s, str(tmp_path))
    if outcome.status == "skipped":
        pytest.skip(outcome.note)
    assert outcome.status == "ok", (outcome.first, outcome.kinds, outcome.note)
    assert outcome.latency_s is not None and outcome.latency_s < 60


def test_every_catalogue_kind_has_a_scenario_a_rule_and_a_readme_row():
    kinds = {name for _, name, _ in RULES}
    assert {s.expected for s in repro.SCENARIOS} <= kinds
    assert kinds - {s.expected for s in repro.SCENARIOS} == set()
    with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for kind in kinds | {"unknown"}:
        assert re.search(rf"^\| `{kind}` \|", readme, re.M), f"README lacks a row for {kind}"


# --- fixtures for what a CPU machine cannot produce ---------------------------------------


def _main_only_facts(stack_file: str, verdict_reason: str, pid: int) -> Facts:
    threads = pyspy.parse_dump(fixture(stack_file))
    main = _proc(pid, ROLE_MAIN, [])
    worker = _proc(pid + 5, ROLE_WORKER, [], "fork")
    sample = _sample(30.0, [main, worker])
    stall = Stall(20.0, 10.0, pid, ((pid, 20.0), (pid + 5, 20.0)), 20.0)
    return Facts(
        mode="hang",
        sample=sample,
        timeline=(sample,),
        stall=stall,
        verdict=HangVerdict("dataloader", True, verdict_reason, threads[0]),
        stacks=((pid, ProcessStack(pid, threads, True, None, "", 0.1)),),
    )


def test_pin_memory_stall_fixture():
    first = diagnose(_main_only_facts("pyspy_main_pin_memory_stall.json", "waits for a batch", 4000))[0]
    assert first.kind == "pin_memory_stall"
    assert any("cudaHostAlloc" in e for e in first.evidence)


def test_shutdown_hang_fixture():
    first = diagnose(_main_only_facts("pyspy_main_shutdown_hang.json", "shutting down", 4100))[0]
    assert first.kind == "shutdown_hang"
    assert first.location == "/home/user/train.py:88"


def test_collective_wait_is_named_in_stall_outside_loader():
    threads = pyspy.parse_dump(fixture("pyspy_main_collective.json"))
    facts = _main_only_facts("pyspy_main_collective.json", "outside", 4200)
    facts = Facts(**{**facts.__dict__, "verdict": HangVerdict("outside_loader", True, "not in a loader", threads[0])})
    first = diagnose(facts)[0]
    assert first.kind == "stall_outside_loader"
    assert "collective" in first.summary and any("barrier" in e for e in first.evidence)


def test_cuda_in_forked_worker_fixture():
    # PyTorch's message text, from torch/cuda/__init__.py (_lazy_init), as printed by a GPU run.
    main = _proc(MAIN_PID, ROLE_MAIN, [])
    sample = _sample(5.0, [main])
    facts = Facts(mode=MODE_CRASH, sample=sample, timeline=(sample,), stderr_tail=fixture("stderr_cuda_in_forked_worker.txt"), exit_code=1)
    found = diagnose(facts)
    assert found[0].kind == "cuda_in_forked_worker"


def test_feeder_traceback_is_parsed_with_the_user_frame():
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed\n'
        "    obj = _ForkingPickler.dumps(obj)\n"
        '  File "/home/user/data.py", line 12, in __reduce__\n'
        "    raise TypeError('no')\n"
        "TypeError: cannot pickle 'Foo' object\n"
    )
    assert feeder_failures(stderr) == [("TypeError: cannot pickle 'Foo' object", "/home/user/data.py:12")]
    assert feeder_failures('Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: x\n') == []


def test_more_specific_cause_comes_before_batch_lost():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    facts = _facts([t])
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed\n'
        "OSError: [Errno 24] Too many open files\n"
    )
    kinds = [d.kind for d in diagnose(Facts(**{**facts.__dict__, "stderr_tail": stderr}))]
    assert kinds.index("fd_exhausted") < kinds.index("batch_lost")
