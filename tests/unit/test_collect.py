"""The collectors' parsers on captured text: py-spy JSON, /proc stat lines and the decoding of
/proc/PID/task/TID/syscall into kernel waits."""

from __future__ import annotations

import pytest

from tests.unit.builders import WORKER_PID, fixture
from watchdog import frames, states
from watchdog.collect import procfs, pyspy, waits
from watchdog.types import WaitKind


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
    assert waits.decode("S", "271 0x1 0x1 0x0 0x0 0x8 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.FD  # ppoll, no timespec


def test_generic_syscall_numbers_for_arm64():
    assert waits.decode("S", "98 0x1 0x189 0x0 0x0 0x0 0x0 0x7f 0x7f", "aarch64").kind is WaitKind.FUTEX_PRIVATE
    assert waits.decode("S", "98 0x1 0x189 0x0 0x0 0x0 0x0 0x7f 0x7f", "x86_64").kind is WaitKind.OTHER  # 98 is getrusage there
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
    assert states.may_be_loader_idle_poll(decode("202 0x1 0x89 0x0 0x7ffe 0x0 0x0 0x7f 0x7f"))  # queue.Queue.get(timeout=5)
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
    msg = pyspy.explain_failure("Error: Failed to get process executable name. Check that the process is running.\n", 42)
    assert "SYS_PTRACE" in msg and "ptrace_scope" in msg and "42" in msg


def test_parse_stat_with_parentheses_in_comm():
    line = "123 (a) b) c) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 10"
    comm, state, cpu_s = procfs.parse_stat(line)
    assert comm == "a) b) c" and state == "S"
    assert cpu_s == pytest.approx(300 / procfs.CLK_TCK)
    assert procfs.stat_start_ticks(line) == 100


def test_secret_environment_values_are_redacted():
    env = procfs.redact_env(
        {
            "AWS_SECRET_ACCESS_KEY": "x",
            "HF_TOKEN": "y",
            "DB_PASSWORD": "z",
            "OMP_NUM_THREADS": "4",
            "DATABASE_URL": "postgres://u:pw123@h/db",
        }
    )
    assert env["OMP_NUM_THREADS"] == "4"
    more = procfs.redact_env(
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
    assert all(procfs.REDACTED in v and "abc" not in v for k, v in more.items() if k != "PWD")
    assert env["DATABASE_URL"] == "postgres://u:<redacted>@h/db"
    assert {env[k] for k in ("AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DB_PASSWORD")} == {procfs.REDACTED}


def test_wchan_families_cover_old_and_new_kernel_names():
    assert frames.wchan_family("futex_do_wait") == frames.wchan_family("futex_wait_queue_me") == "futex"
    assert frames.wchan_family("poll_schedule_timeout.constprop.0") == "poll"
    assert frames.wchan_family("0") is None


def test_shm_leftovers_match_only_the_jobs_pids(tmp_path):
    (tmp_path / "torch_123_abc_0").write_bytes(b"x" * 10)
    (tmp_path / "torch_999_abc_0").write_bytes(b"x")
    (tmp_path / "sem.mp-1").write_bytes(b"")
    assert procfs.shm_leftovers({123, 5}, str(tmp_path)) == (("torch_123_abc_0", 10),)


def test_pinned_memory_is_the_rss_of_shared_nvidiactl_mappings_only():
    text = fixture("smaps_pinned.txt")
    assert procfs.pinned_bytes_from_smaps(text) == (2097152 + 2048) * 1024  # the private one is not pinned memory
    assert procfs.pinned_bytes_from_smaps(text.replace("/dev/nvidiactl", "/dev/zero")) == 0
