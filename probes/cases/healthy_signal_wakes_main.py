"""Healthy control: between epochs main waits on a ``threading.Event`` that a SIGALRM handler
sets 6 s later (a watchdog timer of the job's own). Every thread of main then waits without a
timeout on a private futex, yet the process will wake: Python runs the handler in the main
thread, which sets the event (signal(7), setitimer(2)).

Run: ``python -m probes.cases.healthy_signal_wakes_main``. The watchdog may report the pause as
suspected, but must never call it proven or end the job.
"""

import signal
import threading

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    resume = threading.Event()
    signal.signal(signal.SIGALRM, lambda *_: resume.set())
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in range(2):
        for (_x,) in loader:
            pass
        signal.alarm(6)
        resume.wait()  # woken by the SIGALRM handler
        resume.clear()
        print("epoch", epoch, "resumed", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
