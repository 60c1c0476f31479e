"""Target: a hang at interpreter exit (pytorch/pytorch#48666, in the setting of #30225). The
loop logs per-step arrays to a slow summary-writer process through a multiprocessing queue; a
bad batch raises; at exit multiprocessing's handler terminates the daemonic writer and joins the
queue's feeder thread, which is blocked writing into a full pipe that nobody will read again.

Run: ``python -m probes.cases.exit_hang_queue_feeder``. The watchdog must conclude
``main_thread_deadlock`` at interpreter exit, proven, naming the feeder thread and the pipe,
with the remedy ``cancel_join_thread()`` or draining and joining the consumer.
"""

import time

import torch
import torch.multiprocessing as tmp
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.randn(128)
        if i == 1000:
            x[0] = float("nan")  # one corrupt sample
        return x


def summary_writer(q):
    while True:
        item = q.get()
        if item is None:
            return
        time.sleep(0.2)  # a slow sink


def main():
    ctx = tmp.get_context("fork")
    log_q = ctx.Queue()
    writer = ctx.Process(target=summary_writer, args=(log_q,), daemon=True)
    writer.start()
    model = torch.nn.Linear(128, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, x in enumerate(DataLoader(Samples(), batch_size=16, num_workers=2)):
        if torch.isnan(x).any():
            raise ValueError(f"NaN in batch {step}")
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        # each item (about 130 KiB) is larger than a pipe's buffer: one unread item fills it
        log_q.put({"step": step, "w": model.weight.detach().numpy().copy(), "act": x.repeat(16, 1).numpy()})
    log_q.put(None)
    writer.join()


if __name__ == "__main__":
    main()
