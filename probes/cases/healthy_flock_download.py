"""Healthy control: the dataset's files are guarded by a lock file. Main's downloader thread
holds ``flock(LOCK_EX)`` while the archive arrives from a slow store (25 s, a socket with a
120 s timeout); the workers wait in ``flock(LOCK_SH)`` for it, then read. The workers are
blocked with no timeout, but the holder is alive and moving: slow, not stuck. Modelled on
meta-pytorch/data#409 and huggingface/datasets#1672 (workers waiting on a dataset's lock while
another process downloads or prepares it).

Run: ``python -m probes.cases.healthy_flock_download``. The watchdog must never report it.
"""

import fcntl
import os
import socket
import tempfile
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

CHUNKS, CHUNK = 25, 64 << 10


def store(listener):
    conn, _ = listener.accept()
    with conn:
        for _ in range(CHUNKS):
            time.sleep(1.0)  # a slow object store
            conn.sendall(b"x" * CHUNK)


def download(folder, address, locked):
    with open(os.path.join(folder, "data.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        locked.set()
        with socket.create_connection(address, timeout=120) as sock, open(os.path.join(folder, "data.bin"), "wb") as f:
            left = CHUNKS * CHUNK  # the archive's size, from its manifest
            while left:
                chunk = sock.recv(min(left, 1 << 16))
                left -= len(chunk)
                f.write(chunk)
        fcntl.flock(lock, fcntl.LOCK_UN)


class LockedFiles(Dataset):
    def __init__(self, folder):
        self.folder = folder

    def __len__(self):
        return 16

    def __getitem__(self, i):
        with open(os.path.join(self.folder, "data.lock")) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)  # waits for the download
            with open(os.path.join(self.folder, "data.bin"), "rb") as f:
                f.seek(i * 16)
                return torch.tensor(float(len(f.read(16))))


def main():
    folder = tempfile.mkdtemp(prefix="dataset-")
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=store, args=(listener,), daemon=True).start()
    locked = threading.Event()
    threading.Thread(target=download, args=(folder, listener.getsockname(), locked), daemon=True).start()
    locked.wait()
    for step, batch in enumerate(DataLoader(LockedFiles(folder), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
