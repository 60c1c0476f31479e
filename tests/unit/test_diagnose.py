"""Diagnosis rules on captured py-spy JSON, /proc waits and stderr texts, and on hand-built
stacks for shapes a CPU machine cannot capture: one test per failure class, plus the rank
table and the rule contract."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.unit.builders import (
    IDLE_POLL,
    LOCK_UNTIMED,
    MAIN_PID,
    PIPE_READ,
    PIPE_WRITE,
    SLEEP,
    WORKER_PID,
    detail,
    fixture,
    fork_lock_thread,
    hang_facts,
    live_facts,
    oversubscribed_timeline,
    proc,
    python_only,
    sample,
    stall,
    thread,
)
from watchdog import frames
from watchdog.collect import pyspy
from watchdog.collect.stderr_facts import errno_of
from watchdog.diagnose import RULES, diagnose, engine
from watchdog.diagnose.common import fatal_error_dump, original_traceback
from watchdog.diagnose.hangs import feeder_failures
from watchdog.types import (
    MODE_CRASH,
    MODE_EXIT,
    MODE_LIVE,
    ROLE_MAIN,
    ROLE_WORKER,
    Facts,
    Frame,
    HangVerdict,
    ProcessStack,
    Proof,
    ProofKind,
    ProofLink,
    ThreadStack,
)

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/utils/data"
STDLIB = "/usr/lib/python3.11"
USER = "/home/user/train/data.py"


def _frames(*spec):
    return tuple(Frame(f, file, line, native, module=file if native else None) for f, file, line, native in spec)


def _worker_loop_frames():
    return (
        ("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 54, False),
        ("_worker_loop", f"{TORCH}/_utils/worker.py", 374, False),
    )


def _stack(tid, name, *spec):
    """A thread (not active, not holding the GIL) at ``spec`` frames, innermost first."""
    return ThreadStack(tid, name, False, False, _frames(*spec))


def _in_dataset(*spec):
    """The worker's loop thread, inside the Dataset: ``spec`` frames (innermost first) above fetch."""
    return _stack(WORKER_PID, "MainThread", *spec, *_worker_loop_frames())


def _waiting_on_event():
    """The worker's loop thread waiting on a ``threading.Event`` in ``Frames.__getitem__`` (line 9)."""
    return _in_dataset(
        ("Condition.wait", f"{STDLIB}/threading.py", 320, False),
        ("Event.wait", f"{STDLIB}/threading.py", 622, False),
        ("Frames.__getitem__", USER, 9, False),
    )


def _kernel_proof(*pids):
    return Proof(
        ProofKind.KERNEL,
        tuple(pids),
        tuple(ProofLink(p, p, "x", "futex(FUTEX_WAIT|FUTEX_PRIVATE_FLAG), no timeout") for p in pids),
        "conclusion",
    )


# --- hangs ------------------------------------------------------------------------------------


def test_native_lock_frames_give_fork_inherited_lock_and_a_proof_makes_it_proven():
    t = fork_lock_thread()
    suspected = diagnose(hang_facts([t]))[0]
    assert suspected.kind == "fork_inherited_lock" and suspected.certainty == "suspected"
    assert suspected.pids == (WORKER_PID,) and suspected.location.endswith("probes/train.py:102")
    proven = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID)))[0]
    # the hang is proven; main's other threads at the fork are no evidence that one held this lock (issue #34)
    assert proven.kind == "fork_inherited_lock" and proven.certainty == "proven" and proven.confidence <= 0.5
    assert any(e.startswith("proof:") for e in proven.evidence)


def test_python_only_stack_needs_the_source_line_or_a_proof_to_call_it_inherited():
    t = python_only(fork_lock_thread())
    top = frames.innermost_python(t)
    with_line = diagnose(hang_facts([t], sources=[((top.file, top.line), "with _SAMPLE_LOCK:")]))[0]
    assert with_line.kind == "fork_inherited_lock"
    without = diagnose(hang_facts([t], sources=[((top.file, top.line), "return self._read(index)")]))[0]
    assert without.kind == "worker_stuck"
    proven = diagnose(
        hang_facts([t], sources=[((top.file, top.line), "return self._read(index)")], proof=_kernel_proof(WORKER_PID))
    )[0]
    assert proven.kind == "fork_inherited_lock"


def test_a_spawned_worker_on_a_lock_is_not_inherited_and_with_a_proof_is_its_own_deadlock():
    t = fork_lock_thread()
    assert "fork_inherited_lock" not in [d.kind for d in diagnose(hang_facts([t], method="spawn"))]
    assert diagnose(hang_facts([t], method="spawn", proof=_kernel_proof(WORKER_PID)))[0].kind == "worker_deadlock"


def test_openmp_frames_in_a_forked_worker_name_the_runtime_and_its_remedy():
    t = _in_dataset(
        ("0x7f1696c1e073", "libgomp.so.1", 0, True),
        ("0x7f1696c1ca9d", "libgomp.so.1", 0, True),
        ("at::native::AVX512::exp_kernel", "libtorch_cpu.so", 0, True),
        ("AugDataset.__getitem__", USER, 19, False),
    )
    facts = hang_facts(
        [t],
        worker_details=(detail(WORKER_PID, "202 0x5588b93d9e14 0x80 0x10 0x0 0xca 0x0 0x7f 0x7f"),),
        proof=_kernel_proof(WORKER_PID),
    )
    first = diagnose(facts)[0]
    assert first.kind == "fork_inherited_lock" and "OpenMP" in first.summary
    assert "set_num_threads" in first.remedy and "socket" not in first.remedy
    assert first.location == f"{USER}:19"


def test_a_future_from_a_thread_pool_created_before_fork_is_inherited_state():
    t = _in_dataset(
        ("Condition.wait", f"{STDLIB}/threading.py", 320, False),
        ("Future.result", f"{STDLIB}/concurrent/futures/_base.py", 451, False),
        ("Remote.__getitem__", USER, 40, False),
    )
    first = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID)))[0]
    assert first.kind == "fork_inherited_lock" and "thread pool" in first.summary
    assert "worker_init_fn" in first.remedy


def test_two_threads_taking_locks_in_opposite_orders_are_a_worker_deadlock_naming_both_lines():
    loop = _in_dataset(("Data.__getitem__", USER, 30, False))
    helper = _stack(
        WORKER_PID + 1, "helper", ("refresh", USER, 55, False), ("Thread.run", f"{STDLIB}/threading.py", 975, False)
    )
    details = (detail(WORKER_PID, LOCK_UNTIMED), detail(WORKER_PID + 1, LOCK_UNTIMED))
    facts = hang_facts([loop, helper], worker_details=details, proof=_kernel_proof(WORKER_PID))
    first = diagnose(facts)[0]
    assert first.kind == "worker_deadlock" and first.certainty == "proven"
    text = " ".join(first.evidence)
    assert f"{USER}:30" in text and f"{USER}:55" in text


def test_a_worker_waiting_on_a_multiprocessing_queue_is_stuck_at_the_users_line():
    t = _in_dataset(
        ("_ConnectionBase.recv_bytes", f"{STDLIB}/multiprocessing/connection.py", 216, False),
        ("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 103, False),
        ("Jobs.__getitem__", USER, 12, False),
    )
    facts = hang_facts(
        [t],
        worker_details=(detail(WORKER_PID, PIPE_READ, wchan="anon_pipe_read"),),
        fd_targets=(((WORKER_PID, 6), "pipe:[9]"),),
        pipe_writers=(("pipe:[9]", (MAIN_PID, WORKER_PID)),),
    )
    first = diagnose(facts)[0]
    assert first.kind == "worker_stuck" and first.location == f"{USER}:12"
    assert "multiprocessing queue" in first.evidence[1]
    assert "NFS" not in first.remedy


def test_a_worker_blocked_writing_to_a_pipe_is_told_about_the_reader_not_the_storage():
    t = _in_dataset(("TextIOWrapper.write", "<frozen io>", 0, False), ("Data.__getitem__", USER, 8, False))
    facts = hang_facts(
        [t],
        worker_details=(detail(WORKER_PID, PIPE_WRITE, wchan="anon_pipe_write"),),
        fd_targets=(((WORKER_PID, 9), "pipe:[42]"),),
        pipe_readers=(("pipe:[42]", (4000,)),),
    )
    first = diagnose(facts)[0]
    assert first.kind == "worker_blocked_io"
    assert "reader" in first.remedy and "NFS" not in first.remedy
    assert any("4000" in e for e in first.evidence)


def test_a_timed_wait_is_not_told_to_add_a_timeout():
    t = _in_dataset(("sleep", "<built-in>", 0, False), ("Data.__getitem__", USER, 5, False))
    first = diagnose(hang_facts([t], worker_details=(detail(WORKER_PID, SLEEP, wchan="hrtimer_nanosleep"),)))[0]
    assert first.kind == "worker_stuck" and first.certainty == "suspected"
    assert "stall_timeout_s" in first.remedy and "Give the blocking call a timeout" not in first.remedy


def _idle_worker_hang(wchan="futex_do_wait", **kw):
    """A hang whose worker is idle (the captured fixture), its loop thread in ``poll`` on ``wchan``."""
    idle = pyspy.parse_dump(fixture("pyspy_worker_idle.json"))
    return hang_facts(list(idle), worker_details=(detail(WORKER_PID, IDLE_POLL, wchan=wchan),), **kw)


def test_idle_worker_is_healthy_and_main_waiting_is_only_a_symptom():
    found = diagnose(_idle_worker_hang(wchan="poll_schedule_timeout"))
    assert [d.kind for d in found] == ["unknown"]


def test_a_loader_idle_proof_is_a_lost_batch():
    facts = _idle_worker_hang(
        proof=Proof(
            ProofKind.LOADER_IDLE, (WORKER_PID,), (ProofLink(MAIN_PID, None, "main", "waits"),), "none can come"
        )
    )
    first = diagnose(facts)[0]
    assert first.kind == "batch_lost" and first.certainty == "proven"


def test_a_batch_lost_because_dev_shm_was_full_is_shm_exhausted_first():
    # Captured: the stacked samples fit in /dev/shm, the labels' tensor (default_collate's
    # torch.tensor of ints, not yet shared) did not when the feeder thread pickled it; the batch
    # was dropped and main waits for it forever: a hang, and the cause is the full /dev/shm.
    facts = _idle_worker_hang(
        stderr_tail=fixture("stderr_shm_exhausted_in_feeder.txt"),
        proof=Proof(
            ProofKind.LOADER_IDLE, (WORKER_PID,), (ProofLink(MAIN_PID, None, "main", "waits"),), "none can come"
        ),
    )
    found = diagnose(facts)
    kinds = [d.kind for d in found]
    assert kinds[0] == "shm_exhausted" and "batch_lost" in kinds, kinds
    assert "--shm-size" in found[0].remedy
    assert any("No space left on device" in e for e in found[kinds.index("batch_lost")].evidence)


def test_without_stacks_proc_facts_still_diagnose_with_lower_confidence():
    first = diagnose(hang_facts([], stacks_ok=False))[0]
    assert first.kind == "fork_inherited_lock" and first.confidence <= 0.6


def _main_hang(pid, procs, worker_pids, verdict, threads, native, **kw):
    """A hang seen at one sample of ``procs``, with stacks of main (``pid``) alone."""
    smp = sample(30.0, procs)
    return Facts(
        mode="hang",
        sample=smp,
        timeline=(smp,),
        stall=stall(pid, worker_pids),
        verdict=verdict,
        stacks=((pid, ProcessStack(pid, tuple(threads), native, None, "", 0.1)),),
        **kw,
    )


def _main_waits_for_its_thread(main_frames, name, frames, syscall, **kw):
    """A proven hang outside the loader, main alone (Python frames only): its MainThread at
    ``main_frames`` on a futex, its thread ``name`` (tid MAIN_PID + 1) at ``frames`` in ``syscall``."""
    main_threads = [_stack(MAIN_PID, "MainThread", *main_frames), _stack(MAIN_PID + 1, name, *frames)]
    return _main_hang(
        MAIN_PID,
        [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, syscall=LOCK_UNTIMED)])],
        (),
        HangVerdict("outside_loader", True, "not in a loader", main_threads[0]),
        main_threads,
        False,
        thread_details=((MAIN_PID, (detail(MAIN_PID, LOCK_UNTIMED), detail(MAIN_PID + 1, syscall))),),
        proof=_kernel_proof(MAIN_PID),
        **kw,
    )


def test_main_joining_a_thread_blocked_on_a_full_queue_is_a_main_thread_deadlock_naming_both():
    facts = _main_waits_for_its_thread(
        [
            ("Thread._wait_for_tstate_lock", f"{STDLIB}/threading.py", 1132, False),
            ("Thread.join", f"{STDLIB}/threading.py", 1112, False),
            ("ThreadPrefetcher.close", USER, 30, False),
            ("main", USER, 44, False),
        ],
        "prefetch",
        [
            ("Condition.wait", f"{STDLIB}/threading.py", 320, False),
            ("Queue.put", f"{STDLIB}/queue.py", 140, False),
            ("ThreadPrefetcher._run", USER, 21, False),
        ],
        LOCK_UNTIMED,
    )
    found = diagnose(facts)
    first = found[0]
    assert first.kind == "main_thread_deadlock" and first.certainty == "proven"
    text = " ".join(first.evidence)
    assert f"{USER}:30" in text and f"{USER}:21" in text and "prefetch" in text
    assert "stall_outside_loader" not in [d.kind for d in found]  # it would contradict the proof
    assert first.location == f"{USER}:30"


def test_a_hang_at_exit_joining_a_queue_feeder_names_the_exit_and_the_pipe():
    facts = _main_waits_for_its_thread(
        [
            ("Thread.join", f"{STDLIB}/threading.py", 1112, False),
            ("Queue._finalize_join", f"{STDLIB}/multiprocessing/queues.py", 199, False),
            ("Finalize.__call__", f"{STDLIB}/multiprocessing/util.py", 224, False),
            ("_run_finalizers", f"{STDLIB}/multiprocessing/util.py", 300, False),
            ("_exit_function", f"{STDLIB}/multiprocessing/util.py", 360, False),
        ],
        "QueueFeederThread",
        [
            ("_ConnectionBase.send_bytes", f"{STDLIB}/multiprocessing/connection.py", 205, False),
            ("Queue._feed", f"{STDLIB}/multiprocessing/queues.py", 250, False),
        ],
        PIPE_WRITE,
        fd_targets=(((MAIN_PID, 9), "pipe:[5]"),),
        pipe_readers=(("pipe:[5]", (MAIN_PID,)),),
    )
    first = diagnose(facts)[0]
    assert first.kind == "main_thread_deadlock" and "exit" in first.summary
    assert "cancel_join_thread" in first.remedy
    assert any("pipe:[5]" in e for e in first.evidence)


def test_stall_outside_loader_names_mains_frame():
    first = diagnose(hang_facts([], verdict_kind="outside_loader"))[0]
    assert first.kind == "stall_outside_loader" and first.pids == (MAIN_PID,) and first.certainty == "suspected"


def _main_only_facts(stack_file: str, verdict_reason: str, pid: int, verdict_kind: str = "dataloader") -> Facts:
    """A hang of main ``pid`` and one worker, with main's stack from the captured ``stack_file``."""
    threads = pyspy.parse_dump(fixture(stack_file))
    procs = [proc(pid, ROLE_MAIN, []), proc(pid + 5, ROLE_WORKER, [], "fork")]
    verdict = HangVerdict(verdict_kind, True, verdict_reason, threads[0])
    return _main_hang(pid, procs, (pid + 5,), verdict, threads, True)


def test_pin_memory_stall_fixture():
    first = diagnose(_main_only_facts("pyspy_main_pin_memory_stall.json", "waits for a batch", 4000))[0]
    assert first.kind == "pin_memory_stall"
    assert any("cudaHostAlloc" in e for e in first.evidence)


def test_shutdown_hang_fixture():
    first = diagnose(_main_only_facts("pyspy_main_shutdown_hang.json", "shutting down", 4100))[0]
    assert first.kind == "shutdown_hang"
    assert first.location == "/home/user/train.py:88"


def test_collective_wait_is_named_in_stall_outside_loader():
    facts = _main_only_facts("pyspy_main_collective.json", "not in a loader", 4200, verdict_kind="outside_loader")
    first = diagnose(facts)[0]
    assert first.kind == "stall_outside_loader"
    assert "collective" in first.summary and any("barrier" in e for e in first.evidence)


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
    t = fork_lock_thread()
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed\n'
        "OSError: [Errno 24] Too many open files\n"
    )
    kinds = [d.kind for d in diagnose(hang_facts([t], stderr_tail=stderr))]
    assert kinds.index("fd_exhausted") < kinds.index("batch_lost")


# --- crashes --------------------------------------------------------------------------------------


def _crash(stderr, procs=None, timeline=None, **kw):
    procs = procs or [proc(MAIN_PID, ROLE_MAIN, [])]
    smp = sample(50.0, procs, **kw.pop("host", {}))
    return Facts(mode=MODE_CRASH, sample=smp, timeline=tuple(timeline or (smp,)), stderr_tail=stderr, exit_code=1, **kw)


def test_errno_classes():
    assert (
        errno_of(
            "RuntimeError: unable to open shared memory object </torch_1_2_3> in read-write mode: Too many open files "
            "(24)"
        )
        == 24
    )
    assert errno_of("OSError: [Errno 28] No space left on device") == 28
    assert errno_of("no errno here") is None


def test_loader_timeout_with_busy_workers_says_the_timeout_is_too_short():
    def s(t, cpu):
        return sample(
            t,
            [
                proc(MAIN_PID, ROLE_MAIN, []),
                proc(WORKER_PID, ROLE_WORKER, [], "fork", cpu=cpu),
                proc(WORKER_PID + 1, ROLE_WORKER, [], "fork", cpu=cpu),
            ],
        )

    busy = [s(float(t), float(t)) for t in range(10)]
    first = diagnose(_crash(fixture("stderr_loader_timeout.txt"), timeline=busy))[0]
    assert (
        first.kind == "loader_timeout"
        and "shorter than a batch" in first.summary
        and "Raise DataLoader(timeout" in first.remedy
    )
    quiet = [s(float(t), 1.0) for t in range(10)]
    first = diagnose(_crash(fixture("stderr_loader_timeout.txt"), timeline=quiet))[0]
    assert first.kind == "loader_timeout" and "stuck" in first.summary


def test_an_exception_in_the_dataset_names_it_and_the_users_line():
    first = diagnose(_crash(fixture("stderr_dataset_exception.txt")))[0]
    assert first.kind == "dataset_error"
    assert "IndexError: list index out of range" in first.summary
    assert first.location == "/home/user/train/dataset_exception_len_lies.py:21"
    assert "__len__" in first.remedy
    tb = original_traceback(fixture("stderr_dataset_exception.txt"))
    user, source = tb.user()
    assert user.function == "__getitem__" and source.startswith("name = self.frames[i]") and tb.stage() == "Dataset"


def test_the_sample_that_raised_is_the_one_the_named_worker_recorded_for_the_batch_main_re_raised():
    from watchdog.types import InsideView, WorkerFailure

    def failed(pid, worker, batch, sample, at):
        return WorkerFailure(pid, worker, batch, tuple(range(batch * 8, batch * 8 + 8)), sample, "IndexError", at)

    view = InsideView(
        failures=(
            failed(301, 0, 96, 771, 1.0),  # an earlier epoch's iterator, caught by the job
            failed(311, 1, 97, 779, 2.0),  # worker 1: not the one main names
            failed(310, 0, 98, 784, 3.0),  # worker 0's first failure of this iterator: re-raised
            failed(310, 0, 100, 800, 4.0),  # fetched after it, never reached
        )
    )
    first = diagnose(_crash(fixture("stderr_dataset_exception.txt"), inside=view))[0]
    assert first.kind == "dataset_error" and "(sample index 784)" in first.summary
    assert "dataset[784] (the sample that raised)" in first.remedy
    assert any("batch 98, samples [784, 785" in e and "pid 310" in e for e in first.evidence), first.evidence


def test_a_sample_reached_through_subset_getitems_is_named_as_the_inner_datasets_index():
    from watchdog.types import InsideView, WorkerFailure

    failed = WorkerFailure(310, 0, 21, (52, 3, 62, 31), 37, "IndexError", 1.0, "Subset.__getitems__")
    first = diagnose(_crash(fixture("stderr_dataset_exception.txt"), inside=InsideView(failures=(failed,))))[0]
    assert any("index 37 of the dataset that Subset.__getitems__ reads" in e for e in first.evidence)
    assert "dataset[37]" not in first.remedy and "(sample index" not in first.summary  # 37 is not the Subset's


def test_a_worker_segfault_is_located_at_the_line_faulthandler_dumped():
    # Captured: the inside view turns faulthandler on in workers; the worker's dump (the
    # crashing thread, innermost first) precedes PyTorch's own "Unexpected segmentation fault".
    stderr = fixture("stderr_worker_segfault_faulthandler.txt")
    dump = fatal_error_dump(stderr)
    assert dump.what == "Segmentation fault" and dump.frames[0].function == "string_at"
    assert dump.user().file == "/home/user/train/worker_segfault_mid_epoch.py" and dump.user().line == 23
    first = diagnose(_crash(stderr))[0]
    assert first.kind == "worker_killed"
    assert first.location == "/home/user/train/worker_segfault_mid_epoch.py:23", first.location
    assert "(in __getitem__ at " in first.summary and "native library" in first.remedy
    assert fatal_error_dump("Traceback (most recent call last):\nValueError: x\n") is None


def test_a_pool_in_a_worker_is_a_start_failure_first():
    kinds = [d.kind for d in diagnose(_crash(fixture("stderr_nested_pool.txt")))]
    assert kinds[0] == "worker_start_failed" and "dataset_error" in kinds


@pytest.mark.parametrize("name", ["stderr_worker_segfault.txt", "stderr_worker_segfault_race.txt"])
def test_a_segfault_is_a_killed_worker_with_a_native_remedy_even_when_mains_message_lost_the_race(name):
    first = diagnose(_crash(fixture(name)))[0]
    assert first.kind == "worker_killed" and "egmentation" in first.summary
    assert "native" in first.remedy and "Memory:" not in first.remedy


def test_fd_exhaustion_is_attributed_to_the_processes_at_their_limit():
    workers = [proc(p, ROLE_WORKER, [], "fork", num_fds=199, rlimit=200) for p in (WORKER_PID, WORKER_PID + 1)]
    main = proc(MAIN_PID, ROLE_MAIN, [], num_fds=40, rlimit=4096)
    stderr = (
        "RuntimeError: unable to open shared memory object </torch_2847_1_2> in read-write mode: Too many open files "
        "(24)\n"
    )
    found = diagnose(_crash(stderr, [main, *workers], host={"shm_total": 1 << 30, "shm_used": 50_000}))
    first = found[0]
    assert first.kind == "fd_exhausted" and set(first.pids) == {WORKER_PID, WORKER_PID + 1}
    assert "RLIMIT_NOFILE 200" in first.summary and "main" not in first.summary
    assert "shm_exhausted" not in [d.kind for d in found]


def test_a_full_dev_shm_in_a_workers_collate_is_shm_exhausted_even_between_samples():
    # The failing segment is gone by the next sample: /dev/shm looked empty. The errno decides.
    found = diagnose(_crash(fixture("stderr_shm_exhausted_in_worker.txt"), host={"shm_total": 8 << 20, "shm_used": 0}))
    assert found[0].kind == "shm_exhausted" and not any("contradicted" in e for e in found[0].evidence)
    assert "dataset_error" not in [d.kind for d in found]


def test_enospc_on_a_disk_path_is_not_shared_memory():
    stderr = (
        "RuntimeError: Caught OSError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "/home/user/train/ds.py", line 9, in __getitem__\n    f.write(blob)\n'
        "OSError: [Errno 28] No space left on device: '/data/cache/17.bin'\n"
    )
    found = diagnose(_crash(stderr))
    assert found[0].kind == "disk_full" and "shm_exhausted" not in [d.kind for d in found]
    assert "/data/cache/17.bin" in found[0].summary and "Fix the Dataset code" not in found[0].remedy


def test_shm_exhausted_contradicted_by_an_empty_dev_shm_ranks_last():
    stderr = "RuntimeError: unable to write to file </torch_5_6_7>: No space left on device (28)\n"
    full = diagnose(_crash(stderr, host={"shm_total": 64 << 20, "shm_used": 63 << 20}))[0]
    assert full.kind == "shm_exhausted" and not any("contradicted" in e for e in full.evidence)
    empty = diagnose(
        _crash(stderr + "OSError: [Errno 24] Too many open files\n", host={"shm_total": 64 << 30, "shm_used": 1 << 20})
    )
    assert empty[0].kind == "fd_exhausted" and any("contradicted" in e for e in empty[-1].evidence)


def test_a_deleted_shared_memory_file_is_shm_removed_not_exhausted():
    stderr = (
        "RuntimeError: unable to open shared memory object </torch_12_34_0> in read-write mode: No such file or "
        "directory (2)\n"
    )
    found = diagnose(_crash(stderr, host={"shm_total": 24 << 30, "shm_used": 10 << 20}))
    assert found[0].kind == "shm_removed" and "RemoveIPC" in found[0].remedy
    assert "shm_exhausted" not in [d.kind for d in found]


def test_a_failed_mmap_near_max_map_count_is_map_count_exhausted():
    stderr = "RuntimeError: unable to mmap 4 bytes from file </torch_12_34_0>: Cannot allocate memory (12)\n"
    main = proc(MAIN_PID, ROLE_MAIN, [], map_count=65_400)
    first = diagnose(_crash(stderr, [main], host={"max_maps": 65530}))[0]
    assert first.kind == "map_count_exhausted" and "65530" in first.summary and "max_map_count" in first.remedy


def test_files_left_in_dev_shm_after_exit_are_reported_with_how_to_remove_them():
    smp = sample(1.0, [])
    facts = Facts(
        mode=MODE_EXIT,
        sample=smp,
        timeline=(),
        exit_code=0,
        shm_leftovers=(("torch_42_a_0", 512), ("torch_42_a_1", 512)),
    )
    (only,) = diagnose(facts)
    assert only.kind == "shm_leaked" and "rm -f /dev/shm/torch_42_*" in only.remedy


def test_cuda_in_forked_worker_fixture():
    first = diagnose(_crash(fixture("stderr_cuda_in_forked_worker.txt")))[0]
    assert first.kind == "cuda_in_forked_worker"


# --- warnings -------------------------------------------------------------------------------------


def _uss_timeline(method, worker_mib, main_mib=200, workers=2, main_anon_mib=None):
    """20 samples, 1 s apart, of main and ``workers`` workers started by ``method``, their USS flat."""
    anon = {} if main_anon_mib is None else {"anon_bytes": main_anon_mib << 20}

    def s(t):
        return sample(
            t,
            [
                proc(MAIN_PID, ROLE_MAIN, [], uss=main_mib << 20, **anon),
                *(proc(WORKER_PID + k, ROLE_WORKER, [], method, uss=worker_mib << 20) for k in range(workers)),
            ],
        )

    return tuple(s(float(t)) for t in range(20))


def test_copy_on_read_is_judged_by_level_not_only_by_slope():
    found = diagnose(live_facts(_uss_timeline("fork", 140)))
    first = found[0]
    assert first.kind == "worker_memory_growth" and "one more worker costs" in first.summary
    assert diagnose(live_facts(_uss_timeline("fork", 16, main_mib=72, workers=1))) == ()
    # Far more than main holds, flat: the worker allocated it (a bounded cache), it copied little.
    assert diagnose(live_facts(_uss_timeline("fork", 115, main_mib=11))) == ()

    # With smaps_rollup's figures (as measured on the two cases): what a worker copied of main is
    # main's anonymous memory it no longer shares.
    def measured(main_anon, main_uss, worker_anon, worker_dirty):
        def s(t):
            main = proc(MAIN_PID, ROLE_MAIN, [], uss=main_uss << 20, anon_bytes=main_anon << 20)
            workers = [
                proc(WORKER_PID + k, ROLE_WORKER, [], "fork", uss=worker_dirty << 20, anon_bytes=worker_anon << 20)
                for k in range(2)
            ]
            workers = [dataclasses.replace(w, dirty_bytes=worker_dirty << 20) for w in workers]
            return sample(float(t), [main, *workers])

        return live_facts(tuple(s(t) for t in range(20)))

    assert diagnose(measured(143, 66, 248, 115)) == ()  # a bounded cache: 10 MiB copied of 115 private
    (found,) = diagnose(measured(581, 137, 582, 137))  # copy_on_read_index: its private memory is copies
    assert found.kind == "worker_memory_growth"


def test_oversubscription_remedy_follows_the_measured_thread_counts():
    timeline = oversubscribed_timeline()
    found = {d.kind: d for d in diagnose(live_facts(timeline, host_cpus=4))}
    assert "cpu_oversubscribed" in found and "cpu_affinity_narrowed" in found
    remedy = found["cpu_oversubscribed"].remedy
    assert "set_num_threads" not in remedy and "affinity" in remedy


def test_oversubscription_is_judged_on_the_samples_that_read_threads():
    # NOTE [ Thread reads ]: samples between those that read threads have none; they are not
    # samples with no runnable thread (here half the timeline: the rule needs 60 % of it over).
    def unread(s):
        return dataclasses.replace(
            s, processes=tuple(dataclasses.replace(p, threads=()) for p in s.processes), threads_read=False
        )

    fresh = oversubscribed_timeline()
    mixed = tuple(x for s in fresh for x in (s, unread(dataclasses.replace(s, t_mono=s.t_mono + 0.5))))
    assert "cpu_oversubscribed" in {d.kind for d in diagnose(live_facts(mixed, host_cpus=4))}
    assert "cpu_oversubscribed" not in {d.kind for d in diagnose(live_facts(tuple(map(unread, fresh)), host_cpus=4))}


def test_map_count_pressure_warns_before_the_crash():
    timeline = tuple(
        sample(float(t), [proc(MAIN_PID, ROLE_MAIN, [], map_count=40_000 + 1300 * t)], max_maps=65530)
        for t in range(12)
    )
    (first,) = [d for d in diagnose(live_facts(timeline)) if d.kind == "map_count_pressure"]
    assert "65530" in first.summary and any("mappings/s" in e for e in first.evidence)


# --- the rule contract ------------------------------------------------------------------------------


def test_the_rank_table_in_the_engine_note_matches_the_registered_rules():
    ranks = {kind: int(rank) for rank, kind in re.findall(r"^(\d+)\s+(\w+)\s", engine.__doc__, re.M)}
    for r in RULES:
        if r.rank < 50:
            assert ranks.get(r.kind) == r.rank, r.kind
    assert set(ranks) - {"warnings"} <= {r.kind for r in RULES}


def test_the_engine_runs_a_rule_only_in_its_modes():
    t = fork_lock_thread()
    live = Facts(**{**hang_facts([t]).__dict__, "mode": MODE_LIVE})
    assert all(d.severity == "warning" for d in diagnose(live))


def test_threads_at_fork_count_every_thread_of_main_that_started_before_the_worker():
    # Sampling every second saw 2 threads; 5 were alive at the fork (their start times say so).
    t = fork_lock_thread()
    main_details = tuple(detail(MAIN_PID + k, IDLE_POLL, start_ticks=100 + k) for k in range(5)) + (
        detail(MAIN_PID + 9, IDLE_POLL, start_ticks=300),
    )
    facts = hang_facts(
        [t],
        main_threads_at_fork=((WORKER_PID, 2),),
        worker_start_ticks=((WORKER_PID, 200),),
        thread_details=((MAIN_PID, main_details), (WORKER_PID, (detail(WORKER_PID, LOCK_UNTIMED),))),
    )
    text = " ".join(diagnose(facts)[0].evidence)
    assert "at least 5 threads" in text and str(MAIN_PID + 9) not in text


def test_spawned_workers_own_memory_is_not_copy_on_read():
    assert "worker_memory_growth" not in [d.kind for d in diagnose(live_facts(_uss_timeline("spawn", 144)))]


def _pinned_timeline(values_mib, ram_gib=64):
    out = []
    for i, v in enumerate(values_mib):
        main = proc(MAIN_PID, ROLE_MAIN, [], pinned_bytes=v * 2**20)
        out.append(sample(float(i * 10), [main], total=ram_gib * 2**30))
    return out


def test_pinned_memory_that_grows_steadily_is_a_warning_naming_the_allocator():
    timeline = _pinned_timeline([1024, 2048, 3072, 4096, 5120])
    found = diagnose(live_facts(timeline))
    (pinned,) = [d for d in found if d.kind == "pinned_memory_growth"]
    assert "grows steadily" in pinned.summary and "caching host allocator" in pinned.summary
    assert any("grew by 4096.0 MiB" in e for e in pinned.evidence) and "prefetch_factor" in pinned.remedy


def test_steady_or_small_pinned_memory_and_no_cuda_are_not_warnings():
    for values in ([1024] * 5, [100, 150, 200, 250, 300]):  # flat; grows by less than 256 MiB
        timeline = _pinned_timeline(values)
        assert "pinned_memory_growth" not in [d.kind for d in diagnose(live_facts(timeline))]
    large = _pinned_timeline([20 * 1024] * 5)  # a third of 64 GiB, flat: large
    assert "pinned_memory_growth" in [d.kind for d in diagnose(live_facts(large))]
    s = sample(0.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    assert "pinned_memory_growth" not in [d.kind for d in diagnose(live_facts([s]))]


def _fork_view(*threads):
    from watchdog.types import ForkRecord, InsideView, ThreadAtFork

    return InsideView(
        forks=(
            ForkRecord(
                MAIN_PID,
                1,
                None,
                (WORKER_PID,),
                tuple(ThreadAtFork(n, tid, False, forking, _frames(*fr)) for n, tid, forking, fr in threads),
            ),
        )
    )


def test_the_fork_record_decides_whether_a_waiting_event_was_inherited():
    t = _waiting_on_event()
    forking = (
        "MainThread",
        MAIN_PID,
        True,
        [("__iter__", f"{TORCH}/dataloader.py", 490, False), ("main", USER, 20, False)],
    )
    other = (
        "uploader",
        MAIN_PID + 1,
        False,
        [("Event.wait", f"{STDLIB}/threading.py", 622, False), ("upload", USER, 70, False)],
    )
    with_other = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID), inside=_fork_view(forking, other)))[0]
    assert with_other.kind == "fork_inherited_lock"
    assert any("uploader (tid" in e for e in with_other.evidence)  # the threads at fork, from the job's record
    # a threading.Event never crosses processes: spawn would hang the same way; the fix is a multiprocessing one
    assert "multiprocessing.Event" in with_other.remedy and "hangs the same way" in with_other.remedy
    alone = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID), inside=_fork_view(forking)))[0]
    assert alone.kind == "worker_deadlock" and "only thread of its own" in alone.summary and "setter" in alone.remedy
    # Without a record (no inside view) nothing rules inheritance out: the verdict stays as it was.
    assert diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID)))[0].kind == "fork_inherited_lock"


def test_a_lock_the_forking_thread_itself_held_is_inherited_even_when_it_was_alone():
    t = _in_dataset(("Frames.__getitem__", USER, 9, False))
    forking = ("MainThread", MAIN_PID, True, [("main", USER, 21, False)])
    sources = (
        ((USER, 9), "        with LOCK:"),
        ((USER, 20), "    with LOCK:"),
        ((USER, 21), "        it = iter(loader)"),
    )
    first = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID), sources=sources, inside=_fork_view(forking)))[0]
    assert first.kind == "fork_inherited_lock"


def test_a_lock_the_forking_thread_acquired_above_the_loop_is_inherited():
    # main: `LOCK.acquire()`, then `for b in DataLoader(...)` at one indentation; the worker waits at `with LOCK:`
    t = _in_dataset(("D.__getitem__", USER, 7, False))
    forking = ("MainThread", MAIN_PID, True, [("<module>", USER, 11, False)])
    sources = (
        ((USER, 7), "        with LOCK:"),
        ((USER, 10), "    LOCK.acquire()"),
        ((USER, 11), "    for b in loader:"),
    )
    found = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID), sources=sources, inside=_fork_view(forking)))
    assert found[0].kind == "fork_inherited_lock" and "main's own thread held" in found[0].summary
    assert "before the iterator is created" in found[0].remedy
    assert any("the forking thread MainThread" in e and "`LOCK.acquire()`" in e for e in found[0].evidence)
    # released again before the loop: nothing was inherited held
    released = sources + (((USER, 9), "    LOCK.release()"), ((USER, 8), "    LOCK.acquire()"))
    released = tuple(x for x in released if x[0] != (USER, 10))
    facts = hang_facts([t], proof=_kernel_proof(WORKER_PID), sources=released, inside=_fork_view(forking))
    assert diagnose(facts)[0].kind == "worker_deadlock"


def _first_fetch_view(forking, samples, batch_size=4):
    from tests.unit.builders import loader_view as _loader
    from watchdog.types import WorkerFetch

    view = _fork_view(forking)
    loader = dataclasses.replace(_loader(), settings=(("num_workers", 2), ("batch_size", batch_size)))
    return dataclasses.replace(view, loaders=(loader,), fetches=(WorkerFetch(WORKER_PID, samples, 1.0),))


def test_a_lock_held_before_a_worker_s_first_batch_was_held_by_the_forking_thread():
    # the lock was taken in a helper that returned before iter(loader): no frame at the fork shows it
    t = _in_dataset(("Registry.lookup", USER, 30, False), ("D.__getitem__", USER, 7, False))
    forking = ("MainThread", MAIN_PID, True, [("main", USER, 51, False)])
    sources = (((USER, 30), "        with self._lock:"), ((USER, 7), "        return REGISTRY.lookup(i)"))
    facts = hang_facts(
        [t], proof=_kernel_proof(WORKER_PID), sources=sources, inside=_first_fetch_view(forking, samples=2)
    )
    first = diagnose(facts)[0]
    assert first.kind == "fork_inherited_lock" and "main's own thread held" in first.summary
    assert any("already held when the worker began" in e and "first batch" in e for e in first.evidence)
    # Past its first batch the worker took the lock before: its own thread left it held.
    later = dataclasses.replace(facts, inside=_first_fetch_view(forking, samples=40))
    assert diagnose(later)[0].kind == "worker_deadlock"
    # In its first batch, but an outer frame of its own thread holds it already (taken twice): its own deadlock.
    own = _in_dataset(("Registry.lookup", USER, 30, False), ("Registry.get", USER, 7, False))
    nested = (((USER, 30), "        with self._lock:"), ((USER, 5), "    with self._lock:"), ((USER, 7), "        x()"))
    nested_facts = hang_facts(
        [own], proof=_kernel_proof(WORKER_PID), sources=nested, inside=_first_fetch_view(forking, samples=2)
    )
    assert diagnose(nested_facts)[0].kind == "worker_deadlock"


def test_ranks_whose_loaders_ran_out_at_different_counts_are_uneven_batches():
    from tests.unit.builders import loader_view as _loader

    own = dataclasses.replace(_loader(intervals=4, since=None, worker=0), batches=5)  # mid-epoch, in backward()
    peer = dataclasses.replace(_loader(pid=MAIN_PID + 100, intervals=3, since=50.0, worker=-1), batches=4)  # epoch over
    facts = hang_facts([], verdict_kind="outside_loader", rank="0", peer_loaders=(("1", (peer,)),))
    facts = dataclasses.replace(facts, sample=dataclasses.replace(facts.sample, loaders=(own,)))
    first = diagnose(facts)[0]
    assert first.kind == "uneven_batches" and "rank 1's DataLoader ran out after 4 batches" in first.summary
    assert "rank 0 delivered 5" in first.summary and "DistributedSampler" in first.remedy
    assert any("process group's timeout" in e for e in first.evidence)
    even = dataclasses.replace(peer, batches=5)
    assert diagnose(dataclasses.replace(facts, peer_loaders=(("1", (even,)),)))[0].kind != "uneven_batches"


def test_without_the_fork_record_a_worker_waiting_on_an_event_with_main_seen_alone_is_a_less_sure_inheritance():
    t = _waiting_on_event()
    main_detail = detail(MAIN_PID, LOCK_UNTIMED, start_ticks=100)
    facts = hang_facts(
        [t],
        proof=_kernel_proof(WORKER_PID),
        main_threads_at_fork=((WORKER_PID, 1),),
        worker_start_ticks=((WORKER_PID, 500),),
    )
    facts = dataclasses.replace(facts, thread_details=facts.thread_details + ((MAIN_PID, (main_detail,)),))
    first = diagnose(facts)[0]
    assert first.kind == "fork_inherited_lock" and first.confidence <= 0.6
    assert any("no other thread of main was seen at the fork" in e for e in first.evidence)
    busy = dataclasses.replace(facts, main_threads_at_fork=((WORKER_PID, 3),))
    assert diagnose(busy)[0].confidence >= 0.9


def test_the_threads_at_fork_count_main_s_native_threads_by_their_comm():
    import dataclasses as dc

    forking = ("MainThread", MAIN_PID, True, [("main", USER, 21, False)])
    view = _fork_view(forking)
    record = dc.replace(
        view.forks[0], os_threads=((MAIN_PID, "python"), (MAIN_PID + 1, "tokenizers-0"), (MAIN_PID + 2, "tokenizers-1"))
    )
    view = dc.replace(view, forks=(record,))
    t = _in_dataset(  # a Rust pool's mutex, taken in the tokenizer's native code
        ("__lll_lock_wait", "libc.so.6", 0, True),
        ("pthread_mutex_lock", "libc.so.6", 0, True),
        ("tokenizers::encode", "tokenizers.abi3.so", 0, True),
        ("TextDataset.__getitem__", USER, 12, False),
    )
    first = diagnose(hang_facts([t], proof=_kernel_proof(WORKER_PID), inside=view))[0]
    text = "\n".join(first.evidence)
    assert first.kind == "fork_inherited_lock"
    assert "one Python thread (the forking one) and 2 native thread(s)" in text
    assert "tokenizers-0" in text and "single thread" not in text


def test_where_is_the_jobs_own_line_not_the_library_frame_it_called():
    from watchdog.types import ThreadStack

    lib = "/opt/venv/lib/python3.11/site-packages/rich/live.py"
    spec = (("Live.refresh", lib, 230, False), ("step", USER, 40, False))
    t = ThreadStack(1, "MainThread", False, False, _frames(*spec))
    assert frames.innermost_user(t).file == USER
    only_lib = ThreadStack(1, "MainThread", False, False, _frames(("Live.refresh", lib, 230, False)))
    assert frames.innermost_user(only_lib).file == lib  # nothing of the job's own: the library's frame


def test_a_lock_of_self_is_matched_to_a_holder_of_the_same_class_only():
    t = _in_dataset(("Console.write", USER, 9, False))
    forking = ("MainThread", MAIN_PID, True, [("main", USER, 60, False)])
    sources = (
        ((USER, 9), "        with self._lock:"),
        ((USER, 28), "        with self._lock:"),
        ((USER, 30), "            self.render()"),
    )

    def holder_line(cls):
        other = ("refresher", MAIN_PID + 1, False, [(f"{cls}.refresh", USER, 30, False)])
        facts = hang_facts([t], proof=_kernel_proof(WORKER_PID), sources=sources, inside=_fork_view(forking, other))
        return [e for e in diagnose(facts)[0].evidence if "held a lock named" in e]

    assert holder_line("Console")  # the same class: the same lock
    assert not holder_line("Live")  # Live's self._lock is another object (Textualize/rich#2046)


def test_an_exception_in_collate_fn_is_not_called_the_datasets_and_gets_a_collate_reproduction():
    first = diagnose(_crash(fixture("stderr_collate_object_field.txt")))[0]
    assert first.kind == "collate_error"
    assert first.summary.startswith("collate_fn raised TypeError: default_collate: batch must contain")
    assert (
        "collate_fn([dataset[i] for i in range(batch_size)])" in first.remedy
        and "dataset[i] for the" not in first.remedy
    )
    # no frame of the job's own in the worker's traceback: the loop that iterates the loader, in main
    assert first.location == "/home/user/train/collate_object_field.py:7"
    assert any("PyTorch's call of collate_fn" in line for line in first.evidence)


def test_an_exception_in_worker_init_fn_names_its_line_and_a_reproduction_that_runs_it():
    first = diagnose(_crash(fixture("stderr_worker_init_fn_raises.txt")))[0]
    assert first.kind == "worker_init_error"
    assert first.summary.startswith("worker_init_fn raised KeyError: 'SHARD_ID' at ")
    assert first.location == "/home/user/train/worker_init_fn_raises.py:7"  # not <frozen os>
    assert "worker_init_fn(0)" in first.remedy and "num_workers=0 (or" not in first.remedy
    tb = original_traceback(fixture("stderr_worker_init_fn_raises.txt"))
    assert tb.stage() == "worker_init_fn" and tb.exception == "KeyError: 'SHARD_ID'"


def test_descriptors_exhausted_by_the_datasets_own_files_get_close_them_advice_not_a_sharing_strategy():
    from watchdog.types import FdCensus, FdKind

    stderr = "OSError: [Errno 24] Too many open files: '/data/img/00231.bin'\n"
    census = FdCensus(40.0, 240, ((FdKind.FILE, 228), (FdKind.PIPE, 8), (FdKind.SOCKET, 4)), (("/data/img", 228),))
    worker = dataclasses.replace(proc(WORKER_PID, ROLE_WORKER, [], "fork", num_fds=240, rlimit=256), fd_census=census)
    first = diagnose(_crash(stderr, procs=[proc(MAIN_PID, ROLE_MAIN, []), worker]))[0]
    assert first.kind == "fd_exhausted"
    assert "regular files the job opened and kept open (228 of 240" in first.summary
    assert "Close the files the Dataset opens (under /data/img)" in first.remedy
    assert "set_sharing_strategy" not in first.remedy
    assert any("228 file, 8 pipe, 4 socket" in line for line in first.evidence)
    # shared tensors filling the table: the sharing-strategy advice stays
    shm = FdCensus(40.0, 240, ((FdKind.SHM, 220), (FdKind.FILE, 20)), (("/usr/lib", 20),))
    worker = dataclasses.replace(worker, fd_census=shm)
    first = diagnose(_crash(stderr, procs=[proc(MAIN_PID, ROLE_MAIN, []), worker]))[0]
    assert "set_sharing_strategy" in first.remedy


def test_a_bus_error_from_a_file_that_shrank_under_its_mapping_is_not_blamed_on_dev_shm():
    stderr = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
        "RuntimeError: DataLoader worker (pid 2847) is killed by signal: Bus error.\n"
    )
    mapped = (("/data/features.npy", 16 << 20, 4242),)
    worker = dataclasses.replace(proc(WORKER_PID, ROLE_WORKER, [], "fork"), mapped_files=mapped)
    procs = [proc(MAIN_PID, ROLE_MAIN, []), worker]
    host = {"shm_total": 24 << 30, "shm_used": 1 << 20}
    shrunk = _crash(stderr, procs=procs, host=host, mapped_file_sizes=(("/data/features.npy", 65664, 4242),))
    kinds = [d.kind for d in diagnose(shrunk)]
    first = diagnose(shrunk)[0]
    assert first.kind == "worker_killed" and "shm_exhausted" not in kinds
    assert "/data/features.npy, which it had mapped, shrank" in first.summary and "os.replace()" in first.remedy
    # replaced by a new file (another inode): the mapping keeps the old pages, nothing shrank
    replaced = _crash(stderr, procs=procs, host=host, mapped_file_sizes=(("/data/features.npy", 65664, 9999),))
    found = {d.kind: d for d in diagnose(replaced)}
    assert "shrank" not in found["worker_killed"].summary
    assert any(
        "contradicted by a measurement" in e and "file-backed mapping" in e for e in found["shm_exhausted"].evidence
    )
    assert [d.kind for d in diagnose(replaced)].index("shm_exhausted") > 0  # contradicted: not first


def test_clean_file_pages_a_worker_reads_through_a_memmap_are_not_a_leak():
    # USS grows 8 MiB/s (file pages read through np.load(mmap_mode="r")) while what the
    # workers wrote stays flat: no warning. The same growth in private dirty memory is one.
    def timeline(dirty_grows):
        def s(t):
            workers = [
                dataclasses.replace(
                    proc(WORKER_PID + k, ROLE_WORKER, [], "fork", uss=(20 + 8 * t) << 20),
                    dirty_bytes=((12 + 8 * t) if dirty_grows else 12) << 20,
                )
                for k in range(2)
            ]
            return sample(float(t), [proc(MAIN_PID, ROLE_MAIN, [], uss=200 << 20), *workers])

        return tuple(s(t) for t in range(20))

    assert "worker_memory_growth" not in [d.kind for d in diagnose(live_facts(timeline(False)))]
    (found,) = [d for d in diagnose(live_facts(timeline(True))) if d.kind == "worker_memory_growth"]
    assert any("private dirty memory +" in line for line in found.evidence)


def test_an_oom_kill_under_a_cgroup_names_the_limit_in_force_not_the_hosts_memory():
    stderr = "RuntimeError: DataLoader worker (pid 2847) is killed by signal: Killed.\n"
    procs = [proc(MAIN_PID, ROLE_MAIN, [], uss=150 << 20), proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=300 << 20)]
    smp = sample(50.0, procs)
    smp = dataclasses.replace(
        smp, host=dataclasses.replace(smp.host, mem_limit_bytes=640 << 20, mem_cgroup_usage_bytes=600 << 20)
    )
    facts = Facts(mode=MODE_CRASH, sample=smp, timeline=(smp,), stderr_tail=stderr, exit_code=1, oom_kills=1)
    first = diagnose(facts)[0]
    assert first.kind == "worker_killed" and "by the OOM killer" in first.summary
    assert any("at the cgroup's limit of 640.0 MiB" in e for e in first.evidence)
    assert any("lowest memory left to the job seen: 40.0 MiB" in e for e in first.evidence)  # not the host's 1 GiB
    assert "raise the cgroup's 640.0 MiB limit" in first.remedy and "own allocations grew" in first.remedy


def _main_growth_timeline(mib_per_s, seconds=20, limit=1 << 30, available=1 << 30):
    def s(t):
        main = dataclasses.replace(
            proc(MAIN_PID, ROLE_MAIN, [], uss=(300 + mib_per_s * t) << 20), dirty_bytes=(250 + mib_per_s * t) << 20
        )
        smp = sample(float(t), [main, proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=20 << 20)])
        used = (300 + mib_per_s * t) << 20
        return dataclasses.replace(
            smp,
            host=dataclasses.replace(
                smp.host, mem_limit_bytes=limit, mem_cgroup_usage_bytes=used, mem_available_bytes=available
            ),
        )

    return tuple(s(t) for t in range(seconds))


def test_main_growing_toward_its_cgroup_limit_is_warned_about_and_a_flat_main_is_not():
    (found,) = [d for d in diagnose(live_facts(_main_growth_timeline(30))) if d.kind == "main_memory_growth"]
    assert "30.0 MiB/s" in found.summary and "under the cgroup limit" in found.summary and ".item()" in found.remedy
    assert "main_memory_growth" not in [d.kind for d in diagnose(live_facts(_main_growth_timeline(0)))]
    # growing, but the memory left lasts for hours at that rate: no warning
    slow = _main_growth_timeline(30, limit=1 << 40, available=1 << 40)
    assert "main_memory_growth" not in [d.kind for d in diagnose(live_facts(slow))]


def test_main_killed_by_the_oom_killer_is_a_crash_with_its_growth_and_the_limit():
    timeline = _main_growth_timeline(30)
    facts = Facts(mode=MODE_CRASH, sample=timeline[-1], timeline=timeline, stderr_tail="", exit_code=137, oom_kills=1)
    first = diagnose(facts)[0]
    assert first.kind == "main_killed" and "OOM killer" in first.summary
    assert any("main grew steadily" in e for e in first.evidence)
    assert any("at its limit of 1024.0 MiB" in e for e in first.evidence)
    term = dataclasses.replace(facts, exit_code=143, oom_kills=0, timeline=timeline[:1])
    assert "OOM killer never sends it" in diagnose(term)[0].remedy


def test_a_worker_killed_by_sigabrt_or_sigterm_gets_its_own_cause_not_memory_advice():
    abort = (
        "python: decoder.c:42: decode_row: Assertion `width > 0' failed.\n"
        "RuntimeError: DataLoader worker (pid 2847) is killed by signal: Aborted.\n"
    )
    first = diagnose(_crash(abort))[0]
    assert first.kind == "worker_killed" and "Assertion `width > 0' failed" in first.remedy
    assert any("stderr: python: decoder.c:42" in e for e in first.evidence) and "Memory" not in first.remedy
    term = diagnose(_crash("RuntimeError: DataLoader worker (pid 2847) is killed by signal: Terminated.\n"))[0]
    assert "the OOM killer never sends it" in term.remedy
    # the signal by number and name, as exit records say it, not strsignal's word alone
    assert "killed by signal 15 (SIGTERM: Terminated)" in term.summary + " ".join(term.evidence), term.summary
    assert "killed by signal 6 (SIGABRT: Aborted)" in first.summary + " ".join(first.evidence), first.summary


def test_dev_shm_filled_by_batches_main_keeps_is_not_told_to_raise_shm_size():
    stderr = (
        "RuntimeError: unable to allocate shared memory(shm) for file </torch_7_1_2>: No space left on device (28)\n"
    )

    def timeline(growing):
        return tuple(
            sample(
                float(t),
                [proc(MAIN_PID, ROLE_MAIN, [])],
                shm_total=64 << 20,
                shm_used=((8 * t) if growing else 6) << 20,
            )
            for t in range(9)
        )

    kept = timeline(True)
    first = diagnose(_crash(stderr, timeline=kept, host={"shm_total": 64 << 20, "shm_used": 64 << 20}))[0]
    assert first.kind == "shm_exhausted" and "main kept the batches" in first.summary
    assert "--shm-size=8g" not in first.remedy and "clone()" in first.remedy
    steady = diagnose(_crash(stderr, timeline=timeline(False), host={"shm_total": 64 << 20, "shm_used": 6 << 20}))[0]
    assert "--shm-size=8g" in steady.remedy


def test_the_original_traceback_ends_where_its_exception_does_not_at_the_next_processs_traceback():
    stderr = (
        "ValueError: Caught ValueError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/t/torch/utils/data/_utils/fetch.py", line 52, in fetch\n'
        "    data = [self.dataset[idx] for idx in possibly_batched_index]\n"
        '  File "/home/u/train.py", line 12, in __getitem__\n'
        "    raise ValueError(f'sample {i} is corrupt')\n"
        "ValueError: sample 64 is corrupt\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 30, in main\n'
        "    dist.barrier()\n"
        "RuntimeError: Connection closed by peer\n"
    )
    tb = original_traceback(stderr)
    assert tb.exception == "ValueError: sample 64 is corrupt"
    assert tb.user()[0].line == 12 and all(f.line != 30 for f, _ in tb.frames)


def test_a_worker_that_became_another_program_is_worker_exec_not_a_lost_batch():
    import dataclasses as dc

    from watchdog.types import ROLE_OTHER, Frame, InsideView, WorkerExec

    base = hang_facts([], stacks_ok=False)
    was = next(p for p in base.sample.processes if p.pid == WORKER_PID)
    was = dc.replace(was, name="pt_data_worker", cmdline=("python", "train.py"))
    now = dc.replace(was, name="sleep", cmdline=("sleep", "600"), role=ROLE_OTHER)
    before = dc.replace(base.sample, processes=(base.sample.main, was))
    after = dc.replace(base.sample, processes=(base.sample.main, now))
    record = WorkerExec(WORKER_PID, "/bin/sleep", (Frame("__getitem__", "/work/train.py", 21, False),))
    facts = dc.replace(base, sample=after, timeline=(before, after), inside=InsideView(execs=(record,)))
    first = diagnose(facts)[0]
    assert first.kind == "worker_exec" and first.location == "/work/train.py:21", first
    assert "sleep" in first.summary and "subprocess.run" in first.remedy and "picklable" not in first.remedy
    unchanged = dc.replace(base, sample=before, timeline=(before, before))
    assert all(d.kind != "worker_exec" for d in diagnose(unchanged))


def test_a_killed_processes_memory_says_how_old_its_slow_reading_was():
    import dataclasses

    from watchdog.diagnose.crashes.memory import memory_age

    base = hang_facts([])
    s = base.sample
    pid = s.main.pid
    stale = dataclasses.replace(s.main, memory_read_mono=s.t_mono - 18.0)
    facts = dataclasses.replace(base, timeline=(dataclasses.replace(s, processes=(stale,) + s.processes[1:]),))
    assert memory_age(facts, pid) == " (USS and private dirty read 18 s before; RSS at that sample)"
    fresh = dataclasses.replace(s.main, memory_read_mono=s.t_mono)
    facts = dataclasses.replace(base, timeline=(dataclasses.replace(s, processes=(fresh,) + s.processes[1:]),))
    assert memory_age(facts, pid) == ""


def _warning_stack(pid, thread_frames, wall, why="worker_memory_growth"):
    from watchdog.types import EarlierStack

    threads = (ThreadStack(pid, "MainThread", True, False, thread_frames),)
    return EarlierStack(pid, wall, why, ProcessStack(pid, threads, False, None, "", 0.1))


_OOM_KILLED = "RuntimeError: DataLoader worker (pid 2847) is killed by signal: Killed.\n"


def test_a_worker_oom_killed_without_a_traceback_is_located_at_the_dataset_line_of_its_last_stack():
    # py-spy's --nonblocking dump at the memory warning: the worker was in a helper that
    # __getitem__ calls; the Dataset's line is __getitem__'s, the one torch's fetcher called.
    in_fetch = _frames(
        ("decode", USER, 22, False),
        ("CachedImages.__getitem__", USER, 35, False),
        ("_MapDatasetFetcher.fetch.<locals>.<listcomp>", f"{TORCH}/_utils/fetch.py", 54, False),
        ("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 54, False),
        ("_worker_loop", f"{TORCH}/_utils/worker.py", 349, False),
        ("run", f"{STDLIB}/multiprocessing/process.py", 108, False),
    )
    crash = _crash(_OOM_KILLED, oom_kills=1)
    facts = dataclasses.replace(crash, earlier_stacks=(_warning_stack(WORKER_PID, in_fetch, crash.sample.wall - 5),))
    first = diagnose(facts)[0]
    assert first.kind == "worker_killed" and first.location == f"{USER}:35", first.location
    assert "(at its last stack, 5.0 s before: in CachedImages.__getitem__ at " in first.summary, first.summary
    (line,) = [e for e in first.evidence if "at the worker_memory_growth warning" in e]
    assert "5.0 s before its last sample" in line and "the line it was in then" in line and "decode (" in line
    # another process's stack says nothing about this worker
    other = dataclasses.replace(facts, earlier_stacks=(_warning_stack(WORKER_PID + 1, in_fetch, crash.sample.wall),))
    assert diagnose(other)[0].location != f"{USER}:35"


def test_without_a_stack_a_killed_worker_is_located_at_its_datasets_getitem_from_the_inside_view():
    from watchdog.types import InsideView

    def view(code):
        from tests.unit.builders import loader_view as _loader

        return dataclasses.replace(
            _loader(), site=Frame("main", "/home/user/train/train.py", 40, False), dataset_code=code
        )

    own = Frame("CachedImages.__getitem__", USER, 31, False)
    first = diagnose(_crash(_OOM_KILLED, oom_kills=1, inside=InsideView(loaders=(view(own),))))[0]
    assert first.location == f"{USER}:31", first.location
    assert any(
        "no stack of the worker exists" in e and "CachedImages.__getitem__, defined at" in e for e in first.evidence
    )
    # torch's own Dataset (TensorDataset) is no line of the job's: the loop's site instead
    torch_ds = Frame("TensorDataset.__getitem__", f"{TORCH}/dataset.py", 210, False)
    first = diagnose(_crash(_OOM_KILLED, oom_kills=1, inside=InsideView(loaders=(view(torch_ds),))))[0]
    assert first.location == "/home/user/train/train.py:40", first.location


def test_main_oom_killed_is_located_at_the_line_of_its_stack_at_the_memory_warning():
    timeline = _main_growth_timeline(30)
    in_loop = _frames(
        ("main", "/home/user/train/train.py", 39, False), ("<module>", "/home/user/train/train.py", 43, False)
    )
    facts = Facts(
        mode=MODE_CRASH,
        sample=timeline[-1],
        timeline=timeline,
        stderr_tail="",
        exit_code=137,
        oom_kills=1,
        earlier_stacks=(_warning_stack(MAIN_PID, in_loop, wall=timeline[-1].wall - 2, why="main_memory_growth"),),
    )
    first = diagnose(facts)[0]
    assert first.kind == "main_killed" and first.location == "/home/user/train/train.py:39", first.location
    assert any("main pid 2842 at the main_memory_growth warning, 2.0 s before" in e for e in first.evidence)


def test_memory_series_has_one_point_per_change_per_process_and_tells_a_reused_pid_apart():
    from watchdog.diagnose.common import memory_points, memory_series

    kept = proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=100)  # one object, kept by the sampler
    timeline = (
        sample(0.0, [proc(MAIN_PID, ROLE_MAIN, [], uss=50), kept]),
        sample(1.0, [proc(MAIN_PID, ROLE_MAIN, [], uss=50), kept]),
        sample(2.0, [proc(MAIN_PID, ROLE_MAIN, [], uss=70), proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=100)]),
        sample(3.0, [proc(MAIN_PID, ROLE_MAIN, [], uss=90), proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=130)]),
        # the worker's pid, reused by a process that started later
        sample(4.0, [proc(WORKER_PID, ROLE_WORKER, [], "fork", uss=5, start_ticks=99)]),
    )
    series = memory_series(timeline)
    assert series[(MAIN_PID, kept.start_ticks)] == [(0.0, 50.0), (2.0, 70.0), (3.0, 90.0)]
    assert series[(WORKER_PID, kept.start_ticks)] == [(0.0, 100.0), (3.0, 130.0)]
    assert series[(WORKER_PID, 99)] == [(4.0, 5.0)]
    facts = live_facts(timeline)
    assert memory_points(facts, kept) == [(0.0, 100.0), (3.0, 130.0)]
    memory_points(facts, kept).clear()  # a caller's list is its own: the kept series stays
    assert memory_points(facts, kept) == [(0.0, 100.0), (3.0, 130.0)]


# --- issue #35: a worker's end by its mechanism (exit code or signal), not by PyTorch's wording -----


def _inside_exit_codes(pids, codes):
    from tests.unit.builders import loader_view as _loader
    from watchdog.types import InsideView

    return InsideView(loaders=(dataclasses.replace(_loader(), workers=tuple(pids), worker_exitcodes=tuple(codes)),))


def test_a_worker_that_called_sys_exit_exited_with_code_1_and_its_words_are_quoted_not_killed():
    # Captured: probes/cases/worker_sys_exit_corrupt_sample.py; the worker's message arrives in
    # the middle of main's traceback (both write to one stderr).
    found = diagnose(_crash(fixture("stderr_worker_sys_exit.txt")))
    first = found[0]
    assert first.kind == "worker_exited" and "exited with code 1" in first.summary, first.summary
    assert "corrupt sample 1337: header length 0" in first.summary + first.remedy
    assert "dmesg" not in first.remedy and "OOM" not in first.remedy and "killed by" not in first.summary
    assert "worker_killed" not in [d.kind for d in found]


def test_workers_that_exited_with_code_0_are_worker_exited_by_the_inside_views_exit_codes():
    # Captured: probes/cases/worker_os_exit_zero.py; PyTorch's bare "exited unexpectedly" says
    # nothing of how; the inside view recorded Popen.returncode 0 for each worker.
    stderr = fixture("stderr_worker_os_exit_zero.txt")
    first = diagnose(_crash(stderr, inside=_inside_exit_codes((18512, 18513), (0, 0))))[0]
    assert first.kind == "worker_exited" and "exited with code 0" in first.summary, first.summary
    assert "os._exit(0)" in first.remedy and "dmesg" not in first.remedy
    assert any("the inside view: exit code 0" in e for e in first.evidence), first.evidence
    # a negative returncode is a signal: the same bare message is then a kill, named
    killed = diagnose(_crash(stderr, inside=_inside_exit_codes((18512,), (-9,))))[0]
    assert killed.kind == "worker_killed" and "killed by signal 9 (SIGKILL: Killed)" in killed.summary, killed.summary
    # with neither, nothing is claimed: no "killed", no OOM
    unknown = diagnose(_crash(stderr))[0]
    assert unknown.kind == "worker_killed" and "killed" not in unknown.summary and "OOM killer" not in unknown.remedy


@pytest.mark.parametrize("module", ["__mp_main__", "probes.cases.spawn_dataset_under_main_guard"])
def test_a_spawned_worker_that_cannot_find_a_class_defined_under_the_main_guard_is_a_start_failure(module):
    # Captured: probes/cases/spawn_dataset_under_main_guard.py run as a script (__mp_main__) and
    # with python -m (the module's own name).
    stderr = fixture("stderr_spawn_class_under_main_guard.txt").replace("'__mp_main__'", f"'{module}'")
    found = diagnose(_crash(stderr))
    first = found[0]
    assert first.kind == "worker_start_failed", [d.kind for d in found]
    assert "Frames" in first.remedy and "top level" in first.remedy and "__mp_main__" in first.remedy
    assert "worker_killed" not in [d.kind for d in found]


def test_a_worker_that_could_not_start_a_thread_names_the_pids_limit_and_its_value():
    # Captured: probes/cases/worker_thread_limit_pids.py (pids.max lowered to the tasks running).
    facts = _crash(
        fixture("stderr_worker_thread_limit_pids.txt"),
        task_limits=(("pids.max of cgroup /dlwatch-case-pids-1", 23), ("RLIMIT_NPROC", 96368)),
    )
    first = diagnose(facts)[0]
    assert first.kind == "worker_exited" and "EAGAIN" in first.summary, first.summary
    assert "pids.max of cgroup /dlwatch-case-pids-1 = 23" in first.remedy and "RLIMIT_NPROC = 96368" in first.remedy
    assert "can't start new thread" in first.remedy and "OOM" not in first.remedy


def test_a_signal_names_its_own_cause():
    ill = diagnose(_crash("RuntimeError: DataLoader worker (pid 2847) is killed by signal: Illegal instruction.\n"))[0]
    assert ill.kind == "worker_killed" and "another CPU" in ill.remedy and "dmesg" not in ill.remedy
    xcpu = _crash(
        "RuntimeError: DataLoader worker (pid 2847) is killed by signal: CPU time limit exceeded.\n",
        task_limits=(("RLIMIT_CPU", 30),),
    )
    first = diagnose(xcpu)[0]
    assert "RLIMIT_CPU" in first.remedy and "ulimit -t" in first.remedy and "30" in first.remedy
    assert "OOM" not in first.remedy


# --- issue #35: a full disk is not a full /dev/shm ------------------------------------------------


@pytest.mark.parametrize(
    "name, who, line",
    [
        ("stderr_worker_cache_disk_full.txt", "DataLoader worker 1", "f.write(blob)"),
        ("stderr_main_log_disk_full.txt", "The main process", "log.write("),
    ],
)
def test_enospc_from_a_plain_write_is_the_file_system_it_writes_not_dev_shm(name, who, line):
    # Captured: probes/cases/worker_cache_disk_full.py and main_log_disk_full.py (a 1 MiB
    # tmpfs in a private mount namespace); the error names no file, /dev/shm was nearly empty.
    found = diagnose(_crash(fixture(name), host={"shm_total": 24 << 30, "shm_used": 2_400_000}))
    first = found[0]
    assert first.kind == "disk_full" and first.summary.startswith(who), first.summary
    assert line in first.summary and "--shm-size=8g" not in first.remedy
    assert "shm_exhausted" not in [d.kind for d in found] and "dataset_error" not in [d.kind for d in found]
    if who == "The main process":
        assert "not a DataLoader failure" in first.summary


def test_enospc_with_no_path_and_no_traceback_is_contradicted_by_a_nearly_empty_dev_shm():
    stderr = "OSError: [Errno 28] No space left on device\n"
    low = diagnose(_crash(stderr, host={"shm_total": 24 << 30, "shm_used": 2_400_000}))
    (shm,) = [d for d in low if d.kind == "shm_exhausted"]
    assert any("contradicted" in e for e in shm.evidence) and "2.3 MiB of 24576.0 MiB" in " ".join(shm.evidence)
    full = diagnose(_crash(stderr, host={"shm_total": 64 << 20, "shm_used": 63 << 20}))[0]
    assert full.kind == "shm_exhausted" and not any("contradicted" in e for e in full.evidence)


def _contradictions(facts, found):
    """Remedies and summaries that a figure of the same report contradicts: a worker that
    exited with a code called killed or sent to the OOM killer; ``shm_exhausted`` first while
    /dev/shm stayed nearly empty and no error line named a shared-memory file; copy-on-read
    first while several iterators with persistent workers were alive at once."""
    from watchdog.collect.stderr_facts import names_shared_memory, stderr_facts
    from watchdog.diagnose.crashes.resources import shm_full_lines
    from watchdog.diagnose.crashes.workers import worker_ends
    from watchdog.diagnose.loaders import kept_persistent_loaders

    out = []
    exited = {pid for pid, end in worker_ends(facts).items() if end[0] == "exit"}
    for d in found:
        if set(d.pids) & exited and ("killed by" in d.summary or "OOM killer" in d.remedy or "dmesg" in d.remedy):
            out.append(f"{d.kind}: workers {sorted(set(d.pids) & exited)} exited with a code: {d.summary}")
    total, used = facts.sample.host.shm_total_bytes, facts.sample.host.shm_used_bytes
    named = any(names_shared_memory(line) for line in shm_full_lines(stderr_facts(facts)))
    if found and found[0].kind == "shm_exhausted" and total and used is not None and used < 0.25 * total:
        if not named:
            out.append(f"shm_exhausted first with /dev/shm at {used} of {total} bytes and no shared-memory file named")
    kept = kept_persistent_loaders(facts)
    if found and kept is not None and "copy-on-read" in found[0].remedy:
        out.append(f"{found[0].kind}: copy-on-read first with {kept[0]} persistent iterators alive: {found[0].remedy}")
    return out


_CRASH_FIXTURES = sorted(
    n
    for n in __import__("os").listdir(
        __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "fixtures")
    )
    if n.startswith("stderr_") and n.endswith(".txt")
)


@pytest.mark.parametrize("name", _CRASH_FIXTURES)
def test_no_remedy_contradicts_a_figure_of_the_same_report(name):
    stderr = fixture(name)
    pids = sorted({int(p) for p in re.findall(r"DataLoader worker \(pids?(?:\(s\))? ([\d]+)", stderr)}) or [WORKER_PID]
    for codes in ((), (0,) * len(pids), (1,) * len(pids)):
        if codes and re.search(r"killed by signal|Unexpected (segmentation|bus|floating)", stderr):
            continue  # the recorded end must agree with the one PyTorch printed
        facts = _crash(
            stderr,
            host={"shm_total": 24 << 30, "shm_used": 2_400_000},
            inside=_inside_exit_codes(pids, codes) if codes else None,
        )
        found = diagnose(facts)
        assert not _contradictions(facts, found), (codes, [d.kind for d in found])
    # The same stderr while six iterators with persistent workers were alive, after an OOM kill.
    kept = _kept_alive_facts(6)
    facts = dataclasses.replace(kept, stderr_tail=stderr, sample=kept.timeline[-1])
    found = diagnose(facts)
    assert not _contradictions(facts, found), [d.kind for d in found]


def test_the_consistency_check_sees_copy_on_read_led_while_persistent_iterators_were_alive():
    facts = _kept_alive_facts(6)
    first = diagnose(facts)[0]
    lead = dataclasses.replace(
        first, finding=dataclasses.replace(first.finding, remedy="Lower what each worker holds: copy-on-read of …")
    )
    assert _contradictions(facts, [lead])


def test_where_is_never_a_compiled_modules_relative_source_path():
    # worker_init_fn seeding numpy with a 64-bit seed: the innermost frames are numpy's Cython
    # sources, named by relative paths; the line to change is the job's own.
    stderr = (
        "ValueError: Caught ValueError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        f'  File "{TORCH}/_utils/worker.py", line 300, in _worker_loop\n'
        "    init_fn(worker_id)\n"
        '  File "/home/user/train/train.py", line 12, in seed_worker\n'
        "    np.random.seed(torch.initial_seed())\n"
        '  File "numpy/random/mtrand.pyx", line 4806, in numpy.random.mtrand.seed\n'
        '  File "numpy/random/mtrand.pyx", line 250, in numpy.random.mtrand.RandomState.seed\n'
        '  File "_mt19937.pyx", line 166, in numpy.random._mt19937._legacy_seeding\n'
        '  File "numpy/random/_mt19937.pyx", line 180, in numpy.random._mt19937._legacy_seeding\n'
        "ValueError: Seed must be between 0 and 2**32 - 1\n"
    )
    first = diagnose(_crash(stderr))[0]
    assert first.kind == "worker_init_error" and first.location == "/home/user/train/train.py:12", first.location
    assert ".pyx" not in first.summary.split(" in DataLoader")[0]


def test_loader_timeout_measures_the_workers_cpu_before_the_timeout_fired_not_before_the_jobs_exit():
    # Workers compute until the timeout fires at t=15 (main waited from t=10, timeout=5), then
    # sit idle while the job takes 8 s more to exit (a teardown): the window is before t=15.
    from tests.unit.builders import loader_view as _loader
    from watchdog.types import InsideView

    def s(t):
        cpu = float(min(t, 15))
        workers = [proc(WORKER_PID + k, ROLE_WORKER, [], "fork", cpu=cpu) for k in range(2)]
        return sample(float(t), [proc(MAIN_PID, ROLE_MAIN, []), *workers])

    timeline = tuple(s(t) for t in range(24))
    view = InsideView(loaders=(dataclasses.replace(_loader(), waiting_since=10.0),))
    first = diagnose(_crash(fixture("stderr_loader_timeout.txt"), timeline=timeline, inside=view))[0]
    assert first.kind == "loader_timeout" and "shorter than a batch" in first.summary, first.summary
    assert any("before the timeout fired (main waited" in e for e in first.evidence), first.evidence


def test_a_warning_stacks_age_is_counted_to_the_processs_own_last_sample_not_the_reports():
    # The worker's last sample came 3.2 s after the stack taken at the warning; the report's
    # own sample (main, later) is 10 s after it: the age is the worker's 3.2 s.
    in_fetch = _frames(
        ("CachedImages.__getitem__", USER, 35, False),
        ("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 54, False),
        ("_worker_loop", f"{TORCH}/_utils/worker.py", 349, False),
    )
    with_worker = sample(46.8, [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, [], "fork")])
    crash = _crash(_OOM_KILLED, oom_kills=1)
    timeline = (with_worker, crash.sample)
    stack = _warning_stack(WORKER_PID, in_fetch, with_worker.wall - 3.2)
    facts = dataclasses.replace(crash, timeline=timeline, earlier_stacks=(stack,))
    first = diagnose(facts)[0]
    assert "(at its last stack, 3.2 s before:" in first.summary, first.summary
    assert any("3.2 s before its last sample" in e for e in first.evidence)


# --- issue #35 section 3: the mechanism, not the catalogue's sentence -------------------------------


def _oom_timeline(worker_rss_mib, main_alive_after=True, limit=1 << 30, usage=None, step_s=0.5):
    """Samples ``step_s`` apart of main and workers WORKER_PID (RSS from ``worker_rss_mib``, one
    value a sample) and WORKER_PID + 1 (flat), under a memory cgroup of ``limit``; a last sample
    without WORKER_PID (killed) when ``main_alive_after``. ``usage`` (MiB per sample) is the
    cgroup's usage, else the sum of the RSS."""
    out = []
    for k, rss in enumerate(worker_rss_mib):
        procs = [
            proc(MAIN_PID, ROLE_MAIN, [], rss=226 << 20, uss=150 << 20),
            proc(WORKER_PID, ROLE_WORKER, [], "fork", rss=rss << 20, uss=(rss - 150) << 20),
            proc(WORKER_PID + 1, ROLE_WORKER, [], "fork", rss=170 << 20, uss=20 << 20),
        ]
        used = (usage[k] if usage else 226 + rss + 170 - 300) << 20
        smp = sample(10.0 + k * step_s, procs)
        out.append(
            dataclasses.replace(
                smp, host=dataclasses.replace(smp.host, mem_limit_bytes=limit, mem_cgroup_usage_bytes=used)
            )
        )
    if main_alive_after:
        last = out[-1]
        out.append(
            dataclasses.replace(
                last,
                t_mono=last.t_mono + step_s,
                wall=last.wall + step_s,
                processes=tuple(p for p in last.processes if p.pid != WORKER_PID),
            )
        )
    return tuple(out)


def _sequential_view(waiting_idx, waiting_worker, batch_size=4, p50=0.04):
    from tests.unit.builders import loader_view as _loader

    return dataclasses.replace(
        _loader(worker=waiting_worker),
        settings=(("num_workers", 2), ("batch_size", batch_size), ("sampler", "SequentialSampler")),
        waiting_idx=waiting_idx,
        interval_p50_s=p50,
    )


def test_one_samples_sudden_allocation_is_a_step_named_with_its_batch_not_a_per_worker_cache():
    # Modelled on probes/cases/worker_huge_sample_oom_in_cgroup.py: the worker stood at 300 MiB
    # for 10 s, then +300 and +700 MiB within one second (a corrupt header's 2.5 GiB buffer
    # being filled) and the cgroup's OOM killer ended it; main waited for batch 75, the worker's.
    from watchdog.types import InsideView

    timeline = _oom_timeline([300] * 20 + [600, 1000])
    view = InsideView(loaders=(_sequential_view(75, 0),))
    facts = _crash(_OOM_KILLED, timeline=timeline, oom_kills=1, inside=view)
    facts = dataclasses.replace(facts, sample=timeline[-1])
    first = diagnose(facts)[0]
    assert first.kind == "worker_killed" and "one sample asked for at least 700.0 MiB" in first.summary, first.summary
    assert "One sample asked for at least 700.0 MiB at once" in first.remedy, first.remedy
    assert "samples 300–303" in first.remedy and "per-worker cache" not in first.remedy
    assert "copy-on-read" not in first.remedy
    assert any("RSS stood at 300.0 MiB for 5.0 s, then rose by 700.0 MiB within 1.0 s" in e for e in first.evidence)

    # The rise came between the worker's last sample and its death: the cgroup's headroom then.
    unseen = _oom_timeline([300] * 20, usage=[400] * 20)
    facts = dataclasses.replace(_crash(_OOM_KILLED, timeline=unseen, oom_kills=1), sample=unseen[-1])
    first = diagnose(facts)[0]
    assert "One sample asked for more than 624.0 MiB at once" in first.remedy, first.remedy

    # A cache that grows sample by sample (+40 MiB a second) is a slope: the cache remedy stays.
    slope = _oom_timeline([300 + 20 * k for k in range(22)])
    facts = dataclasses.replace(_crash(_OOM_KILLED, timeline=slope, oom_kills=1), sample=slope[-1])
    first = diagnose(facts)[0]
    assert "One sample" not in first.remedy and "per-worker cache" in first.remedy, first.remedy

    # The same slope on a loaded machine, all of it while the worker read one sample (as the
    # case ran under load: its count of samples reached for stood still from t=15): a step.
    from watchdog.types import WorkerFetch

    def counted(s):
        reached = WorkerFetch(WORKER_PID, 300 if s.t_mono <= 15.0 else 301, min(s.t_mono, 15.0))
        return dataclasses.replace(s, fetches=(reached,))

    one_read = tuple(counted(s) for s in _oom_timeline([300] * 11 + [300 + 20 * k for k in range(1, 36)]))
    facts = dataclasses.replace(_crash(_OOM_KILLED, timeline=one_read, oom_kills=1), sample=one_read[-1])
    first = diagnose(facts)[0]
    assert "One sample asked for at least 700.0 MiB at once" in first.remedy, first.remedy
    assert any("within 18 s while it read one sample" in e for e in first.evidence), first.evidence
    # ... and without the count, the same rise is a slope.
    plain = tuple(dataclasses.replace(s, fetches=()) for s in one_read)
    first = diagnose(dataclasses.replace(facts, timeline=plain, sample=plain[-1]))[0]
    assert "One sample" not in first.remedy, first.remedy


def _persistent_views(count, same_site=True, persistent=True):
    """``count`` iterators of main, two workers each (WORKER_PID + 2k, + 2k + 1), created at one
    line (``same_site``) or each at its own."""
    from tests.unit.builders import loader_view as _loader

    return tuple(
        dataclasses.replace(
            _loader(),
            iterator=k + 1,
            site=Frame("main", "/home/user/train/train.py", 40 if same_site else 40 + k, False),
            settings=(("num_workers", 2), ("persistent_workers", persistent), ("batch_size", 4)),
            workers=(WORKER_PID + 2 * k, WORKER_PID + 2 * k + 1),
            epoch=0,
        )
        for k in range(count)
    )


def _kept_alive_facts(count, **kw):
    """An OOM-killed worker of the first iterator while ``count`` iterators' workers ran; main's
    last sample, as it exits, has none of them."""
    from watchdog.types import InsideView

    def s(t, gone=()):
        workers = [
            proc(WORKER_PID + k, ROLE_WORKER, [], "fork", rss=300 << 20, uss=140 << 20)
            for k in range(2 * count)
            if WORKER_PID + k not in gone
        ]
        return sample(t, [proc(MAIN_PID, ROLE_MAIN, [], rss=226 << 20, uss=150 << 20), *workers])

    # the kill, then main's exit shutting the other workers down (as the case's crash report shows)
    everyone = tuple(WORKER_PID + k for k in range(2 * count))
    timeline = tuple(s(float(t)) for t in range(10)) + (s(10.0, gone=(WORKER_PID,)), s(11.0, gone=everyone))
    return dataclasses.replace(
        _crash(_OOM_KILLED, timeline=timeline, oom_kills=1, inside=InsideView(loaders=_persistent_views(count, **kw))),
        sample=timeline[-1],
    )


def test_several_persistent_loaders_alive_at_once_are_counted_not_told_copy_on_read():
    # Modelled on probes/cases/persistent_loaders_kept_alive.py: a new persistent loader each
    # epoch, all kept; six iterators' twelve workers alive when memory ran out.
    first = diagnose(_kept_alive_facts(6))[0]
    assert first.kind == "worker_killed", first.kind
    assert first.remedy.startswith(
        "6 DataLoader iterators with persistent workers are alive at once (12 workers; created at "
        "/home/user/train/train.py:40)"
    ), first.remedy
    assert "`del` the old ones" in first.remedy and "copy-on-read" not in first.remedy
    assert sum("the inside view: iterator" in e for e in first.evidence) == 6
    # A training loader and a validation loader, both persistent, at two lines: nothing kept.
    first = diagnose(_kept_alive_facts(2, same_site=False))[0]
    assert "alive at once" not in first.remedy
    # Loaders without persistent workers stop theirs at each epoch's end: not counted.
    first = diagnose(_kept_alive_facts(6, persistent=False))[0]
    assert "alive at once" not in first.remedy


def test_an_index_error_in_a_later_epoch_of_persistent_workers_names_their_stale_copy_of_the_dataset():
    # Captured: probes/cases/dataset_extended_after_persistent_workers.py; main extended the
    # sample list from 600 to 640 after epoch 0; worker 1 failed at index 600 in epoch 1 (75
    # batches of 8 in epoch 0, then 75 more before the failing one).
    from tests.unit.builders import loader_view as _loader
    from watchdog.types import InsideView, WorkerFailure

    def facts(persistent=True, epoch=1):
        view = dataclasses.replace(
            _loader(),
            settings=(("num_workers", 2), ("persistent_workers", persistent), ("batch_size", 8)),
            workers=(WORKER_PID, WORKER_PID + 1),
            epoch=epoch,
            batches=150 if epoch else 75,
        )
        failed = WorkerFailure(WORKER_PID + 1, 1, 75, tuple(range(600, 608)), 600, "IndexError", 60.0)
        return _crash(fixture("stderr_dataset_extended_persistent.txt"), inside=InsideView((view,), failures=(failed,)))

    first = diagnose(facts())[0]
    assert first.kind == "dataset_error" and "stale copy of the Dataset" in first.summary, first.summary
    assert "Recreate the DataLoader" in first.remedy and "persistent_workers=False" in first.remedy
    assert "dataset[600] works in main and fails only in the workers" in first.remedy, first.remedy
    assert any("index 600 is past the 600 samples an earlier epoch read at most" in e for e in first.evidence)
    # Without persistent workers, or in the first epoch, it is the Dataset's own error.
    for other in (facts(persistent=False), facts(epoch=0)):
        first = diagnose(other)[0]
        assert first.kind == "dataset_error" and "stale" not in first.summary + first.remedy
        assert "dataset[600]" in first.remedy


def test_a_full_disk_names_its_file_systems_figures_from_statvfs_of_the_path_the_error_names(tmp_path):
    # The error names a file under folders that do not exist (yet): the nearest existing folder
    # is measured, for real, at diagnosis time.
    import os

    from watchdog.watch.exit_look import file_system_figures

    target = os.path.join(str(tmp_path), "cache", "shard-7", "x.bin")
    stderr = f"OSError: [Errno 28] No space left on device: '{target}'\n"
    figures = file_system_figures([target])
    ((path, folder, free, size),) = figures
    st = os.statvfs(str(tmp_path))
    assert (path, folder, size) == (target, str(tmp_path), st.f_blocks * st.f_frsize) and 0 <= free <= size
    facts = _crash(stderr, host={"shm_total": 24 << 30, "shm_used": 2_400_000}, file_systems=figures)
    first = diagnose(facts)[0]
    assert first.kind == "disk_full" and " free of " in first.summary and target in first.summary, first.summary
    assert first.remedy.startswith(f"Free space on the file system of {tmp_path} ("), first.remedy
    assert any("the nearest folder that exists" in e and "statvfs at diagnosis time" in e for e in first.evidence)
    # A literal path in the failing line of the traceback is the file too.
    literal = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/train/train.py", line 12, in main\n'
        f'    with open("{target}", "wb") as f:\n'
        "OSError: [Errno 28] No space left on device\n"
    )
    from watchdog.collect.stderr_facts import enospc_paths

    assert enospc_paths(literal) == [target]
    assert enospc_paths(fixture("stderr_worker_cache_disk_full.txt")) == []  # os.path.join(...): not known


def test_a_full_disk_while_a_job_process_still_runs_reads_its_open_files_and_measures_through_its_root(tmp_path):
    import os
    import subprocess
    import sys

    from watchdog.collect import procfs
    from watchdog.watch.exit_look import JobTraces, _disk_full_look

    held = tmp_path / "log.txt"
    child = subprocess.Popen(
        [sys.executable, "-c", f"f = open({str(held)!r}, 'w'); import time; time.sleep(60)"],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if str(held) in procfs.open_files(child.pid):
                break
            __import__("time").sleep(0.05)
        start = procfs.proc_stat(child.pid).start_ticks
        last = sample(1.0, [proc(child.pid, ROLE_MAIN, [], start_ticks=start)])
        tail = (
            "Traceback (most recent call last):\n"
            '  File "/x/t.py", line 3, in main\n'
            "    f.write(s)\n"
            "OSError: [Errno 28] No space left on device\n"
        )
        opened, figures = _disk_full_look(JobTraces(os.getpid()), last, tail)
        assert opened and opened[0][0] == child.pid and str(held) in opened[0][1], opened
        assert [(p, folder) for p, folder, _, _ in figures] == [(str(tmp_path), str(tmp_path))], figures
        # any other crash reads nothing
        assert _disk_full_look(JobTraces(os.getpid()), last, "RuntimeError: boom\n") == ((), ())
    finally:
        child.kill()
        child.wait(timeout=10)


def test_workers_of_persistent_loaders_kept_alive_are_no_copy_on_read_warning():
    # The live warning in probes/cases/persistent_loaders_kept_alive.py: the workers' memory is
    # that of six persistent loaders kept alive, not copies of the Dataset's objects.
    from watchdog.types import InsideView

    def s(t):
        workers = [proc(WORKER_PID + k, ROLE_WORKER, [], "fork", rss=300 << 20, uss=140 << 20) for k in range(12)]
        return sample(t, [proc(MAIN_PID, ROLE_MAIN, [], rss=226 << 20, uss=150 << 20), *workers])

    timeline = tuple(s(float(t)) for t in range(20))
    facts = dataclasses.replace(live_facts(timeline), inside=InsideView(loaders=_persistent_views(6)))
    (found,) = [d for d in diagnose(facts) if d.kind == "worker_memory_growth"]
    assert "6 DataLoader iterators with persistent workers are alive at once" in found.remedy
    assert "numpy arrays" not in found.remedy and "copy-on-read" not in found.summary
    plain = dataclasses.replace(live_facts(timeline), inside=InsideView(loaders=_persistent_views(1)))
    assert "numpy arrays" in next(d for d in diagnose(plain) if d.kind == "worker_memory_growth").remedy


def test_a_worker_that_exited_right_after_sending_a_batch_is_worker_exited_not_nothing():
    # Captured: probes/cases/worker_os_exit_zero.py when main took the last batch's shared fd
    # after its worker had ended: main raises ConnectionResetError in rebuild_storage_fd, not
    # PyTorch's "exited unexpectedly"; the inside view recorded both workers' exit code 0.
    stderr = fixture("stderr_worker_exit_lost_receive.txt")
    (first, *_) = diagnose(_crash(stderr, inside=_inside_exit_codes([WORKER_PID, WORKER_PID + 1], (0, 0))))
    assert first.kind == "worker_exited" and "exited with code 0" in first.summary, first.summary
    assert any("rebuild_storage_fd" in e for e in first.evidence) and "OOM" not in first.remedy
    assert not [d for d in diagnose(_crash(stderr)) if d.kind == "worker_exited"]  # no recorded end: no worker named


def test_main_aborting_because_its_shared_memory_file_was_already_gone_is_shm_removed():
    # probes/cases/shm_removed.py, one run in two: PyTorch's shm_unlink of a /torch_* segment a
    # cleaner had deleted fails, and main aborts (exit 134) instead of printing ENOENT
    stderr = (
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  could not unlink the shared memory file /torch_13329_2110464527_0\n"
    )
    first = diagnose(_crash(stderr))[0]
    assert first.kind == "shm_removed", [d.kind for d in diagnose(_crash(stderr))]
    assert any("could not unlink the shared memory file" in e for e in first.evidence)


def test_oversubscription_counts_each_reading_once_not_the_lean_samples_that_hold_it():
    # NOTE [ Lean ticks ]: a lean sample holds its full sample's processes (the same tuple); the
    # evidence's "over N samples" counts readings, and one reading is no five
    fresh = oversubscribed_timeline()
    lean = tuple(
        x
        for s in fresh
        for x in (s, *(dataclasses.replace(s, t_mono=s.t_mono + k / 5, lean=True) for k in range(1, 5)))
    )
    (found,) = [d for d in diagnose(live_facts(lean, host_cpus=4)) if d.kind == "cpu_oversubscribed"]
    assert "over 6 samples" in found.evidence[0]
    (five,) = [d for d in diagnose(live_facts(lean[:25], host_cpus=4)) if d.kind == "cpu_oversubscribed"]
    assert "over 5 samples" in five.evidence[0]  # five readings in 25 samples (under the cap of 6)
    few = lean[:9]  # two readings, nine samples
    assert "cpu_oversubscribed" not in {d.kind for d in diagnose(live_facts(few, host_cpus=4))}


def _with_lean_ticks(full, every_s):
    """``full`` (full samples) with lean ticks ``every_s`` seconds apart between them, as the
    watcher takes them while the loader delivers (NOTE [ Lean ticks ])."""
    out = []
    for a, b in zip(full, full[1:] + (None,)):
        out.append(a)
        t = a.t_mono + every_s
        while b is not None and t < b.t_mono:
            out.append(dataclasses.replace(a, t_mono=t, lean=True))
            t += every_s
    return tuple(out)


def test_oversubscription_is_judged_on_full_samples_at_the_default_cadence_and_not_on_stale_ones():
    # full samples every warning_interval_s (15 s by default) and lean ticks each second: the
    # last 30 samples hold two readings, and the rule once needed five there
    every15 = _with_lean_ticks(oversubscribed_timeline(n=10, every_s=15.0), 1.0)
    (found,) = [d for d in diagnose(live_facts(every15, host_cpus=4)) if d.kind == "cpu_oversubscribed"]
    assert "over 6 samples" in found.evidence[0]
    # readings 40 s apart: four in the last two minutes, too few, the older ones not counted
    every40 = _with_lean_ticks(oversubscribed_timeline(n=6, every_s=40.0), 1.0)
    assert "cpu_oversubscribed" not in {d.kind for d in diagnose(live_facts(every40, host_cpus=4))}
