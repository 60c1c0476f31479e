"""Target: the spawn start method with no ``if __name__ == "__main__":`` guard
(pytorch/tutorials#1661, pytorch/pytorch#162612): each spawned worker re-imports this file,
reaches the loop again and fails "An attempt has been made to start a new process before the
current process has finished its bootstrapping phase". Exit code 1.

Run: ``python -m probes.cases.spawn_without_main_guard``. The watchdog must write a crash report
``worker_start_failed`` with the main-guard remedy.
"""

import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(64, dtype=torch.float32).view(-1, 1))
loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="spawn")

for epoch in range(2):
    for step, (x,) in enumerate(loader):  # no main guard
        print("epoch", epoch, "step", step, float(x.sum()), flush=True)
print("done")
