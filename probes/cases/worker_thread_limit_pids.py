"""Target: the job runs in a pids cgroup whose ``pids.max`` leaves no room for the threads
its workers start (a container's ``--pids-limit``, a Kubernetes ``podPidsLimit``, systemd's
``TasksMax``: pytorch/pytorch#43911, huggingface/datasets#2963). Each worker's first
``data_queue.put`` starts multiprocessing's queue feeder thread; ``pthread_create`` fails
with EAGAIN, the worker dies of the uncaught "RuntimeError: can't start new thread" with exit
code 1, and main raises "DataLoader worker (pid N) exited unexpectedly with exit code 1".
``worker_init_fn`` lowers ``pids.max`` to the tasks already running, once main has started
its own feeder threads; the target moves itself back and removes the cgroup as it ends.

Run: ``python -m probes.cases.worker_thread_limit_pids`` as root (cgroup v1 or v2 with the
pids controller; it exits 0 saying why when it cannot make the cgroup). The watchdog must
write a crash report ``worker_exited`` naming exit code 1, the thread that could not start,
and the pids limit with its value, with no OOM-killer advice.
"""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")


def make_cgroup():
    """A pids cgroup of this process's own, or ``None`` when none can be made."""
    for root in ROOTS:
        if os.path.exists(os.path.join(root, "pids.max")) or os.path.exists(os.path.join(root, "cgroup.procs")):
            folder = os.path.join(root, f"dlwatch-case-pids-{os.getpid()}")
            try:
                os.mkdir(folder)
                if not os.path.exists(os.path.join(folder, "pids.max")):
                    os.rmdir(folder)
                    continue
                with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
                return root, folder
            except OSError:
                continue
    return None


def leave_cgroup(root, folder):
    with open(os.path.join(root, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    for _ in range(50):
        try:
            os.rmdir(folder)
            return
        except OSError:
            time.sleep(0.1)  # the workers may still be leaving


class Rows(Dataset):
    def __init__(self, folder):
        self.folder = folder

    def __len__(self):
        return 256

    def __getitem__(self, i):
        return torch.full((8,), float(i))


def cap_tasks(worker_id):
    info = torch.utils.data.get_worker_info()
    time.sleep(1.0)  # main has started its feeder threads and waits for data
    with open(os.path.join(info.dataset.folder, "pids.current")) as f:
        current = f.read().strip()
    with open(os.path.join(info.dataset.folder, "pids.max"), "w") as f:
        f.write(current)  # no new task may start in the cgroup
    time.sleep(3.0)  # the limit stands a few samples before the worker's feeder thread needs a task


def main():
    made = make_cgroup()
    if made is None:
        print("worker_thread_limit_pids needs root and a pids cgroup controller", file=sys.stderr)
        return
    root, folder = made
    try:
        loader = DataLoader(Rows(folder), batch_size=8, num_workers=2, worker_init_fn=cap_tasks)
        for step, batch in enumerate(loader):
            print("step", step, tuple(batch.shape), flush=True)
    finally:
        leave_cgroup(root, folder)


if __name__ == "__main__":
    main()
