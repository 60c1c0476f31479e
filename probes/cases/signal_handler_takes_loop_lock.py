"""Target: a signal handler that takes a lock the training loop holds. The loop keeps its
``STATE_LOCK`` held while it does a step; a status signal (``SIGUSR1``, sent here by a ``kill``
the step runs, as a scheduler or an operator would) arrives during the step, and CPython runs the Python
handler in the main thread on top of the interrupted frame, between two bytecodes. The handler's
``with STATE_LOCK:`` then waits for a lock that only the frame it interrupted can release: the
main thread deadlocks on itself (patroni/patroni#3413, a signal handler re-entering logging's
lock; CPython docs, signal module: "Python signal handlers are always executed in the main
Python thread of the main interpreter").

Run: ``python -m probes.cases.signal_handler_takes_loop_lock``. The watchdog must conclude
``main_thread_deadlock``, proven, naming the handler's ``with STATE_LOCK:`` line and the
interrupted ``with STATE_LOCK:`` of the loop, with the remedy of a handler that only sets a flag.
"""

import os
import signal
import subprocess
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

STATE_LOCK = threading.Lock()
STATE = {"step": 0}


def report_status(signum, frame):
    with STATE_LOCK:  # the interrupted loop holds it: waits forever
        print("status", STATE, flush=True)


class Numbers(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return torch.tensor(float(i))


def main():
    signal.signal(signal.SIGUSR1, report_status)
    for step, batch in enumerate(DataLoader(Numbers(), batch_size=4, num_workers=2)):
        with STATE_LOCK:
            STATE["step"] = step
            if step == 5:  # a status request arrives during the step
                subprocess.run(["kill", "-USR1", str(os.getpid())], check=True)
            time.sleep(0.05)  # the step's work, under the lock
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()
