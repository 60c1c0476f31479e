"""The inside view's bootstrap on real jobs: it records, and the job cannot tell it is there
(exit code, stdout, stderr, its own sitecustomize), also under torchrun."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.real.helpers import DLWATCH, PY, kill_tree, run_bounded, start
from watchdog.collect import inside

JOB = textwrap.dedent(
    """
    import os, sys
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Squares(Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            if i == int(os.environ.get("FAIL_AT", "-1")):
                raise ValueError(f"sample {i} is corrupt")
            return torch.tensor([i * i])

    print("PYTHONPATH=" + os.environ.get("PYTHONPATH", ""), flush=True)
    print("sitecustomize:", getattr(sys.modules.get("sitecustomize"), "MARK", None), flush=True)
    loader = DataLoader(Squares(), batch_size=4, num_workers=2)
    for epoch in range(2):
        total = sum(int(b.sum()) for b in loader)
        print(f"epoch {epoch} total {total}", flush=True)
    print("to stderr", file=sys.stderr)
    sys.exit(int(os.environ.get("EXIT", "0")))
    """
)


def _run(cmd, env, timeout_s=120):
    return run_bounded(cmd, timeout_s, env=env)


def _timing_free(stderr):
    """``stderr`` with the line numbers of dataloader.py's frames blanked: ``_next_data`` returns
    a failed batch from one of two lines depending on whether it arrived before it was asked
    for (a race between workers, with or without the hook)."""
    import re

    return re.sub(r'(dataloader\.py", line )\d+', r"\1N", stderr)


def _hooked(env, folder):
    return inside.hook_env(env, str(folder), os.getpid())


@pytest.mark.parametrize(
    "extra",
    [{}, {"EXIT": "3"}, {"FAIL_AT": "13"}],
    ids=["clean-exit", "exit-3", "dataset-error-traceback"],
)
def test_the_job_cannot_tell_the_hook_is_there(tmp_path, extra):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    base = {**os.environ, **extra}
    base.pop("PYTHONPATH", None)
    plain = _run([PY, str(script)], base)
    hooked = _run([PY, str(script)], _hooked(base, folder))
    assert hooked[0] == plain[0]
    assert hooked[1].replace(inside.BOOT_DIR, "") == plain[1]
    assert _timing_free(hooked[2]) == _timing_free(plain[2])
    if "FAIL_AT" in extra:
        assert "Caught ValueError in DataLoader worker process" in hooked[2] and "_dlwatch" not in hooked[2]
    else:
        view = inside.InsideReader(str(folder)).read()
        assert [v.batches for v in view.loaders] == [8, 8], view


def test_the_jobs_own_sitecustomize_still_runs_and_its_errors_read_the_same(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("MARK = 'theirs'\nprint('their sitecustomize ran')\n")
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    base = {**os.environ, "PYTHONPATH": str(own)}
    plain = _run([PY, str(script)], base)
    hooked = _run([PY, str(script)], _hooked(base, folder))
    assert "their sitecustomize ran" in plain[1] and "sitecustomize: theirs" in plain[1]
    assert hooked[0] == plain[0] == 0
    assert hooked[1].replace(inside.BOOT_DIR + os.pathsep, "") == plain[1]
    assert hooked[2] == plain[2]
    (own / "sitecustomize.py").write_text("raise RuntimeError('their sitecustomize is broken')\n")
    plain = _run([PY, "-c", "print('ran')"], base)
    hooked = _run([PY, "-c", "print('ran')"], _hooked(base, folder))
    assert "their sitecustomize is broken" in plain[2]
    assert hooked == plain


def test_dlwatch_run_no_hook_leaves_pythonpath_alone(tmp_path, short_tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    # a TMPDIR of this test's own: hook folders that tests beside it make in /tmp are not its
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TMPDIR"] = str(short_tmp_path)
    code, out, err = _run(DLWATCH + ["run", "--no-hook", "--report-dir", str(tmp_path), "--", PY, str(script)], env)
    assert code == 0, err
    assert "PYTHONPATH=\n" in out
    assert _hook_folders(short_tmp_path) == set()
    code, out, err = _run(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, str(script)], env)
    assert code == 0, err
    assert f"PYTHONPATH={inside.BOOT_DIR}\n" in out
    assert _hook_folders(short_tmp_path) == set()  # removed when the job ended


def _hook_folders(folder) -> set:
    return {n for n in os.listdir(folder) if n.startswith("dlwatch-hook-")}


RANKS = textwrap.dedent(
    """
    import os, torch
    from torch.utils.data import DataLoader, TensorDataset
    rank = int(os.environ["RANK"])
    loader = DataLoader(TensorDataset(torch.arange(40.0)), batch_size=4, num_workers=1)
    n = sum(1 for _ in loader)
    print(f"rank {rank} batches {n}", flush=True)
    """
)


def test_every_rank_records_under_torchrun(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    env = _hooked({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, folder)
    cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "0", str(script)]
    code, out, err = _run(cmd, env, timeout_s=150)
    assert code == 0, err
    view = inside.InsideReader(str(folder)).read()
    assert sorted(v.batches for v in view.loaders) == [10, 10], view
    assert len({v.pid for v in view.loaders}) == 2


PAUSING = textwrap.dedent(
    """
    import os, time, torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.arange(400.0)), batch_size=4, num_workers=2)
    for i, batch in enumerate(loader):
        if i == 30:
            print(f"paused pid={os.getpid()}", flush=True)
            time.sleep(120)
    """
)


def test_dlwatch_status_shows_a_running_jobs_loader(tmp_path):
    import re
    import subprocess

    from tests.real.helpers import wait_for

    script = tmp_path / "job.py"
    script.write_text(PAUSING)
    proc = start(DLWATCH + ["run", "--report-dir", str(tmp_path), "--", PY, str(script)])
    try:
        line = wait_for(lambda: proc.stdout.readline(), 60, "the job to pause")
        pid = int(re.search(r"pid=(\d+)", line).group(1))
        done = subprocess.run(DLWATCH + ["status", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "31 batches (epoch 0)" in done.stdout and "num_workers=2" in done.stdout, done.stdout
        assert "nothing is pinned" in done.stdout
        table = done.stdout.split("DataLoader (inside view):")[0]  # the outside view comes first
        assert re.search(rf"^\s+{pid}\s+main\s", table, re.M) and table.count("dataloader_worker") == 2, table
        bad = subprocess.run(DLWATCH + ["status", "--pid", "999999999"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "999999999" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    finally:
        kill_tree(proc)


def test_a_process_outside_the_watched_tree_does_not_record(tmp_path):
    import subprocess

    script = tmp_path / "job.py"
    script.write_text(JOB)
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    stranger = subprocess.Popen(["sleep", "60"])  # alive, but not an ancestor of the job
    try:
        env = inside.hook_env({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, str(folder), stranger.pid)
        code, out, err = _run([PY, str(script)], env)
    finally:
        stranger.kill()
        stranger.wait()
    assert code == 0, err
    assert os.listdir(folder) == []
    # A folder open to others is refused too, even for the watched tree.
    folder.chmod(0o755)
    code, out, err = _run(
        [PY, str(script)], _hooked({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, folder)
    )
    assert code == 0 and os.listdir(folder) == []


FETCHER_SUBCLASS = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    class Fetch(_MapDatasetFetcher):  # fills __dict__ itself, as some libraries do
        def __init__(self, ds):
            self.__dict__.update(dataset=ds, auto_collation=False, collate_fn=lambda x: x, drop_last=False)

    f = Fetch([1, 2, 8, 3])
    print(f.fetch(2), sorted(vars(f)))
    it = iter(DataLoader([1, 2, 3]))
    next(it)
    print(sorted(k for k in vars(it) if not k.startswith("_dlwatch")))
    """
)


def test_code_that_reads_or_fills_the_hooked_objects_dicts_sees_no_difference(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(FETCHER_SUBCLASS)
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    plain = _run([PY, str(script)], base)
    hooked = _run([PY, str(script)], _hooked(base, folder))
    assert plain[0] == 0 and hooked == plain, (plain, hooked)


def test_attach_to_a_job_started_under_hook_env_has_the_inside_view_and_removes_its_folder_after_ending_it(tmp_path):
    import shlex

    from tests.real.helpers import TERMINATE_AFTER_4_S, TRAIN, load_report, reports

    code, out, err = run_bounded(DLWATCH + ["hook-env"], 60)
    assert code == 0, err
    env = dict(os.environ)
    env.update(dict(item.split("=", 1) for item in shlex.split(out)))
    folder = env["DLWATCH_HOOK_DIR"]
    assert os.path.basename(folder).startswith("dlwatch-hook-") and os.path.isdir(folder)
    job = start(TRAIN + ["--fault", "fork-lock", "--num-workers", "2"], env=env)
    try:
        code, _out, err = run_bounded(
            DLWATCH + ["attach", "--pid", str(job.pid), *TERMINATE_AFTER_4_S, "--report-dir", str(tmp_path)], 150
        )
        assert code == 124, err
        (report,) = reports(str(tmp_path))
        assert load_report(report)["diagnoses"][0]["kind"] == "fork_inherited_lock"
        with open(os.path.join(report, "report.txt"), encoding="utf-8") as f:
            assert "DataLoader (inside view):" in f.read()
        assert not os.path.exists(folder), "the hook folder of the job dlwatch ended was left behind"
    finally:
        kill_tree(job)
        if os.path.isdir(folder):
            import shutil

            shutil.rmtree(folder)


PERSISTENT_JOB = textwrap.dedent(
    """
    import os
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Squares(Dataset):
        def __len__(self):
            return 256
        def __getitem__(self, i):
            return torch.tensor([i * i])

    folder = os.environ["DLWATCH_HOOK_DIR"]
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, persistent_workers=True)
    for epoch in range(5):
        sum(int(b.sum()) for b in loader)
        records = sorted(n for n in os.listdir(folder) if n.endswith(".json") and n != f"{os.getpid()}.json")
        seen = [(n, os.stat(os.path.join(folder, n)).st_ino) for n in records]
        print(f"epoch {epoch} {seen}", flush=True)
    """
)


def test_a_persistent_worker_writes_its_record_once_not_at_every_epoch(tmp_path):
    """Each write of a record replaces the file (a new inode), and the sidecar lists the folder
    and checks every record again after each change: a persistent worker's record, written at
    its first epoch (its RNG states, then again after 32 samples), stays the same file over the
    next four epochs (before, each epoch's new fetcher wrote it again)."""
    script = tmp_path / "job.py"
    script.write_text(PERSISTENT_JOB)
    folder = tmp_path / "hook"
    folder.mkdir(mode=0o700)
    base = dict(os.environ)
    base.pop("PYTHONPATH", None)
    code, out, err = _run([PY, str(script)], _hooked(base, folder))
    assert code == 0, err[-3000:]
    epochs = [line.split(" ", 2)[2] for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 5 and "json" in epochs[0], out
    assert epochs[1:] == [epochs[0]] * 4, out
    view = inside.InsideReader(str(folder)).read()
    # the RNG check still has each worker's states, at its start and 32 samples later
    assert len(view.rng) == 2 and all(c.start and c.later for c in view.rng), view.rng
