"""``dlwatch probe overhead``: what the sidecar costs, measured on a real job with ``N``
DataLoader workers (1 + N processes), in paired runs with and without ``dlwatch attach``.

Each pair runs the same healthy job twice, once watched and once not, in alternating order. The
job (a built-in loop: 32 samples a batch, about 0.2 ms of torch work per sample in the workers,
a small training step in main with one intra-op thread; with ``--matmul``, a 64 x 64 matmul per
sample and main with torch's default intra-op threads, as users' jobs run) warms up, then waits
for SIGUSR1 and counts its batches for ``--seconds``. In the watched run, ``dlwatch attach --pid
JOB --interval I`` starts during the warm-up (``--warmup`` seconds, and at least three ticks),
so its start-up is left out: its imports, and the first two USS reads of each process
(``memory_read_base_interval_s`` apart), after which a process whose memory holds still is read six
times less often, then less and less. The start-up is measured apart: the sidecar's CPU when its
first tick is logged (imports, the target's checks, the first sample).
Measured, over the window:

* the sidecar's CPU as a fraction of one core (the run time of the ``dlwatch`` process's
  threads, ``/proc/PID/task/TID/schedstat``, over the window's wall-clock time), and per
  watched process;
* the tick's wall-clock time, p50 and p99, in ms (``DLWATCH_TICK_LOG``: ``dlwatch`` appends
  each tick's timing to that file, see ``watchdog/watch/tick_log.py``), and its CPU time;
* the share of lean ticks (their sample a stat per process, while the inside view shows
  batches delivered: NOTE [ Lean ticks ] in ``watchdog/collect/read_plan.py``);
* the sidecar's read system calls per tick (``syscr`` in ``/proc/PID/io``): its ``/proc``
  reads, the part of its cost that a busy machine does not inflate;
* the sidecar's peak RSS (``VmHWM`` in ``/proc/PID/status``), in bytes;
* the job's throughput watched / unwatched (batches per second), the median over pairs and its
  spread (least and greatest ratio).

With ``--hang`` (the default), one more run per ``N``: ``python -m probes.train --fault
fork-lock --num-workers N`` (every worker deadlocks) under ``dlwatch attach --stall-timeout
S``; the time from the stall's detection to its report is the wall-clock time of the tick that
wrote the report (it begins with the sample that found the stall due and ends after the report
is written: the two reads of every thread's wait 0.25 s apart, the py-spy dumps, the
diagnosis). ``--full-timeline`` adds a run that fills the timeline (``timeline_samples``
ticks, at ``--full-timeline-interval``) with the largest ``N`` and reports the sidecar's RSS
then: what it holds at most.

With ``--node``, the job is a node like users run (``NODE_JOB``, issue #36): ``--ranks`` ranks
under ``torchrun``, each sample an ``np.load`` of a real ``.npy`` file the probe wrote once to its
private folder, persistent workers, and a DDP all-reduce (gloo) each step; its window opens 60 s
after every rank's first batch and lasts 90 s unless ``--warmup`` and ``--seconds`` say
otherwise. ``--mode run`` has ``dlwatch run`` start the job (the sidecar's CPU is still its own
process's, not its children's), ``--mode both`` measures ``run`` and ``attach`` in alternating
runs; ``--watched-only`` skips the unwatched runs (no throughput ratio).

Exit codes: 0 done; 1 a run failed (what was measured before it is still printed and written);
2 a bad flag.
"""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

from tabulate import tabulate

from watchdog.collect import procfs
from watchdog.exits import Exit

from . import module_name
from .cli import (
    MAX_SECONDS,
    MAX_WORKERS,
    Parser,
    float_range,
    int_list,
    int_range,
    output_file,
    positive_seconds,
    say_estimate,
)
from .env import child_env, python
from .outfile import write_text
from .repro import kill_session

JOB = textwrap.dedent(
    """
    import json, os, signal, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Work(Dataset):
        def __len__(self):
            return 10**9
        def __getitem__(self, i):
            if matmul:  # a 64 x 64 matmul per sample
                a = torch.randn(64, 64)
                x = (a @ a).flatten()[:256]
            else:
                x = torch.full((256,), float(i % 7))
                for _ in range(8):  # about 0.2 ms of CPU per sample
                    x = torch.sin(x) * 0.5 + 0.25
            if io_s:
                time.sleep(io_s)  # a read from storage
            return x

    workers, warmup_s, seconds, limit_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    io_s = float(sys.argv[5]) / 1000 if len(sys.argv) > 5 else 0.0
    matmul = len(sys.argv) > 6 and sys.argv[6] == "matmul"
    if not matmul:  # with --matmul, main keeps torch's intra-op threads, as users' jobs do
        torch.set_num_threads(1)
    go = []
    signal.signal(signal.SIGUSR1, lambda *_: go.append(time.perf_counter()))
    model = torch.nn.Linear(256, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(DataLoader(Work(), batch_size=32, num_workers=workers))

    def step(batch):
        opt.zero_grad()
        model(batch).sum().backward()
        opt.step()

    step(next(it))
    sys.stdout.write("\\n" + json.dumps({"pid": os.getpid()}) + "\\n")  # one write: ranks share the pipe
    sys.stdout.flush()
    start = time.perf_counter()
    while not go or time.perf_counter() - start < warmup_s:  # warm; then wait for the window
        step(next(it))
        if time.perf_counter() - start > limit_s:
            sys.exit(f"no SIGUSR1 within {limit_s:g} s")
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        step(next(it))
        n += 1
    sys.stdout.write("\\n" + json.dumps({"batches": n, "seconds": time.perf_counter() - t0}) + "\\n")
    sys.stdout.flush()
    os._exit(0)  # the workers die with main (their parent-death check); no slow shutdown to time
    """
)

# A job whose workers are recreated about every second (persistent_workers=False, short epochs),
# for --churn: what the sidecar costs after hours of worker churn must be what it costs at first.
CHURN_JOB = textwrap.dedent(
    """
    import json, os, sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Small(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            time.sleep(0.005)
            return torch.ones(8)

    workers, seconds = int(sys.argv[1]), float(sys.argv[2])
    print(json.dumps({"pid": os.getpid()}), flush=True)
    end, epochs = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for _ in DataLoader(Small(), batch_size=8, num_workers=workers, persistent_workers=False):
            pass
        epochs += 1
    print(json.dumps({"epochs": epochs}), flush=True)
    """
)

# A node like users run (issue #36): under torchrun, each rank's Dataset reads a real .npy file per
# sample (np.load, from files the probe wrote once to its private folder), its workers persist
# across epochs (persistent_workers=True, a DistributedSampler with set_epoch), and each step
# all-reduces the gradients (a DistributedDataParallel model, gloo on the CPU). The ranks agree on
# the window with one more all-reduce a step (every rank has had SIGUSR1; rank 0's window is over),
# so every rank makes the same number of steps and none waits forever for another.
NODE_JOB = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import numpy as np, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset, DistributedSampler

    class Files(Dataset):
        def __init__(self, paths, length):
            self.paths, self.length = paths, length
        def __len__(self):
            return self.length
        def __getitem__(self, i):
            a = np.load(self.paths[i % len(self.paths)])  # a read from storage, per sample
            x = torch.from_numpy(a[:256].copy())
            for _ in range(4):  # a little decoding work
                x = torch.sin(x) * 0.5 + 0.25
            return x

    workers, warmup_s, seconds, limit_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    data = sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    paths = sorted(os.path.join(data, n) for n in os.listdir(data) if n.endswith(".npy"))
    dataset = Files(paths, 32 * 16 * world)  # 16 batches a rank per epoch
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=workers, persistent_workers=workers > 0)
    model = DistributedDataParallel(torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    go = []
    signal.signal(signal.SIGUSR1, lambda *_: go.append(time.perf_counter()))

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    it = batches()
    state = torch.zeros(2)

    def step(stop=False):
        opt.zero_grad()
        model(next(it)).sum().backward()  # DDP all-reduces the gradients
        opt.step()
        state[0], state[1] = float(bool(go)), float(stop)
        dist.all_reduce(state)
        return state[0].item() == world, state[1].item() > 0

    step()
    sys.stdout.write("\\n" + json.dumps({"pid": os.getpid()}) + "\\n")  # one write: ranks share the pipe
    sys.stdout.flush()
    start = time.perf_counter()
    while True:  # warm; then wait for the window
        ready, _ = step()
        if ready and time.perf_counter() - start >= warmup_s:
            break
        if time.perf_counter() - start > limit_s:
            sys.exit(f"no SIGUSR1 within {limit_s:g} s")
    t0, n = time.perf_counter(), 0
    while True:
        _, stop = step(rank == 0 and time.perf_counter() - t0 >= seconds)
        n += 1
        if stop:
            break
    sys.stdout.write("\\n" + json.dumps({"batches": n, "seconds": time.perf_counter() - t0}) + "\\n")
    sys.stdout.flush()
    os._exit(0)  # every rank after the same all-reduce; the workers die with their rank
    """
)

NODE_FILES = 256  # .npy files the node's ranks read, each NODE_FILE_FLOATS float32 values
NODE_FILE_FLOATS = 16384  # 64 KiB a file


def write_node_files(folder: str, count: int = NODE_FILES) -> str:
    """Write ``count`` ``.npy`` files (``NODE_FILE_FLOATS`` float32 each) to a new folder
    ``node-data`` of ``folder`` (the probe's private temporary folder) and return its path."""
    import numpy as np

    data = os.path.join(folder, "node-data")
    os.makedirs(data, mode=0o700, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(count):
        np.save(os.path.join(data, f"{k:05d}.npy"), rng.standard_normal(NODE_FILE_FLOATS, dtype=np.float32))
    return data


_SETTLE_TICKS = 3  # ticks the sidecar makes before the window opens (start-up left out)
_RUN_SLACK_S = 180.0  # seconds a run may take beyond its warm-up and window


class RunError(Exception):
    """A run failed; the message says which and why."""


def _stat_ticks(pid: int, tid: Optional[int] = None) -> Optional[int]:
    """``utime + stime`` (clock ticks) of ``pid`` (or its thread ``tid``), or ``None``."""
    st = procfs.proc_stat(pid, tid)
    return None if st is None else st.cpu_ticks


def _cpu_s(pid: int) -> Optional[float]:
    """CPU seconds ``pid`` has used, its ended threads' included: its live threads' run time
    in nanoseconds (``/proc/PID/task/TID/schedstat``, first field; ``CONFIG_SCHED_INFO``),
    precise where ``stat``'s ``utime + stime`` counts in clock ticks (10 ms), plus what the
    process's ``stat`` counts beyond its live threads' ``stat``: the threads that ended (a rank's
    watcher thread ends with its rank, at the end of the window; proc(5)). ``stat``'s alone when
    ``schedstat`` is missing. ``None`` when the process is gone."""
    clk = procfs.CLK_TCK
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    run_ns, live_ticks = 0, 0
    if os.path.exists("/proc/self/schedstat"):
        for tid in tids:
            ticks = _stat_ticks(pid, int(tid))
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    ns = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # it ended meanwhile: counted in the process's total
            if ticks is not None:
                run_ns += ns
                live_ticks += ticks
    whole = _stat_ticks(pid)  # last: at least the live threads' ticks read
    if whole is None:
        return None
    return run_ns / 1e9 + max(0, whole - live_ticks) / clk


def _read_syscalls(pid: int) -> Optional[int]:
    """Read-like system calls ``pid`` has made (``syscr`` in ``/proc/PID/io``): the sidecar's
    ``/proc`` reads, a count of its work that the machine's load does not change. ``None``
    when unreadable."""
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("syscr:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _status_bytes(pid: int, key: str) -> Optional[int]:
    """A ``kB`` field of ``/proc/PID/status`` (``VmHWM``, ``VmRSS``) in bytes, or ``None``."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def _ticks(path: str) -> List[Tuple[float, float, float, int, int, bool]]:
    """The tick log's lines: ``(start wall s, elapsed ms, CPU ms, processes, reports, lean)``."""
    out = []
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 6:
                    out.append(
                        (
                            float(parts[0]),
                            float(parts[1]),
                            float(parts[2]),
                            int(parts[3]),
                            int(parts[4]),
                            parts[5] == "lean",
                        )
                    )
    except (OSError, ValueError):
        pass
    return out


def _percentile(values: List[float], q: float) -> Optional[float]:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def _read_json_line(proc: subprocess.Popen, deadline: float, what: str) -> dict:
    """The next line of ``proc``'s stdout that holds a JSON object, by ``deadline``
    (``time.monotonic()``). Reads the pipe unbuffered (``os.read``), so a line already read
    ahead is never waited for.

    Raises:
        RunError: the process ended or the deadline passed first.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf: bytearray = getattr(proc, "line_buffer", bytearray())
    proc.line_buffer = buf  # type: ignore[attr-defined]
    pending: list = getattr(proc, "objects", [])
    proc.objects = pending  # type: ignore[attr-defined]
    decoder = json.JSONDecoder()
    while True:
        while b"\n" in buf and not pending:
            at = buf.index(b"\n")
            line = bytes(buf[:at]).decode("utf-8", "replace").strip()
            del buf[: at + 1]
            while line.startswith("{"):  # ranks' lines may run together on one pipe
                obj, end = decoder.raw_decode(line)
                pending.append(obj)
                line = line[end:].strip()
        if pending:
            return pending.pop(0)
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunError(f"timed out waiting for {what}")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            raise RunError(f"the job exited with code {proc.returncode} before {what}: {_tail(proc)}")
        buf.extend(chunk)


def _tail(proc: subprocess.Popen) -> str:
    """The last non-empty line of ``proc``'s stderr file (:func:`_start`), at most 300 characters."""
    err = getattr(proc, "err_path", None)
    if not err:
        return ""
    try:
        with open(err, encoding="utf-8", errors="replace") as f:
            lines = [x for x in f.read().splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def _start(
    cmd: List[str], folder: str, name: str, env: Optional[dict] = None, stdout=subprocess.PIPE
) -> subprocess.Popen:
    """Start ``cmd`` in a session of its own (so its whole tree can be killed), stderr to a file,
    in the probe's private folder ``folder``: never in the caller's working directory, which may
    be one another user writes (a ``torch.py`` there would run as the caller)."""
    err_path = os.path.join(folder, f"{name}.stderr")
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            cmd, stdout=stdout, stderr=err, env=env or child_env(), cwd=folder, start_new_session=True
        )
    proc.err_path = err_path  # type: ignore[attr-defined]
    return proc


def _dlwatch_run(cmd: List[str], folder: str, name: str, interval_s: float) -> Tuple[subprocess.Popen, str]:
    """``dlwatch run -- cmd`` (the job started by the sidecar, with its inside view), its
    stdout (the job's) a pipe, writing its tick log to a file of ``folder``."""
    log = os.path.join(folder, f"ticks-{name}.log")
    env = child_env()
    env["DLWATCH_TICK_LOG"] = log
    dlwatch = python("-m", "watchdog", "run", "--interval", f"{interval_s:g}", "--stall-timeout", "600")
    dlwatch += ["--report-dir", os.path.join(folder, "reports"), "--"]
    return _start(dlwatch + cmd, folder, name, env), log


def _dlwatch(
    job_pid: int, folder: str, interval_s: float, extra: List[str], config: Optional[str] = None
) -> Tuple[subprocess.Popen, str]:
    """``dlwatch attach`` to ``job_pid``, writing its tick log to a file of ``folder``."""
    log = os.path.join(folder, f"ticks-{job_pid}.log")
    env = child_env()
    env["DLWATCH_TICK_LOG"] = log
    cmd = python(
        "-m",
        "watchdog",
        "attach",
        "--pid",
        str(job_pid),
        "--interval",
        f"{interval_s:g}",
        "--report-dir",
        os.path.join(folder, "reports"),
    )
    if config:
        cmd += ["--config", config]
    return _start(cmd + extra, folder, f"dlwatch-{job_pid}", env, stdout=subprocess.DEVNULL), log


def _wait_ticks(
    log: str, count: int, watcher: subprocess.Popen, job: subprocess.Popen, deadline: float, poll_s: float = 0.1
) -> None:
    while len(_ticks(log)) < count:
        if watcher.poll() is not None:
            why = f"the job exited with code {job.poll()}: {_tail(job)}" if job.poll() is not None else _tail(watcher)
            raise RunError(f"dlwatch exited with code {watcher.returncode} before ticking {count} times; {why}")
        if time.monotonic() > deadline:
            raise RunError(f"dlwatch did not tick {count} times in time")
        time.sleep(poll_s)


def _stop(watcher: Optional[subprocess.Popen]) -> None:
    """SIGTERM to ``dlwatch`` (it stops watching, leaving the job alone), then its tree killed."""
    if watcher is None:
        return
    try:
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass
    kill_session(watcher)


class Shape(NamedTuple):
    """How the measured job runs: ``ranks`` training ranks under ``torchrun`` (1: a plain
    process), each with ``workers`` DataLoader workers; ``inside``: started with the inside
    view's hook (``dlwatch hook-env``), as ``dlwatch run`` starts a job; ``io_ms``: each sample
    also sleeps that long, a read from storage (milliseconds); ``matmul``: each sample is a
    64 x 64 matmul and main keeps torch's default intra-op threads (a job like users run: more
    threads, busier), instead of about 0.2 ms of elementwise work and one thread; ``node``: the
    node job (``NODE_JOB``: ``.npy`` reads, persistent workers, a DDP all-reduce a step, always
    under ``torchrun``); ``mode``: how the sidecar watches it, ``attach`` (``dlwatch attach`` to
    the running job) or ``run`` (``dlwatch run`` starts the job, with its inside view)."""

    workers: int
    ranks: int = 1
    inside: bool = False
    io_ms: float = 0.0
    matmul: bool = False
    node: bool = False
    mode: str = "attach"

    @property
    def label(self) -> str:
        """``1 + 8`` or ``8 x (1 + 8)``, with ``, matmul``, ``, node`` and ``, run`` (the mode
        when it is not ``attach``) for those."""
        one = f"1 + {self.workers}"
        shape = one if self.ranks == 1 and not self.node else f"{self.ranks} x ({one})"
        shape += ", matmul" if self.matmul else ""
        shape += ", node" if self.node else ""
        return shape + (f", {self.mode}" if self.mode != "attach" else "")


def _job_command(shape: Shape, warmup_s: float, seconds: float, folder: str) -> List[str]:
    """The job's command line: ``JOB`` with its arguments, under ``torchrun --standalone`` for
    several ranks (the script written to ``folder``); for a node, ``NODE_JOB`` under
    ``torchrun`` reading the files of ``folder/node-data`` (:func:`write_node_files`)."""
    if shape.node:
        script = os.path.join(folder, "overhead_node.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(NODE_JOB)
        data = os.path.join(folder, "node-data")
        if not os.path.isdir(data):
            write_node_files(folder)
        return python(
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={shape.ranks}",
            script,
            str(shape.workers),
            str(warmup_s),
            str(seconds),
            "600",
            data,
        )
    args = [
        str(shape.workers),
        str(warmup_s),
        str(seconds),
        "600",
        f"{shape.io_ms:g}",
        "matmul" if shape.matmul else "-",
    ]
    if shape.ranks == 1:
        return python("-c", JOB, *args)
    script = os.path.join(folder, "overhead_job.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(JOB)
    return python("-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={shape.ranks}", script, *args)


def _descendants(pid: int) -> int:
    """How many processes run below ``pid`` now (0 when it is gone)."""
    import psutil

    try:
        return len(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return 0


def run_job(shape: Shape, watched: bool, seconds: float, warmup_s: float, interval_s: float, folder: str) -> dict:
    """One run of the job of ``shape``, watched (by ``dlwatch attach`` to the job, to
    ``torchrun`` for several ranks; by ``dlwatch run`` starting it, in ``shape.mode`` run) or not.

    Returns batches per second (every rank's together) and, watched, the sidecar's figures over
    the window: ``cpu_s``, ``window_s``, ``cpu_fraction`` (of one core), ``tick_ms``
    (wall-clock per tick of one watcher: each rank has its own), ``tick_cpu_ms``, ``ticks``,
    ``lean_ticks`` (those whose sample was lean, NOTE [ Lean ticks ] in watchdog/collect/read_plan.py),
    ``processes`` (watched: ranks and their workers), ``peak_rss_bytes`` and
    ``first_tick_cpu_s`` (the sidecar's CPU when its first tick was logged: its start-up) and
    ``startup_cpu_s`` (its CPU before the window: start-up and the warm-up's ticks).

    Raises:
        RunError: the job or ``dlwatch`` failed, or a deadline passed.
    """
    from watchdog.collect import inside

    workers = shape.workers
    deadline = time.monotonic() + warmup_s + seconds + _RUN_SLACK_S + workers * shape.ranks
    by_run = watched and shape.mode == "run"
    hook = inside.make_folder() if shape.inside and not by_run else None
    env = inside.hook_env(child_env(), hook.path, None) if hook is not None else None
    name = f"job-{shape.ranks}x{workers}-{int(watched)}{'-run' if by_run else ''}"
    watcher: Optional[subprocess.Popen] = None
    if by_run:  # the sidecar starts the job; the job's stdout is dlwatch's
        watcher, log = _dlwatch_run(_job_command(shape, warmup_s, seconds, folder), folder, name, interval_s)
        job = watcher
    else:
        job = _start(_job_command(shape, warmup_s, seconds, folder), folder, name, env)
    try:
        pids = [_read_json_line(job, deadline, "its first batch")["pid"] for _ in range(shape.ranks)]
        pid = pids[0] if shape.ranks == 1 and not shape.node else job.pid
        t_ready = time.monotonic()
        out: dict = {
            "workers": workers,
            "ranks": shape.ranks,
            "inside": shape.inside or by_run,
            "node": shape.node,
            "mode": shape.mode if watched else None,
            "watched": watched,
        }
        if by_run:
            assert watcher is not None
            _wait_ticks(log, 1, watcher, job, deadline, poll_s=0.01)
            out["first_tick_cpu_s"] = _cpu_s(watcher.pid)
            _wait_ticks(log, _SETTLE_TICKS, watcher, job, deadline)
        elif watched:
            watcher, log = _dlwatch(pid, folder, interval_s, ["--stall-timeout", "600"])
            _wait_ticks(log, 1, watcher, job, deadline, poll_s=0.01)
            out["first_tick_cpu_s"] = _cpu_s(watcher.pid)
            _wait_ticks(log, _SETTLE_TICKS, watcher, job, deadline)
        time.sleep(max(0.0, warmup_s - (time.monotonic() - t_ready)))
        c0 = _cpu_s(watcher.pid) if watcher is not None else None
        r0 = _read_syscalls(watcher.pid) if watcher is not None else None
        w0 = time.time()
        out["startup_cpu_s"] = c0
        # dlwatch run's descendants include its own helpers: the tick log's count then.
        processes = _descendants(job.pid) if (shape.ranks > 1 or shape.node) and not by_run else None
        if by_run and (shape.ranks > 1 or shape.node):
            processes = shape.ranks * (workers + 1)
        for rank in pids:
            os.kill(rank, signal.SIGUSR1)
        results = [_read_json_line(job, deadline, "its result") for _ in pids]
        out["batches_per_s"] = sum(r["batches"] / r["seconds"] for r in results)
        if watcher is not None:
            c1, r1, w1 = _cpu_s(watcher.pid), _read_syscalls(watcher.pid), time.time()
            if c0 is None or c1 is None:
                raise RunError(f"dlwatch exited during the window (code {watcher.poll()}): {_tail(watcher)}")
            ticks = [t for t in _ticks(log) if w0 <= t[0] <= w1]
            out.update(
                cpu_s=c1 - c0,
                window_s=w1 - w0,
                cpu_fraction=(c1 - c0) / (w1 - w0),
                ticks=len(ticks),
                lean_ticks=sum(1 for t in ticks if t[5]),
                reads_per_tick=(r1 - r0) / len(ticks) if r0 is not None and r1 is not None and ticks else None,
                tick_ms=[t[1] for t in ticks],
                tick_cpu_ms=[t[2] for t in ticks],
                processes=processes or (ticks[-1][3] if ticks else None),
                peak_rss_bytes=_status_bytes(watcher.pid, "VmHWM"),
            )
        return out
    finally:
        _stop(watcher)
        kill_session(job)
        if hook is not None:
            inside.remove_folder(hook)


def run_hang(workers: int, interval_s: float, stall_timeout_s: float, folder: str) -> dict:
    """The fork-lock deadlock (``probes.train --fault fork-lock``) with ``workers`` workers
    under ``dlwatch attach --stall-timeout``: ``detect_to_report_s`` (the reporting tick's
    wall-clock time), ``stall_s`` (as the report gives it) and the report's first diagnosis.

    Raises:
        RunError: no report within the deadline, or a process failed.
    """
    deadline = time.monotonic() + stall_timeout_s + _RUN_SLACK_S + 2 * workers
    job = _start(
        python("-m", module_name("train"), "--fault", "fork-lock", "--num-workers", str(workers), "--epochs", "1"),
        folder,
        f"hang-{workers}",
        stdout=subprocess.DEVNULL,
    )
    watcher = None
    try:
        time.sleep(1.0)
        if job.poll() is not None:
            raise RunError(f"the hanging job exited with code {job.returncode}: {_tail(job)}")
        watcher, log = _dlwatch(job.pid, folder, interval_s, ["--stall-timeout", f"{stall_timeout_s:g}"])
        while True:
            done = [t for t in _ticks(log) if t[4] > 0]
            if done:
                break
            if watcher.poll() is not None:
                raise RunError(f"dlwatch exited with code {watcher.returncode} before a report: {_tail(watcher)}")
            if time.monotonic() > deadline:
                raise RunError(f"no hang report for {workers} workers in time")
            time.sleep(0.2)
        tick = done[0]
        out = {"workers": workers, "detect_to_report_s": tick[1] / 1000, "processes": tick[3]}
        reports = os.path.join(folder, "reports")
        names = sorted(n for n in os.listdir(reports) if not n.startswith(".")) if os.path.isdir(reports) else []
        if names:
            try:
                with open(os.path.join(reports, names[0], "report.json"), encoding="utf-8") as f:
                    doc = json.load(f)
                out["stall_s"] = doc.get("stall_s")
                out["kind"] = (doc.get("diagnoses") or [{}])[0].get("kind")
            except (OSError, ValueError):
                pass
        return out
    finally:
        _stop(watcher)
        kill_session(job)


def run_full_timeline(workers: int, interval_s: float, samples: int, folder: str) -> dict:
    """The job with ``workers`` workers watched until the sidecar's timeline is full
    (``samples`` ticks at ``interval_s``): the sidecar's RSS then, and its peak, in bytes.

    Raises:
        RunError: a process failed or a deadline passed.
    """
    config = os.path.join(folder, "full-timeline.yaml")
    with open(config, "w", encoding="ascii") as f:
        f.write(f"timeline_samples: {samples}\n")
    seconds = samples * interval_s * 1.5 + 30
    deadline = time.monotonic() + seconds + _RUN_SLACK_S + workers
    limit = f"{deadline - time.monotonic():.0f}"  # never waits out its SIGUSR1 before the deadline
    job = _start(python("-c", JOB, str(workers), "0", "1", limit), folder, f"timeline-{workers}")
    watcher = None
    try:
        pid = _read_json_line(job, deadline, "its first batch")["pid"]
        watcher, log = _dlwatch(pid, folder, interval_s, ["--stall-timeout", "600"], config)
        _wait_ticks(log, samples + 5, watcher, job, deadline)
        ticks = _ticks(log)
        return {
            "workers": workers,
            "timeline_samples": samples,
            "interval_s": interval_s,
            "processes": ticks[-1][3],
            "rss_bytes": _status_bytes(watcher.pid, "VmRSS"),
            "peak_rss_bytes": _status_bytes(watcher.pid, "VmHWM"),
        }
    finally:
        _stop(watcher)
        kill_session(job)


def run_churn(workers: int, seconds: float, interval_s: float, folder: str) -> dict:
    """The churn job (``CHURN_JOB``: ``workers`` workers recreated about every second) for
    ``seconds``, with the inside view (``hook-env``'s folder), watched by ``dlwatch attach``:
    the sidecar's tick CPU (p50, milliseconds) over the first and the last fifth of the run, its
    RSS at the first and the last tick (bytes), the epochs (worker generations) and the files
    left in the inside view's folder.

    Raises:
        RunError: a process failed or a deadline passed.
    """
    from watchdog.collect import inside

    hook = inside.make_folder()
    env = inside.hook_env(child_env(), hook.path, None)
    deadline = time.monotonic() + seconds + _RUN_SLACK_S
    job = _start(python("-c", CHURN_JOB, str(workers), f"{seconds:g}"), folder, "churn", env)
    watcher = None
    try:
        pid = _read_json_line(job, deadline, "its start")["pid"]
        watcher, log = _dlwatch(pid, folder, interval_s, ["--stall-timeout", "600"])
        _wait_ticks(log, _SETTLE_TICKS, watcher, job, deadline)
        rss = [_status_bytes(watcher.pid, "VmRSS")]
        epochs = _read_json_line(job, deadline, "its end")["epochs"]
        rss.append(_status_bytes(watcher.pid, "VmRSS"))
        cpu = [t[2] for t in _ticks(log)]
        fifth = max(1, len(cpu) // 5)
        return {
            "workers": workers,
            "seconds": seconds,
            "interval_s": interval_s,
            "epochs": epochs,
            "ticks": len(cpu),
            "tick_cpu_ms_first": _percentile(cpu[:fifth], 0.5),
            "tick_cpu_ms_last": _percentile(cpu[-fifth:], 0.5),
            "rss_bytes_first": rss[0],
            "rss_bytes_last": rss[1],
            "hook_files": len(os.listdir(hook.path)),
        }
    finally:
        _stop(watcher)
        kill_session(job)
        inside.remove_folder(hook)


def summarize(shape: Shape, pairs: List[Tuple[Optional[dict], dict]]) -> dict:
    """The figures for one job ``shape`` from its pairs (``(plain, watched)`` runs; ``plain``
    ``None`` with ``--watched-only``): medians over pairs, the spread (least and greatest) of the
    sidecar's CPU and of the throughput ratio, tick percentiles over every tick of every pair."""
    workers = shape.workers
    watched = [w for _p, w in pairs]
    ratios = [w["batches_per_s"] / p["batches_per_s"] for p, w in pairs if p is not None]
    plain = [p["batches_per_s"] for p, _w in pairs if p is not None]
    ticks = [ms for w in watched for ms in w["tick_ms"]]
    cpus = [w["cpu_fraction"] for w in watched]
    cpu = statistics.median(cpus)
    procs = max((w["processes"] or 0) for w in watched) or shape.ranks * (workers + 1)
    return {
        "shape": shape.label,
        "mode": shape.mode,
        "node": shape.node,
        "ranks": shape.ranks,
        "inside": shape.inside,
        "io_ms": shape.io_ms,
        "matmul": shape.matmul,
        "workers": workers,
        "processes": procs,
        "pairs": len(pairs),
        "cpu_fraction": cpu,
        "cpu_fraction_min": min(cpus),
        "cpu_fraction_max": max(cpus),
        "cpu_fraction_per_process": cpu / procs,
        "tick_p50_ms": _percentile(ticks, 0.5),
        "tick_p99_ms": _percentile(ticks, 0.99),
        "tick_cpu_p50_ms": _percentile([ms for w in watched for ms in w["tick_cpu_ms"]], 0.5),
        "lean_share": sum(w["lean_ticks"] for w in watched) / max(1, sum(w["ticks"] for w in watched)),
        "reads_per_tick": _median_or_none([w["reads_per_tick"] for w in watched]),
        "peak_rss_bytes": max((w["peak_rss_bytes"] or 0) for w in watched) or None,
        "startup_cpu_s": statistics.median(w["startup_cpu_s"] for w in watched),
        "first_tick_cpu_s": _median_or_none([w.get("first_tick_cpu_s") for w in watched]),
        "plain_batches_per_s": statistics.median(plain) if plain else None,
        "watched_batches_per_s": statistics.median(w["batches_per_s"] for w in watched),
        "throughput_ratio": statistics.median(ratios) if ratios else None,
        "throughput_ratio_min": min(ratios) if ratios else None,
        "throughput_ratio_max": max(ratios) if ratios else None,
    }


# Typo guards, in each flag's --help.
MAX_PAIRS = 100
MAX_RANKS = 64
# dlwatch's own bounds (watchdog/config.py): interval_s 0.1..60, timeline_samples 10..100000.
INTERVAL_S = (0.1, 60.0)
TIMELINE_SAMPLES = (10, 100_000)


# Seconds a run of the job takes to start and stop beside its --warmup and --seconds, and a hang
# run in all, on a 2-core VM (2026-12-05: `--pairs 1 --seconds 5 --warmup 5 --no-hang`, two
# runs of 10 s, took 40 s).
RUN_START_S, HANG_RUN_S = 10.0, 20.0


def with_defaults(args):
    """``args`` with ``--seconds`` and ``--warmup`` left out given their defaults: 20 and 20
    seconds, with ``--node`` 90 and 60 (the window of issue #36: t = 60 to 150 s)."""
    if args.seconds is None:
        args.seconds = 90.0 if args.node else 20.0
    if args.warmup is None:
        args.warmup = 60.0 if args.node else 20.0
    return args


def estimate_s(args) -> float:
    """About how many seconds ``dlwatch probe overhead`` takes with ``args`` on a 2-core machine:
    per N, ``--pairs`` pairs of two runs of ``--warmup`` + ``--seconds`` and :data:`RUN_START_S`,
    and a hang run; then ``--full-timeline`` and ``--churn``. Many workers or ranks start slower."""
    args = with_defaults(args)
    counts = [int(x) for x in args.workers.split(",")]
    total = 0.0
    runs = (1 if args.watched_only else 2) * (2 if args.mode == "both" else 1)
    for n in counts:
        start = RUN_START_S * max(1.0, n * args.ranks / 8) * (3 if args.node else 1)  # torch.distributed, gloo
        total += args.pairs * runs * (args.warmup + args.seconds + start)
        if not args.no_hang and args.ranks == 1 and not args.node:
            total += HANG_RUN_S
    if args.full_timeline:
        total += args.timeline_samples * args.full_timeline_interval + RUN_START_S
    if args.churn:
        total += args.churn + RUN_START_S
    return total


def build_parser() -> Parser:
    """The ``dlwatch probe overhead`` parser."""
    p = Parser(prog="dlwatch probe overhead", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--workers",
        type=int_list(1, MAX_WORKERS),
        default="8",
        help=f"comma list of DataLoader worker counts N (1 + N processes watched), each from 1 to {MAX_WORKERS}, "
        "e.g. 1,8,32,64",
    )
    p.add_argument(
        "--pairs",
        type=int_range(1, MAX_PAIRS),
        default=3,
        help=f"paired runs (watched and unwatched, alternating order) per N, from 1 to {MAX_PAIRS}",
    )
    p.add_argument(
        "--seconds",
        type=positive_seconds,
        default=None,
        help="seconds each run counts batches (above 0, up to a day; default 20, with --node 90)",
    )
    p.add_argument(
        "--warmup",
        type=float_range(0.0, MAX_SECONDS),
        default=None,
        help=(
            "seconds each run warms up before its window, counted from every rank's first batch, at least until "
            "dlwatch ticked 3 times; 20 s covers its first two USS reads of each process (0 to a day; default 20, "
            "with --node 60: the window of issue #36, t = 60 to 150 s)"
        ),
    )
    p.add_argument(
        "--interval",
        type=float_range(*INTERVAL_S),
        default=1.0,
        help="dlwatch's sampling period in seconds (interval_s), from %g to %g" % INTERVAL_S,
    )
    p.add_argument(
        "--ranks",
        type=int_range(1, MAX_RANKS),
        default=1,
        help=f"training ranks of the job, from 1 to {MAX_RANKS}: above 1 the job runs under torchrun --standalone "
        "--nproc-per-node RANKS, each rank with N workers, and dlwatch attaches to torchrun (a node: 8 ranks x "
        "(1 + 8) is --ranks 8 --workers 8)",
    )
    p.add_argument(
        "--inside",
        action="store_true",
        help="start the job with the inside view's hook (dlwatch hook-env), as dlwatch run does: the sidecar then "
        "counts batches and reads less while they flow",
    )
    p.add_argument(
        "--node",
        action="store_true",
        help="the node job: under torchrun (--ranks ranks, 1 or more), each sample an np.load of a real .npy file "
        "(written once to the probe's private folder), persistent_workers=True, and a DDP all-reduce (gloo) each "
        "step; no hang run. A node of issue #36: --node --ranks 8 --workers 8",
    )
    p.add_argument(
        "--mode",
        choices=("attach", "run", "both"),
        default="attach",
        help="how the sidecar watches the job: attach (dlwatch attach to the running job), run (dlwatch run "
        "starts it, with its inside view), or both (each measured in its own pairs)",
    )
    p.add_argument(
        "--watched-only",
        action="store_true",
        help="skip the unwatched runs: the sidecar's figures only, no throughput ratio (a loaded machine's "
        "throughput says little)",
    )
    p.add_argument(
        "--io-ms",
        type=float_range(0.0, 1000.0),
        default=0.0,
        help="each sample also sleeps this many milliseconds, a read from storage (0 to 1000; default 0: the "
        "workers only compute)",
    )
    p.add_argument(
        "--matmul",
        action="store_true",
        help="a job like users run: each sample is a 64 x 64 matmul, and main keeps torch's intra-op threads "
        "(without it: about 0.2 ms of elementwise work per sample, main with one thread)",
    )
    p.add_argument(
        "--stall-timeout",
        type=positive_seconds,
        default=3.0,
        help="stall_timeout_s of the hang runs, in seconds (above 0, up to a day)",
    )
    p.add_argument(
        "--no-hang", action="store_true", help="skip the hang runs (the time from a stall's detection to its report)"
    )
    p.add_argument(
        "--full-timeline",
        action="store_true",
        help="also fill the timeline with the largest N and report the sidecar's RSS then",
    )
    p.add_argument(
        "--timeline-samples",
        type=int_range(*TIMELINE_SAMPLES),
        default=600,
        help="timeline_samples for --full-timeline, from %d to %d" % TIMELINE_SAMPLES,
    )
    p.add_argument(
        "--full-timeline-interval",
        type=float_range(*INTERVAL_S),
        default=0.2,
        help="dlwatch's interval in seconds for --full-timeline, from %g to %g" % INTERVAL_S,
    )
    p.add_argument(
        "--churn",
        type=float_range(0.0, MAX_SECONDS),
        default=0.0,
        metavar="SECONDS",
        help="also run a job whose workers are recreated about every second (persistent_workers=False) for SECONDS "
        "with the inside view, and compare the sidecar's tick CPU and RSS at its start and end (0: off)",
    )
    p.add_argument(
        "--json", type=output_file, metavar="PATH", help="also write every figure, each run's included, as JSON"
    )
    return p


def _machine() -> dict:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch_version,
        "load_average": os.getloadavg(),
    }


def main(argv: Optional[List[str]] = None) -> int:
    """Measure and print the table; see the module docstring."""
    args = with_defaults(build_parser().parse_args(argv))  # each flag checked (its type), one line naming it
    counts = [int(x) for x in args.workers.split(",")]
    modes = ["run", "attach"] if args.mode == "both" else [args.mode]
    say_estimate(
        "overhead",
        estimate_s(args),
        f"{len(counts)} N x {args.pairs} pair(s) of runs of {args.warmup:g} + {args.seconds:g} s and about "
        f"{RUN_START_S:g} s to start",
    )
    all_runs: List[dict] = []
    results: List[dict] = []
    hangs: List[dict] = []
    doc: Dict[str, object] = {
        "machine": _machine(),
        "settings": vars(args),
        "runs": all_runs,
        "results": results,
        "hangs": hangs,
    }
    rows = []
    failed = ""
    # SIGTERM (a CI timeout, kill PID) ends the probe through its finally blocks: every process
    # group it started is killed and its temporary folder removed.
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    from .bench.load import LoadMeter, busy_line

    meter = LoadMeter()
    with tempfile.TemporaryDirectory(prefix="dlwatch-overhead-") as folder:
        try:
            for n in counts:
                shapes = [Shape(n, args.ranks, args.inside, args.io_ms, args.matmul, args.node, m) for m in modes]
                by_shape: Dict[Shape, List[Tuple[Optional[dict], dict]]] = {sh: [] for sh in shapes}
                for k in range(args.pairs):
                    for shape in shapes if k % 2 == 0 else shapes[::-1]:  # both modes: alternating
                        order = (True,) if args.watched_only else (False, True) if k % 2 == 0 else (True, False)
                        runs = {w: run_job(shape, w, args.seconds, args.warmup, args.interval, folder) for w in order}
                        all_runs.extend(runs[w] for w in order)
                        by_shape[shape].append((runs.get(False), runs[True]))
                        print(
                            f"dlwatch: {shape.label}: sidecar {100 * runs[True]['cpu_fraction']:.2f} % of a core, "
                            f"load {os.getloadavg()[0]:.1f}",
                            file=sys.stderr,
                            flush=True,
                        )
                for shape in shapes:
                    summary = summarize(shape, by_shape[shape])
                    if not args.no_hang and args.ranks == 1 and not args.node and shape is shapes[-1]:
                        hang = run_hang(n, args.interval, args.stall_timeout, folder)
                        hangs.append(hang)
                        summary["detect_to_report_s"] = hang["detect_to_report_s"]
                    results.append(summary)
                    rows.append(_row(summary))
                    print(f"dlwatch: measured {shape.label} processes", file=sys.stderr, flush=True)
            if args.full_timeline:
                doc["full_timeline"] = run_full_timeline(
                    max(counts), args.full_timeline_interval, args.timeline_samples, folder
                )
            if args.churn:
                doc["churn"] = run_churn(max(counts), args.churn, args.interval, folder)
        except RunError as e:
            failed = str(e)  # what was measured before is still printed and written
            doc["error"] = failed
            print(f"dlwatch: error: {e}", file=sys.stderr)
        except SystemExit as e:  # SIGTERM: the runs' processes are already killed
            failed = f"stopped by signal {int(e.code or 0) - 128}"
            doc["error"] = failed
            print(f"dlwatch: {failed}; what was measured so far follows", file=sys.stderr)
        finally:
            signal.signal(signal.SIGTERM, previous)
    headers = [
        "processes",
        "CPU % of a core",
        "per process %",
        "tick p50 ms",
        "tick p99 ms",
        "lean ticks %",
        "reads/tick",
        "peak RSS MiB",
        "start-up CPU s",
        "batches/s unwatched",
        "watched/unwatched (min–max)",
        "detect→report s",
    ]
    if rows:
        print(tabulate(rows, headers=headers, disable_numparse=True))
    timeline = doc.get("full_timeline")
    if isinstance(timeline, dict):
        print(
            f"full timeline: {timeline['timeline_samples']} samples of {timeline['processes']} processes: "
            f"sidecar RSS {_mib(timeline['rss_bytes'])} MiB (peak {_mib(timeline['peak_rss_bytes'])} MiB)"
        )
    churn = doc.get("churn")
    if isinstance(churn, dict):
        print(
            f"churn: {churn['epochs']} worker generations of {churn['workers']} in {churn['seconds']:g} s: "
            f"tick CPU p50 {_ms(churn['tick_cpu_ms_first'])} ms in the first fifth, "
            f"{_ms(churn['tick_cpu_ms_last'])} ms in the last; "
            f"sidecar RSS {_mib(churn['rss_bytes_first'])} -> {_mib(churn['rss_bytes_last'])} MiB; "
            f"{churn['hook_files']} file(s) left in the inside view's folder"
        )
    machine = _machine_line(doc["machine"])
    print(machine)
    busy = meter.stop()
    doc["machine_load"] = None if busy is None else vars(busy) | {"share": busy.share}
    print(
        busy_line(busy, "the runs", verdict=False)
        + "; the sidecar's CPU and ticks are its own, the job's throughput is not"
    )
    if args.json:
        try:  # never through a link planted at the path or beside it (probes.outfile)
            write_text(args.json, json.dumps(doc, indent=1) + "\n")
        except OSError as e:
            print(f"dlwatch: error: cannot write --json {args.json!r}: {e.strerror or e}", file=sys.stderr)
            return Exit.FAILED
    return Exit.FAILED if failed else Exit.OK


def _exit_on_signal(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def _median_or_none(values: List[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _machine_line(machine) -> str:
    load = ", ".join(f"{x:.1f}" for x in machine["load_average"])
    return f"machine: {machine['usable_cpus']} usable CPUs, load average {load} at the start"


def _mib(value: Optional[int]) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row(s: dict) -> list:
    def ms(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.2f}"

    cpu = f"{100 * s['cpu_fraction']:.2f}"
    if s.get("cpu_fraction_min") is not None and s.get("pairs", 1) > 1:
        cpu += f" ({100 * s['cpu_fraction_min']:.2f}–{100 * s['cpu_fraction_max']:.2f})"
    ratio = "-"
    if s.get("throughput_ratio") is not None:
        ratio = f"{s['throughput_ratio']:.3f} ({s['throughput_ratio_min']:.3f}–{s['throughput_ratio_max']:.3f})"
    return [
        s.get("shape") or f"1 + {s['workers']}",
        cpu,
        f"{100 * s['cpu_fraction_per_process']:.3f}",
        ms(s["tick_p50_ms"]),
        ms(s["tick_p99_ms"]),
        "-" if s.get("lean_share") is None else f"{100 * s['lean_share']:.0f}",
        "-" if s["reads_per_tick"] is None else f"{s['reads_per_tick']:.0f}",
        _mib(s["peak_rss_bytes"]),
        "-" if s.get("first_tick_cpu_s") is None else f"{s['first_tick_cpu_s']:.2f}",
        "-" if s.get("plain_batches_per_s") is None else f"{s['plain_batches_per_s']:.1f}",
        ratio,
        "-" if s.get("detect_to_report_s") is None else f"{s['detect_to_report_s']:.2f}",
    ]


if __name__ == "__main__":
    sys.exit(main())
