"""The job's stderr tail parsed once into a record (watchdog.collect.stderr_facts), on stderr
texts captured from real PyTorch jobs (tests/fixtures/stderr_*.txt) and on single lines in the
wording PyTorch and Python use; and the crash rules reading that record, parsed once per
Facts, instead of the raw text."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tests.unit.builders import MAIN_PID, ROOT, fixture, proc, sample
from watchdog.collect import stderr_facts as sf
from watchdog.collect.stderr_facts import (
    ErrnoLine,
    KilledWorker,
    LoaderTimeout,
    NativeSignal,
    StderrFacts,
    WorkerExitCode,
    parse_stderr,
    stderr_facts,
)
from watchdog.diagnose import diagnose
from watchdog.types import MODE_CRASH, ROLE_MAIN, Facts


def _crash_facts(stderr: str) -> Facts:
    smp = sample(50.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    return Facts(mode=MODE_CRASH, sample=smp, timeline=(smp,), stderr_tail=stderr, exit_code=1)


def test_a_segfault_with_faulthandler_gives_the_killed_worker_its_handlers_line_and_the_dump():
    err = parse_stderr(fixture("stderr_worker_segfault_faulthandler.txt"))
    assert err.killed == (
        KilledWorker(
            (5808,), "Segmentation fault", "DataLoader worker (pid 5808) is killed by signal: Segmentation fault."
        ),
    )
    assert err.last_killed() == err.killed[0]
    assert err.native_signal == NativeSignal(
        "segmentation fault", "ERROR: Unexpected segmentation fault encountered in worker"
    )
    assert err.fault is not None and err.fault.what == "Segmentation fault"
    user = err.fault.user()
    assert user is not None and (user.function, user.file, user.line) == (
        "__getitem__",
        "/home/user/train/worker_segfault_mid_epoch.py",
        23,
    )
    assert err.assertions == ("Fatal Python error: Segmentation fault",)
    assert err.lost_receive == "EOFError"  # main's rebuild_storage_fd found the worker gone


def test_shared_memory_full_in_a_worker_is_an_errno_28_line_on_a_torch_segment_with_its_creator():
    err = parse_stderr(fixture("stderr_shm_exhausted_in_worker.txt"))
    line = (
        "RuntimeError: unable to allocate shared memory(shm) for file </torch_7605_689225936_0>: No space left on "
        "device (28)"
    )
    assert err.errors == (ErrnoLine(line, 28, "/torch_7605_689225936_0", True),)
    assert [(n.line, n.shared_memory) for n in err.enospc] == [(line, True)]
    assert err.enospc_paths == ()  # shared memory: no file system of its own
    assert err.shm_creators == (7605,)
    assert [(c.exception, c.worker_id) for c in err.caught] == [("RuntimeError", 0)]
    assert err.original is not None and err.original.exception == line and err.original.stage() == "collate_fn"


def test_a_full_disk_under_a_workers_cache_is_enospc_on_another_file_system_from_its_traceback():
    err = parse_stderr(fixture("stderr_worker_cache_disk_full.txt"))
    assert [(n.line, n.shared_memory, n.path) for n in err.enospc] == [
        ("OSError: [Errno 28] No space left on device", False, None)
    ]
    block = err.enospc[0].block
    assert block is not None and block.original and block.user() is not None
    assert err.enospc_paths == ()  # the frame writes a path built with os.path.join: not known
    assert err.location == "/home/user/train/worker_cache_disk_full.py:55"


def test_the_file_a_full_disk_refused_is_the_path_the_error_names_else_the_literal_the_frame_opens():
    named = parse_stderr("OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_9.pt'\n")
    assert named.errors == (
        ErrnoLine(
            "OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_9.pt'",
            28,
            "/scratch/ckpt/step_9.pt",
            False,
        ),
    )
    assert named.enospc_paths == ("/scratch/ckpt/step_9.pt",)
    literal = parse_stderr(
        "Traceback (most recent call last):\n"
        '  File "/home/user/train/train.py", line 12, in main\n'
        '    with open("/scratch/c.bin", "wb") as f:\n'
        "OSError: [Errno 28] No space left on device\n"
    )
    assert literal.enospc_paths == ("/scratch/c.bin",)
    undecided = parse_stderr("OSError: [Errno 28] No space left on device\n")  # no traceback: shared memory assumed
    assert [(n.shared_memory, n.block) for n in undecided.enospc] == [(True, None)]


@pytest.mark.parametrize(
    "line, errno, shm",
    [
        ("RuntimeError: received 0 items of ancdata", 24, False),
        ("OSError: [Errno 24] Too many open files: '/data/img/00231.bin'", 24, False),
        ("RuntimeError: unable to mmap 4 bytes from file </torch_12_34_0>: Cannot allocate memory (12)", 12, True),
        ("FileNotFoundError: [Errno 2] No such file or directory: '/dev/shm/torch_1_2_3'", 2, True),
        ("RuntimeError: Too many open files. Communication with the workers is no longer possible.", 24, False),
    ],
)
def test_errno_lines_carry_their_errno_and_whether_they_name_shared_memory(line, errno, shm):
    (found,) = parse_stderr(f"noise before\n{line}\nnoise after\n").errors
    assert (found.line, found.errno, found.shared_memory) == (line, errno, shm)


def test_a_worker_that_exited_with_a_code_is_told_apart_from_one_killed_by_a_signal():
    err = parse_stderr(fixture("stderr_worker_thread_limit_pids.txt"))
    assert err.exit_codes == (
        WorkerExitCode(22383, 1, "DataLoader worker (pid 22383) exited unexpectedly with exit code 1"),
    )
    assert [k.signal for k in err.killed] == [None, None]  # "exited unexpectedly": no signal
    assert err.native_signal is None
    words = err.worker_last_words()
    assert words == ["RuntimeError: can't start new thread"] and sf.says_eagain(words[-1])
    assert err.worker_traceback() is not None and err.worker_traceback().worker


def test_a_workers_own_message_is_among_its_last_words_and_mains_tracebacks_are_not():
    err = parse_stderr(fixture("stderr_worker_sys_exit.txt"))
    assert err.worker_last_words() == ["corrupt sample 1337: header length 0"]
    assert err.lost_receive == "FileNotFoundError"


def test_a_spawned_worker_that_could_not_unpickle_its_dataset_is_a_start_failure():
    err = parse_stderr(fixture("stderr_spawn_class_under_main_guard.txt"))
    assert err.start_failures and all("Can't get attribute 'Frames'" in line for line in err.start_failures)
    assert sf.unpickle_error(err.start_failures[-1]) == ("Frames", "__mp_main__")
    assert sf.unpickle_error("ValueError: x") is None


def test_a_pickling_error_away_from_process_start_is_no_start_failure():
    text = "TypeError: cannot pickle '_thread.lock' object\n"
    assert parse_stderr(text).start_failures == ()
    on_start = '  File "/usr/lib/python3.11/multiprocessing/popen_spawn_posix.py", line 47, in _launch\n' + text
    assert parse_stderr(on_start).start_failures == ("TypeError: cannot pickle '_thread.lock' object",)


def test_a_loader_timeout_carries_its_seconds():
    err = parse_stderr(fixture("stderr_loader_timeout.txt"))
    assert err.timeout == LoaderTimeout(5.0, "DataLoader timed out after 5 seconds")


def test_a_queue_feeder_threads_failure_is_read_with_its_exception():
    err = parse_stderr(fixture("stderr_shm_exhausted_in_feeder.txt"))
    assert [exc for exc, _ in err.feeder_failures] == [
        "RuntimeError: unable to allocate shared memory(shm) for file </torch_31252_2427141618_1>: No space left on "
        "device (28)"
    ]


def test_cuda_touched_in_a_forked_worker_is_read():
    err = parse_stderr(fixture("stderr_cuda_in_forked_worker.txt"))
    assert len(err.cuda_fork) == 1 and err.cuda_fork[0].startswith("RuntimeError: Cannot re-initialize CUDA")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "Traceback (most recent call last):\n",
        "\x00\x01 binary \xff",
        "DataLoader worker (pid",
        "Fatal Python error: ",
    ],
)
def test_empty_cut_or_garbled_text_parses_to_a_record_without_raising(text):
    err = parse_stderr(text)
    assert isinstance(err, StderrFacts) and err.killed == () and err.errors == ()
    assert parse_stderr("") == StderrFacts()


def test_the_record_is_parsed_once_per_facts_and_anew_for_facts_made_anew(monkeypatch):
    calls = []
    real = sf.parse_stderr

    def counting(text):
        calls.append(text)
        return real(text)

    monkeypatch.setattr(sf, "parse_stderr", counting)
    facts = _crash_facts(fixture("stderr_worker_segfault_faulthandler.txt"))
    found = diagnose(facts)
    assert found and found[0].kind == "worker_killed"
    assert stderr_facts(facts) is stderr_facts(facts)
    assert len(calls) == 1  # every crash rule read the one record
    other = dataclasses.replace(facts, stderr_tail=fixture("stderr_loader_timeout.txt"))
    assert stderr_facts(other).timeout is not None and stderr_facts(facts).timeout is None
    assert len(calls) == 2


def test_the_crash_rules_read_the_record_not_the_raw_tail():
    folder = os.path.join(ROOT, "watchdog", "diagnose", "crashes")
    readers = [
        name
        for name in sorted(os.listdir(folder))
        if name.endswith(".py") and "stderr_tail" in open(os.path.join(folder, name), encoding="utf-8").read()
    ]
    assert readers == []
