"""Healthy control: a job that talks to its terminal. Before training it asks whether to
overwrite an earlier checkpoint (``input()``, as ``unzip`` asks "replace …? [y]es, [n]o"), and
with a terminal it stops at ``breakpoint()`` after the first batch; then it trains. Under
``dlwatch run`` it must behave as without it: the prompt shows and takes the answer, pdb takes
``c`` (a job in a background process group would be stopped by SIGTTIN instead). Without a
terminal it takes the default answer and skips the breakpoint. Modelled on
mlcommons/storage#391.

Run: ``python -m probes.cases.healthy_terminal_prompt``. The watchdog must never report it; through
a terminal (tests/real/test_terminal.py) the prompt and pdb work.
"""

import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def ask(question, default):
    try:
        return input(question) or default
    except (EOFError, OSError, RuntimeError):  # no terminal, no stdin
        return default


def main():
    answer = ask("replace checkpoint.pt? [y]es, [n]o: ", "n")
    print("answer", answer, flush=True)
    loader = DataLoader(TensorDataset(torch.arange(32.0)), batch_size=4, num_workers=2)
    for step, (batch,) in enumerate(loader):
        if step == 0 and sys.stdin is not None and sys.stdin.isatty():
            breakpoint()  # look at the first batch
        print("step", step, batch.tolist(), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
