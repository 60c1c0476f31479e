"""Cycles across processes through a ``multiprocessing.Manager``, proven (issue #34, section 2;
NOTE [ Manager lock proof ] in watchdog/detect/manager_proof.py), from the stacks and
``/proc/PID/task/TID/syscall`` lines captured from ``probes/cases/manager_lock_never_released.py``
(main keeps the lock and waits in ``__next__``), ``manager_lock_order_two_workers.py`` (worker 0
inside ``with self.a:`` waits for ``self.b``, worker 1 inside ``with self.b:`` for ``self.a``) and
the healthy twin ``healthy_manager_lock_main_holds_briefly.py`` (a thread of main holds the lock
and sleeps, then releases): what each step needs, and that without any of them the hang stays
suspected."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tests.unit.builders import (
    IDLE_POLL,
    LOCK_TIMED,
    ROOT,
    SLEEP,
    concluded_under_terminate,
    detail,
    fixture,
    manager_job,
    manager_peers,
    manager_reads,
    stall,
)
from watchdog import detect
from watchdog.collect import pyspy
from watchdog.detect import dead_releaser, manager_proof
from watchdog.diagnose import engine
from watchdog.types import (
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_WORKER,
    ExitRecord,
    Facts,
    HangVerdict,
    KernelWait,
    ProofKind,
    WaitKind,
)

NEVER = "manager_lock_never_released.json"
AB = "manager_lock_order_two_workers.json"
BRIEF = "manager_lock_main_holds_briefly.json"


def _prove(smp, stacks, details, wakeable=None, peers=None, listeners=None):
    return manager_proof.prove_manager_cycle(
        manager_reads(smp, stacks, details, wakeable, peers, listeners), detect.role_words(smp)
    )


def _pid(smp, role):
    return next(p.pid for p in smp.processes if p.role == role)


def test_main_keeping_the_lock_while_it_waits_for_the_workers_is_a_proven_cycle():
    smp, stacks, details = manager_job(NEVER)
    proof = _prove(smp, stacks, details)
    assert proof is not None and proof.kind is ProofKind.MANAGER_CYCLE
    main, manager = smp.main.pid, _pid(smp, ROLE_OTHER)
    w0, w1 = smp.loaders[0].workers
    assert set(proof.pids) == {p.pid for p in smp.processes}
    # every thread of main, the workers and the manager is a step of the argument
    assert {(link.pid, link.tid) for link in proof.links if link.tid is not None} == {
        (pid, d.tid) for pid, threads in details.items() for d in threads
    }
    text = proof.conclusion
    assert "no process of the job can move" in text
    # the cycle, named: main in __next__ for both workers' batch, each worker's wait with its line
    batch = f"main (pid {main}) waits in __next__ (PyTorch's loop, no timeout) for the batch of worker 0 (pid {w0})"
    assert f"{batch} and worker 1 (pid {w1})" in text
    assert f"worker 0 (pid {w0}) waits at " in text and f"worker 1 (pid {w1}) waits at " in text
    assert "manager_lock_never_released.py:31 (SharedCacheDataset.__getitem__) for the manager's answer" in text
    assert "its proxy's acquire()" in text and f"the manager (pid {manager}) runs those acquire() calls" in text
    # what is proven (nobody can move) apart from who likely holds it (never proven)
    assert "who holds it is not proven: main is the likely holder" in text
    assert "or a process of the job that took it and ended before a sample saw it" in text
    assert "lock-order cycle" not in text
    assert sum("waits in it, on a lock" in link.wait for link in proof.links_of(manager)) == 2


def test_two_workers_taking_two_manager_locks_in_opposite_orders_are_a_proven_cycle():
    smp, stacks, details = manager_job(AB)
    proof = _prove(smp, stacks, details)
    assert proof is not None and proof.kind is ProofKind.MANAGER_CYCLE
    w0, w1 = smp.loaders[0].workers
    text = proof.conclusion
    # named from both stacks: each worker at its own `with` line
    at = "probes/cases/manager_lock_order_two_workers.py"
    assert f"worker 0 (pid {w0}) waits at " in text and f"{at}:49 (TwoLockDataset.__getitem__)" in text
    assert f"worker 1 (pid {w1}) waits at " in text and f"{at}:54 (TwoLockDataset.__getitem__)" in text
    assert text.index(f"pid {w0}) waits at") < text.index(f"{at}:49") < text.index(f"pid {w1}) waits at")
    assert "the waits are at different lines" in text and "a lock-order cycle" in text


def test_a_thread_of_main_that_holds_the_lock_and_sleeps_leaves_it_unproven():
    # The healthy twin: the same waits in main's iterating thread, the workers and the manager,
    # but a thread of main holds the lock in time.sleep and will release it.
    smp, stacks, details = manager_job(BRIEF)
    assert any("prepare" == t.name for t in stacks[smp.main.pid].threads)
    assert _prove(smp, stacks, details) is None
    assert dead_releaser.prove_manager_lock(manager_reads(smp, stacks, details)) is None
    # without that thread (as if it ended) the rest is the cycle: the sleeping thread alone kept it unproven
    main = smp.main.pid
    tid = next(t.tid for t in stacks[main].threads if t.name == "prepare")
    st = dataclasses.replace(stacks[main], threads=tuple(t for t in stacks[main].threads if t.tid != tid))
    fewer = {**details, main: tuple(d for d in details[main] if d.tid != tid)}
    assert _prove(smp, {**stacks, main: st}, fewer) is not None


@pytest.mark.parametrize("case", [NEVER, AB])
@pytest.mark.parametrize("who", ["main", "worker", "manager"])
def test_any_live_thread_that_could_still_run_leaves_it_unproven(case, who):
    smp, stacks, details = manager_job(case)
    pid = _pid(smp, {"main": ROLE_MAIN, "worker": ROLE_WORKER, "manager": ROLE_OTHER}[who])
    assert _prove(smp, stacks, details) is not None
    last = details[pid][-1]
    details = {**details, pid: details[pid][:-1] + (detail(last.tid, SLEEP),)}  # a thread in time.sleep
    assert _prove(smp, stacks, details) is None


@pytest.mark.parametrize("case", [NEVER, AB])
def test_a_timed_acquire_in_the_manager_ends_by_itself(case):
    smp, stacks, details = manager_job(case)
    manager = _pid(smp, ROLE_OTHER)
    timed = tuple(detail(d.tid, LOCK_TIMED) if d.wait.kind is WaitKind.FUTEX_PRIVATE else d for d in details[manager])
    assert _prove(smp, stacks, {**details, manager: timed}) is None


def test_a_missing_stack_a_timer_signal_or_another_live_process_leave_it_unproven():
    smp, stacks, details = manager_job(NEVER)
    manager = _pid(smp, ROLE_OTHER)
    assert _prove(smp, {k: v for k, v in stacks.items() if k != manager}, details) is None
    worker = _pid(smp, ROLE_WORKER)
    assert _prove(smp, {k: v for k, v in stacks.items() if k != worker}, details) is None
    assert _prove(smp, stacks, details, wakeable={smp.main.pid: "catches SIGALRM"}) is None
    other = dataclasses.replace(smp.process(manager), pid=99999, ppid=smp.main.pid)  # a helper, alive
    assert _prove(dataclasses.replace(smp, processes=smp.processes + (other,)), stacks, details) is None
    # a thread py-spy shows that the /proc reads did not list started since: something moves
    main = smp.main.pid
    assert _prove(smp, stacks, {**details, main: details[main][:-1]}) is None


def test_a_process_that_ended_beside_the_manager_makes_it_the_dead_releasers_proof():
    # Not a cycle among the living: the ended process is the likely holder (waits_on_dead).
    smp, stacks, details = manager_job(NEVER)
    gone = ExitRecord(99999, 10**12, smp.main.pid, ROLE_OTHER, "python", ("python",), 1.0, 2e9, 2.0, 2e9, 9)
    dead = dataclasses.replace(smp, exits=(gone,))
    assert _prove(dead, stacks, details) is None
    proof = dead_releaser.prove_manager_lock(manager_reads(dead, stacks, details))
    assert proof is not None and proof.kind is ProofKind.WAITS_ON_DEAD


def test_a_loop_that_woke_between_the_two_reads_is_still_in_its_loop():
    smp, stacks, details = manager_job(AB)
    manager, main = _pid(smp, ROLE_OTHER), smp.main.pid
    changed = KernelWait(WaitKind.UNKNOWN, detail="changed between two reads")
    woke = {
        pid: tuple(dataclasses.replace(d, wait=changed) if d.tid == pid else d for d in details[pid])
        for pid in (manager, main)
    }
    assert _prove(smp, stacks, {**details, **woke}) is not None
    # ... but a worker's proxy read that changed is not a wait the proof can rest on
    worker = _pid(smp, ROLE_WORKER)
    moved = tuple(dataclasses.replace(d, wait=changed) for d in details[worker])
    assert _prove(smp, stacks, {**details, worker: moved}) is None


def test_the_cycle_ends_the_job_under_on_hang_terminate():
    smp, stacks, details = manager_job(NEVER)
    decision = concluded_under_terminate(smp, stacks, details)
    assert decision.assessment.hang and decision.assessment.proof is not None
    assert decision.assessment.proof.kind is ProofKind.MANAGER_CYCLE
    assert decision.terminate and decision.termination.grounded and not decision.termination.unproven


def test_the_healthy_twin_is_never_ended_under_on_hang_terminate():
    smp, stacks, details = manager_job(BRIEF)
    decision = concluded_under_terminate(smp, stacks, details)
    assert decision.assessment.proof is None and not decision.terminate


def _diagnosed(name):
    """The first diagnosis of the captured job ``name`` with its cycle proof, and the case's
    source lines (as the hang's closer look reads them) under the paths its stacks name."""
    smp, stacks, details = manager_job(name)
    proof = _prove(smp, stacks, details)
    main = smp.main.pid
    iterating = next(t for t in stacks[main].threads if t.tid == main)
    files = {f.file for st in stacks.values() for t in st.threads for f in t.frames if "probes/cases/" in f.file}
    sources = []
    for file in files:
        with open(os.path.join(ROOT, "probes", "cases", os.path.basename(file)), encoding="utf-8") as f:
            sources += [((file, i), text.rstrip("\n")) for i, text in enumerate(f, 1)]
    facts = Facts(
        mode="hang",
        sample=smp,
        timeline=(smp,),
        stall=stall(main, tuple(w.pid for w in smp.workers), s=6.0),
        verdict=HangVerdict("dataloader", True, "test", iterating),
        stacks=tuple(stacks.items()),
        thread_details=tuple(details.items()),
        proof=proof,
        source_lines=tuple(sources),
    )
    return engine.diagnose(facts)[0]


def test_the_remedy_names_the_lock_order_cycle_from_the_workers_source():
    first = _diagnosed(AB)
    assert first.kind == "worker_stuck" and first.certainty == "proven"
    assert "No process of the job can move" in first.remedy and "not proven" in first.remedy
    assert "worker 0 (pid" in first.remedy and "holds self.a (taken at line 45) and waits for self.b" in first.remedy
    assert "holds self.b (taken at line 51) and waits for self.a" in first.remedy
    assert "one global order" in first.remedy and "main likely took" not in first.remedy


def test_the_remedy_names_main_as_the_likely_holder_when_only_main_is_outside_the_manager():
    first = _diagnosed(NEVER)
    assert first.kind == "worker_stuck" and first.certainty == "proven"
    assert "main likely took the lock and did not release it before iterating" in first.remedy
    # a holder that took the lock and exited between two samples is never seen: it is named as possible
    assert "ended before a sample saw it" in first.remedy
    assert "lock-order cycle" not in first.remedy and "no process feeds" not in first.remedy


def test_main_is_named_the_likely_holder_only_when_every_other_client_waits_to_acquire():
    # Worker 1 idle in PyTorch's loop (waiting for an index) could hold the lock from an earlier
    # sample as well as main: both are named, main alone is not.
    smp, stacks, details = manager_job(NEVER)
    w1 = smp.loaders[0].workers[1]
    idle = tuple(
        dataclasses.replace(t, tid=w1) for t in pyspy.parse_dump(fixture("pyspy_worker_idle.json")) if t.tid == 5905
    )
    stacks = {**stacks, w1: dataclasses.replace(stacks[w1], threads=idle)}
    details = {**details, w1: (detail(w1, IDLE_POLL),)}
    proof = _prove(smp, stacks, details)
    assert proof is not None
    main = smp.main.pid
    assert "main is the likely holder" not in proof.conclusion
    assert f"one of the clients not waiting to acquire: main (pid {main}), worker 1 (pid {w1})" in proof.conclusion


@pytest.mark.parametrize("case", [NEVER, AB])
def test_a_client_outside_the_job_or_a_tcp_connection_leaves_it_unproven(case):
    # tests/real/test_hostile_manager.py: a remote-manager client outside the job holds the lock
    # and releases it later; its end of its connection is held by no process of the set.
    smp, stacks, details = manager_job(case)
    manager = _pid(smp, ROLE_OTHER)
    assert _prove(smp, stacks, details) is not None
    assert _prove(smp, stacks, details, peers={manager: manager_peers(smp)[manager] + (None,)}) is None
    assert _prove(smp, stacks, details, peers={}) is None  # not read: not accounted for


@pytest.mark.parametrize("case", [NEVER, AB])
def test_a_listener_at_a_chosen_address_leaves_it_unproven(case):
    # tests/real/test_hostile_manager_gate.py: a process outside the job that knows a chosen
    # address and authkey can connect later and release.
    smp, stacks, details = manager_job(case)
    assert _prove(smp, stacks, details, listeners={_pid(smp, ROLE_OTHER): ()}) is None
