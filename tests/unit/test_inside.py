"""The inside view's file format and reader, on a recorder file captured from a real job
(tests/fixtures/inside: two epochs of a 2-worker fork DataLoader, with one extra thread
running in main) and on counters written here by the recorder's own slot writer."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from tests.unit.builders import MAIN_PID, proc, sample
from watchdog.collect import inside
from watchdog.report import document as report
from watchdog.report import rendering
from watchdog.types import ROLE_MAIN, Diagnosis, Facts, Finding

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "inside")
FMT = inside.FORMAT


def test_every_interval_falls_inside_its_buckets_bounds():
    for ns in [1_000, 1_500, 3_999, 4_000, 7_777, 10**6, 123_456_789, 5 * 10**9, 60 * 10**9]:
        lo, hi = FMT.bucket_bounds_s(FMT.bucket_of(ns))
        assert lo <= (ns // 1000) / 1e6 < hi, ns  # whole microseconds
        assert hi / lo <= 1.26  # a quarter octave at most


def test_percentiles_take_the_upper_bound_of_the_bucket():
    hist = [0] * FMT.BUCKETS
    hist[FMT.bucket_of(10 * 10**6)] = 98  # 98 intervals of 10 ms
    hist[FMT.bucket_of(2 * 10**9)] = 2  # 2 of 2 s
    assert 0.010 <= inside.percentile_s(tuple(hist), 0.5) < 0.0126
    assert 2.0 <= inside.percentile_s(tuple(hist), 0.99) < 2.52
    assert inside.percentile_s(tuple([0] * FMT.BUCKETS), 0.99) is None


def test_the_captured_record_reads_as_two_iterators_with_their_settings_and_threads_at_fork():
    view = inside.InsideReader(FIXTURE).read()
    assert view.note is None
    assert [v.iterator for v in view.loaders] == [1, 2]
    first = view.loaders[0]
    assert first.batches == 16 and first.kind == "_MultiProcessingDataLoaderIter"
    assert first.setting("num_workers") == 2 and first.setting("multiprocessing_context") == "fork"
    assert first.site.file == "/home/user/train/train.py" and first.site.line == 12
    assert len(first.workers) == 2 and first.worker_exitcodes == (0, 0)
    assert 0 < first.data_wait_fraction < 1 and first.interval_p50_s <= first.interval_p99_s
    assert first.intervals == 15  # the first batch of an epoch is not an interval
    fork = view.forks[0]
    names = {t.name: t for t in fork.threads}
    assert set(names) == {"MainThread", "my-bg"} and names["MainThread"].forking
    assert names["my-bg"].frames[0].function == "bg" and names["my-bg"].frames[0].line == 8


def test_a_slot_being_written_is_skipped_and_a_foreign_file_is_named(tmp_path):
    shutil.copy(os.path.join(FIXTURE, "10114.json"), tmp_path / "10114.json")
    data = bytearray(open(os.path.join(FIXTURE, "10114.bin"), "rb").read())
    off = FMT.HEADER_SIZE  # slot 0
    seq = int.from_bytes(data[off : off + 8], "little")
    data[off : off + 8] = (seq | 1).to_bytes(8, "little")  # odd: the writer is inside
    (tmp_path / "10114.bin").write_bytes(bytes(data))
    (tmp_path / "777.bin").write_bytes(b"not a recorder file" + bytes(FMT.FILE_SIZE))
    view = inside.InsideReader(str(tmp_path)).read()
    assert [v.iterator for v in view.loaders] == [2]
    assert "777.bin" in view.note


def test_counters_written_by_the_recorder_round_trip(tmp_path):
    FMT._FOLDER = str(tmp_path)
    try:
        proc_state = FMT._Process(str(tmp_path))
        record = {"kind": "_MultiProcessingDataLoaderIter", "settings": {"num_workers": 4}, "workers": [11, 12, 13, 14]}
        slot = proc_state.new_iterator(record)
        proc_state.write_json()
        for _ in range(3):
            slot.enter(0, 0)
            slot.delivered()
        slot.enter(3, 2)
    finally:
        FMT._FOLDER = None
    (loader,) = inside.InsideReader(str(tmp_path)).read().loaders
    assert loader.batches == 3 and loader.intervals == 2 and loader.first_batch_s is not None
    assert loader.waiting_since is not None and loader.waiting_idx == 3 and loader.waiting_worker == 2
    assert loader.setting("num_workers") == 4 and loader.workers == (11, 12, 13, 14)


def test_hook_env_puts_the_bootstrap_first_and_keeps_the_jobs_path():
    env = inside.hook_env({"PYTHONPATH": "/opt/lib", "DLWATCH_HOOK_ANCESTOR": "1"}, "/tmp/x", 42)
    assert env["PYTHONPATH"] == inside.BOOT_DIR + os.pathsep + "/opt/lib"
    assert env[FMT.ENV_DIR] == "/tmp/x" and env[FMT.ENV_ANCESTOR] == "42"
    assert FMT.ENV_ANCESTOR not in inside.hook_env({"DLWATCH_HOOK_ANCESTOR": "1"}, "/tmp/x", None)
    assert os.path.isfile(os.path.join(inside.BOOT_DIR, "sitecustomize.py"))


def test_the_report_shows_batches_data_wait_and_the_threads_at_fork():
    view = inside.InsideReader(FIXTURE).read()
    last = max(v.last_batch for v in view.loaders)
    s = sample(last + 5.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    facts = Facts(mode="live", sample=s, timeline=(s,), inside=view)
    found = [Diagnosis("unknown", "warning", Finding(0.1, "placeholder", (), "", ()))]
    rep = report.build(
        facts, found, {"pid": MAIN_PID, "cmdline": ["python", "train.py"], "start_time": None}, 0.0, "report", None, {}
    )
    text = rep.text
    assert "DataLoader (inside view):" in text and "16 batches (epoch 0)" in text and "data wait" in text
    assert "my-bg (tid" in text and "bg (/home/user/train/train.py:8)" in text
    loaders = rep.document["inside_view"]["loaders"]
    assert loaders[0]["batches"] == 16 and loaders[0]["settings"]["num_workers"] == 2


@pytest.mark.parametrize("line", ["sitecustomize.py", "_dlwatch_arm.py", "_dlwatch_inside.py", "_dlwatch_fix.py"])
def test_the_bootstrap_uses_the_standard_library_only(line):
    import ast

    tree = ast.parse(open(os.path.join(inside.BOOT_DIR, line)).read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    import sys

    ours = {"_dlwatch_inside", "_dlwatch_arm", "_dlwatch_fix"}
    # A verify run's fix sets torch's sharing strategy: torch is loaded by then (the job imported its DataLoader).
    theirs = {"torch"} if line == "_dlwatch_fix.py" else set()
    assert imported <= set(sys.stdlib_module_names) | ours | theirs, imported
    if line not in (
        "_dlwatch_inside.py",
        "_dlwatch_fix.py",
    ):  # imported at every start-up: nothing but what Python has loaded by then
        assert imported <= {"os", "sys", "importlib", "_dlwatch_inside", "_dlwatch_arm"}, imported


def test_the_arming_module_and_the_recorder_name_the_same_variables():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_dlwatch_arm_test", os.path.join(inside.BOOT_DIR, "_dlwatch_arm.py"))
    arm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(arm)
    assert (arm.ENV_DIR, arm.ENV_ANCESTOR, arm.TARGET) == (FMT.ENV_DIR, FMT.ENV_ANCESTOR, FMT.TARGET)


def test_pin_memory_without_an_accelerator_is_said_to_do_nothing():
    import dataclasses

    view = inside.InsideReader(FIXTURE).read()
    loader = dataclasses.replace(
        view.loaders[0], settings=(("pin_memory", True), ("num_workers", 2)), pin_memory_effective=False
    )
    doc = report.status_document(dataclasses.replace(view, loaders=(loader,)), {}, loader.last_batch + 1.0)
    text = "\n".join(rendering.status_lines(doc))
    assert "pin_memory=True does nothing here" in text and "nothing is pinned" in text
    assert doc["inside_view"]["loaders"][0]["pin_memory_effective"] is False


def test_cuda_host_allocator_figures_are_shown_when_the_job_recorded_them():
    import dataclasses

    view = inside.InsideReader(FIXTURE).read()
    stats = (("allocated_bytes.current", 512 * 2**20), ("num_host_alloc", 12.0), ("reserved_bytes.peak", 1024 * 2**20))
    loader = dataclasses.replace(view.loaders[0], host_memory=stats, pin_thread_alive=True)
    doc = report.status_document(dataclasses.replace(view, loaders=(loader,)), {4242: 1 << 30}, loader.last_batch + 1.0)
    text = "\n".join(rendering.status_lines(doc))
    assert (
        "allocated_bytes.current 512.0 MiB" in text
        and "num_host_alloc 12" in text
        and "pin-memory thread alive" in text
    )
    assert "pid 4242: pinned host memory 1024.0 MiB" in text


def test_the_recorder_reads_cuda_host_stats_only_once_cuda_is_initialised(monkeypatch):
    import sys
    import types

    class Thread:
        def is_alive(self):
            return True

    state = {"init": False}
    cuda = types.SimpleNamespace(
        is_initialized=lambda: state["init"],
        host_memory_stats=lambda: {"allocated_bytes.current": 4096, "flag": True, "name": "x"},
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    it = types.SimpleNamespace(_pin_memory_thread=Thread())
    record = {}
    assert FMT._cuda_refresh(it, record) is False and "cuda" not in record  # never initialises CUDA itself
    state["init"] = True
    assert FMT._cuda_refresh(it, record) is True
    assert record["cuda"] == {"host_memory_stats": {"allocated_bytes.current": 4096}, "pin_thread_alive": True}


def _data_facts(view):
    s = sample(1000.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    return Facts(mode="exit", sample=s, timeline=(s,), inside=view, exit_code=0)


def test_identical_first_batches_of_an_iterable_dataset_are_a_replicated_stream():
    import dataclasses

    from watchdog.diagnose import diagnose

    view = inside.InsideReader(FIXTURE).read()
    base = dataclasses.replace(view.loaders[0], iterable=True, dataset_type="RecordStream")
    same = dataclasses.replace(base, first_batches=((0, "aa"), (1, "aa")))
    (found,) = [
        d for d in diagnose(_data_facts(dataclasses.replace(view, loaders=(same,)))) if d.kind == "iterable_replicated"
    ]
    assert "replays the same stream" in found.summary and "get_worker_info" in found.remedy
    differ = dataclasses.replace(base, first_batches=((0, "aa"), (1, "bb")))
    assert not [d for d in diagnose(_data_facts(dataclasses.replace(view, loaders=(differ,))))]


def test_a_generator_copied_into_workers_and_drawn_from_is_duplicated_randomness():
    from watchdog.diagnose import diagnose
    from watchdog.types import InsideView, RngCheck

    def check(pid, wid, start, later):
        return RngCheck(pid, MAIN_PID, wid, 2, tuple(start.items()), tuple(later.items()))

    g = "Crops.rng (Generator)"
    drawn = (
        check(11, 0, {g: "s", "random (global)": "r0"}, {g: "t", "random (global)": "r0"}),
        check(12, 1, {g: "s", "random (global)": "r1"}, {g: "t", "random (global)": "r1"}),
    )
    (found,) = diagnose(_data_facts(InsideView(rng=drawn)))
    assert found.kind == "rng_duplicated" and "Crops.rng" in found.summary and "worker_init_fn" in found.remedy
    unused = (check(11, 0, {g: "s"}, {g: "s"}), check(12, 1, {g: "s"}, {g: "s"}))  # never drawn from in the workers
    not_yet = (check(11, 0, {g: "s"}, {}), check(12, 1, {g: "s"}, {}))  # fewer samples than the second look
    seeded = (check(11, 0, {g: "s0"}, {g: "t0"}), check(12, 1, {g: "s1"}, {g: "t1"}))
    for checks in (unused, not_yet, seeded):
        assert not diagnose(_data_facts(InsideView(rng=checks)))


def test_the_full_report_text_holds_every_thread_at_fork_with_its_stack():
    view = inside.InsideReader(FIXTURE).read()
    s = sample(max(v.last_batch for v in view.loaders) + 5.0, [proc(MAIN_PID, ROLE_MAIN, [])])
    found = [Diagnosis("unknown", "warning", Finding(0.1, "placeholder", (), "", ()))]
    rep = report.build(
        Facts(mode="crash", sample=s, timeline=(s,), inside=view, exit_code=1),
        found,
        {"pid": MAIN_PID, "cmdline": ["python"], "start_time": None},
        0.0,
        "report",
        None,
        {},
    )
    stacks = rep.text.split(rendering.STACKS_HEADING, 1)[1]
    assert "recorded by the job at the fork" in stacks and "thread" in stacks and "my-bg" in stacks
    assert "bg (/home/user/train/train.py:8)" in stacks and "_launch (" in stacks
    assert rendering.STACKS_HEADING not in rendering.summary_text(rep.text)


def test_a_recorder_that_stopped_itself_is_named_with_its_reason(tmp_path):
    import json

    (tmp_path / "77.json").write_text(
        json.dumps({"pid": 77, "disabled": "cannot install on this torch: AttributeError('x')", "iterators": []})
    )
    view = inside.InsideReader(str(tmp_path)).read()
    assert "pid 77 stopped: cannot install on this torch" in view.note
    assert "not enabled" in inside.InsideReader(None, "no inside view (not enabled)").read().note


def test_a_hook_folder_is_removed_only_while_it_is_the_one_made_and_a_swapped_one_stays(tmp_path, monkeypatch):
    monkeypatch.setattr(inside.tempfile, "tempdir", str(tmp_path))
    made = inside.make_folder()
    (open(os.path.join(made.path, "12.bin"), "wb")).close()
    assert inside.remove_folder(made) and not os.path.lexists(made.path)
    again = inside.make_folder()
    other = tmp_path / "other"
    other.mkdir(mode=0o700)  # made while the first exists: another inode
    (other / "keep").write_text("x")
    shutil.rmtree(again.path)
    os.rename(other, again.path)  # same name, another directory: not the one made
    assert not inside.remove_folder(again) and os.path.exists(os.path.join(again.path, "keep"))
    shutil.rmtree(again.path)
    linked = inside.make_folder()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    shutil.rmtree(linked.path)
    os.symlink(target, linked.path)  # a link where the folder was: never followed
    assert not inside.remove_folder(linked) and (target / "keep").exists()


def test_a_fifo_in_the_hook_folder_never_blocks_the_reader(tmp_path):
    os.mkfifo(tmp_path / "123.json")
    os.mkfifo(tmp_path / "124.bin")
    view = inside.InsideReader(str(tmp_path)).read()  # returns: nothing is opened for blocking reads
    assert view.loaders == () and "not a regular file" in (view.note or "")


def test_only_a_folder_named_as_hook_env_names_them_and_private_to_this_user_is_taken_from_a_jobs_environment(
    tmp_path,
):
    import subprocess
    import sys
    import time

    private = tmp_path / "secret"  # as /root/.ssh: this user's, closed to others, but no hook folder
    private.mkdir(mode=0o700)
    hook = tmp_path / "dlwatch-hook-abcd1234"
    hook.mkdir(mode=0o700)
    (hook / inside.TOKEN_FILE).write_text("f00d" * 8)
    shared = tmp_path / "dlwatch-hook-open5678"
    shared.mkdir(mode=0o755)
    found = {}
    for folder in (private, hook, shared, "relative/dlwatch-hook-abcd1234", "another job's"):
        token = "f00d" * 8 if folder == hook else "bad0" * 8
        named = hook if folder == "another job's" else folder  # the right folder, another job's token
        env = {**os.environ, FMT.ENV_DIR: str(named), inside.TOKEN_ENV: token}
        job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"], env=env)
        try:
            deadline = time.monotonic() + 10  # until the child has exec'd with its environment (slow under load)
            while time.monotonic() < deadline:
                if inside.FORMAT.ENV_DIR.encode() in open(f"/proc/{job.pid}/environ", "rb").read():
                    break
                time.sleep(0.01)
            found[str(folder)] = inside.folder_of(job.pid)
        finally:
            job.kill()
            job.wait(10)
    assert (
        found[str(private)] is None and found[str(shared)] is None and found["relative/dlwatch-hook-abcd1234"] is None
    )
    assert found["another job's"] is None
    taken = found[str(hook)]
    assert taken is not None and taken.path == str(hook) and taken.ino == os.lstat(hook).st_ino


def test_records_of_ended_workers_are_kept_in_memory_their_files_removed_and_the_cost_stays_flat(tmp_path):
    import json
    import time

    dead = 4_000_000  # above any pid_max: a worker that ended
    for i in range(1000):
        doc = {"pid": dead + i, "ppid": 1, "worker": {"id": i % 2, "num_workers": 2, "rng_start": {"torch": f"s{i}"}}}
        (tmp_path / f"{dead + i}.json").write_text(json.dumps(doc))
        (tmp_path / f"{dead + i}.fetch").write_bytes(b"\0" * FMT.FETCH.size)
    (tmp_path / f"{dead}.json").write_text(json.dumps({"pid": dead, "disabled": "test stop"}))
    shutil.copy(os.path.join(FIXTURE, sorted(n for n in os.listdir(FIXTURE) if n.endswith(".bin"))[0]), tmp_path)
    reader = inside.InsideReader(str(tmp_path), retire=True)
    view = reader.read()
    left = sorted(os.listdir(tmp_path))
    assert all(n.endswith(".bin") for n in left)  # the loader owner's file stays; every ended worker's went
    assert len(view.rng) == inside.RETIRED_KEPT and view.rng[-1].start == (("torch", "s999"),)
    t0 = time.perf_counter()
    again = reader.read()
    assert time.perf_counter() - t0 < 0.5 and len(again.rng) == inside.RETIRED_KEPT
    untouched = tmp_path / "look"
    untouched.mkdir()
    (untouched / f"{dead}.json").write_text("{}")
    inside.InsideReader(str(untouched)).read()  # a one-off look (dlwatch status) removes nothing
    assert os.listdir(untouched) == [f"{dead}.json"]


def test_a_workers_failed_batches_are_read_malformed_entries_skipped_and_kept_after_it_ended(tmp_path):
    import json

    dead = 4_000_001  # above any pid_max (4194304): a worker that ended, whatever runs beside the test
    doc = {
        "pid": dead,
        "failed": [
            {"worker": 1, "batch": 3, "indices": [5, 9], "sample": 9, "exception": "KeyError", "ns": 2 * 10**9},
            {"worker": 1, "batch": "3"},  # malformed: skipped
            {
                "worker": 1,
                "batch": 4,
                "indices": ["a"],
                "sample": True,
                "exception": None,
                "through": "Subset.__getitems__",
            },
        ],
    }
    (tmp_path / f"{dead}.json").write_text(json.dumps(doc))
    reader = inside.InsideReader(str(tmp_path), retire=True)
    want = (
        inside.WorkerFailure(dead, 1, 3, (5, 9), 9, "KeyError", 2.0),
        inside.WorkerFailure(dead, 1, 4, None, None, None, 0.0, "Subset.__getitems__"),
    )
    assert reader.read().failures == want
    # no process has that pid: its file is retired and removed, its failures kept
    assert reader.read(pids=[]).failures == want and not (tmp_path / f"{dead}.json").exists()


def test_a_record_replaced_while_another_rank_listed_the_folder_is_read_again_by_its_own_rank(tmp_path):
    # Two ranks share the reader, each reads its own records. Rank b's record is replaced; rank
    # a is the first to list the folder again (it reads only its own records); rank b's next
    # read, on that listing, still reads its new record.
    def write(pid, workers):
        FMT._write_atomic(str(tmp_path / f"{pid}.json"), {"iterators": [{"id": 7, "workers": workers}]})

    write(10, [11])
    write(20, [21])
    old = time.time() - 60
    os.utime(tmp_path, (old, old))
    reader = inside.InsideReader(str(tmp_path))
    reader.read([20], forks=False)
    assert reader._docs[20][1]["iterators"][0]["workers"] == [21]
    write(20, [22])
    os.utime(tmp_path, (old + 1, old + 1))  # the folder moved (and its listing can be trusted)
    reader.read([10], forks=False)  # rank a lists the folder again
    reader.read([20], forks=False)
    assert reader._docs[20][1]["iterators"][0]["workers"] == [22]


def test_ranks_sharing_a_reader_look_for_ended_processes_only_when_their_own_unsampled_files_changed(tmp_path):
    # Two ranks' watchers read one folder, each for its own pids: each one's files are the
    # other's unsampled ones. A look for ended processes is due at a caller's first read, then
    # only when a pid it did not sample has new files (or every RETIRE_EVERY_S).
    reader = inside.InsideReader(str(tmp_path), retire=True)
    names = ["10.json", "11.json", "20.json", "21.json"]
    rank_a, rank_b = {10, 11}, {20, 21}
    assert reader._retire_due(names, rank_a, 10) and reader._retire_due(names, rank_b, 20)
    for _ in range(3):  # the ranks alternate: neither one's unsampled files changed
        assert not reader._retire_due(names, rank_a, 10)
        assert not reader._retire_due(names, rank_b, 20)
    assert reader._retire_due([*names, "22.json"], rank_a, 10)  # rank b's new worker: rank a looks
    assert not reader._retire_due([*names, "22.json"], rank_b | {22}, 20)  # its own: sampled
    assert reader._retire_due(names, None, None)  # a read of the whole folder always looks


def test_a_look_for_ended_processes_looks_up_only_pids_no_rank_sampled_lately(tmp_path, monkeypatch):
    # The ranks of a job share one reader; each samples its own processes. At a look for
    # processes that ended, a pid another rank sampled within SAMPLED_KEPT_S is alive (no /proc
    # lookup); only the others are looked up, and the ended one's files go.
    for pid in (10, 20):
        (tmp_path / f"{pid}.json").write_text("{}")
    looked: list = []
    monkeypatch.setattr(inside, "_alive", lambda stem: looked.append(stem) or stem != "30")
    reader = inside.InsideReader(str(tmp_path), retire=True)
    reader.read([20], forks=False)  # rank b samples pid 20; pid 10 is looked up
    assert looked == ["10"]
    looked.clear()
    (tmp_path / "30.json").write_text("{}")  # a process that ended
    reader.read([10], forks=False)  # rank a, for its own pid 10: pid 20 was sampled by rank b
    assert looked == ["30"] and sorted(os.listdir(tmp_path)) == ["10.json", "20.json"]
    # rank b's last full read 20 s ago (its looks come every warning_interval_s, 15 s by
    # default): its pids are still alive; 61 s ago (a rank that ended): looked up again
    t, pids = reader._sampled[20]
    for age, lookups in ((20.0, []), (inside.SAMPLED_KEPT_S + 1, ["20"])):
        reader._sampled[20] = (t - age, pids)
        reader._retired_at = float("-inf")
        looked.clear()
        reader.read([10], forks=False)
        assert looked == lookups
    reader._sampled[20] = (t, pids)
    # a caller's own pids are those of its latest read only: its worker that ended is looked up
    # at once (workers recreated every epoch must not pile up)
    (tmp_path / "11.json").write_text("{}")
    reader.read([10, 11], forks=False)
    looked.clear()
    monkeypatch.setattr(inside, "_alive", lambda stem: looked.append(stem) or stem not in ("11", "30"))
    reader._retired_at = float("-inf")
    reader.read([10], forks=False)
    assert looked == ["11"] and sorted(os.listdir(tmp_path)) == ["10.json", "20.json"]


def test_loader_views_made_through_the_cache_equal_fresh_ones_and_follow_a_new_record_or_histogram():
    def slot(iterator, batches, hist):
        keys = ("wait_ns", "since_ns", "last_ns", "waiting_idx", "waiting_worker", "epoch", "first_ns")
        return {"iterator": iterator, "batches": batches, "hist": hist, **dict.fromkeys(keys, 0)}

    hist = [0] * FMT.HIST.size
    doc = {"iterators": [{"id": 7, "kind": "_MultiProcessingDataLoaderIter", "workers": [11, 12]}]}
    cache: dict = {}
    first = inside.loader_views(5, doc, [slot(7, 3, hist)], cache)
    assert first == inside.loader_views(5, doc, [slot(7, 3, hist)]) and first[0].workers == (11, 12)
    hist2 = list(hist)
    hist2[3] = 4
    moved = inside.loader_views(5, doc, [slot(7, 9, hist2)], cache)[0]
    assert (
        moved.batches == 9 and moved.intervals == 4 and moved.interval_p50_s == inside.percentile_s(tuple(hist2), 0.5)
    )
    doc2 = {"iterators": [{"id": 7, "kind": "_MultiProcessingDataLoaderIter", "workers": [11, 13]}]}
    assert inside.loader_views(5, doc2, [slot(7, 9, hist2)], cache)[0].workers == (11, 13)  # the file changed
    inside.loader_views(5, doc2, [], cache)
    assert not cache  # the iterator ended: forgotten


def test_an_unchanged_folder_is_not_listed_again_and_a_record_the_recorder_replaces_is_read_again(tmp_path):
    # The recorder's own writer: records are renamed into place, which moves the folder's mtime.
    # While it stays (and the listing came well after it), the listing and the records read
    # before are used again: a record changed in place (which the recorder never does) is not
    # seen; one the recorder replaces is. A listing close to the mtime is not trusted.
    FMT._FOLDER = str(tmp_path)
    try:
        proc_state = FMT._Process(str(tmp_path))
        slot = proc_state.new_iterator({"kind": "_MultiProcessingDataLoaderIter", "workers": [11, 12]})
        proc_state.write_json()
        slot.enter(0, 0)
        slot.delivered()
    finally:
        FMT._FOLDER = None
    pid = os.getpid()
    json_path = tmp_path / f"{pid}.json"

    old = time.time() - 60

    def age_folder():
        os.utime(tmp_path, (old, old))

    reader = inside.InsideReader(str(tmp_path))
    age_folder()
    assert reader.read().loaders[0].workers == (11, 12)
    in_place = json.loads(json_path.read_text())
    in_place["iterators"][0]["workers"] = [11, 99]
    json_path.write_text(json.dumps(in_place))  # in place: the folder's mtime stays
    age_folder()
    assert reader.read().loaders[0].workers == (11, 12)  # the trusted listing's record
    assert reader.read(counters=True).loaders[0].workers == (11, 12)
    FMT._write_atomic(str(json_path), dict(in_place, iterators=[dict(in_place["iterators"][0], workers=[11, 13])]))
    assert reader.read().loaders[0].workers == (11, 13)  # replaced: the folder moved, listed and read again
    json_path.write_text(json.dumps(in_place))  # in place, just after a listing close to the mtime
    assert reader.read().loaders[0].workers == (11, 99)  # that listing was not trusted: every record's stat


# The job writes the recorder's folder, and a root dlwatch does not trust it (NOTE [ What the job
# writes ] in watchdog/collect/inside.py): each test below plays the job as an attacker would.


def test_a_record_planted_for_a_process_outside_the_job_is_never_read(tmp_path):
    # pid 1 runs on every host and is no process of this job: its planted record (a fork record
    # and an exec) must not be parsed or kept, at a tick, at a hang's examination or at the end
    planted = {
        "pid": 1,
        "exec": {"path": "/bin/planted", "stack": []},
        "iterators": [{"id": 1, "workers": [2], "threads_at_fork": [{"name": "planted", "stack": []}]}],
    }
    (tmp_path / "1.json").write_text(json.dumps(planted))
    me = os.getpid()
    (tmp_path / f"{me}.json").write_text(json.dumps({"pid": me, "exec": {"path": "/bin/true", "stack": []}}))
    reader = inside.InsideReader(str(tmp_path), retire=True)
    for view in (reader.read([me]), reader.read([me], forks=False), reader.read()):  # examination, tick, end
        assert [e.pid for e in view.execs] == [me] and not view.forks, view
    assert 1 not in reader._docs and (tmp_path / "1.json").exists()


def _frames_record(pid: int, iterators: int = FMT.MAX_ITERATORS) -> bytes:
    """A record as heavy as the recorder's bounds allow (1.6 MB for 16 iterators): iterators
    that each forked while 64 threads ran 40 frames deep (short names: many objects for few
    bytes)."""
    frame = {"file": "a", "line": 1, "function": "f"}
    thread = {"name": "t", "stack": [frame] * FMT.MAX_FRAMES}
    its = [{"id": i, "workers": [1], "threads_at_fork": [thread] * FMT.MAX_THREADS} for i in range(1, iterators + 1)]
    return json.dumps({"pid": pid, "iterators": its}).encode()


def test_records_of_many_job_processes_keep_the_memory_bounded_and_the_ones_skipped_are_named(tmp_path):
    import tracemalloc

    pids = list(range(4_100_000, 4_100_012))  # the job's, as the sampler gives them (no real process needed)
    data = _frames_record(0)
    for pid in pids:
        (tmp_path / f"{pid}.json").write_bytes(data)
    reader = inside.InsideReader(str(tmp_path))
    tracemalloc.start()
    try:
        view = reader.read(pids, forks=False)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del view
    assert kept < 100 << 20, f"{kept >> 20} MiB kept of 12 records of {len(data) >> 10} KiB"  # ~12 x 14 MiB before
    assert "skipped: the records kept would weigh over" in (reader.read(pids, forks=False).note or "")


def test_records_of_ended_processes_kept_in_memory_stay_bounded_however_heavy(tmp_path):
    import tracemalloc

    dead = 4_000_000  # above any pid_max: processes that ended, whose files the job wrote
    for i in range(40):  # each names a program of 1.5 MB it exec'd
        doc = {"pid": dead + i, "exec": {"path": "/" + "x" * 1_500_000, "stack": []}}
        (tmp_path / f"{dead + i}.json").write_text(json.dumps(doc))
    reader = inside.InsideReader(str(tmp_path), retire=True)
    tracemalloc.start()
    try:
        execs = len(reader.read([os.getpid()]).execs)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert not os.listdir(tmp_path)  # every ended process's files went
    assert 0 < execs < 40 and kept < 30 << 20, f"{kept >> 20} MiB kept of 40 ended processes' records"  # 57 MiB before


def test_a_record_over_the_size_cap_is_skipped_and_named_and_the_others_kept(tmp_path):
    for name in ("10114.json", "10114.bin"):
        shutil.copy(os.path.join(FIXTURE, name), tmp_path / name)
    (tmp_path / "10115.json").write_text(json.dumps({"pid": 10115, "python": "x" * (3 << 20)}))  # 3 MiB
    view = inside.InsideReader(str(tmp_path)).read([10114, 10115])
    assert [v.iterator for v in view.loaders] == [1, 2] and view.forks
    assert "10115.json: a record of more than 2 MiB" in (view.note or "")


@pytest.mark.parametrize(
    "bad",
    [
        b"[]",
        b"null",
        b'{"iterators": "x"}',
        b'{"iterators": [{"id": 1, "workers": ["a"], "threads_at_fork": [{"stack": []}]}]}',
        b'{"worker": {"id": "x", "rng_start": {"a": "b"}}}',
        b'{"exec": {"path": "/x", "stack": [1]}}',
        b"[" * 1_000_000 + b"]" * 1_000_000,
        b'{"later": ' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"}",  # under a key the reader does not use
        b'{"pid": 1',
    ],
    ids=[
        "list",
        "null",
        "str-iterators",
        "str-worker-pid",
        "str-id",
        "int-frame",
        "deep",
        "deep-key",
        "cut",
    ],
)
def test_a_malformed_record_is_skipped_and_named_and_the_others_kept(tmp_path, bad):
    for name in ("10114.json", "10114.bin"):
        shutil.copy(os.path.join(FIXTURE, name), tmp_path / name)
    (tmp_path / "10115.json").write_bytes(bad)
    for pids in ([10114, 10115], None):  # a rank's examination; a one-off look at the folder
        view = inside.InsideReader(str(tmp_path)).read(pids)
        assert [v.iterator for v in view.loaders] == [1, 2] and len(view.forks) == 2
        assert "10115.json: " in (view.note or ""), view.note


def other_names(pid: int, n: int) -> list:
    """``n`` other names than ``str(pid)`` that ``int()`` reads as ``pid``: leading zeros, and
    digits of other scripts (Unicode decimal digits, which ``int`` accepts)."""
    # zero in ASCII, Arabic-Indic, Devanagari, full-width and Bengali digits
    zeros = [chr(c) for c in (0x30, 0x660, 0x966, 0xFF10, 0x9E6)]
    out = []
    for lead in range(0, 236):  # 255 bytes a name at most
        for zero in zeros:
            name = "0" * lead + "".join(chr(ord(zero) + int(d)) for d in str(pid))
            if name != str(pid):
                out.append(name)
    assert len(out) >= n
    return out[:n]


def test_counter_files_held_open_stay_few_whatever_the_job_writes(tmp_path):
    import resource

    shutil.copy(os.path.join(FIXTURE, "10114.json"), tmp_path)
    counters = open(os.path.join(FIXTURE, "10114.bin"), "rb").read()
    (tmp_path / "10114.bin").write_bytes(counters)
    for name in other_names(10114, 1100):  # 010114.bin, 0010114.bin, ..., in other scripts' digits
        (tmp_path / f"{name}.bin").write_bytes(counters)
    workers = list(range(4_100_000, 4_100_400))  # more job processes than descriptors are held
    for pid in workers:
        (tmp_path / f"{pid}.fetch").write_bytes(FMT.FETCH.pack(3, 0))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))  # a usual default
    reader = inside.InsideReader(str(tmp_path))
    try:
        before = len(os.listdir("/proc/self/fd"))
        for counters_only in (False, True, True):  # a full tick, then lean ones (reopened on demand)
            view = reader.read([10114, *workers], forks=False, counters=counters_only)
            held = len(os.listdir("/proc/self/fd")) - before
            assert held <= 256, f"{held} descriptors held"
            assert [v.iterator for v in view.loaders] == [1, 2], view.note
            assert len(view.fetches) == len(workers) and {f.samples for f in view.fetches} == {3}
    finally:
        for fd, _ino in reader._held.values():
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_worker_ids_int_refuses_are_left_out_of_the_first_batches(tmp_path):
    doc = json.load(open(os.path.join(FIXTURE, "10114.json")))
    doc["iterators"][0]["first_batches"] = {"\u00b2": "x", "--1": "y", "0": "aa"}  # a superscript two; two signs
    (tmp_path / "10114.json").write_text(json.dumps(doc))
    shutil.copy(os.path.join(FIXTURE, "10114.bin"), tmp_path)
    view = inside.InsideReader(str(tmp_path)).read([10114])
    assert view.loaders[0].first_batches == ((0, "aa"),) and view.note is None


def test_a_parent_others_can_write_is_never_safe_unless_sticky(tmp_path):
    from watchdog.collect import inside

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # ours, but anyone may rename what it holds
    assert not inside.safe_parent(str(shared / "dlwatch-hook-abcdefgh"))
    os.chmod(shared, 0o1777)  # sticky, as /tmp
    assert inside.safe_parent(str(shared / "dlwatch-hook-abcdefgh"))
    os.chmod(shared, 0o755)
    assert inside.safe_parent(str(shared / "dlwatch-hook-abcdefgh"))
