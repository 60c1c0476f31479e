"""A healthy job whose Manager serves a process outside the job must never be ended as a proven
Manager cycle (``manager_cycle``/``waits_on_dead``, NOTE [ Manager lock proof ] in
watchdog/manager_proof.py).

The proof assumes that a manager's connections come only from the job's processes ("only its
client, a process of this set, sends one"; the authkey is inherited). Python's own documentation
("Using a remote manager": ``BaseManager(address=..., authkey=...)``) serves objects to any
process that knows the address and the authkey: here main serves a ``threading.Lock`` through
``AcquirerProxy``, a process that is NOT of the job (started by the test, not by main) connects,
takes the lock, works for ``HOLD_S`` seconds and releases it; the DataLoader's workers wait in
``with lock:``. Meanwhile the outside client's serving thread in the manager waits for its next
request (an untimed read) and every thread of the job waits for a thread of the job: the closed
wait holds, yet the holder is alive and releases; the job ends by itself with code 0.

The check (manager_proof.closed_wait, collect.sockets.peer_holders): the other end of each of
the manager's connections must be held by a process of the set (the peer of its Unix socket,
UNIX_DIAG_PEER of sock_diag(7), found in the members' /proc/PID/fd); a connection that is not a
Unix socket (TCP) cannot be told and fails the proof.

Every process here runs in its own session, bounded, and is killed whatever happens."""

from __future__ import annotations

from tests.real.helpers import run_beside_outsider

JOB = """
import sys, threading
from multiprocessing.managers import AcquirerProxy, BaseManager
import torch
from torch.utils.data import DataLoader, Dataset

ADDR = sys.argv[1]
lock = threading.Lock()

class QM(BaseManager):
    pass

QM.register("get_lock", callable=lambda: lock, proxytype=AcquirerProxy)

class Guarded(Dataset):
    lock = None
    def __len__(self):
        return 8
    def __getitem__(self, i):
        if self.lock is None:
            m = QM(address=ADDR, authkey=b"feed")
            m.connect()
            self.lock = m.get_lock()
        with self.lock:  # the outside process holds it for a while, then releases
            return torch.tensor(float(i))

if __name__ == "__main__":
    m = QM(address=ADDR, authkey=b"feed")
    m.start()
    print("serving", flush=True)
    import os, time
    while not os.path.exists(ADDR + ".held"):  # the outside process holds the lock
        time.sleep(0.1)
    for step, b in enumerate(DataLoader(Guarded(), batch_size=2, num_workers=2)):
        print("step", step, b.tolist(), flush=True)
    m.shutdown()
"""

HOLDER = """
import sys, time
from multiprocessing.managers import AcquirerProxy, BaseManager
class QM(BaseManager):
    pass
QM.register("get_lock", proxytype=AcquirerProxy)
addr, delay = sys.argv[1], float(sys.argv[2])
for _ in range(600):
    try:
        m = QM(address=addr, authkey=b"feed"); m.connect(); break
    except OSError:
        time.sleep(0.1)
lock = m.get_lock()
lock.acquire()
open(addr + ".held", "w").close()
print("holding", flush=True)
time.sleep(delay)
lock.release()
print("released", flush=True)
"""

# Seconds the outside process holds the lock: well past the stall timeout (4 s) and the proof's
# two reads.
HOLD_S = 35


def test_a_manager_lock_held_outside_the_job_is_never_ended_as_proven(short_tmp_path):
    run_beside_outsider(
        short_tmp_path, JOB, HOLDER, "mgr.sock", HOLD_S, "a healthy job whose lock an outside process holds"
    )
