"""Target: a shared-memory file is deleted underneath the job (systemd-logind's ``RemoveIPC``
when the user logs out, logind.conf(5); a ``/dev/shm`` cleaner). Under the ``file_system``
sharing strategy workers pass batches as ``/dev/shm/torch_<pid>_…`` files; a cleaner thread
removes them before main opens them, and main fails with "unable to open shared memory object
… No such file or directory (2)", while ``/dev/shm`` is almost empty. Exit code 1.

Run: ``python -m probes.cases.shm_removed``. The watchdog must write a crash report
``shm_removed`` (never ``shm_exhausted``), with the RemoveIPC remedy.
"""

import os
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

torch.multiprocessing.set_sharing_strategy("file_system")


def _my_workers() -> set:
    """Pids of this process's children (its DataLoader workers), from the kernel's
    ``/proc/self/task/*/children`` (proc(5)); empty where the kernel lacks those files."""
    pids = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(f.read().split())
        except OSError:
            pass
    return pids


def cleaner():
    # Only this job's own files: those its workers created (``torch_<worker pid>_…``). A cleaner
    # that took every ``torch_*`` file would break any other PyTorch job on the machine.
    workers, seen_at = set(), 0.0
    while True:
        if time.monotonic() - seen_at > 0.1:
            workers, seen_at = _my_workers(), time.monotonic()
        for name in os.listdir("/dev/shm"):
            parts = name.split("_")
            if len(parts) > 2 and parts[0] == "torch" and parts[1] in workers:
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
        time.sleep(0.0005)


class Samples(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.randn(256)


def main():
    threading.Thread(target=cleaner, daemon=True).start()
    for _step, _batch in enumerate(DataLoader(Samples(), batch_size=8, num_workers=2)):
        pass
    print("finished without error", flush=True)


if __name__ == "__main__":
    main()
