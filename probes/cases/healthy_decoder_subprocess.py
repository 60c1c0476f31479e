"""Healthy control: workers decode through an external program (``subprocess.run`` of an
ffmpeg-like decoder). The first sample of each persistent worker takes about 12 s while the
decoder child burns CPU; the worker itself sits in ``wait4`` with no CPU. The job is healthy.

Run: ``python -m probes.cases.healthy_decoder_subprocess``. The watchdog must never report it
(the decoder is the worker's progress), even with a 5 s stall timeout and ``on_hang: terminate``.
"""

import subprocess
import sys

import torch
from torch.utils.data import DataLoader, Dataset

DECODER = "import time\nt = time.time()\nwhile time.time() - t < {s}:\n    sum(range(1000))\n"


class VideoDataset(Dataset):
    def __init__(self):
        self.warm = False

    def __len__(self):
        return 24

    def __getitem__(self, i):
        seconds = 0.05 if self.warm else 12.0  # the first decode of each worker is slow (codec start-up)
        self.warm = True
        subprocess.run([sys.executable, "-c", DECODER.format(s=seconds)], check=True)
        return torch.tensor(float(i))


def main():
    for epoch in range(2):
        for step, _batch in enumerate(
            DataLoader(VideoDataset(), batch_size=2, num_workers=2, persistent_workers=False)
        ):
            print("epoch", epoch, "step", step, flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
