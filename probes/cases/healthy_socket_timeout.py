"""Healthy control: samples fetched over a socket that has ``timeout=30`` from a server that
answers each request within 1.5 s; batches of 4 take about 6 s, longer than a 5 s stall
timeout. The timeout is already there: advice to add one would be wrong.

Run: ``python -m probes.cases.healthy_socket_timeout``. The watchdog must never report it.
"""

import socket
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


def serve(listener):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def answer(conn):
    with conn:
        request = conn.recv(64)
        time.sleep(1.5)  # a slow service
        conn.sendall(request.upper())


class RemoteDataset(Dataset):
    def __init__(self, address):
        self.address = address

    def __len__(self):
        return 24

    def __getitem__(self, i):
        with socket.create_connection(self.address, timeout=30) as sock:
            sock.sendall(f"sample {i}".encode())
            return torch.tensor(float(len(sock.recv(64))))


def main():
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    for step, _batch in enumerate(DataLoader(RemoteDataset(listener.getsockname()), batch_size=4, num_workers=2)):
        print("step", step, flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
