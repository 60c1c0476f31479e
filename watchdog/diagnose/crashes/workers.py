"""Crash rules of a DataLoader worker that ended: killed by a signal (``worker_killed``: the OOM
killer, a native crash, a file that shrank under a mapping, a limit) or exited with a code
(``worker_exited``: EAGAIN, an uncaught exception, ``sys.exit``, a class a spawned worker
could not unpickle). They read PyTorch's lines on the worker's end in the job's stderr
(``StderrFacts.killed``, ``.exit_codes``, ``.native_signal``: torch/utils/data/dataloader.py
``_try_get_data`` and torch/csrc/DataLoader.cpp's SIGCHLD and worker signal handlers), the
worker's own last words, a faulthandler dump, and the inside view's record of each worker's
``Popen.returncode`` (CPython's multiprocessing.popen_fork)."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ... import frames
from ...collect.stderr_facts import says_eagain, stderr_facts, unpickle_error
from ...types import SEVERITY_CRASH, Facts
from ..common import (
    DOC_MULTI_PROCESS_LOADING,
    DOC_MULTIPROCESSING,
    last_seen_at,
    max_over_timeline,
    mib,
    seconds,
)
from ..engine import Finding, rule
from ..loaders import kept_loaders_text, kept_persistent_loaders, live_iterator_evidence
from .memory import memory_age, memory_remedy, memory_step, step_evidence, truncated_mappings, worker_batch
from .shared import CRASH, dataset_code, exit_clause, limits_text, loader_site, unpickle_remedy


def _signal_words(number: int) -> str:
    """A signal number as ``strsignal(3)`` words, the way PyTorch names it ("Killed")."""
    import signal as signals

    try:
        return signals.strsignal(number) or f"signal {number}"
    except ValueError:
        return f"signal {number}"


def worker_ends(facts: Facts) -> Dict[int, Tuple[str, object, str]]:
    """How each worker that ended was seen to end, by mechanism: ``pid -> ("exit", code,
    source)`` or ``("signal", words, source)``. From PyTorch's SIGCHLD handler
    (torch/csrc/DataLoader.cpp: "exited unexpectedly with exit code N" for ``CLD_EXITED``,
    "is killed by signal: X" for ``CLD_KILLED``/``CLD_DUMPED``), and from the inside view's
    record of each worker's ``Popen.returncode`` (negative: the signal's number; CPython's
    multiprocessing.popen_fork). A signal named anywhere wins over an exit code."""
    ends: Dict[int, Tuple[str, object, str]] = {}
    for v in facts.inside.loaders if facts.inside else ():
        for pid, code in zip(v.workers, v.worker_exitcodes):
            if code is None:
                continue
            if code < 0:
                ends[pid] = ("signal", _signal_words(-code), f"the inside view: returncode {code}")
            else:
                ends[pid] = ("exit", code, f"the inside view: exit code {code}")
    err = stderr_facts(facts)
    for e in err.exit_codes:
        if ends.get(e.pid, ("exit",))[0] != "signal":
            ends[e.pid] = ("exit", e.code, f"stderr: {e.line}")
    for k in err.killed:
        if k.signal:
            for pid in k.pids:
                ends[pid] = ("signal", k.signal, f"stderr: {k.line}")
    return ends


@rule("worker_exited", SEVERITY_CRASH, 5, CRASH)
def worker_exited(facts: Facts) -> Optional[Finding]:
    """A worker ended by exiting, with a code (0 or N) and no signal (:func:`worker_ends`):
    nothing killed it, so no memory or OOM advice applies. What it printed last decides the
    cause: a limit on threads or processes (EAGAIN: the pids cgroup, ``RLIMIT_NPROC``), an
    exception it did not catch outside the fetch PyTorch wraps, ``sys.exit("message")``
    (multiprocessing prints the message and exits with 1), or a silent ``os._exit``."""
    err = stderr_facts(facts)
    if not err.text:
        return None
    phrased = bool(err.killed or err.exit_codes)
    lost = err.lost_receive
    if not (phrased or lost) or err.native_signal is not None:
        return None
    ends = worker_ends(facts)
    if not phrased and not any(end[2].startswith("the inside view") for end in ends.values()):
        return None  # a lost receive alone, with no worker's recorded end, names no worker
    died = err.last_killed()
    named = died.pids if died is not None else ()
    if any(ends.get(pid, ("",))[0] == "signal" for pid in named):
        return None
    exited = [(pid, ends[pid]) for pid in (named or tuple(ends)) if ends.get(pid, ("",))[0] == "exit"]
    if not exited:
        return None
    codes = sorted({int(end[1]) for _, end in exited})  # type: ignore[call-overload]
    pids = tuple(pid for pid, _ in exited)
    evidence = [f"worker pid {pid}: exited with code {end[1]}, no signal ({end[2]})" for pid, end in exited[:4]]
    words = err.worker_last_words()
    evidence += [f"stderr, the worker's last words: {w}" for w in words]
    if lost and not phrased:
        evidence.append(
            f"main: taking a batch's shared tensor from its worker failed ({lost} in "
            "rebuild_storage_fd): the worker that sent it had already ended"
        )
    block = err.worker_traceback()
    user = block.user() if block is not None else None
    code_text = ", ".join(map(str, codes))
    who = f"DataLoader worker(s) {', '.join(map(str, pids))}"
    eagain = next((w for w in words if says_eagain(w)), None)
    unpickle = next((u for u in map(unpickle_error, words) if u is not None), None)
    if eagain is not None:
        limits = limits_text(facts, ("pids.max", "RLIMIT_NPROC"))
        evidence += [f"limit on the job's tasks: {x}" for x in limits]
        how = f"exited with code {code_text} because a new thread or process could not be created (EAGAIN)"
        remedy = (
            f"`{eagain}`: pthread_create or fork failed with EAGAIN, the limit on tasks (every process and thread "
            "counts) was reached: "
            + ("; ".join(limits) if limits else "the pids cgroup's pids.max or RLIMIT_NPROC")
            + ". Raise it (docker run --pids-limit, Kubernetes podPidsLimit, systemd TasksMax, `ulimit -u` for "
            "RLIMIT_NPROC), or need fewer tasks: lower num_workers, and the threads each worker starts "
            "(OMP_NUM_THREADS, thread pools the Dataset creates); each worker also starts a queue feeder thread."
        )
    elif unpickle is not None:
        attr, module = unpickle
        how = f"exited with code {code_text}: it could not unpickle {attr} (not found in {module})"
        remedy = unpickle_remedy(attr, module)
    elif block is not None:
        where = f" at {frames.short_path(user.file)}:{user.line}" if user else ""
        how = f"exited with code {code_text} after an uncaught {block.exception}{where}"
        remedy = (
            f"The worker process died of `{block.exception}`, raised outside the fetch PyTorch wraps (the worker "
            "loop, its queue, a thread it started): main only learns that it exited. Fix what raised it at the "
            "place above; num_workers=0 reproduces it in main."
        )
    elif codes == [0]:
        how = "exited with code 0 before the loader was done: no signal, no exception"
        remedy = (
            "Something in the worker ended its process on purpose with code 0: os._exit(0), sys.exit(0) or exit() "
            "in the Dataset, collate_fn or worker_init_fn, or a native library calling exit(0) (multiprocessing "
            "runs none of them for a worker that just returns). Nothing killed it: memory is not the cause. Find "
            "the exit call (grep the Dataset's code and its libraries for os._exit, sys.exit, exit(); run with "
            "num_workers=0, where it ends main the same way)."
        )
    else:
        said = f" It printed `{words[-1]}` as it ended." if words else " It printed nothing."
        how = f"exited with code {code_text} (no signal: it was not killed)"
        remedy = (
            f'The worker ended its own process with exit code {code_text}: sys.exit("…") (multiprocessing prints '
            "the message and exits with 1), exit(N), or a native library's exit().{said} A SystemExit is no "
            "Exception, so PyTorch does not pass it to main as a traceback: raise an exception for a bad sample "
            "(or skip it) instead of exiting, and num_workers=0 shows where it exits."
        ).replace("{said}", said)
    if words and eagain is None and unpickle is None and block is None:
        how += f"; its last words: `{words[-1][:120]}`"
    seen_at = None if user is not None else next((a for p in pids for a in [last_seen_at(facts, p)] if a), None)
    if seen_at is not None:
        evidence.append(seen_at.evidence("worker"))
    fetch_code = dataset_code(facts, pids) if user is None and seen_at is None else None
    evidence.append(f"nothing signalled the worker: no OOM advice applies{exit_clause(facts)}")
    return Finding(
        confidence=0.9,
        summary=f"{who} {how}; the main process stopped with an error.",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=pids,
        location=(f"{user.file}:{user.line}" if user is not None else None)
        or (f"{seen_at.frame.file}:{seen_at.frame.line}" if seen_at is not None else None)
        or (f"{fetch_code.file}:{fetch_code.line}" if fetch_code is not None else None)
        or loader_site(facts)
        or err.location,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_MULTIPROCESSING),
    )


@rule("worker_killed", SEVERITY_CRASH, 5, CRASH)
def worker_killed(facts: Facts) -> Optional[Finding]:
    """A worker vanished or was killed by a signal; PyTorch raises "DataLoader worker (pid N) is
    killed by signal" (SIGCHLD handler) or "exited unexpectedly" (``_try_get_data``). The
    worker's own C handler prints "Unexpected segmentation fault encountered in worker" first;
    when main's message loses the race, that line alone names the signal."""
    err = stderr_facts(facts)
    if not err.text:
        return None
    native = err.native_signal
    if not err.killed and native is None:
        return None
    m = err.last_killed()  # "killed by signal" says more
    pids = m.pids if m else ()
    ends = worker_ends(facts)
    if native is None and pids and all(ends.get(pid, ("",))[0] == "exit" for pid in pids):
        return None  # they exited with a code: worker_exited
    recorded = next((str(ends[pid][1]) for pid in pids if ends.get(pid, ("",))[0] == "signal"), None)
    signal_name = (m.signal if m else None) or (native.what.capitalize() if native else None) or recorded
    evidence = [f"stderr: {m.line}"] if m else []
    evidence += [f"worker pid {pid}: {ends[pid][2]}" for pid in pids if pid in ends and ends[pid][2].startswith("the")]
    if native is not None:
        evidence.append(f"stderr: {native.line} (the worker's own signal handler, torch/csrc/DataLoader.cpp)")
    for pid in pids:
        last = facts.last_seen(pid)
        if last is not None:
            evidence.append(
                f"worker pid {pid}: last seen state {last.state}, RSS {mib(last.rss_bytes)}, USS {mib(last.uss_bytes)}"
                + memory_age(facts, pid)
            )
    oom = bool(facts.oom_kills)
    limit = max_over_timeline(facts, lambda s: s.host.mem_limit_bytes)
    used = max_over_timeline(facts, lambda s: s.host.mem_cgroup_usage_bytes)
    if oom:
        evidence.append(
            f"the job's memory cgroup counted {facts.oom_kills} OOM kill(s) while it was watched: the kernel's OOM "
            "killer ended the worker"
            + (f" at the cgroup's limit of {mib(limit)} (highest usage seen {mib(used)})" if limit else "")
        )
    elif limit:
        evidence.append(f"the job's memory cgroup: limit {mib(limit)}, highest usage seen {mib(used)}")
    avail = max_over_timeline(facts, lambda s: -s.host.mem_left_bytes)
    if avail is not None:
        evidence.append(f"lowest memory left to the job seen: {mib(-avail)}{exit_clause(facts)}")
    how = (
        f"killed by signal {signal_label(signal_name)}"
        if signal_name
        else "ended (PyTorch recorded no exit code or signal)"
    )
    if oom:
        how += " by the OOM killer"
    seen = any(facts.last_seen(pid) is not None for pid in pids)
    if pids and not seen:
        evidence.append(
            "the watchdog has no sample of these workers: they lived less than about one or two sampling "
            "intervals (interval_s) from their start to their death, or between two samples"
        )
    low_memory = avail is not None and -avail < 0.05 * 2**30
    segfault = (signal_name or "").lower().startswith(("segmentation", "floating"))
    bus = (signal_name or "").lower().startswith("bus")
    truncated = truncated_mappings(facts, pids or None) if bus else []
    for pid, path, extent, size in truncated[:3]:
        evidence.append(
            f"worker pid {pid} had {path} mapped up to byte {extent}; the same file is now {size} bytes: it shrank "
            "under the mapping"
        )
    if truncated:
        pid, path, extent, size = truncated[0]
        how += f": {path}, which it had mapped, shrank under the mapping"
        remedy = (
            f"Another process rewrote or truncated {path} while workers had it mapped (np.memmap, "
            "np.load(mmap_mode=...)): a page past the file's new end raises SIGBUS. Write a new version to a new file "
            "and os.replace() it into place (the workers keep the old one until they reopen it), never truncate or "
            "rewrite a file in place while it is mapped; reopen the mapping in each worker after a rewrite."
        )
    elif (signal_name or "").lower().startswith(("abort", "terminated")):
        asserted = list(err.assertions)
        evidence += [f"stderr: {line}" for line in asserted[-2:]]
        if (signal_name or "").lower().startswith("abort"):
            remedy = (
                "A native library in the worker called abort(): "
                + (f"it said `{asserted[-1]}`; " if asserted else "a failed assertion or an uncaught C++ exception; ")
                + "reproduce with num_workers=0 under `python -X faulthandler` to get the stack, and check the "
                "library's version and the record it was given."
            )
        else:
            remedy = (
                "SIGTERM came from a process outside the job (the OOM killer never sends it): a scheduler ending "
                "the job, `kill`, or a cleanup script that matched the worker's name; check who, and handle or "
                "avoid it."
            )
    elif bus:
        shm_total = max_over_timeline(facts, lambda s: s.host.shm_total_bytes)
        shm_peak = max_over_timeline(facts, lambda s: s.host.shm_used_bytes)
        mapped = (
            "a file-backed mapping (np.memmap, np.load(mmap_mode=...), safetensors, Arrow) whose file shrank or "
            "whose disk filled: check which files the worker maps and whether something rewrites them in place "
            "while the job runs (write a new file and os.replace() it instead)"
        )
        shm = "/dev/shm full (Docker's default is 64 MB: --shm-size) or a shared-memory file removed"
        if shm_total and shm_peak is not None and shm_peak < 0.05 * shm_total:
            remedy = (
                f"A bus error is a mapping that lost its backing store. /dev/shm was at most {mib(shm_peak)} of "
                f"{mib(shm_total)} used, so most likely {mapped}; less likely {shm}."
            )
        else:
            remedy = f"A bus error is a mapping that lost its backing store: {shm}, or {mapped}."
    elif segfault:
        remedy = (
            "A native library called from __getitem__ crashed (a decoder, a C extension, ctypes): this is a bug or "
            "bad input, not memory. Reproduce with num_workers=0 under `python -X faulthandler` (or gdb) to get the "
            "native stack, check the record being decoded, and upgrade or replace the library."
        )
    elif oom or (signal_name == "Killed" and low_memory):
        kept = kept_persistent_loaders(facts)
        step = None if kept else next((s for s in (memory_step(facts, p, limit) for p in pids) if s), None)
        if kept is not None:
            evidence += live_iterator_evidence(facts)
            how += f": {kept[0]} loaders' persistent workers ({kept[1]}) were alive at once"
            where = f"the cgroup's {mib(limit)} limit" if limit else "the memory limit"
            remedy = (
                kept_loaders_text(kept) + f". Each worker holds its own memory: that, not the Dataset's objects, "
                f"reached {where}. Check `dmesg | grep -i -e oom -e killed`."
            )
        elif step is not None:
            pid = next(p for p in pids if memory_step(facts, p, limit) is not None)
            batch = worker_batch(facts, pid)
            evidence.append(step_evidence(facts, pid, step, limit) + (f"; the worker was on {batch}" if batch else ""))
            how += f": one sample asked for {'at least ' if step.seen else 'more than '}{mib(step.asked)} at once"
            remedy = (
                f"One sample asked for {'more than ' if not step.seen else 'at least '}{mib(step.asked)} at once"
                + (f" ({batch})" if batch else "")
                + ": a step, not a slope; the worker's memory stood still before it, so no cache grew. Find that "
                "sample and check the size it declares before allocating (a length, shape or count read from its "
                "header or file: reject or cap it, a corrupt header asks for gigabytes); raise "
                + (f"the cgroup's {mib(limit)} limit" if limit else "the memory limit")
                + " only if samples that large are real. Check `dmesg | grep -i -e oom -e killed`."
            )
        else:
            remedy = memory_remedy(facts, pids, limit)
    elif (signal_name or "").lower().startswith("illegal"):
        remedy = (
            "SIGILL: the worker ran a machine instruction this CPU does not have: a binary built for another CPU "
            "(a wheel or extension compiled with -march=native, AVX-512 or AVX2 on an older or virtual CPU, an ARM "
            "build feature). Reinstall the library the worker calls from a build for this CPU (pip install "
            "--no-binary, or the generic wheel), or run where the CPU matches; `grep flags /proc/cpuinfo` lists what "
            "it has."
        )
    elif (signal_name or "").lower().startswith("cpu time"):
        limits = limits_text(facts, ("RLIMIT_CPU",))
        evidence += [f"limit on the job's processes: {x} (seconds)" for x in limits]
        remedy = (
            "SIGXCPU: the worker used up its CPU-time limit (RLIMIT_CPU"
            + (f": {', '.join(limits)} s" if limits else "")
            + "), set by `ulimit -t`, a scheduler or a container's limits, and inherited by every worker. Raise or "
            "remove it (ulimit -t unlimited, the scheduler's CPU-time option); long-lived persistent_workers "
            "accumulate CPU time over epochs."
        )
    elif signal_name == "Killed":
        remedy = (
            "SIGKILL with no OOM kill counted in the job's memory cgroup: check `dmesg | grep -i -e oom -e killed` "
            "(the host's OOM killer outside this cgroup), then who else sends SIGKILL (a scheduler's memory or time "
            "limit, an operator, a watchdog script)."
        )
    elif signal_name:
        remedy = (
            f"The worker died of the signal {signal_name}: find who sends it (`kill`, a scheduler, a library's own "
            "handler) or what raises it in the worker; reproduce with num_workers=0 under `python -X faulthandler`."
        )
    else:
        remedy = (
            "PyTorch did not record how the worker ended (no exit code, no signal). Look at the worker's last lines "
            "on stderr, and at `dmesg | grep -i -e oom -e killed` for a kill."
        )
    who = f"DataLoader worker(s) {', '.join(map(str, pids))}" if pids else "A DataLoader worker"
    loop = loader_site(facts)
    dump = err.fault
    hit = dump.user() if dump is not None else None
    if dump is not None and hit is not None:
        inner = " ← ".join(f"{f.function} ({frames.short_path(f.file)}:{f.line})" for f in dump.frames[:3])
        evidence.append(
            f"stderr (faulthandler, which dlwatch's inside view turns on in workers): the {dump.what.lower()} hit "
            f"in {hit.function} at {hit.file}:{hit.line}; innermost frames: {inner}"
        )
        how += f" (in {hit.function} at {frames.short_path(hit.file)}:{hit.line})"
    seen_at = None if hit is not None else next((a for p in pids for a in [last_seen_at(facts, p)] if a), None)
    if seen_at is not None:
        evidence.append(seen_at.evidence("worker"))
        how += (
            f" (at its last stack, {seconds(seen_at.before_s)} before: in {seen_at.frame.function} at "
            f"{frames.short_path(seen_at.frame.file)}:{seen_at.frame.line})"
        )
    fetch_code = dataset_code(facts, pids) if hit is None and seen_at is None and signal_name else None
    if fetch_code is not None:
        evidence.append(
            f"no stack of the worker exists (it died with no traceback, and none was taken while it ran): its fetches "
            f"run {fetch_code.function}, defined at {fetch_code.file}:{fetch_code.line} (the inside view)"
        )
    return Finding(
        confidence=(0.9 if oom or signal_name else 0.75) - (0 if seen or not pids else 0.15),
        summary=f"{who} {how}; the main process stopped with an error.",
        evidence=tuple(evidence),
        remedy=remedy,
        pids=pids,
        location=(f"{hit.file}:{hit.line}" if hit is not None else None)
        or (f"{seen_at.frame.file}:{seen_at.frame.line}" if seen_at is not None else None)
        or (f"{fetch_code.file}:{fetch_code.line}" if fetch_code is not None else None)
        or loop
        or err.location,
        docs=(DOC_MULTI_PROCESS_LOADING, DOC_MULTIPROCESSING),
    )


def signal_label(description: str) -> str:
    """``"11 (SIGSEGV: Segmentation fault)"``: the number and name (as exit records say it) of
    the signal whose description (``strsignal(3)``, what PyTorch's SIGCHLD handler prints in "is
    killed by signal: Killed.", torch/csrc/DataLoader.cpp) is ``description``; the description
    alone when no signal of this system has it."""
    import signal

    for sig in signal.Signals:
        if signal.strsignal(sig) == description:
            return f"{int(sig)} ({sig.name}: {description})"
    return description
