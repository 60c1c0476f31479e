"""Multi-rank jobs under ``torchrun`` (gloo, CPU): every rank watched as a main process of its
own, a stuck rank named in one report, the other rank said to wait for it, and a healthy job
left alone. Each run is bounded and every process group it starts is killed."""

from __future__ import annotations

import textwrap

from tests.real.helpers import DLWATCH, PY, load_report, reports, run_bounded

RANKS = textwrap.dedent(
    """
    import os, threading, time, torch, torch.distributed as dist
    from torch.utils.data import DataLoader, Dataset

    STUCK_RANK = int(os.environ.get("STUCK_RANK", "-1"))
    FAILING_RANK = int(os.environ.get("FAILING_RANK", "-1"))

    class Frames(Dataset):
        def __len__(self):
            return 400
        def __getitem__(self, i):
            if int(os.environ["RANK"]) == STUCK_RANK and i >= 64:
                threading.Event().wait()   # this rank's workers block forever
            if int(os.environ["RANK"]) == FAILING_RANK and i >= 64:
                time.sleep(6)  # a slow corrupt record: the job runs long enough to be sampled whole
                raise ValueError(f"sample {i} is corrupt")
            return torch.ones(4)

    def main():
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x in DataLoader(Frames(), batch_size=8, num_workers=2):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            time.sleep(0.01)
        dist.destroy_process_group()
        print(f"rank {os.environ['RANK']} done", flush=True)

    if __name__ == "__main__":
        main()
    """
)


def _torchrun(tmp_path, stuck_rank, args, timeout_s=150, failing_rank=-1):
    import os

    script = tmp_path / "train_ranks.py"
    script.write_text(RANKS)
    env = {**os.environ, "STUCK_RANK": str(stuck_rank), "FAILING_RANK": str(failing_rank)}
    cmd = (
        DLWATCH
        + ["run", "--report-dir", str(tmp_path / "reports")]
        + args
        + ["--", PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)]
    )
    return run_bounded(cmd, timeout_s, env=env)


def test_a_rank_whose_workers_block_is_named_and_ended_and_the_other_rank_waits_for_it(tmp_path):
    code, out, err = _torchrun(
        tmp_path, 1, ["--stall-timeout", "10", "--on-hang", "terminate", "--terminate-grace", "3"]
    )
    assert code == 124, err
    found = reports(str(tmp_path / "reports"))
    assert len(found) == 1 and found[0].endswith("-rank1"), found  # one report, for the stuck rank
    doc = load_report(found[0])
    assert doc["job"]["rank"]["RANK"] == "1" and doc["job"]["rank"]["WORLD_SIZE"] == "2"
    first = doc["diagnoses"][0]
    assert first["kind"] in ("worker_deadlock", "fork_inherited_lock", "worker_stuck"), first
    stuck_line = next(i for i, line in enumerate(RANKS.splitlines(), 1) if "threading.Event().wait()" in line)
    assert first["location"].endswith(f"train_ranks.py:{stuck_line}"), first["location"]
    assert doc["stall"]["certainty"] == "proven"
    assert "rank 1 of 2" in err and "waiting for another rank: rank 1" in err, err[-3000:]


def test_a_healthy_two_rank_job_gets_no_report(tmp_path):
    code, out, err = _torchrun(tmp_path, -1, ["--stall-timeout", "5"])
    assert code == 0, err
    assert "rank 0 done" in out and "rank 1 done" in out
    assert reports(str(tmp_path / "reports")) == [], err
    assert "watching rank 0 of 2" in err and "watching rank 1 of 2" in err


def test_a_rank_that_crashes_gets_a_crash_report_with_the_launcher_and_ranks_named(tmp_path):
    code, out, err = _torchrun(tmp_path, -1, ["--stall-timeout", "30"], failing_rank=1)
    assert code != 0, err
    found = reports(str(tmp_path / "reports"))
    assert found, err[-2000:]
    doc = load_report(found[-1])
    assert doc["mode"] == "crash" and doc["diagnoses"][0]["kind"] == "dataset_error", doc["diagnoses"][0]
    roles = {p["role"] for s in doc["timeline"] for p in s["processes"]}
    assert "launcher" in roles and "rank" in roles, roles
    # the launcher's timeline holds each rank as its own watcher read it (its threads included),
    # not a second, thinner read of the same processes
    assert any(p["role"] == "rank" and p["threads"] for s in doc["timeline"] for p in s["processes"])
    assert "sample 64 is corrupt" in doc["diagnoses"][0]["summary"]  # torchrun's [rank1]: prefixes are read through
