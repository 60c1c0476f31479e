"""Issue #34, section 3: a proven hang and a sure cause are two things. On hand-built stacks
(shapes captured from probes/cases/lock_taken_twice_in_worker.py and its kin): a worker stuck on
its own ``threading.Lock`` is not called fork-inherited because main had another thread at the
fork; a verdict of inheritance needs a thread that held that lock at the fork; the remedy follows
the evidence; and the report's first line says the hang's certainty apart from the cause's."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import MAIN_PID, WORKER_PID, hang_facts, proc, sample
from watchdog.diagnose import diagnose
from watchdog.report import document as report
from watchdog.types import (
    ROLE_FORKSERVER,
    ROLE_WORKER,
    ForkRecord,
    Frame,
    InsideView,
    LoaderView,
    ProcessStack,
    Proof,
    ProofKind,
    ProofLink,
    ThreadAtFork,
    ThreadStack,
    WorkerFetch,
)

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/utils/data"
STDLIB = "/usr/lib/python3.11"
USER = "/home/user/train/data.py"
FORKSERVER_PID = 2840


def _frames(*spec):
    return tuple(Frame(f, file, line, native, module=file if native else None) for f, file, line, native in spec)


def _worker_waits_at_acquire() -> ThreadStack:
    """The worker's loop thread at ``self.lock.acquire()`` in ``__getitem__`` (line 40)."""
    return ThreadStack(
        WORKER_PID,
        "MainThread",
        False,
        False,
        _frames(
            ("CachedDataset.__getitem__", USER, 40, False),
            ("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 54, False),
            ("_worker_loop", f"{TORCH}/_utils/worker.py", 374, False),
        ),
    )


SOURCES = (((USER, 40), "        self.lock.acquire()"),)


def _proof(*pids):
    return Proof(
        ProofKind.KERNEL,
        tuple(pids),
        tuple(ProofLink(p, p, "x", "futex(FUTEX_WAIT|FUTEX_PRIVATE_FLAG), no timeout") for p in pids),
        "conclusion",
    )


def _record(helper_frames, helper_sources=()):
    """The job's record at the fork: main's forking thread and a helper thread (a progress-bar
    monitor) at ``helper_frames``."""
    threads = (
        ThreadAtFork("MainThread", MAIN_PID, False, True, _frames(("main", USER, 52, False))),
        ThreadAtFork("tqdm_monitor", MAIN_PID + 1, True, False, _frames(*helper_frames)),
    )
    return ForkRecord(MAIN_PID, 1, None, (WORKER_PID,), threads)


MONITOR = (("Event.wait", f"{STDLIB}/threading.py", 622, False), ("monitor", USER, 28, False))


def _inside(record, samples):
    loader = LoaderView(
        pid=MAIN_PID,
        iterator=1,
        kind="_MultiProcessingDataLoaderIter",
        site=None,
        settings=(("num_workers", 2), ("batch_size", 4)),
        dataset_type="CachedDataset",
        iterable=False,
        workers=(WORKER_PID,),
        worker_exitcodes=(),
        created=0.0,
        batches=6,
        wait_s=1.0,
        epoch=0,
        first_batch_s=0.5,
        waiting_since=100.0,
        waiting_idx=6,
        waiting_worker=0,
        last_batch=100.0,
        intervals=5,
        interval_p50_s=0.01,
        interval_p99_s=0.04,
    )
    return InsideView(forks=(record,), loaders=(loader,), fetches=(WorkerFetch(WORKER_PID, samples, 1.0),))


def _facts(**kw):
    return hang_facts([_worker_waits_at_acquire()], proof=_proof(WORKER_PID), sources=SOURCES, **kw)


def _written(facts, n):
    """``facts`` with the worker's ``wchar`` at ``n`` bytes."""
    procs = tuple(dataclasses.replace(p, write_chars=n) if p.pid == WORKER_PID else p for p in facts.sample.processes)
    smp = dataclasses.replace(facts.sample, processes=procs)
    return dataclasses.replace(facts, sample=smp, timeline=(smp,))


def test_a_worker_past_its_first_batch_waiting_on_its_own_lock_is_its_own_deadlock_with_the_lock_remedy():
    """Main had a helper thread at the fork, but nothing shows it held the lock, and the worker read
    25 samples through its code since: not fork-inherited, and the remedy is a lock's."""
    facts = _facts(inside=_inside(_record(MONITOR), samples=25))
    first = diagnose(facts)[0]
    assert first.kind == "worker_deadlock" and first.certainty == "proven", (first.kind, first.summary)
    assert "threading.Lock" in first.summary and "Event, Condition or Queue" not in first.remedy
    assert "RLock" in first.remedy and "finally" in first.remedy and "acquire(timeout=" in first.remedy
    assert "forkserver" not in first.remedy and first.fix is None
    assert any("read 25 samples since it started" in e for e in first.evidence)
    assert "fork_inherited_lock" not in [d.kind for d in diagnose(facts)]


def test_under_attach_a_worker_that_sent_batches_is_its_own_deadlock_and_no_holder_is_invented():
    """No inside view (``attach``): the worker wrote its batches to main's pipe, so it got through
    its code since the fork; main's threads at the fork are named, no 'short-lived thread'."""
    facts = _written(_facts(main_threads_at_fork=((WORKER_PID, 2),)), 1243)
    first = diagnose(facts)[0]
    assert first.kind == "worker_deadlock" and "RLock" in first.remedy, (first.kind, first.summary)
    assert any("written 1243 bytes since it started" in e for e in first.evidence)
    alone = _written(_facts(main_threads_at_fork=((WORKER_PID, 1),)), 0)
    text = " ".join(d for x in diagnose(alone) for d in x.evidence)
    assert "short-lived thread" not in text


def test_without_evidence_either_way_the_cause_is_suspected_with_both_remedies_and_the_top_says_so():
    """Main ran three threads at the fork (sampled), nothing shows which held what, nothing shows
    the worker got through its code: the hang is proven, the cause only suspected."""
    facts = _facts(main_threads_at_fork=((WORKER_PID, 3),))
    first = diagnose(facts)[0]
    assert first.kind == "fork_inherited_lock" and first.certainty == "proven"
    assert first.confidence <= 0.5 and "nothing seen tells which" in first.summary
    assert "RLock" in first.remedy and "forkserver" in first.remedy
    doc = report.build(facts, diagnose(facts), {"pid": MAIN_PID, "cmdline": ["python", "x.py"]}, 1.8e9, "r", {}, {})
    head = doc.text.splitlines()[0]
    assert head.startswith("dlwatch: job hung — hang: proven; cause: fork_inherited_lock (suspected, confidence 0.50)")
    assert "(proven): fork_inherited_lock" not in doc.text


def test_a_helper_thread_inside_with_of_that_lock_at_the_fork_still_makes_it_inherited():
    """Positive evidence: the job's record shows main's other thread inside ``with self.lock:``
    at the fork; the worker is in its first batch."""
    holder = (("time.sleep", "<built-in>", 0, False), ("CachedDataset.refresh", USER, 61, False))
    sources = SOURCES + (((USER, 61), "            time.sleep(0.5)"), ((USER, 60), "        with self.lock:"))
    facts = hang_facts(
        [_worker_waits_at_acquire()],
        proof=_proof(WORKER_PID),
        sources=sources,
        inside=_inside(_record(holder), samples=2),
    )
    first = diagnose(facts)[0]
    assert first.kind == "fork_inherited_lock" and first.confidence >= 0.9
    assert "forkserver" in first.remedy and first.fix is not None
    assert any("held a lock named self.lock" in e and "tqdm_monitor" in e for e in first.evidence)


def test_a_worker_of_a_one_thread_forkserver_is_not_blamed_on_a_thread_in_the_forkserver():
    """`dlwatch verify`'s forkserver run of a lock taken twice: the forkserver runs one thread."""
    facts = _facts()
    server = proc(FORKSERVER_PID, ROLE_FORKSERVER, [], ppid=MAIN_PID)
    procs = tuple(
        dataclasses.replace(p, ppid=FORKSERVER_PID, start_method="forkserver", write_chars=900)
        if p.role == ROLE_WORKER
        else p
        for p in facts.sample.processes
    ) + (dataclasses.replace(server, num_threads=1),)
    smp = sample(30.0, procs)
    stacks = facts.stacks + ((FORKSERVER_PID, ProcessStack(FORKSERVER_PID, (), True, None, "", 0.1)),)
    facts = dataclasses.replace(facts, sample=smp, timeline=(smp,), stacks=stacks, main_threads_at_fork=())
    first = diagnose(facts)[0]
    assert first.kind == "worker_deadlock", (first.kind, first.summary)
    assert "a thread in it held this lock" not in first.remedy and "RLock" in first.remedy


# --- a lock the main thread already holds ------------------------------------------------------

SIGNAL_SOURCES = (
    ((USER, 29), "    with STATE_LOCK:"),
    ((f"{STDLIB}/subprocess.py", 1883), "            self.pid = _fork_exec("),
    ((f"{STDLIB}/subprocess.py", 1026), "            self._execute_child(args, executable, preexec_fn, close_fds,"),
    ((f"{STDLIB}/subprocess.py", 548), "    with Popen(*popenargs, **kwargs) as process:"),
    ((USER, 43), "    for step, batch in enumerate(loader):"),
    ((USER, 44), "        with STATE_LOCK:"),
    ((USER, 45), '            STATE["step"] = step'),
    ((USER, 46), "            if step == 5:"),
    ((USER, 47), '                subprocess.run(["kill", "-USR1", str(os.getpid())], check=True)'),
)


def _main_facts(frames_spec, sources):
    """Main's only thread at ``frames_spec`` (innermost first), proven stuck, outside the loader."""
    t = ThreadStack(MAIN_PID, "MainThread", False, False, _frames(*frames_spec))
    facts = hang_facts([], verdict_kind="outside_loader", sources=sources, proof=_proof(MAIN_PID))
    stacks = ((MAIN_PID, ProcessStack(MAIN_PID, (t,), True, None, "", 0.1)),)
    verdict = dataclasses.replace(facts.verdict, thread=t)
    return dataclasses.replace(facts, stacks=stacks, verdict=verdict)


def test_a_signal_handler_waiting_for_the_lock_the_interrupted_loop_holds_gets_the_flag_remedy():
    """patroni/patroni#3413's shape: the handler's frame sits on a line that does not call it."""
    facts = _main_facts(
        (
            ("report_status", USER, 29, False),
            ("Popen._execute_child", f"{STDLIB}/subprocess.py", 1883, False),
            ("Popen.__init__", f"{STDLIB}/subprocess.py", 1026, False),
            ("run", f"{STDLIB}/subprocess.py", 548, False),
            ("main", USER, 47, False),
        ),
        SIGNAL_SOURCES,
    )
    first = diagnose(facts)[0]
    assert first.kind == "main_thread_deadlock" and first.certainty == "proven", (first.kind, first.summary)
    assert "signal handler" in first.summary and "STATE_LOCK" in first.summary
    assert "only set a flag" in first.remedy and "join" not in first.remedy
    assert first.location == f"{USER}:29"
    assert any("as a signal handler" in e and "`with STATE_LOCK:` at" in e for e in first.evidence)


def test_a_nested_call_taking_the_lock_main_holds_is_a_lock_taken_twice_not_a_handler():
    sources = (
        ((USER, 29), "    with STATE_LOCK:"),
        ((USER, 44), "        with STATE_LOCK:"),
        ((USER, 45), "            report_status()"),
    )
    facts = _main_facts((("report_status", USER, 29, False), ("main", USER, 45, False)), sources)
    first = diagnose(facts)[0]
    assert first.kind == "main_thread_deadlock" and "signal handler" not in first.summary
    assert "RLock" in first.remedy and "same thread holds" in first.summary + " ".join(first.evidence)


# --- waits through a multiprocessing.Manager proxy ---------------------------------------------

MANAGER_PID = 2900
MANAGERS = f"{STDLIB}/multiprocessing/managers.py"
CONNECTION = f"{STDLIB}/multiprocessing/connection.py"


def _through_proxy(*proxy):
    """The worker's loop thread reading the manager's answer under ``proxy`` frames."""
    return ThreadStack(
        WORKER_PID,
        "MainThread",
        False,
        False,
        _frames(
            ("_ConnectionBase.recv", CONNECTION, 250, False),
            ("BaseProxy._callmethod", MANAGERS, 822, False),
            *proxy,
            ("SharedCacheDataset.__getitem__", USER, 31, False),
            ("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 54, False),
            ("_worker_loop", f"{TORCH}/_utils/worker.py", 374, False),
        ),
    )


def _manager_facts(worker_thread, serving):
    """A worker reading its proxy's Unix socket; main's child ``MANAGER_PID`` runs managers.py's
    Server, its serving threads at ``serving`` (one frames spec each)."""
    from tests.unit.builders import PIPE_READ, detail
    from watchdog.types import ROLE_OTHER

    facts = hang_facts(
        [worker_thread],
        sources=(((USER, 31), "        with self.lock:"), ((MANAGERS, 273), "                res = function(*args)")),
        worker_details=(detail(WORKER_PID, PIPE_READ, wchan="unix_stream_read_generic"),),
        fd_targets=(((WORKER_PID, 6), "socket:[148200]"),),
    )
    threads = tuple(
        ThreadStack(MANAGER_PID + 1 + i, "Thread", False, False, _frames(*s)) for i, s in enumerate(serving)
    )
    manager = proc(MANAGER_PID, ROLE_OTHER, [], ppid=MAIN_PID)
    smp = sample(30.0, facts.sample.processes + (manager,))
    stacks = facts.stacks + ((MANAGER_PID, ProcessStack(MANAGER_PID, threads, True, None, "", 0.1)),)
    return dataclasses.replace(facts, sample=smp, timeline=(smp,), stacks=stacks)


SERVING_LOCK = (
    ("lock_PyThread_acquire_lock", "/usr/lib/libpython3.11.so", 0, True),
    ("Server.serve_client", MANAGERS, 273, False),
)
SERVING_IDLE = (("_ConnectionBase.recv", CONNECTION, 250, False), ("Server.serve_client", MANAGERS, 250, False))


def test_a_worker_waiting_on_a_manager_lock_is_told_about_the_manager_not_a_queue():
    t = _through_proxy(("AcquirerProxy.__enter__", MANAGERS, 1040, False))
    first = diagnose(_manager_facts(t, [SERVING_LOCK, SERVING_IDLE]))[0]
    text = " ".join(first.evidence)
    assert first.kind == "worker_stuck" and first.location == f"{USER}:31"
    assert "no process feeds" not in text and "Nothing puts" not in first.remedy, (text, first.remedy)
    assert f"to the manager process, pid {MANAGER_PID}" in text and "acquire()" in text
    assert (
        f"thread {MANAGER_PID + 1} of the manager (pid {MANAGER_PID}) runs a call and waits for a threading.Lock"
        in text
    )
    assert f"thread {MANAGER_PID + 2} " not in text  # a serving thread waiting for its next request runs no call
    assert "multiprocessing.Manager lock" in first.remedy and "acquire(timeout=" in first.remedy


def test_a_worker_getting_from_a_manager_queue_gets_the_queue_remedy_with_the_manager_named():
    t = _through_proxy(("get", "<string>", 2, False))
    serving_get = (
        ("lock_PyThread_acquire_lock", "/usr/lib/libpython3.11.so", 0, True),
        ("Condition.wait", f"{STDLIB}/threading.py", 320, False),
        ("Queue.get", f"{STDLIB}/queue.py", 171, False),
        ("Server.serve_client", MANAGERS, 273, False),
    )
    first = diagnose(_manager_facts(t, [serving_get]))[0]
    assert "Manager queue" in first.remedy and f"pid {MANAGER_PID}" in first.remedy, first.remedy
    assert "no process feeds" not in " ".join(first.evidence)
