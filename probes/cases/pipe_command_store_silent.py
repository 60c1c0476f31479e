"""Target: each sample is read from a command's output (webdataset's ``pipe:curl -s URL``
shards): the worker starts ``curl`` and reads its stdout pipe. The store accepts the
connection and never answers, and curl has no ``--max-time``: curl waits on its socket, the
worker waits on the pipe, main waits for the batch. Modelled on webdataset/webdataset#308.
Without curl on the machine a Python child plays its part.

Run: ``python -m probes.cases.pipe_command_store_silent``. The watchdog must conclude
``worker_blocked_io``, following the pipe to the command and the command to the store's
address, with that command's timeout as the remedy (not "nothing writes to the pipe").
"""

import shutil
import socket
import subprocess
import sys
import threading

import torch
from torch.utils.data import DataLoader, Dataset

FETCH = (
    "import socket,sys\ns=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\n"
    "sys.stdout.write(s.recv(1).decode())"
)


def silent_store(listener):
    held = []
    while True:
        conn, _ = listener.accept()
        held.append(conn)  # accepted, never answered


class PipeShards(Dataset):
    def __init__(self, port):
        self.port = port

    def __len__(self):
        return 16

    def __getitem__(self, i):
        url = f"http://127.0.0.1:{self.port}/shard-{i:04d}.tar"
        curl = shutil.which("curl")
        cmd = [curl, "-s", url] if curl else [sys.executable, "-c", FETCH, str(self.port)]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE) as proc:
            data = proc.stdout.read()  # pipe:curl -s URL
        return torch.tensor(float(len(data)))


def main():
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=silent_store, args=(listener,), daemon=True).start()
    loader = DataLoader(PipeShards(listener.getsockname()[1]), batch_size=4, num_workers=2)
    for step, batch in enumerate(loader):
        print("step", step, batch.tolist(), flush=True)


if __name__ == "__main__":
    main()
