"""Target: the Dataset class is defined inside ``if __name__ == "__main__":`` and the loader
starts its workers with spawn (macOS's and Windows's default, Python 3.14's on Linux:
pytorch/pytorch#5858, #51688). A spawned worker re-imports the main module as ``__mp_main__``,
where the guarded class does not exist, and cannot unpickle the Dataset: "AttributeError: Can't
get attribute 'Frames' on <module '__mp_main__' …>"; it exits with code 1 and main raises
"DataLoader worker (pid N) exited unexpectedly with exit code 1".

Run: ``python -m probes.cases.spawn_dataset_under_main_guard``. The watchdog must write a crash
report ``worker_start_failed`` telling to define the class at module top level.
"""

import torch
from torch.utils.data import DataLoader, Dataset

if __name__ == "__main__":

    class Frames(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.full((4,), float(i))

    loader = DataLoader(Frames(), batch_size=8, num_workers=2, multiprocessing_context="spawn")
    for step, batch in enumerate(loader):
        print("step", step, tuple(batch.shape), flush=True)
