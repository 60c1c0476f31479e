"""Target: ``/dev/shm`` has room for a batch's stacked samples but not for its labels. A worker's
``default_collate`` stacks the sample tensors straight into shared memory
(``collate_tensor_fn``, torch/utils/data/_utils/collate.py), but turns the integer labels into
a plain ``torch.tensor``; the worker's queue feeder thread moves that tensor to ``/dev/shm``
only when it pickles the batch, fails with "No space left on device", prints the traceback and
drops the batch (``multiprocessing.queues.Queue._feed``). Main then waits for that batch
forever: not a crash but a hang, whose cause is the full ``/dev/shm`` (the same race turns
some of pytorch/pytorch#5040's crashes into hangs). The case runs with a private 16 MiB
``/dev/shm``, which main fills, once the workers are started, until exactly one batch of
samples fits.

Run: ``python -m probes.cases.shm_full_labels_lost`` (``dlwatch probe repro
shm_full_labels_lost`` mounts the small ``/dev/shm``). The watchdog must conclude
``shm_exhausted`` for the hang, with the lost batch among its findings.
"""

import os
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_FLOATS = 256 * 1024  # 1 MiB a sample
BATCH = 4
PAGE = os.sysconf("SC_PAGE_SIZE")


class Frames(Dataset):
    def __init__(self, go: str):
        self.go = go

    def __len__(self):
        return 64

    def __getitem__(self, i):
        while not os.path.exists(self.go):  # until main has filled /dev/shm
            time.sleep(0.05)
        return torch.full((SAMPLE_FLOATS,), float(i)), i  # a tensor and an int label


def fill_dev_shm(leave_bytes: int) -> str:
    """Write a file in /dev/shm that leaves exactly ``leave_bytes`` (rounded up to pages) free."""
    st = os.statvfs("/dev/shm")
    leave_pages = -(-leave_bytes // PAGE)
    fill = (st.f_bavail - leave_pages) * st.f_frsize
    fd, path = tempfile.mkstemp(prefix="filler-", dir="/dev/shm")
    with os.fdopen(fd, "wb") as f:
        f.write(b"\0" * fill)
    return path


def main():
    if os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize > 256 << 20:
        sys.exit("shm_full_labels_lost fills /dev/shm: run it with a small private one (dlwatch probe repro)")
    go = os.path.join(tempfile.mkdtemp(prefix="shm-case-"), "go")
    loader = DataLoader(Frames(go), batch_size=BATCH, num_workers=1, prefetch_factor=1)
    batches = iter(loader)  # the worker and its queues (whose semaphores live in /dev/shm) exist
    filler = fill_dev_shm(BATCH * SAMPLE_FLOATS * 4)
    open(go, "w").close()
    print(f"filled /dev/shm up to one batch of samples (t={time.time():.3f})", flush=True)
    try:
        for step, (x, y) in enumerate(batches):
            print("step", step, x.shape, y.tolist(), flush=True)
    finally:
        os.unlink(filler)


if __name__ == "__main__":
    main()
