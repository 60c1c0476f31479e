"""Target: each sample is unpacked by a command that asks before it overwrites (``unzip``'s
"replace data.bin? [y]es, [n]o"): the worker starts it with ``stdin=subprocess.PIPE`` and
reads its output, but never answers. The child waits for its stdin, which only the worker
can write; the worker waits for the child's output. Modelled on mlcommons/storage#391 (an
``unzip`` prompt in a DataLoader worker). A Python child plays unzip.

Run: ``python -m probes.cases.child_waits_on_stdin``. The watchdog must follow the worker's
wait to the child and the child's to its stdin, and advise ``stdin=subprocess.DEVNULL`` or a
flag that never asks (``unzip -o``), not a socket timeout.
"""

import subprocess
import sys

import torch
from torch.utils.data import DataLoader, Dataset

UNZIP = "import sys\nsys.stdout.write('replace data.bin? [y]es, [n]o: ')\nsys.stdout.flush()\nsys.stdin.readline()"


class ZippedSamples(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        child = subprocess.Popen([sys.executable, "-c", UNZIP], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        out = child.stdout.read()  # the prompt, then nothing until someone answers
        child.wait()
        return torch.tensor(float(len(out)))


def main():
    for step, batch in enumerate(DataLoader(ZippedSamples(), batch_size=4, num_workers=2)):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()
