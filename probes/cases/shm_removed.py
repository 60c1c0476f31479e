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


def cleaner():
    mine = f"torch_{os.getpid()}_"
    while True:
        for name in os.listdir("/dev/shm"):
            if name.startswith("torch_") and not name.startswith(mine):
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
