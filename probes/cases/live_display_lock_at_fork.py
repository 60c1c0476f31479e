"""Target: a live progress display from an installed package refreshes in a thread of main that
holds the display's ``self._lock`` while it redraws; the DataLoader forks its workers while the
lock is held, and each worker's first ``display.update()`` (from ``__getitem__``) blocks forever
on the copy of that held lock (Textualize/rich#2046: ``rich.live.Live``'s refresh thread). The
job also has a cache of its own whose loader thread holds *its* ``self._lock`` at the fork: a
second lock with the same name, which the report must not blame.

The package is a small module written at start into a ``site-packages`` folder of a temporary
prefix (the report's ``where`` must be the job's own ``__getitem__`` line, not the library's
frame the worker blocks in).

Run: ``python -m probes.cases.live_display_lock_at_fork``. The watchdog must conclude
``fork_inherited_lock``, proven, naming the ``display.update(...)`` line in ``__getitem__`` and
the display's refresh thread (``Live._refresh``) as the holder at the fork.
"""

import os
import sys
import tempfile
import textwrap
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

LIBRARY = '''
"""A live progress display (the shape of rich.live.Live): a refresh thread redraws under the
display's lock; update() takes the same lock."""
import threading
import time


class Live:
    def __init__(self, refresh_s=0.5):
        self._lock = threading.RLock()
        self._text = ""
        self._refresh_s = refresh_s
        self._thread = threading.Thread(target=self._refresh, name="live-refresh", daemon=True)
        self._thread.start()

    def _refresh(self):
        while True:
            with self._lock:
                time.sleep(self._refresh_s)  # redrawing a large table to a slow terminal
            time.sleep(0.0005)

    def update(self, text):
        with self._lock:
            self._text = text
'''


def install_library():
    """Write the display package into a fresh site-packages folder and put it on sys.path."""
    prefix = tempfile.mkdtemp(prefix="live-display-")
    site = os.path.join(prefix, "lib", "python3", "site-packages")
    os.makedirs(site)
    with open(os.path.join(site, "livedisplay.py"), "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(LIBRARY))
    sys.path.insert(0, site)


class Cache:
    """The job's own cache: its loader thread holds the cache's lock while it waits for the
    index (a lock also named ``self._lock``, but another object's)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ready = threading.Event()
        threading.Thread(target=self._fill, name="cache-fill", daemon=True).start()

    def _fill(self):
        with self._lock:
            self._ready.wait()  # the index arrives later; this lock is not the one workers need


class ShowingDataset(Dataset):
    def __init__(self, display):
        self.display = display

    def __len__(self):
        return 32

    def __getitem__(self, i):
        self.display.update(f"sample {i}")  # blocks forever: the display's lock was held at fork
        return torch.tensor(float(i))


def main():
    install_library()
    import livedisplay

    display = livedisplay.Live()
    Cache()
    time.sleep(0.3)  # both threads hold their locks now
    for step, batch in enumerate(DataLoader(ShowingDataset(display), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()
