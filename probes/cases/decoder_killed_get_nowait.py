"""Target: a decoder process (a ``multiprocessing.Process`` that main starts before the loader)
decodes frames into a ``multiprocessing.Queue``; the DataLoader's workers take them in
``__getitem__`` with ``queue.get_nowait()``, catching ``queue.Empty`` and yielding the CPU
between tries (``os.sched_yield()``: a spin that never blocks, so a slow decoder never stalls a
worker in a lock). After 24
frames the decoder is killed with SIGKILL (as the kernel's OOM killer kills; here it kills
itself the same way, before its last frames): nothing will ever put again, and the workers spin
forever, each burning a core. Modelled on the non-blocking queue loop of
atomicarchitects/nequix#42 (workers looping on ``get(timeout=0)``, about 17% of a core each while
nothing came) and on issue #34 of this project, section 2 (a worker spinning on ``get_nowait()``
for a decoder process that was killed).

Run: ``python -m probes.cases.decoder_killed_get_nowait``. The watchdog must report
``worker_stuck``, suspected (a poll cannot be proven stuck from outside: the loop might give up),
at the spinning line, and name the decoder: its pid, that it was killed by a signal, when.
With ``healthy`` (the decoder slow but alive: a frame every 0.3 s) it must never report it.
"""

import multiprocessing as mp
import os
import queue
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

HEALTHY = sys.argv[1:] == ["healthy"]
FRAMES = 64
KILLED_AFTER = 24


def decode(frames: "mp.Queue") -> None:
    for i in range(FRAMES):
        if HEALTHY:
            time.sleep(0.3)  # a slow codec: every frame comes, late
        frames.put(bytes([i % 256]) * 64)  # a decoded frame (bytes: a tensor's storage would die with this process)
        if not HEALTHY and i + 1 == KILLED_AFTER:
            time.sleep(1.0)  # its feeder thread flushes the frames already put
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer does: no traceback, no cleanup


class DecodedFrames(Dataset):
    def __init__(self, frames):
        self.frames = frames

    def __len__(self):
        return FRAMES

    def __getitem__(self, i):
        while True:
            try:
                frame = self.frames.get_nowait()
                return torch.tensor(list(frame[:2]), dtype=torch.float32)
            except queue.Empty:
                os.sched_yield()  # spin: only the decoder can put


def main():
    ctx = mp.get_context("fork")
    frames = ctx.Queue(maxsize=FRAMES)
    decoder = ctx.Process(target=decode, args=(frames,), name="frame-decoder")
    decoder.start()
    for step, batch in enumerate(DataLoader(DecodedFrames(frames), batch_size=4, num_workers=2)):
        print("step", step, batch.shape, flush=True)
    decoder.join()
    print("done", flush=True)


if __name__ == "__main__":
    main()
