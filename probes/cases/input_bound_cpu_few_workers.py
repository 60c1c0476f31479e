"""Target: a job whose one DataLoader worker decodes and augments on the CPU (about 60 ms of
CPU a sample, a pure-Python busy loop) while main's step takes a few milliseconds: main waits
for data most of the time, the worker computes nearly all of its time, and one more worker fits
the usable CPUs. The common "num_workers too low" job (PyTorch's data-loading tuning guide:
raise num_workers until the GPU, or here the step, waits no more).

Run: ``python -m probes.cases.input_bound_cpu_few_workers [SECONDS]`` (90 by default). The
watchdog must warn ``input_bound``: the workers CPU-bound, with ``num_workers=2`` on a
machine with two usable CPUs or more.
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Decode(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        start, acc = time.process_time(), 0
        while time.process_time() - start < 0.06:  # 60 ms of CPU a sample
            acc += 1
        return torch.tensor(float(acc % 7))


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 90.0
    end = time.monotonic() + seconds
    for step, _batch in enumerate(DataLoader(Decode(), batch_size=2, num_workers=1)):
        time.sleep(0.005)  # the training step
        if step % 20 == 0:
            print("step", step, flush=True)
        if time.monotonic() > end:
            break
    print("done", flush=True)


if __name__ == "__main__":
    main()
