"""The collectors' parsers on captured text: py-spy JSON, /proc stat lines and the decoding of
/proc/PID/task/TID/syscall into kernel waits."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import resource
import time

import pytest

from tests.unit.builders import WORKER_PID, fixture
from watchdog import frames, redact, states
from watchdog.collect import memory_plan, procfs, pyspy, waits
from watchdog.collect.read_plan import ReadPlan
from watchdog.errors import ProcError, ProcessGone
from watchdog.types import ProcId, StackFailureKind, WaitKind

LEAN = ReadPlan(lean=True)
NO_THREADS = ReadPlan(threads=False)


def _captured_syscalls():
    for line in fixture("proc_task_syscall.txt").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        label, state, text, expected = line.split("\t")
        yield pytest.param(state, text or None, expected, id=label)


@pytest.mark.parametrize("state, text, expected", list(_captured_syscalls()))
def test_captured_syscall_lines_decode_to_their_wait(state, text, expected):
    assert waits.decode(state, text, "x86_64").kind.value == expected


def test_private_untimed_futex_is_told_from_shared_and_timed():
    lock = waits.decode("S", "202 0x5561c80fe7c0 0x189 0x0 0x0 0x0 0xffffffff 0x7f 0x7f", "x86_64")
    assert lock.kind is WaitKind.FUTEX_PRIVATE and "no timeout" in lock.detail and "PRIVATE" in lock.detail
    assert waits.decode("S", "202 0x1 0x109 0x0 0x0 0x0 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.FUTEX_SHARED
    assert waits.decode("S", "202 0x1 0x89 0x0 0x7ffe 0x0 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.TIMED
    assert waits.decode("S", "202 0x1 0x81 0x1 0x0 0x0 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.OTHER  # FUTEX_WAKE


def test_poll_timeouts_are_read_in_milliseconds_and_minus_one_is_untimed():
    assert waits.decode("S", "7 0x1 0x1 0x1388 0x0 0x0 0x0 0x7f 0x7f", "x86_64").timeout_ms == 5000
    untimed = waits.decode("S", "7 0x1 0x1 0xffffffff 0x0 0x0 0x0 0x7f 0x7f", "x86_64")
    assert untimed.kind is WaitKind.FD
    assert waits.decode("S", "232 0x3 0x1 0x10 0xffffffffffffffff 0x0 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.FD
    # ppoll, no timespec
    assert waits.decode("S", "271 0x1 0x1 0x0 0x0 0x8 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.FD


def test_generic_syscall_numbers_for_arm64():
    assert waits.decode("S", "98 0x1 0x189 0x0 0x0 0x0 0x0 0x7f 0x7f", "aarch64").kind is WaitKind.FUTEX_PRIVATE
    # 98 is getrusage there
    assert waits.decode("S", "98 0x1 0x189 0x0 0x0 0x0 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.OTHER
    assert waits.decode("S", "202 0x1 0x189 0x0 0x0 0x0 0x0 0x7f 0x7f", "s390x").syscall == "202"


def test_state_decides_before_the_syscall():
    line = "202 0x1 0x189 0x0 0x0 0x0 0x0 0x7f 0x7f"
    assert waits.decode("D", line, "x86_64").kind is WaitKind.DISK
    assert waits.decode("t", line, "x86_64").kind is WaitKind.STOPPED
    assert waits.decode("Z", None, "x86_64").kind is WaitKind.ZOMBIE
    assert waits.decode("S", "garbage here", "x86_64").kind is WaitKind.OTHER


def test_pytorch_idle_polls_are_ambiguous_and_other_timed_waits_are_the_users():
    decode = lambda line: waits.decode("S", line, "x86_64")  # noqa: E731
    assert states.may_be_loader_idle_poll(decode("7 0x1 0x1 0x1388 0x1 0x0 0x0 0x7f 0x7f"))  # mp Queue.get(timeout=5)
    # queue.Queue.get(timeout=5)
    assert states.may_be_loader_idle_poll(decode("202 0x1 0x89 0x0 0x7ffe 0x0 0x0 0x7f 0x7f"))
    assert not states.may_be_loader_idle_poll(decode("7 0x1 0x1 0x7530 0x0 0x0 0x0 0x7f 0x7f"))  # a socket's 30 s
    assert not states.may_be_loader_idle_poll(decode("230 0x1 0x1 0x7f 0x0 0x0 0x0 0x7f 0x7f"))  # time.sleep


def test_parse_worker_dump_marks_native_frames_and_keeps_order():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    assert t.tid == WORKER_PID and t.name == "MainThread" and not t.active
    assert t.frames[0].native and not t.frames[4].native
    assert frames.native_lock_frame(t).function == "PyThread_acquire_lock_timed"
    assert frames.innermost_user(t).function == "FileDataset.__getitem__"
    assert frames.is_worker_stack([t]) and not frames.is_idle_worker(t)
    assert frames.lock_holder(t) == "python_lock"


def test_parse_main_dump_finds_the_loader_wait_and_main_thread_first():
    threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    assert threads[0].name == "MainThread"
    assert frames.loader_wait_depth(threads[0]) is not None
    assert states.is_loader_idle(threads[0])


@pytest.mark.parametrize("text", ["", "{}", "not json"])
def test_parse_rejects_other_output(text):
    with pytest.raises(ValueError):
        pyspy.parse_dump(text)


def test_permission_failure_gives_the_ptrace_remedy():
    failure = pyspy.explain_failure(
        "Error: Failed to get process executable name. Check that the process is running.\n", 42
    )
    msg = failure.detail
    assert failure.kind is StackFailureKind.PTRACE_REFUSED
    assert "SYS_PTRACE" in msg and "ptrace_scope" in msg and "42" in msg


def test_parse_stat_with_parentheses_in_comm():
    line = b"123 (a) b) c) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10"
    st = procfs.parse_proc_stat(line)
    assert st.comm == "a) b) c" and st.state == "S"
    assert st.cpu_s == pytest.approx(300 / procfs.CLK_TCK)
    assert st.start_ticks == 100
    assert (st.pgrp, st.tty_nr, st.tpgid) == (1, 0, -1) and not st.stopped_for_terminal()


def test_a_background_process_stopped_on_its_terminal_is_told_from_a_paused_one():
    def stat(state, pgrp, tty, tpgid):
        return procfs.parse_proc_stat(
            f"9 (python) {state} 1 {pgrp} 1 {tty} {tpgid} 0 0 0 0 0 1 1 0 0 20 0 1 0 5 1 1".encode()
        )

    assert stat("T", 900, 34816, 800).stopped_for_terminal()  # SIGTTIN: another group owns /dev/pts/0
    assert not stat("T", 900, 34816, 900).stopped_for_terminal()  # its own group is in the foreground
    assert not stat("T", 900, 0, -1).stopped_for_terminal()  # no terminal: SIGSTOP, a debugger
    assert not stat("S", 900, 34816, 800).stopped_for_terminal()


def test_secret_environment_values_are_redacted():
    env = redact.env(
        {
            "AWS_SECRET_ACCESS_KEY": "x",
            "HF_TOKEN": "y",
            "DB_PASSWORD": "z",
            "OMP_NUM_THREADS": "4",
            "DATABASE_URL": "postgres://u:pw123@h/db",
        }
    )
    assert env["OMP_NUM_THREADS"] == "4"
    more = redact.env(
        {
            "GITHUB_PAT": "x",
            "CI_JOB_JWT": "x",
            "DB_PASS": "x",
            "SIGNING_SALT": "x",
            "SENTRY_DSN": "https://k@h/1",
            "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=abc;",
            "SIGNED": "https://h/blob?sv=1&sig=abc",
            "PWD": "/work",
        }
    )
    assert more["PWD"] == "/work"
    assert all(redact.REDACTED in v and "abc" not in v for k, v in more.items() if k != "PWD")
    assert env["DATABASE_URL"] == "postgres://u:<redacted>@h/db"
    assert {env[k] for k in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD")} == {redact.REDACTED}


def test_wchan_families_cover_old_and_new_kernel_names():
    assert frames.wchan_family("futex_do_wait") == frames.wchan_family("futex_wait_queue_me") == "futex"
    assert frames.wchan_family("poll_schedule_timeout.constprop.0") == "poll"
    assert frames.wchan_family("0") is None


def test_shm_leftovers_match_only_the_jobs_pids_and_count_allocated_bytes(tmp_path):
    (tmp_path / "torch_123_abc_0").write_bytes(b"x" * 10)
    with open(tmp_path / "torch_123_abc_1", "wb") as f:
        f.truncate(24 << 20)  # sized, never written: sparse, holds nothing
    (tmp_path / "torch_999_abc_0").write_bytes(b"x")
    (tmp_path / "sem.mp-1").write_bytes(b"")
    os.symlink("/etc/shadow", tmp_path / "torch_123_abc_2")  # another user's name in /dev/shm
    found = dict(procfs.shm_leftovers({123, 5}, str(tmp_path)))
    assert set(found) == {"torch_123_abc_0", "torch_123_abc_1"}
    assert 10 <= found["torch_123_abc_0"] <= 64 << 10 and found["torch_123_abc_1"] == 0


def test_a_shm_file_older_than_the_jobs_process_with_its_pid_was_an_earlier_process_s(tmp_path):
    # pids are reused: a torch_<pid>_ file an earlier process left is no leftover of the job's
    # process with that pid, started after the file last changed
    (tmp_path / "torch_123_abc_0").write_bytes(b"x")
    changed = os.stat(tmp_path / "torch_123_abc_0").st_ctime
    slack = procfs.SHM_START_SLACK_S
    assert procfs.shm_leftovers({123}, str(tmp_path), since={123: changed + slack + 10}) == ()
    assert [n for n, _ in procfs.shm_leftovers({123}, str(tmp_path), since={123: changed + slack / 2})] == [
        "torch_123_abc_0"
    ]  # within the slack of a start computed from whole-second boot time
    assert [n for n, _ in procfs.shm_leftovers({123}, str(tmp_path), since={5: changed + 100})] == ["torch_123_abc_0"]


def test_pinned_memory_is_the_rss_of_shared_nvidiactl_mappings_only():
    text = fixture("smaps_pinned.txt")
    assert procfs.pinned_bytes_from_smaps(text) == (2097152 + 2048) * 1024  # the private one is not pinned memory
    assert procfs.pinned_bytes_from_smaps(text.replace("/dev/nvidiactl", "/dev/zero")) == 0


# --- the tick's own reads (issue #10: a sidecar that costs nothing) ---------------------------


def test_proc_stat_fields_and_a_comm_with_spaces_and_parentheses():
    fields = " ".join(str(n) for n in range(4, 53))  # field N holds N, from ppid (4) on
    st = procfs.parse_proc_stat(f"42 (a (b) c) R {fields}\n".encode())
    assert (st.comm, st.state, st.ppid, st.minflt, st.majflt) == ("a (b) c", "R", 4, 10, 12)
    assert (st.cpu_ticks, st.num_threads, st.start_ticks, st.rss_pages) == (14 + 15, 20, 22, 24)
    assert (st.pgrp, st.tty_nr, st.tpgid, st.session, st.vsize_bytes) == (5, 7, 8, 6, 23)
    own = procfs.proc_stat(os.getpid())
    assert own is not None and own.ppid == os.getppid() and own.num_threads >= 1
    assert procfs.proc_stat(2**22 + 1) is None  # above any pid_max: no such process


def test_one_reader_of_status_finds_each_field_the_line_split_finds():
    status = b"Name:\tpython\nvoluntary_ctxt_switches:\t170\nnonvoluntary_ctxt_switches:\t3\n"
    assert procfs.ctxt_switches(status) == (170, 3)
    assert procfs.ctxt_switches(b"Name:\tx\n") == (0, 0)
    assert procfs.status_field(status, "Name") == b"python"  # the first line has no newline before it
    assert procfs.status_field(status, "Tgid") is None
    with open(f"/proc/{os.getpid()}/status", "rb") as f:
        text = f.read()
    split = dict(line.split(b":", 1) for line in text.splitlines())
    for key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches", "SigCgt", "Tgid", "Name", "VmRSS"):
        assert procfs.status_field(text, key) == split[key.encode()].strip()


def test_one_reader_of_io_gives_rchar_and_wchar():
    captured = fixture("proc_io.txt").encode()  # /proc/self/io of `cat`, Linux 6.x
    expected = tuple(int(line.split(b":")[1]) for line in captured.splitlines()[:2])
    assert procfs.parse_io(captured) == expected
    assert procfs.parse_io(b"rchar: x\n") == (None, None)
    with open(f"/proc/{os.getpid()}/io", "rb") as f:
        own = f.read()
    rchar, wchar = procfs.parse_io(own)
    assert rchar is not None and wchar is not None and rchar > 0


def test_command_line_is_split_as_psutil_splits_it():
    import psutil

    assert list(procfs.cmdline(os.getpid())) == psutil.Process().cmdline()
    assert procfs.cmdline(2**22 + 1) is None


def test_children_of_a_process_come_from_its_threads_children_files():
    import psutil

    if not procfs.children_files_supported():
        pytest.skip("this kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)")
    parent = os.getppid()
    assert os.getpid() in procfs.children_of(parent)
    assert set(procfs.children_of(parent)) == {c.pid for c in psutil.Process(parent).children()}
    assert procfs.ThreadReader().read(parent, children="all")[1] is not None
    assert procfs.children_of(2**22 + 1) == ()
    assert isinstance(procfs.last_pid(), int)


def test_a_thread_that_did_not_run_keeps_its_sample_and_only_judged_threads_read_io():
    import threading

    done = threading.Event()
    idle = threading.Thread(target=done.wait, daemon=True)
    idle.start()
    try:
        for _ in range(500):  # until it sleeps in its wait (at most 5 s)
            st = procfs.proc_stat(os.getpid(), idle.native_id)
            if st is not None and st.state == "S":
                break
            time.sleep(0.01)
        reader = procfs.ThreadReader()
        first, _ = reader.read(os.getpid(), judged_tid=os.getpid())
        second, _ = reader.read(os.getpid(), judged_tid=os.getpid())
        by_tid = {t.tid: t for t in first}
        (again,) = [t for t in second if t.tid == idle.native_id]
        assert again is by_tid[idle.native_id]  # asleep, no switch since: the same object
        assert again.io_bytes is None  # not the judged thread
        assert again.wait is None or again.wait.kind is WaitKind.FUTEX_PRIVATE
        (mine,) = [t for t in second if t.tid == os.getpid()]
        assert mine.io_bytes is not None and mine.state == "R"
        everything, _ = procfs.ThreadReader().read(os.getpid())  # every thread judged: a worker
        assert all(t.io_bytes is not None for t in everything)
    finally:
        done.set()
        idle.join(timeout=5)


def test_roles_are_decided_from_name_parent_command_line_and_age():
    from watchdog.collect.discovery import Role, decide_role
    from watchdog.types import ROLE_FORKSERVER, ROLE_OTHER, ROLE_STARTING, ROLE_WORKER, ROLE_WORKER_CHILD

    main_cmd = ("python", "train.py")
    main = Role(10, "main")

    def role(name, cmd, age=100.0, parent=main, ppid=10, modern=True):
        return decide_role(99, name, ppid, tuple(cmd), age, parent, 10, main_cmd, lambda: modern)

    spawned = ["python", "-c", "from multiprocessing.spawn import spawn_main"]
    assert role("pt_data_worker", main_cmd) == Role(99, ROLE_WORKER, "fork")
    assert role("pt_data_worker", spawned).start_method == "spawn"
    assert role("python", spawned, age=1.0) == Role(99, ROLE_STARTING, "spawn")
    assert role("python", spawned, age=100.0).role == ROLE_OTHER
    assert role("python", main_cmd, age=0.5) == Role(99, ROLE_STARTING, "fork")  # not renamed yet
    assert role("python", main_cmd, age=10.0).role == ROLE_OTHER  # a plain multiprocessing.Process
    assert role("python", main_cmd, age=10.0, modern=False) == Role(99, ROLE_WORKER, "fork")  # torch < 2.5
    decoder = role("ffmpeg", ["ffmpeg"], parent=Role(50, ROLE_WORKER), ppid=50)
    assert decoder == Role(99, ROLE_WORKER_CHILD, owner_pid=50)
    assert role("sh", ["sh"], parent=Role(51, ROLE_WORKER_CHILD, owner_pid=50), ppid=51).owner_pid == 50
    server = Role(60, ROLE_FORKSERVER)
    assert role("python", ["python", "-c", "from multiprocessing.forkserver import main"]).role == ROLE_FORKSERVER
    assert role("pt_data_worker", ["python"], parent=server, ppid=60).start_method == "forkserver"
    assert role("python", ["python"], parent=server, ppid=60, age=1.0) == Role(99, ROLE_STARTING, "forkserver")
    assert role("python", ["python", "-c", "from multiprocessing.resource_tracker import main"]).role == ROLE_OTHER


def _entry(pid, rss, role="dataloader_worker", create_time=None):
    created = create_time if create_time is not None else pid
    return {
        "pid": pid,
        "create_time": float(created),
        "start_ticks": int(created),
        "role": role,
        "state": "S",
        "rss_bytes": rss,
    }


def test_descriptor_count_matches_the_listing_and_a_gone_pid_raises():
    # Counted on a child of known descriptors, not on this process: a thread of ours blocked in
    # accept() (pytest-rerunfailures' server) holds a reserved descriptor that the count
    # includes and no listing shows.
    import subprocess
    import sys

    r, w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(r, w)
    )
    try:
        listed = len(os.listdir(f"/proc/{child.pid}/fd"))
        assert procfs.fd_count(child.pid) == listed and listed >= 5  # stdio and the pipe's two ends
    finally:
        os.close(r)
        os.close(w)
        child.communicate(b"", timeout=30)
    with pytest.raises(ProcessGone):
        procfs.fd_count(2**22 + 1)


def test_os_errors_become_typed_errors_at_one_boundary_and_dlwatchs_own_trouble_is_not_a_gone_process():
    with pytest.raises(ProcessGone) as gone:
        procfs.read_checked(2**22 + 1, "io")
    assert gone.value.pid == 2**22 + 1 and "io" in str(gone.value)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        with pytest.raises(OSError):
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        with pytest.raises(ProcError) as full:  # out of descriptors: dlwatch's trouble, the process is there
            procfs.read_checked(os.getpid(), "io")
        assert type(full.value) is ProcError and full.value.errno == errno.EMFILE
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert procfs.nofile_limit(os.getpid()) == soft


def test_memory_is_read_again_sooner_while_it_moves_and_reads_spread_over_ticks():
    from watchdog.collect import sampler as sampler_mod

    s = sampler_mod.Sampler(os.getpid(), full_info_interval_s=10.0)
    s._last_t = 0.0
    entries = [_entry(100 + i, 100 * 2**20) for i in range(20)]
    due = s._due_full_info(entries, 1.0)
    assert len(due) == 2  # ceil(20 processes x 1 s / 10 s): never-read ones first, spread
    s._last_t = 1.0
    other = [_entry(1, 100 * 2**20, role="other")]
    assert s._due_full_info(other, 2.0) == []  # only main and workers
    # a process read at t=0 that was still is due after 6 x 10 s, unless its RSS moved
    s._full = {ProcId(7, 7): memory_plan.MemoryRead(0.0, 8 * 2**20, None, 400, None, 100 * 2**20, 60.0)}
    s._last_t = 29.0
    assert s._due_full_info([_entry(7, 100 * 2**20)], 30.0) == []
    assert len(s._due_full_info([_entry(7, 140 * 2**20)], 30.0)) == 1  # RSS +40 MiB: due at 10 s
    s._last_t = 60.0
    assert len(s._due_full_info([_entry(7, 100 * 2**20)], 61.0)) == 1


def test_ranks_sharing_a_memory_budget_read_within_it_together_but_never_hold_back_a_first_read():
    from watchdog.collect import sampler as sampler_mod

    # 5 ms of CPU a second, 20 ms saved up, a read thought to cost 10 ms until one is measured
    budget = memory_plan.MemoryReadBudget(share=0.005, burst_s=0.02, first_cost_s=0.01)
    ranks = [sampler_mod.Sampler(os.getpid(), full_info_interval_s=10.0, clock=lambda: 1000.0) for _ in range(2)]
    read = memory_plan.MemoryRead(0.0, 8 * 2**20, None, 400, None, 100 * 2**20, 10.0)
    for r, s in enumerate(ranks):
        s.memory_budget = budget
        s._full = {ProcId(100 * r + i, 900): read for i in range(10)}
        s._last_t = 59.0
    overdue = [[_entry(100 * r + i, 100 * 2**20, create_time=900.0) for i in range(10)] for r in range(2)]
    # each rank alone would read 1 (ceil(10 x 1 s / 10 s)); together they read what the saved
    # 20 ms cover, spent as the reads are made, and then what 5 ms a second covers
    got = [len(s._due_full_info(e, 60.0)) for s, e in zip(ranks, overdue)]
    assert got == [1, 1]
    budget.spend(0.012)
    budget.spend(0.012)  # the two reads cost 24 ms: 4 ms in debt
    assert [len(s._due_full_info(e, 60.0)) for s, e in zip(ranks, overdue)] == [0, 0]
    fresh = _entry(999, 100 * 2**20, create_time=999.0)  # never read: read at once, whatever the budget
    assert ranks[0]._due_full_info([fresh] + overdue[0], 60.0) == [fresh]
    for bad in ({"share": 0.0}, {"burst_s": 0.0}, {"first_cost_s": -1.0}):
        with pytest.raises(ValueError):
            memory_plan.MemoryReadBudget(**bad)


def test_a_first_read_is_made_beyond_the_shared_budget_and_a_later_one_spends_its_cpu_time():
    from watchdog.collect import sampler as sampler_mod

    budget = memory_plan.MemoryReadBudget(share=1e-6, burst_s=0.016, first_cost_s=0.008)
    s = sampler_mod.Sampler(os.getpid(), full_info_interval_s=10.0)
    s.memory_budget = budget
    st = procfs.proc_stat(os.getpid())
    entry = dict(_entry(os.getpid(), st.rss_pages * procfs.PAGE_SIZE, role="main"), start_ticks=st.start_ticks)
    s._read_full_info([dict(entry)], 100.0)
    key = ProcId(os.getpid(), st.start_ticks)
    assert key in s._full and budget._tokens == pytest.approx(0.016, abs=1e-6)  # the first read: none spent
    s._last_t = 109.0
    s._read_full_info([dict(entry, rss_bytes=entry["rss_bytes"] + 2**30)], 110.0)  # RSS moved: due again
    assert s._full[key].at == 110.0 and budget._tokens < 0.016  # read, and its CPU time spent


def test_a_memory_budget_grants_reads_at_their_measured_cost_and_carries_a_debt():
    budget = memory_plan.MemoryReadBudget(share=0.001, burst_s=0.016, first_cost_s=0.008)
    assert budget.take(10) == 2  # 16 ms saved, 8 ms a read
    for _ in range(8):
        budget.spend(0.002)  # cheap reads: the mean cost falls towards 2 ms, 0 ms left
    budget._tokens = 0.012
    assert budget.take(10) >= 4  # 12 ms at about 2-3 ms a read
    budget.spend(0.030)  # one read far dearer than saved: a debt
    assert budget.take(1) == 0
    budget._at -= 60.0  # a minute later: 60 ms of share, capped at the 16 ms burst, less the debt
    assert budget.take(10) >= 1


def test_while_memory_is_short_every_process_whose_rss_moved_is_read_at_each_tick_beyond_the_budget():
    from watchdog.collect import sampler as sampler_mod
    from watchdog.types import HostSample

    s = sampler_mod.Sampler(os.getpid(), full_info_interval_s=10.0, clock=lambda: 1000.0)
    read = memory_plan.MemoryRead(50.0, 8 * 2**20, None, 400, None, 100 * 2**20, 60.0)
    s._full = {ProcId(p, 900): read for p in range(10, 20)}
    growing = [_entry(p, 180 * 2**20, create_time=900.0) for p in range(10, 16)]
    still = [_entry(p, 100 * 2**20, create_time=900.0) for p in range(16, 20)]
    s._last_t = 50.0
    assert s._due_full_info(growing + still, 51.0) == []  # read a second ago: due at 60 s
    s._short = True
    assert s._due_full_info(growing + still, 51.0) == growing  # all six, though the budget is one
    # short: under a quarter of the cgroup's limit left; the host's total when there is no limit
    limited = HostSample(None, None, 20 << 30, mem_total_bytes=24 << 30, mem_limit_bytes=640 << 20)
    assert memory_plan.memory_short(dataclasses.replace(limited, mem_cgroup_usage_bytes=600 << 20))
    assert not memory_plan.memory_short(dataclasses.replace(limited, mem_cgroup_usage_bytes=300 << 20))
    assert not memory_plan.memory_short(HostSample(None, None, 20 << 30, mem_total_bytes=24 << 30))
    assert memory_plan.memory_short(HostSample(None, None, 2 << 30, mem_total_bytes=24 << 30))
    assert not memory_plan.memory_short(HostSample(None, None, 2 << 30))  # nothing to compare with


def test_a_young_process_is_read_again_a_second_after_each_read_while_its_mappings_form():
    from watchdog.collect import sampler as sampler_mod

    s = sampler_mod.Sampler(os.getpid(), full_info_interval_s=10.0, clock=lambda: 1000.0)
    young, old = _entry(8, 100 * 2**20, create_time=997.0), _entry(9, 100 * 2**20, create_time=900.0)
    s._full = {
        ProcId(8, 997): memory_plan.MemoryRead(50.0, 8 * 2**20, None, 400, None, 100 * 2**20, 60.0),
        ProcId(9, 900): memory_plan.MemoryRead(50.0, 8 * 2**20, None, 400, None, 100 * 2**20, 60.0),
    }
    s._last_t = 50.0
    assert s._due_full_info([young, old], 51.5) == [young]  # 3 s old: its files are being mapped now


def test_a_still_process_is_read_half_as_often_after_each_still_read_down_to_a_floor():
    import psutil

    from watchdog.collect import sampler as sampler_mod

    me = psutil.Process()
    s = sampler_mod.Sampler(me.pid, full_info_interval_s=10.0)
    key = ProcId(me.pid, procfs.start_ticks(me.pid))
    uss, rss = me.memory_full_info().uss, me.memory_info().rss
    s._full = {key: memory_plan.MemoryRead(0.0, uss, None, None, None, rss, 10.0)}
    intervals = []
    for _ in range(4):
        last = s._full[key]
        s._last_t = last.at + last.interval - 1.0
        entry = {
            "pid": me.pid,
            "start_ticks": key.start_ticks,
            "create_time": me.create_time(),
            "role": "main",
            "state": "R",
            "rss_bytes": rss,
        }
        s._read_full_info([entry], last.at + last.interval)
        assert entry["uss_bytes"] is not None
        intervals.append(s._full[key].interval)
    assert intervals == [60.0, 120.0, 240.0, 240.0]
    # memory that moved brings the cadence back to full_info_interval_s
    last = s._full[key]
    s._full[key] = memory_plan.MemoryRead(last.at, last.uss + 200 * 2**20, None, None, None, rss, last.interval)
    s._read_full_info([dict(entry)], last.at + last.interval)
    assert s._full[key].interval == 10.0


def test_a_process_is_not_read_again_while_its_rss_and_virtual_size_and_the_jobs_anonymous_memory_stand_still():
    # NOTE [ Memory reads on a still job ]: overdue by its cadence, a process is held back while
    # nothing cheap says its memory changed; any of the signs moving, CUDA pinned memory,
    # memory short or the ceiling makes it due again.
    from watchdog.collect import sampler as sampler_mod
    from watchdog.collect.cgroup import MemoryCgroup

    s = sampler_mod.Sampler(os.getpid(), full_info_interval_s=10.0, clock=lambda: 10_000.0)
    key, rss, vsize, anon = ProcId(7, 900), 100 * 2**20, 2 << 30, 500 << 20
    read = memory_plan.MemoryRead(0.0, 8 * 2**20, None, 400, None, rss, 60.0, vsize=vsize, job_anon=anon)
    s._full = {key: read}
    s._last_t = 99.0
    entry = _entry(7, rss, create_time=900.0)

    def due(now=100.0, vsize_now=vsize, anon_now=anon + 2**20):
        s._vsize[key] = vsize_now
        return len(s._due_full_info([entry], now, anon_now))

    assert due() == 0  # 100 s after its read, past its 60 s: nothing moved
    assert due(vsize_now=vsize + 20 * 2**20) == 1  # new mappings
    # the job's anonymous memory may drift by half the slowest growth a rule warns about
    # (0.5 MiB/s, at least 4 MiB: 50 MiB in 100 s); more, and pages were un-shared somewhere
    assert due(anon_now=anon + 45 * 2**20) == 0
    assert due(anon_now=anon + 55 * 2**20) == 1
    assert due(anon_now=anon - 55 * 2**20) == 1
    assert due(now=65.0, anon_now=anon + 4 * 2**20) == 0  # past its 60 s: 32.5 MiB allowed
    assert due(now=65.0, anon_now=anon + 40 * 2**20) == 1
    assert due(anon_now=None) == 1  # the job's anonymous memory unknown
    assert len(s._due_full_info([_entry(7, rss + 40 * 2**20, create_time=900.0)], 100.0, anon)) == 1  # RSS
    assert due(now=memory_plan.GATED_MAX_FACTOR * 10.0 + 1) == 1  # the ceiling
    s._full = {key: dataclasses.replace(read, pinned=1 << 20)}
    assert due() == 1  # CUDA pinned memory grows in neither
    s._full = {key: dataclasses.replace(read, uss=None)}
    assert due() == 1  # its last read failed
    s._full = {key: read}
    s._ended_at = 50.0
    assert due() == 1  # a process of the tree ended since: what it shared is this one's now
    s._ended_at = float("-inf")
    s._full = {key: read}
    s._short = True
    assert due() == 1
    # the job's anonymous memory is the least of the last readings: a batch allocated and freed
    # between two samples is no move
    s._short = False
    for value in (500, 530, 505, 540, 520, 560, 545):
        s.memory_cgroup = MemoryCgroup(2, "/x", None, None, None, value << 20)
        floor = s._job_anon()
    assert floor == 505 << 20
    # dlwatch's own memory is left out of the cgroup it shares with the job (or of the host's)
    s.node.own_anon = lambda: 400 << 20
    s.node.memory_cgroup_folder = lambda pid: (2, "/x")
    s._anon.clear()
    assert s._job_anon() == 145 << 20
    s.memory_cgroup = None
    s.node.anon_pages = lambda: 1 << 30
    s._anon.clear()
    assert s._job_anon() == (1 << 30) - (400 << 20)
    s.node.anon_pages = lambda: None  # neither known
    assert s._job_anon() is None


def test_still_memory_is_judged_against_the_slowest_growth_the_rules_warn_about():
    from watchdog.collect.memory_plan import MemoryRead, still

    last = MemoryRead(0.0, 100 * 2**20, None, 400, None, 0, 10.0)
    assert still(last, 100 * 2**20 + 2**20, 401, None, 10.0)  # +1 MiB in 10 s: noise
    assert not still(last, 100 * 2**20 + 12 * 2**20, 400, None, 10.0)  # 1.2 MiB/s: growth
    assert not still(last, 100 * 2**20, 600, None, 10.0)  # +200 mappings
    assert still(last, None, None, None, 10.0)  # unreadable: nothing to learn


def test_fd_kinds_and_a_census_of_this_process(tmp_path):
    from watchdog.types import FdKind

    assert procfs.fd_kind("socket:[123]") is FdKind.SOCKET and procfs.fd_kind("pipe:[9]") is FdKind.PIPE
    assert procfs.fd_kind("/dev/shm/torch_12_345_0 (deleted)") is FdKind.SHM
    assert procfs.fd_kind("/memfd:torch (deleted)") is FdKind.SHM and procfs.fd_kind("/dev/nvidia0") is FdKind.DEVICE
    assert procfs.fd_kind("anon_inode:[eventfd]") is FdKind.ANON and procfs.fd_kind("/data/x.jpg") is FdKind.FILE
    handles = []
    try:
        for i in range(30):
            p = tmp_path / f"{i}.bin"
            p.write_bytes(b"x")
            handles.append(open(p, "rb"))
        census = procfs.fd_census(os.getpid(), 5.0)
        assert census is not None and census.count(FdKind.FILE) >= 30
        assert census.files[0] == (str(tmp_path), 30)
    finally:
        for f in handles:
            f.close()


def test_mapped_data_files_are_the_non_library_files_with_their_extent_and_inode():
    maps = (
        b"7f0000000000-7f0001000000 r--s 00000000 fd:01 4242 /data/features.npy\n"
        b"7f0002000000-7f0002001000 r--p 00001000 fd:01 4242 /data/features.npy\n"
        b"7f1000000000-7f1000100000 r-xp 00000000 fd:01 77 /opt/venv/lib/libfoo.so.1\n"
        b"7f1000100000-7f1000200000 r--p 00100000 fd:01 77 /opt/venv/lib/libfoo.so.1\n"
        b"7f2000000000-7f2000001000 rw-s 00000000 00:05 9 /dev/shm/torch_1_2_0 (deleted)\n"
        b"7f3000000000-7f3000001000 r--p 00000000 fd:01 5 /usr/lib/locale/locale-archive\n"
        b"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
    )
    assert procfs.mapped_data_files(maps) == (("/data/features.npy", 0x1000000, 4242),)


def test_mapped_data_files_keeps_spaces_and_slashes_in_a_path_and_drops_libraries_early():
    # a path with " /" inside, a data file mapped twice (the furthest extent counts), a
    # library's non-executable mapping (dropped by its suffix, never parsed), a .pyc, a line
    # with a bad number (skipped) and one with too few fields
    maps = (
        b"7f0000000000-7f0000002000 r--s 00000000 fd:01 11 /data/my dir /part 1.npy\n"
        b"7f0000010000-7f0000011000 r--s 00004000 fd:01 11 /data/my dir /part 1.npy\n"
        b"7f1000100000-7f1000200000 r--p 00100000 fd:01 77 /opt/venv/lib/libtorch_cpu.so\n"
        b"7f1000300000-7f1000301000 r--p 00000000 fd:01 78 /opt/app/__pycache__/m.cpython-311.pyc\n"
        b"zz-7f1000401000 r--p 00000000 fd:01 79 /data/bad.bin\n"
        b"7f1000500000-7f1000501000 r--p 00000000 /data/short.bin\n"
        b"7f1000600000-7f1000601000 r--p 00000000 fd:01 80 /data/b.arrow\n"
    )
    assert procfs.mapped_data_files(maps) == (
        ("/data/my dir /part 1.npy", 0x5000, 11),
        ("/data/b.arrow", 0x1000, 80),
    )


def test_smaps_rollup_gives_uss_pss_and_private_dirty():
    text = (
        "55d0c0000000-7ffd00000000 ---p 00000000 00:00 0    [rollup]\n"
        "Rss:              250000 kB\nPss:              180000 kB\nShared_Clean:      60000 kB\n"
        "Private_Clean:    153600 kB\nPrivate_Dirty:     12152 kB\nAnonymous:         14000 kB\n"
    )
    r = procfs.parse_smaps_rollup(text)
    assert r.uss == (153600 + 12152) * 1024 and r.pss == 180000 * 1024
    assert r.private_dirty == 12152 * 1024 and r.anonymous == 14000 * 1024
    assert procfs.parse_smaps_rollup("garbage") is None
    own = procfs.smaps_rollup(os.getpid())
    assert own is not None and own.uss >= own.private_dirty > 0


def test_memory_cgroups_v1_and_v2_are_read_by_folder(tmp_path):
    from watchdog.collect import cgroup

    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text("671088640\n")
    (v1 / "memory.usage_in_bytes").write_text("600000000\n")
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cgroup.read_memory(1, str(v1)) == cgroup.MemoryCgroup(1, str(v1), 640 << 20, 600000000, 2)
    (v1 / "memory.stat").write_text("rss 5\ntotal_inactive_file 1000\ntotal_rss 4096\n")
    assert cgroup.read_memory(1, str(v1)) == cgroup.MemoryCgroup(1, str(v1), 640 << 20, 599999000, 2, 4096)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert cgroup.read_memory(1, str(v1)).limit_bytes is None
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("123\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cgroup.read_memory(2, str(v2)) == cgroup.MemoryCgroup(2, str(v2), None, 123, 1)
    (v2 / "memory.stat").write_text("anon 8192\nfile 4096\ninactive_file 23\n")
    assert cgroup.read_memory(2, str(v2)) == cgroup.MemoryCgroup(2, str(v2), None, 100, 1, 8192)
    assert cgroup.read_memory(2, str(tmp_path / "gone")) is None


def test_shm_held_counts_the_processes_own_files_open_or_named_and_not_others(tmp_path):
    me = os.getpid()
    held = tmp_path / "torch_x_held"
    held.write_bytes(b"y" * 8192)
    f = open(held, "rb")
    try:
        held.unlink()  # as the file_descriptor strategy does: only the descriptor finds it
        (tmp_path / f"torch_{me}_named_0").write_bytes(b"z" * 4096)
        (tmp_path / "torch_1_other_0").write_bytes(b"w" * (1 << 20))  # another job's
        n = procfs.shm_held([me], str(tmp_path))
        assert 8192 + 4096 <= n < (1 << 20)
    finally:
        f.close()


def test_a_dlwatch_inside_the_job_is_a_wrapper_never_the_main():
    from watchdog.collect.discovery import is_dlwatch

    assert is_dlwatch(["/venv/bin/python", "/venv/bin/dlwatch", "run", "--", "python", "train.py"])
    assert is_dlwatch(["python3", "-m", "watchdog", "run", "--", "python", "train.py"])
    assert is_dlwatch(["/usr/bin/python3", "-I", "-m", "watchdog.collect.stderr_tail", "/tmp/x/tail", "65536", "1"])
    assert not is_dlwatch(["python", "train.py", "--log-dir", "dlwatch"])
    assert not is_dlwatch(["python", "-m", "watchdogs.observer"])
    assert not is_dlwatch(["python", "-m", "watchdog.probes.train", "--fault", "fork-lock"])  # installed probes


def test_the_path_a_thread_is_opening_is_read_from_its_system_call_argument():
    import ctypes

    from watchdog.types import KernelWait, WaitKind

    name = ctypes.create_string_buffer(b"/data/shards/in.fifo\nforged line")
    address = ctypes.addressof(name)
    wait = KernelWait(WaitKind.FD, "openat", raw=f"257 0xffffff9c {address:#x} 0x80000 0x0 0x0 0x0 0x7ffd 0x7f01")
    assert procfs.opening_path(os.getpid(), wait) == "/data/shards/in.fifo\\nforged line"
    opened = KernelWait(WaitKind.FD, "open", raw=f"2 {address:#x} 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f01")
    assert procfs.opening_path(os.getpid(), opened).startswith("/data/shards/in.fifo")
    assert procfs.opening_path(os.getpid(), KernelWait(WaitKind.FD, "read", fd=3, raw="0 0x3 0x0")) is None
    assert procfs.opening_path(os.getpid(), KernelWait(WaitKind.FD, "openat", raw="257 0xffffff9c 0x0")) is None


@contextlib.contextmanager
def _sampled_job(script: str):
    """A real Python job running ``script`` (which prints ``ready`` once set up) in a session of
    its own, and a :class:`Sampler` of it whose roles are settled (its clock an hour ahead);
    the session is killed whatever happens."""
    import signal
    import subprocess
    import sys

    from watchdog.collect.sampler import Sampler

    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc, Sampler(proc.pid, full_info_interval_s=10.0, clock=lambda: time.time() + 3600)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# A main that forks one child, and kills and reaps it on SIGUSR2.
_ONE_CHILD = (
    "import os, signal, time\n"
    "kid = os.fork() or (time.sleep(60), os._exit(0))\n"
    "signal.signal(signal.SIGUSR2, lambda *_: (os.kill(kid, 9), os.waitpid(kid, 0)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _with_processes(s, count: int):
    """The first sample of ``s`` (a :class:`Sampler`) that holds ``count`` processes, within 10 s
    (the last one taken when none does)."""
    deadline = time.monotonic() + 10
    first = s.sample()
    while len(first.processes) < count and time.monotonic() < deadline:
        first = s.sample()
    return first


def test_a_lean_sample_is_the_last_one_again_until_main_forks_or_loses_a_child(tmp_path):
    # A real main that forks one child, then another on a signal, and reaps its first on a
    # second signal: a lean sample reads main's children only, and a child it did not know, or
    # one gone, makes it a full sample.
    import signal

    script = (
        "import os, signal, sys, time\n"
        "kids = [os.fork() or (time.sleep(60), os._exit(0))]\n"
        "signal.signal(signal.SIGUSR1, lambda *_: kids.append(os.fork() or (time.sleep(60), os._exit(0))))\n"
        "signal.signal(signal.SIGUSR2, lambda *_: (os.kill(kids[0], 9), os.waitpid(kids[0], 0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    with _sampled_job(script) as (proc, s):
        assert not s.sample(LEAN).lean  # no sample before: a full one
        first = _with_processes(s, 2)
        again = s.sample(LEAN)
        assert again.lean and again.processes is first.processes and again.t_mono > first.t_mono
        assert first.may_lean and again.may_lean  # NOTE [ Lean ticks ]: a tick after them may be skipped
        os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while len(procfs.thread_children(proc.pid, proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        after = s.sample(LEAN)
        assert not after.lean and len(after.processes) == 3, after.processes
        quick = s.sample(LEAN)
        assert quick.processes is after.processes and quick.lean
        os.kill(proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while len(procfs.thread_children(proc.pid, proc.pid)) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        gone = s.sample(LEAN)
        assert not gone.lean and len(gone.processes) == 2, gone.processes
        # a child ended at that walk: no lean sample may follow it, and none does
        assert not gone.may_lean and not s.sample(LEAN).lean


def test_a_child_that_ended_between_the_walk_and_the_first_lean_sample_makes_that_one_full():
    # The first lean sample after a walk has no children of its own to compare with: a child of
    # the walk that main no longer has is looked up, and one reaped since makes it a full sample
    # (else lean ticks would show the ended worker until the next look, 15 s by default).
    import signal

    with _sampled_job(_ONE_CHILD) as (proc, s):
        first = _with_processes(s, 2)
        assert len(first.processes) == 2 and first.may_lean
        os.kill(proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while procfs.thread_children(proc.pid, proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        after = s.sample(LEAN)
        assert not after.lean and len(after.processes) == 1, after.processes


def test_a_full_sample_without_threads_reads_none_and_still_finds_the_children():
    # NOTE [ Thread reads ]: a real main with one forked child; a sample with threads=False has
    # both processes, no thread of either, and says so; the next one with threads reads them.
    with _sampled_job(_ONE_CHILD) as (_proc, s):
        first = _with_processes(s, 2)
        assert first.threads_read and first.main.threads  # main's (the child is no worker: not read)
        bare = s.sample(NO_THREADS)
        assert not bare.threads_read and len(bare.processes) == 2 and all(p.threads == () for p in bare.processes)
        assert [p.pid for p in bare.processes] == [p.pid for p in first.processes]
        assert s.sample(LEAN).threads_read is False  # a lean sample has its full sample's
        again = s.sample()
        assert again.threads_read and again.main.threads


def test_an_exit_watch_says_ended_once_the_process_exits_even_unreaped_and_never_for_a_reused_pid():
    # A real child: alive, then a zombie (exited, not reaped: ended), then reaped; a watch opened
    # with another start time is ended from the start (its pid names another process).
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        start = procfs.start_ticks(child.pid)
        watch = procfs.ExitWatch(child.pid, start)
        assert not watch.ended() and not watch.ended()
        assert procfs.ExitWatch(child.pid, (start or 0) + 1).ended()
        child.stdin.close()
        deadline = time.monotonic() + 10
        while not watch.ended() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watch.ended() and procfs.proc_stat(child.pid).state == "Z"  # exited, not reaped yet
    finally:
        child.kill()
        child.wait()
    assert watch.ended()


def test_a_walk_without_threads_finds_main_threads_new_children_and_keeps_another_threads_once_seen():
    # NOTE [ Thread reads ]: a real main whose main thread forks a child on SIGUSR1 and whose
    # other thread forks one when a line comes on stdin. Walks without threads read the main
    # thread's children and keep those already found; the other thread's child is found by a
    # walk with threads (the first tick without a batch) and then kept by walks without.
    import signal
    import subprocess
    import sys

    from watchdog.collect.sampler import Sampler

    script = (
        "import os, signal, sys, threading, time\n"
        "def child():\n"
        "    time.sleep(60); os._exit(0)\n"
        "signal.signal(signal.SIGUSR1, lambda *_: os.fork() or child())\n"
        "def other():\n"
        "    sys.stdin.readline()\n"
        "    os.fork() or child()\n"
        "    time.sleep(60)\n"
        "threading.Thread(target=other, daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        s = Sampler(proc.pid, full_info_interval_s=10.0, clock=lambda: time.time() + 3600)
        assert len(s.sample().processes) == 1 and len(s.sample(NO_THREADS).processes) == 1

        def wait_for(count, tid=None):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                tids = [tid] if tid else procfs.task_ids(proc.pid) or []
                if sum(len(procfs.thread_children(proc.pid, t)) for t in tids) >= count:
                    return
                time.sleep(0.01)
            raise AssertionError(f"no {count} children within 10 s")

        os.kill(proc.pid, signal.SIGUSR1)
        wait_for(1, proc.pid)
        assert len(s.sample(NO_THREADS).processes) == 2  # the main thread's new child
        proc.stdin.write("fork\n")
        proc.stdin.flush()
        wait_for(2)
        assert len(s.sample().processes) == 3  # with threads: the other thread's child too
        for _ in range(3):
            subprocess.run(["true"], check=True)  # a task made on the host: the walk reads children again
            assert len(s.sample(NO_THREADS).processes) == 3  # kept, not read again
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_node_reads_are_kept_for_their_max_age_and_shared_by_the_ranks_that_ask(tmp_path, monkeypatch):
    # NOTE [ Node reads ]: a reading is given again while it is at most max_age_s old, to any
    # caller; with max_age_s 0, every call reads. The memory cgroup's folder is looked up once
    # per CGROUP_PATH_EVERY_S, its figures once per max_age_s for every pid in it.
    from watchdog.collect import cgroup, node

    now = [100.0]
    reads = {"meminfo": 0, "folder": 0}

    def fake_meminfo(wanted=(b"MemTotal", b"MemAvailable")):
        reads["meminfo"] += 1
        every = {b"MemTotal": 1 << 30, b"MemAvailable": reads["meminfo"] << 20, b"AnonPages": 7 << 20}
        return {k: v for k, v in every.items() if k in wanted}

    def fake_folder(pid):
        reads["folder"] += 1
        return 2, str(tmp_path)

    monkeypatch.setattr(node, "meminfo_fields", fake_meminfo)
    monkeypatch.setattr(cgroup, "memory_cgroup_folder", fake_folder)
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "memory.current").write_text("123\n")
    shared = node.NodeReads(max_age_s=0.5, clock=lambda: now[0])
    assert shared.meminfo() == shared.meminfo() == (1 << 30, 1 << 20) and reads["meminfo"] == 1
    assert shared.anon_pages() == 7 << 20 and shared.anon_pages() == 7 << 20 and reads["meminfo"] == 2
    reads["meminfo"] = 1
    now[0] += 0.6
    assert shared.meminfo() == (1 << 30, 2 << 20)
    assert shared.memory_cgroup(11).usage_bytes == 123
    (tmp_path / "memory.current").write_text("456\n")
    assert shared.memory_cgroup(12).usage_bytes == 123  # another rank, the same folder: one reading
    now[0] += 0.6
    assert shared.memory_cgroup(11).usage_bytes == 456 and reads["folder"] == 2  # pids 11 and 12, once each
    now[0] += node.CGROUP_PATH_EVERY_S + 1
    shared.memory_cgroup(11)
    assert reads["folder"] == 3
    alone = node.NodeReads()
    assert alone.meminfo() != alone.meminfo()  # max_age_s 0: read at every call
    with pytest.raises(ValueError):
        node.NodeReads(max_age_s=-1)


def test_a_walk_with_threads_after_walks_without_reads_every_threads_children_even_when_nothing_forked_since():
    # The thread reader keeps each thread's children from its own last read; walks without
    # threads in between do not update it. A child main forked between a walk with threads and
    # one without is found by the one without; the next walk with threads, with no task made on
    # the host since (its "cached" case), must still have it.
    import signal

    script = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGUSR1, lambda *_: os.fork() or (time.sleep(60), os._exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    with _sampled_job(script) as (proc, s):
        last_pids = iter([1, 1, 2, 2])  # no task made between the last two walks
        s.node.last_pid = lambda: next(last_pids)
        assert len(s.sample().processes) == 1
        assert len(s.sample().processes) == 1
        os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not procfs.thread_children(proc.pid, proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(s.sample(NO_THREADS).processes) == 2
        assert len(s.sample().processes) == 2


def test_a_mapped_file_with_a_line_break_in_its_name_is_found_and_statted(tmp_path):
    # The kernel writes the line break as "\012" in /proc/PID/maps (fs/seq_file.c, mangle_path).
    import mmap

    path = tmp_path / "shard\nx.npy"
    path.write_bytes(b"\0" * 8192)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 8192, prot=mmap.PROT_READ) as _mapped:
        with open("/proc/self/maps", "rb") as m:
            maps = m.read()
    assert b"shard\\012x.npy" in maps
    found = [entry for entry in procfs.mapped_data_files(maps) if "shard" in entry[0]]
    assert found == [(str(path), 8192, path.stat().st_ino)]
    assert procfs.file_sizes([found[0][0]]) == ((str(path), 8192, path.stat().st_ino),)
