"""Target: a deadlock inside the main process, outside the loader (meta-pytorch/data#1176,
fgnt/lazy_dataset#58). The training loop stops early and closes its prefetcher: ``close()``
joins the prefetch thread, which is blocked forever in ``queue.Queue.put`` on the full buffer
that nobody reads any more. The DataLoader's persistent workers sit idle.

Run: ``python -m probes.cases.main_join_prefetch_thread``. The watchdog must conclude
``main_thread_deadlock``, proven, naming both threads and both lines (``self.thread.join()`` and
``self.buffer.put(batch)``).
"""

import queue
import threading

import torch
from torch.utils.data import DataLoader, TensorDataset


class ThreadPrefetcher:
    def __init__(self, loader, buffer_size=1):
        self.buffer = queue.Queue(maxsize=buffer_size)
        self.thread = threading.Thread(target=self._run, args=(loader,), name="prefetch", daemon=True)
        self.thread.start()

    def _run(self, loader):
        for batch in loader:
            self.buffer.put(batch)  # blocks forever once nobody consumes
        self.buffer.put(None)

    def __iter__(self):
        while (batch := self.buffer.get()) is not None:
            yield batch

    def close(self):
        self.thread.join()  # main waits here forever


def main():
    data = TensorDataset(torch.randn(4096, 16))
    loader = DataLoader(data, batch_size=32, num_workers=2, persistent_workers=True)
    prefetcher = ThreadPrefetcher(loader)
    for step, (_x,) in enumerate(prefetcher):
        if step + 1 == 20:
            break
    print("reached max_steps, closing the prefetcher", flush=True)
    prefetcher.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
