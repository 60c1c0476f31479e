"""Target: the training loop keeps every step's loss tensor in a list for logging (``losses.append
(loss)`` instead of ``loss.item()``), and with it each step's autograd graph and the activations
it saved; main grows by about 8 MiB a step until the memory cgroup's OOM killer ends it
(SIGKILL, exit 137, no traceback), leaving its workers orphaned for a few seconds
(Lightning-AI/pytorch-lightning#9894, pytorch/pytorch#1085). The case runs under a 1 GiB
memory cgroup (``dlwatch probe repro main_keeps_graphs_oom``).

Run: ``python -m probes.cases.main_keeps_graphs_oom``. The watchdog must warn about main's
growth while it runs and, after the kill, conclude ``main_killed`` by the OOM killer, naming the
cgroup's limit and main's growth.
"""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        return torch.randn(1024)


def main():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for step, x in enumerate(DataLoader(Features(), batch_size=2048, num_workers=2)):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward(retain_graph=True)  # the graph (and its 8 MiB of saved activations) stays alive
        opt.step()
        losses.append(loss)  # kept with its graph: should be loss.item()
        if step % 20 == 0:
            print("step", step, float(loss), flush=True)
        time.sleep(0.4)


if __name__ == "__main__":
    main()
