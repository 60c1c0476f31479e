"""Waits on the dead, proven (issue #34, section 2; NOTE [ Manager lock proof ] in
watchdog/detect/manager_proof.py): a ``multiprocessing.Manager()`` lock whose holder was SIGKILLed,
from the stacks and ``/proc/PID/task/TID/syscall`` lines captured from
``probes/cases/manager_lock_holder_killed.py`` and its healthy twin (holder alive), and what
each step needs: without any of them the hang stays suspected."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.builders import (
    LOCK_TIMED,
    SLEEP,
    concluded_under_terminate,
    detail,
    manager_job,
    manager_reads,
)
from watchdog.detect import dead_releaser
from watchdog.types import (
    NO_EXIT_RECORD,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_WORKER,
    ExitRecord,
    KernelWait,
    ProofKind,
    WaitKind,
)


def _job(name: str, status=9):
    return manager_job(name, status)


def _prove(smp, stacks, details, wakeable=None, peers=None, listeners=None):
    return dead_releaser.prove_manager_lock(manager_reads(smp, stacks, details, wakeable, peers, listeners))


def test_a_manager_lock_whose_holder_was_killed_is_proven_and_names_the_dead():
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    proof = _prove(smp, stacks, details)
    assert proof is not None and proof.kind is ProofKind.WAITS_ON_DEAD
    main, manager = smp.main.pid, next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    assert set(proof.pids) == {p.pid for p in smp.processes}
    dead = smp.exits[0]
    assert f"pid {dead.pid} was killed by signal 9 (SIGKILL)" in proof.conclusion
    assert "no live process of the job can ever release it" in proof.conclusion
    # every thread of main, the workers and the manager is a step of the argument
    assert {(link.pid, link.tid) for link in proof.links if link.tid is not None} == {
        (pid, d.tid) for pid, threads in details.items() for d in threads
    }
    waits = [link for link in proof.links if link.pid == manager]
    assert sum("waits in it, on a lock" in link.wait for link in waits) == 2  # one per waiting worker
    assert any("new connection" in link.wait for link in waits) and any("serve_forever" in link.wait for link in waits)
    assert any(link.pid == main and "PyTorch's own loop" in link.wait for link in proof.links)
    ended = [link for link in proof.links if link.pid == dead.pid]
    assert ended and "was killed by signal 9 (SIGKILL)" in ended[0].wait and "last seen alive" in ended[0].wait


def test_the_dead_holder_is_said_as_the_kernel_left_it_or_not_at_all():
    smp, stacks, details = _job("manager_lock_holder_killed.json", status=None)  # reaped before a sample saw it
    proof = _prove(smp, stacks, details)
    assert proof is not None and NO_EXIT_RECORD in proof.conclusion and "was killed by signal" not in proof.conclusion


def test_without_a_process_that_ended_beside_the_manager_it_stays_suspected():
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    assert _prove(dataclasses.replace(smp, exits=()), stacks, details) is None
    # a helper that ended before the manager started never held its lock
    later = tuple(
        dataclasses.replace(p, create_time=2e9, start_ticks=10**12) if p.role == ROLE_OTHER else p
        for p in smp.processes
    )
    assert _prove(dataclasses.replace(smp, processes=later), stacks, details) is None


def test_a_live_holder_leaves_it_unproven():
    # The healthy twin: the same waits in the manager and the workers, but the holder is alive
    # (asleep in time.sleep, then it releases): it could still release, so nothing is proven.
    smp, stacks, details = _job("manager_lock_holder_alive.json")
    assert len(smp.processes) == 5
    assert _prove(smp, stacks, details) is None
    # ... even with a process of the job that ended besides it
    gone = ExitRecord(99999, 1, smp.main.pid, ROLE_OTHER, "python", ("python",), 1.0, 1.0, 2.0, 2.0, 9)
    assert _prove(dataclasses.replace(smp, exits=(gone,)), stacks, details) is None


@pytest.mark.parametrize("who", ["main", "worker", "manager"])
def test_any_live_thread_that_could_still_run_leaves_it_unproven(who):
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    role = {"main": ROLE_MAIN, "worker": ROLE_WORKER, "manager": ROLE_OTHER}[who]
    pid = next(p.pid for p in smp.processes if p.role == role)
    last = details[pid][-1]
    details = {**details, pid: details[pid][:-1] + (detail(last.tid, SLEEP),)}  # a thread in time.sleep
    assert _prove(smp, stacks, details) is None


def test_an_acquire_with_a_timeout_in_the_manager_ends_by_itself():
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    timed = tuple(detail(d.tid, LOCK_TIMED) if d.wait.kind.value == "futex_private" else d for d in details[manager])
    assert _prove(smp, stacks, {**details, manager: timed}) is None


def test_unknown_stacks_or_a_timer_signal_leave_it_unproven():
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    assert _prove(smp, {k: v for k, v in stacks.items() if k != manager}, details) is None
    assert _prove(smp, stacks, details, wakeable={smp.main.pid: "catches SIGALRM"}) is None


def test_the_proof_ends_the_job_under_on_hang_terminate():
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    decision = concluded_under_terminate(smp, stacks, details)
    assert decision.assessment.hang and decision.assessment.proof is not None
    assert decision.assessment.proof.kind is ProofKind.WAITS_ON_DEAD
    assert decision.terminate and decision.termination.grounded and not decision.termination.unproven


def test_a_loop_that_woke_between_the_two_reads_is_still_in_its_loop():
    # The manager's serve_forever wakes every second and main's _try_get_data every 5 s: a wait
    # that changed between the two reads (UNKNOWN in Evidence.stable) is that loop going round,
    # not a thread that got away; a thread seen running is not.
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    changed = KernelWait(WaitKind.UNKNOWN, detail="changed between two reads")
    woke = {
        manager: tuple(dataclasses.replace(d, wait=changed) if d.tid == manager else d for d in details[manager]),
        smp.main.pid: tuple(
            dataclasses.replace(d, wait=changed) if d.tid == smp.main.pid else d for d in details[smp.main.pid]
        ),
    }
    assert _prove(smp, stacks, {**details, **woke}) is not None
    running = tuple(detail(d.tid, None, state="R") if d.tid == manager else d for d in details[manager])
    assert _prove(smp, stacks, {**details, manager: running}) is None


def test_a_thread_the_reads_did_not_see_leaves_it_unproven():
    # py-spy's stack holds a thread that /proc did not list at the two reads: it started since.
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    main = smp.main.pid
    assert _prove(smp, stacks, details) is not None
    fewer = {**details, main: details[main][:-1]}
    assert _prove(smp, stacks, fewer) is None


def test_a_connection_of_the_manager_held_outside_the_job_leaves_it_unproven():
    # A client outside the job (a remote-manager client that knows the address and authkey)
    # could release the lock: its end of a connection is held by no process of the set.
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    assert _prove(smp, stacks, details) is not None
    assert _prove(smp, stacks, details, peers={manager: (smp.main.pid, None)}) is None
    assert _prove(smp, stacks, details, peers={}) is None  # the peers were not read


def test_a_listener_at_a_chosen_address_leaves_it_unproven():
    # tests/real/test_hostile_manager_gate.py: a manager served at a chosen address and authkey
    # lets an outside process connect later and release; only multiprocessing's own private
    # listener keeps new clients to the job.
    smp, stacks, details = _job("manager_lock_holder_killed.json")
    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    assert _prove(smp, stacks, details, listeners={manager: ()}) is None
    assert _prove(smp, stacks, details, listeners={}) is None
