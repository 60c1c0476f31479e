"""Small training jobs modelled on public bug reports, one per failure class, and healthy
controls that must never be reported. Each is a target: a plain script that never imports
``watchdog``, run as ``python -m probes.cases.NAME``; its docstring cites the reports it is
modelled on and says what the watchdog must conclude. ``CASES`` is the index the tests and
``dlwatch probe repro`` read: the verdict each case must get, and which case stands for a
failure kind in ``probe repro``'s catalogue (``repro_as``) where no ``probes.train`` fault
reproduces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .. import module_name


@dataclass(frozen=True)
class Case:
    """One run of a target and its verdict: ``kind`` first among the reports of ``mode``
    (``hang``, ``crash``, ``exit``, ``warning``); no report at all when ``kind`` is ``None`` and
    ``mode`` is ``None``; with ``mode`` ``unharmed``, reports are allowed but the job must end by
    itself with exit code 0 (a job that waits legitimately in a way that looks like a hang).
    ``target`` is the script when it differs from ``name``, run with ``args`` and a stall
    timeout of ``stall_timeout_s`` seconds.
    ``certainty`` (``proven``/``suspected``) is checked for hangs; ``location`` is a source
    fragment the first diagnosis's ``file:line`` must point at; ``settings`` are watchdog
    settings for the run; ``timeout_s`` bounds it; ``warnings`` are kinds that must also have been
    warned about while the job ran; ``remedy`` holds words the first diagnosis's remedy must
    contain (``"!words"``: must not); ``needs_mount`` marks a target that mounts a file system in
    a mount namespace of its own (root or CAP_SYS_ADMIN; skipped without); ``evidence`` holds
    words the first diagnosis's evidence must contain; ``attach`` runs the target with plain
    ``python`` and watches it with ``dlwatch attach --pid`` (no inside view: what progress
    means then is main's wait seen from outside); ``memory_limit`` (bytes) runs the job in a
    memory cgroup of its own with that limit (root and cgroup v1; skipped without);
    ``shm_size`` gives it a private ``/dev/shm`` of that size (root; skipped without); ``also``
    are kinds the same report must hold among its other findings. A healthy control (``kind``
    and ``mode`` ``None``) may get performance advice (``input_bound``: a slow-data toy job is
    input-bound), never anything else; with ``mode`` ``quiet`` it may get no report at all. For a
    ``warning``, ``remedy`` and ``evidence`` words are looked for in that warning (its summary
    and evidence). ``repro_as`` names the scenario this case is in ``dlwatch probe repro``'s
    catalogue (``probes.repro.SCENARIOS``): the failure kind it stands for there, its ``kind``
    or one of ``also``; one case at most per kind."""

    name: str
    kind: Optional[str]
    mode: Optional[str] = None
    certainty: Optional[str] = None
    location: Optional[str] = None
    settings: Tuple[Tuple[str, object], ...] = ()
    timeout_s: float = 120.0
    warnings: Tuple[str, ...] = ()
    target: Optional[str] = None
    args: Tuple[str, ...] = ()
    stall_timeout_s: float = 5.0
    remedy: Tuple[str, ...] = ()
    needs_mount: bool = False
    evidence: Tuple[str, ...] = ()
    attach: bool = False
    memory_limit: Optional[int] = None
    shm_size: Optional[str] = None
    also: Tuple[str, ...] = ()
    repro_as: Optional[str] = None

    def __post_init__(self) -> None:
        if self.repro_as is not None and self.repro_as != self.kind and self.repro_as not in self.also:
            raise ValueError(f"case {self.name}: repro_as {self.repro_as!r} is neither its kind nor among also")

    @property
    def module(self) -> str:
        """The target's module (``python -m`` name): ``probes.cases.<target or name>``."""
        return module_name(f"cases.{self.target or self.name}")


CASES: Tuple[Case, ...] = (
    Case(
        "openmp_pool_after_fork",
        "fork_inherited_lock",
        "hang",
        "proven",
        "torch.exp(x).sum()",
        evidence=("native thread(s) that threading does not list",),
    ),
    Case("thread_pool_before_fork", "fork_inherited_lock", "hang", "proven", "future.result()"),
    Case(
        "live_display_lock_at_fork",
        "fork_inherited_lock",
        "hang",
        "proven",
        'self.display.update(f"sample {i}")',
        evidence=("held a lock named self._lock: it was at livedisplay.py:19 in Live._refresh",),
    ),
    Case(
        "lock_held_across_iter",
        "fork_inherited_lock",
        "hang",
        "proven",
        "with self._lock:",
        evidence=("already held when the worker began",),
        remedy=("before the iterator is created",),
    ),
    Case("lock_order_in_worker", "worker_deadlock", "hang", "proven", repro_as="worker_deadlock"),
    # Issue #34 section 2: cycles across processes through file locks, proven from /proc/locks.
    Case(
        "flock_cycle_two_workers",
        "worker_deadlock",
        "hang",
        "proven",
        "fcntl.flock(f2, fcntl.LOCK_EX)",
        remedy=("one global order",),
        evidence=("holds /tmp/shards-", "(/proc/locks"),
    ),
    Case("healthy_flock_same_order", None, target="flock_cycle_two_workers", args=("same",)),
    Case(
        "fcntl_main_holds_worker_lock",
        "worker_deadlock",
        "hang",
        "proven",
        "fcntl.lockf(f, fcntl.LOCK_EX)",
        remedy=("Main holds the file lock", "before iterating"),
        evidence=("main (pid ",),
    ),
    Case(
        "mp_lock_cycle_two_workers",
        "worker_deadlock",
        "hang",
        "suspected",
        "holds it",
        remedy=("one global order",),
        evidence=("inside `with self.", "the kernel shows no holder"),
    ),
    Case("healthy_mp_lock_same_order", None, target="mp_lock_cycle_two_workers", args=("same",)),
    Case(
        "forkserver_flusher_lock_after_batches",
        "fork_inherited_lock",
        "hang",
        "proven",
        "with METRICS_LOCK:",
        remedy=("set_forkserver_preload", "!socket.settimeout"),
        evidence=("metrics-flusher (tid", "QueueFeederThread"),
    ),
    Case(
        "healthy_main_lock_released",
        None,
        "unharmed",
        target="fcntl_main_holds_worker_lock",
        args=("12",),
        timeout_s=90.0,
    ),
    # Issue #34 section 3: a worker's own lock taken twice, main with a helper thread at the fork.
    Case(
        "lock_taken_twice_in_worker",
        "worker_deadlock",
        "hang",
        "proven",
        "self.lock.acquire()",
        remedy=("threading.RLock", "acquire(timeout=", "!forkserver"),
        evidence=("samples since it started",),
    ),
    Case(
        "lock_taken_twice_in_worker_attach",
        "worker_deadlock",
        "hang",
        "proven",
        "self.lock.acquire()",
        target="lock_taken_twice_in_worker",
        args=("300",),
        remedy=("threading.RLock", "!forkserver"),
        evidence=("bytes since it started",),
        attach=True,
    ),
    Case(
        "mp_queue_nothing_feeds",
        "worker_stuck",
        "hang",
        "suspected",
        "self.jobs.get()",
        remedy=("Nothing puts to the multiprocessing queue", "queue.get(timeout="),
    ),
    Case(
        "mp_event_never_set",
        "worker_stuck",
        "hang",
        "suspected",
        "self.ready.wait()",
        remedy=("Nothing sets the multiprocessing.Event", ".set()"),
    ),
    Case(
        "manager_lock_never_released",
        "worker_stuck",
        "hang",
        "proven",
        "with self.lock:  # the manager's lock",
        remedy=(
            "multiprocessing.Manager lock",
            "main likely took the lock",
            "acquire(timeout=",
            "!no process feeds",
            "!Nothing puts",
        ),
        evidence=(
            "to the manager process, pid",
            "waits for a threading.Lock, at multiprocessing/managers.py",
            "no process of the job can move",
            "main is the likely holder",
        ),
    ),
    Case("healthy_manager_lock_main_holds_briefly", None, "unharmed", timeout_s=150.0),
    # Issue #34 section 2: a lock-order cycle across processes through a Manager, proven.
    Case(
        "manager_lock_order_two_workers",
        "worker_stuck",
        "hang",
        "proven",
        evidence=("no process of the job can move", "a lock-order cycle"),
        remedy=(
            "worker 0 (pid",
            "holds self.a (taken at line",
            "and waits for self.b; worker 1 (pid",
            "holds self.b",
            "one global order",
            "!no process feeds",
        ),
    ),
    Case("healthy_manager_lock_same_order", None, target="manager_lock_order_two_workers", args=("same",)),
    Case(
        "manager_lock_holder_killed",
        "worker_stuck",
        "hang",
        "proven",
        "with self.lock:  # the manager's lock: its holder was killed",
        evidence=("was killed by signal 9 (SIGKILL)", "no live process of the job can ever release it"),
        remedy=("multiprocessing.Manager lock", "!no process feeds"),
    ),
    Case(
        "main_join_prefetch_thread",
        "main_thread_deadlock",
        "hang",
        "proven",
        "self.thread.join()",
        repro_as="main_thread_deadlock",
    ),
    Case(
        "signal_handler_takes_loop_lock",
        "main_thread_deadlock",
        "hang",
        "proven",
        "with STATE_LOCK:  # the interrupted loop holds it",
        remedy=("only set a flag", "!join"),
        evidence=("as a signal handler",),
    ),
    Case("exit_hang_queue_feeder", "main_thread_deadlock", "hang", "proven"),
    Case(
        "sqlite_busy_retry",
        "worker_stuck",
        "hang",
        "suspected",
        "INSERT OR REPLACE INTO cache",
        remedy=("cache.db is locked (POSIX WRITE", "(main): release it", "!socket"),
    ),
    Case(
        "node_barrier_stale_world",
        "worker_stuck",
        "hang",
        "suspected",
        "time.sleep(0.007)",
        remedy=("keeps trying", "!socket"),
    ),
    Case(
        "sqlite_busy_retry_attach",
        "worker_stuck",
        "hang",
        "suspected",
        "INSERT OR REPLACE INTO cache",
        target="sqlite_busy_retry",
        remedy=("cache.db is locked (POSIX WRITE", "(main): release it", "!socket"),
        attach=True,
    ),
    Case(
        "node_barrier_stale_world_attach",
        "worker_stuck",
        "hang",
        "suspected",
        "time.sleep(0.007)",
        target="node_barrier_stale_world",
        remedy=("keeps trying", "!socket"),
        attach=True,
    ),
    Case(
        "pipe_command_store_silent",
        "worker_blocked_io",
        "hang",
        "suspected",
        "proc.stdout.read()",
        remedy=("waits on a TCP connection to 127.0.0.1:", "!Nothing writes"),
    ),
    Case(
        "child_waits_on_stdin",
        "worker_blocked_io",
        "hang",
        "proven",
        "child.stdout.read()",
        remedy=("stdin=subprocess.DEVNULL", "(its standard input)", "!socket"),
    ),
    Case(
        "fuse_daemon_silent",
        "worker_blocked_io",
        "hang",
        "suspected",
        None,  # the open or the read, whichever request the daemon left unanswered
        remedy=("/sys/fs/fuse/connections/", "umount -l", "!FIFO", "!socket"),
        needs_mount=True,
    ),
    Case("fd_exhausted_in_workers", "fd_exhausted", "hang"),
    Case(
        "fd_exhausted_by_open_files",
        "fd_exhausted",
        "crash",
        location="open(self.paths[i]",
        remedy=("Close the files the Dataset opens", "!set_sharing_strategy"),
        evidence=("regular files: ",),
    ),
    Case("stdout_reader_gone", "worker_blocked_io", "hang", "suspected"),
    Case("summary_writer_and_deadlock", "fork_inherited_lock", "hang", "proven", "with LOCK:"),
    Case(
        "forkserver_preload_lock",
        "fork_inherited_lock",
        "hang",
        "proven",
        "with METRICS_LOCK:",
        remedy=("set_forkserver_preload",),
        evidence=("the forkserver (pid", "metrics-flusher (tid"),
    ),
    Case("loader_timeout_slow_batch", "loader_timeout", "crash", repro_as="loader_timeout"),
    Case(
        "dataset_exception_len_lies",
        "dataset_error",
        "crash",
        location="name = self.frames[i]",
        remedy=("dataset[784] (the sample that raised)",),
        evidence=("the sample that raised: index 784",),
        repro_as="dataset_error",
    ),
    Case(
        "collate_object_field",
        "collate_error",
        "crash",
        location="DataLoader(Rows()",
        remedy=("collate_fn([dataset[i] for i in range(0, 4)])", "!num_workers=0 (or dataset[i]"),
        evidence=("PyTorch's call of collate_fn",),
        repro_as="collate_error",
    ),
    Case(
        "worker_init_fn_raises",
        "worker_init_error",
        "crash",
        location='os.environ["SHARD_ID"]',
        remedy=("worker_init_fn(0)", "!num_workers=0 (or dataset[i]"),
        repro_as="worker_init_error",
    ),
    Case(
        "worker_segfault_mid_epoch",
        "worker_killed",
        "crash",
        location="ctypes.string_at(0)",
        evidence=("the segmentation fault hit in __getitem__",),
    ),
    Case("worker_execs_program", "worker_exec", "hang", "suspected", "os.execv(", repro_as="worker_exec"),
    Case("worker_init_execs_program", "worker_exec", "hang", "suspected", "os.execv("),
    Case(
        "mp_lock_left_held",
        "worker_stuck",
        "hang",
        "suspected",
        "self.lock.acquire()",
        remedy=("a lock shared between processes", "release it on every path", "not re-entrant"),
    ),
    Case(
        "ready_marker_producer_died",
        "worker_stuck",
        "hang",
        "suspected",
        "time.sleep(0.1)",
        remedy=("has ended", "can never end", "exited with code 1"),
        evidence=("has ended: it exited with code 1", "RuntimeError: could not prepare the shards"),
    ),
    # Issue #34 section 2, waits on the dead: a soft lock file whose holder, a process of the job,
    # was killed (its pid in the file); a spin on get_nowait() for a decoder that was killed.
    Case(
        "lock_file_holder_killed",
        "worker_stuck",
        "hang",
        "suspected",
        "time.sleep(POLL_S)",
        remedy=("delete the file", "filelock.FileLock", "acquire(timeout="),
        evidence=("-shards.lock names pid ", "was killed by signal 9 (SIGKILL)", "takes a soft lock"),
    ),
    Case("healthy_lock_file_stale_broken", None, target="lock_file_holder_killed", args=("breaks_stale",)),
    Case(
        "decoder_killed_get_nowait",
        "worker_stuck",
        "hang",
        "suspected",
        "self.frames.get_nowait()",  # the line to change, wherever in the spin the stack caught it
        remedy=("queue.get(timeout=", "is_alive()"),
        evidence=("gets from a queue without blocking", "was killed by signal 9 (SIGKILL)"),
    ),
    Case("healthy_decoder_spin_alive", None, target="decoder_killed_get_nowait", args=("healthy",)),
    Case("healthy_helper_stopped_while_computing", None),
    Case(
        "lock_file_holder_killed_attach",
        "worker_stuck",
        "hang",
        "suspected",
        "time.sleep(POLL_S)",
        target="lock_file_holder_killed",
        evidence=("-shards.lock names pid ", "was killed by signal 9 (SIGKILL)"),
        attach=True,
    ),
    Case(
        "decoder_killed_get_nowait_attach",
        "worker_stuck",
        "hang",
        "suspected",
        "self.frames.get_nowait()",
        target="decoder_killed_get_nowait",
        evidence=("gets from a queue without blocking", "was killed by signal 9 (SIGKILL)"),
        attach=True,
    ),
    Case(
        "worker_cache_oom_in_cgroup",
        "worker_killed",
        "crash",
        location="self.cache[i] = decode(i)",
        memory_limit=640 << 20,
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        warnings=("worker_memory_growth",),
        evidence=("OOM kill(s) while it was watched", "limit of 640.0 MiB", "at the worker_memory_growth warning"),
    ),
    Case(
        "main_keeps_batches_shm",
        "shm_exhausted",
        "crash",
        shm_size="64m",
        remedy=("Main keeps the batches it received", "!--shm-size=8g"),
        evidence=("never fell back",),
    ),
    Case(
        "shm_full_labels_lost",
        "shm_exhausted",
        "hang",
        shm_size="16m",
        remedy=("--shm-size",),
        also=("batch_lost",),
    ),
    Case(
        "main_keeps_graphs_oom",
        "main_killed",
        "crash",
        memory_limit=1 << 30,
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        warnings=("main_memory_growth",),
        evidence=("OOM kill(s)", "main grew steadily"),
        timeout_s=180.0,
        repro_as="main_killed",
    ),
    Case(
        "memmap_truncated_under_workers",
        "worker_killed",
        "crash",
        remedy=("os.replace()", "!--shm-size"),
        evidence=("features.npy mapped up to byte", "shrank under the mapping"),
    ),
    # Issue #35: a worker's end by its mechanism; a full disk is not a full /dev/shm.
    Case(
        "worker_sys_exit_corrupt_sample",
        "worker_exited",
        "crash",
        remedy=("corrupt sample 1337", "!dmesg", "!OOM"),
        evidence=("exited with code 1, no signal",),
        repro_as="worker_exited",
    ),
    Case("worker_os_exit_zero", "worker_exited", "crash", remedy=("os._exit(0)", "!dmesg")),
    Case("spawn_dataset_under_main_guard", "worker_start_failed", "crash", remedy=("top level", "Frames")),
    Case(
        "worker_thread_limit_pids",
        "worker_exited",
        "crash",
        remedy=("can't start new thread", "pids.max of cgroup /dlwatch-case-pids-", "!OOM"),
        needs_mount=True,
    ),
    Case(
        "worker_cache_disk_full",
        "disk_full",
        "crash",
        location="f.write(blob)",
        remedy=("!--shm-size",),
        needs_mount=True,
        repro_as="disk_full",
    ),
    Case("main_log_disk_full", "disk_full", "crash", location="log.write(", needs_mount=True),
    Case("nested_pool_in_worker", "worker_start_failed", "crash"),
    # Issue #35 section 3: the mechanism, not the catalogue's sentence.
    Case(
        "worker_huge_sample_oom_in_cgroup",
        "worker_killed",
        "crash",
        memory_limit=1 << 30,
        settings=(("interval_s", 0.5),),
        remedy=("One sample asked for", "samples 300–303", "!per-worker cache", "!copy-on-read"),
        evidence=("a step, not a slope",),
    ),
    Case(
        "persistent_loaders_kept_alive",
        "worker_killed",
        "crash",
        memory_limit=2 << 30,
        timeout_s=180.0,
        remedy=(
            "DataLoader iterators with persistent workers are alive at once",
            "`del` the old ones",
            "!copy-on-read",
        ),
    ),
    Case(
        "dataset_extended_after_persistent_workers",
        "dataset_error",
        "crash",
        location="return torch.tensor([self.items[i]])",
        remedy=("stale copy of the Dataset", "Recreate the DataLoader"),
        evidence=("persistent_workers=True",),
    ),
    Case("spawn_without_main_guard", "worker_start_failed", "crash"),
    Case("shm_removed", "shm_removed", "crash", repro_as="shm_removed"),
    Case(
        "shm_leaked_after_kill",
        "main_killed",
        "crash",
        also=("shm_leaked",),
        remedy=("scheduler",),
        repro_as="shm_leaked",  # main_killed first, shm_leaked among the findings
    ),
    Case(
        "map_count_exhausted",
        "map_count_exhausted",
        "crash",
        settings=(("memory_read_base_interval_s", 2.0), ("warning_interval_s", 2.0)),
        timeout_s=170.0,
        warnings=("map_count_pressure",),
        repro_as="map_count_exhausted",
    ),
    Case(
        "copy_on_read_index",
        "worker_memory_growth",
        "warning",
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
    ),
    Case("taskset_one_cpu", "cpu_affinity_narrowed", "warning", settings=(("warning_interval_s", 2.0),)),
    Case("uneven_shards_mp_spawn", "uneven_batches", "hang", "suspected", repro_as="uneven_batches"),
    Case("iterable_not_sharded", "iterable_replicated", "warning", repro_as="iterable_replicated"),
    Case("rng_copied_into_workers", "rng_duplicated", "warning", repro_as="rng_duplicated"),
    Case("healthy_iterable_sharded", None),
    # Issue #35 section 4: true-looking warnings on healthy jobs (sharded streams that begin alike,
    # a one-time load in main before the loader, an allocator plateau in workers).
    Case("healthy_iterable_shared_first", None),
    Case("healthy_iterable_shared_first_header", None, target="healthy_iterable_shared_first", args=("header",)),
    Case(
        "healthy_main_table_load",
        None,
        args=("320",),
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        timeout_s=150.0,
    ),
    Case(
        "healthy_worker_allocator_plateau",
        None,
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        timeout_s=150.0,
    ),
    Case("healthy_rng_per_worker", None),
    Case("healthy_decoder_subprocess", None),
    Case("healthy_slow_samples", None),
    Case("healthy_socket_timeout", None),
    Case("healthy_poll_until_ready", None, stall_timeout_s=30.0),
    Case("healthy_compute_slow_batches", None),
    Case("healthy_many_open_files", None),
    Case(
        "healthy_bounded_worker_cache",
        None,
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        timeout_s=180.0,
    ),
    Case(
        "healthy_mmap_reads",
        None,
        settings=(("memory_read_base_interval_s", 1.0), ("warning_interval_s", 2.0)),
        timeout_s=180.0,
    ),
    Case("healthy_poll_until_ready_attach", None, target="healthy_poll_until_ready", stall_timeout_s=30.0, attach=True),
    Case("healthy_compute_slow_batches_attach", None, target="healthy_compute_slow_batches", attach=True),
    Case("healthy_slow_samples_attach", None, target="healthy_slow_samples", attach=True),
    Case("healthy_socket_timeout_attach", None, target="healthy_socket_timeout", attach=True),
    Case("healthy_flock_download", None, timeout_s=150.0),
    Case("healthy_forkserver_preload", None),
    # A first user's trial: forkserver workers that start slowly (a CPU-heavy import, each epoch)
    # on a loaded machine were reported "cause: unknown, nothing else moved" (workers starting).
    Case("healthy_forkserver_slow_worker_start", None, timeout_s=240.0),
    Case("healthy_terminal_prompt", None),
    Case("healthy_main_joins_threads", None),
    Case("healthy_slow_worker_shutdown", None),
    Case(
        "healthy_slow_worker_shutdown_6_workers",
        None,
        target="healthy_slow_worker_shutdown",
        args=("6",),
        stall_timeout_s=2.0,
    ),
    Case("healthy_signal_wakes_main", None, "unharmed", stall_timeout_s=2.0),
    # Issue #34: healthy jobs with no batch for longer than busy_stall_timeout_s (10 s here, 25 s
    # without one) that on_hang=terminate must never end: a suspected report is allowed, an ending
    # is not, nor with the opt-in terminate_unproven_after_s while the holder or the worker moves.
    Case(
        "healthy_lock_holder_writes",
        None,
        "unharmed",
        args=("25",),
        settings=(("busy_stall_timeout_s", 10.0),),
        timeout_s=150.0,
    ),
    Case(
        "healthy_lock_holder_writes_opt_in",
        None,
        "unharmed",
        target="healthy_lock_holder_writes",
        args=("25",),
        settings=(("busy_stall_timeout_s", 10.0), ("terminate_unproven_after_s", 10.0)),
        timeout_s=150.0,
    ),
    Case("healthy_manager_lock_holder_alive", None, "unharmed", timeout_s=150.0),
    Case(
        "healthy_long_first_batch",
        None,
        "unharmed",
        args=("25",),
        settings=(("busy_stall_timeout_s", 10.0),),
        timeout_s=150.0,
    ),
    Case(
        "healthy_long_first_batch_opt_in",
        None,
        "unharmed",
        target="healthy_long_first_batch",
        args=("25",),
        settings=(("busy_stall_timeout_s", 10.0), ("terminate_unproven_after_s", 10.0)),
        timeout_s=150.0,
    ),
    # Issue #34 section 4: waits that end by themselves. A retry with back-off that succeeds
    # after 20 s (45 s by default): a suspected report may come, and must resolve; under
    # attach (exit 0 required) the job's success stays one.
    Case("healthy_retry_backoff", None, "unharmed", args=("20",), timeout_s=90.0),
    Case(
        "healthy_retry_backoff_attach",
        None,
        "unharmed",
        target="healthy_retry_backoff",
        args=("20",),
        attach=True,
        timeout_s=90.0,
    ),
    # A worker computing 8 s per sample at nice 19: tests/real/test_loaded.py runs it beside
    # busy processes, where its CPU share is tiny but it is runnable all along.
    Case("healthy_compute_low_priority", None, args=("8", "2"), timeout_s=90.0),
    # Issue #38: is the job input-bound? Each verdict, warned once batches flowed for 20 s; and a
    # job whose step is the slow part, never warned ("quiet": not even input_bound).
    Case(
        "input_bound_cpu_few_workers",
        "input_bound",
        "warning",
        settings=(("warning_interval_s", 2.0),),
        evidence=("CPU-bound",),
        remedy=("num_workers=",),
        repro_as="input_bound",
    ),
    Case(
        "input_bound_io_workers",
        "input_bound",
        "warning",
        settings=(("warning_interval_s", 2.0),),
        evidence=("I/O-bound",),
        remedy=("num_workers=4", "prefetch_factor"),
    ),
    Case(
        "input_bound_oversubscribed",
        "input_bound",
        "warning",
        settings=(("warning_interval_s", 2.0),),
        evidence=("CPU oversubscribed",),
        remedy=("torch.set_num_threads(1)",),
    ),
    # NumPy's OpenBLAS threads in each worker (torch.set_num_threads does not reach them): the
    # warning's fix sets OMP_NUM_THREADS=1, which tests/real/test_verify_throughput_cases.py proves.
    Case(
        "input_bound_oversubscribed_blas",
        "input_bound",
        "warning",
        settings=(("warning_interval_s", 2.0),),
        evidence=("CPU oversubscribed",),
        remedy=("OMP_NUM_THREADS=1",),
    ),
    Case(
        "input_bound_epoch_starts",
        "input_bound",
        "warning",
        settings=(("warning_interval_s", 2.0),),
        evidence=("epoch starts dominate",),
        remedy=("persistent_workers=True",),
    ),
    # A new-user trial (loaded 2-CPU VM): one CPU-bound worker started again each epoch was called
    # "blocked in the Dataset 49 %" and "idle ... in transit"; with persistent workers, CPU-bound.
    Case(
        "input_bound_cpu_epochs",
        "input_bound",
        "warning",
        settings=(("warning_interval_s", 2.0),),
        args=("60", "40", "0"),
        evidence=("CPU-bound",),
        remedy=("num_workers=", "!Return tensors"),
    ),
    Case(
        "input_bound_cpu_epochs_persistent",
        "input_bound",
        "warning",
        target="input_bound_cpu_epochs",
        settings=(("warning_interval_s", 2.0),),
        args=("60", "40", "1"),
        evidence=("CPU-bound",),
        remedy=("num_workers=", "!Return tensors"),
    ),
    Case("healthy_step_bound", None, "quiet", settings=(("warning_interval_s", 2.0),), timeout_s=90.0),
)
BY_NAME = {c.name: c for c in CASES}
REPRO_AS = {c.repro_as: c.name for c in CASES if c.repro_as is not None}
"""The catalogue scenarios of ``dlwatch probe repro`` that a case runs: scenario name (the
failure kind) -> case name."""
if len(REPRO_AS) != sum(c.repro_as is not None for c in CASES):
    raise ValueError("two cases stand for the same kind in probe repro's catalogue")


# For each kind whose rule declares a mechanical fix (``remedy_apply`` in the report), the
# scenarios (cases, or catalogue scenarios of ``probes.repro``) on which ``dlwatch verify`` must
# find that the fix holds: tests/real/test_verify.py runs each one.
FIX_PROOFS: Dict[str, Tuple[str, ...]] = {
    "fork_inherited_lock": ("thread_pool_before_fork", "openmp_pool_after_fork"),
    "fd_exhausted": ("fd_exhausted_in_workers",),
    "loader_timeout": ("loader_timeout_slow_batch",),
    "cuda_in_forked_worker": ("cuda_in_forked_worker",),  # a catalogue scenario: needs CUDA
}
