"""A healthy job whose Manager lock is released by a process outside the job that connects only
to release it must never be ended as a proven Manager cycle (NOTE [ Manager lock proof ] in
watchdog/detect/manager_proof.py).

The proof's step for the manager's accepter thread reads "a new client's request is served only
after the authkey handshake, and every client the manager has now is a process of this set".
That holds for ``multiprocessing.Manager()`` (an address in a private ``pymp-`` folder, the
authkey inherited from main, ``current_process().authkey``), not for a manager served at a
chosen address with a chosen authkey (CPython docs, "Using a remote manager"): any process that
knows both may connect later. Here main serves a ``threading.Lock`` as a gate through
``AcquirerProxy`` and closes it; the DataLoader's workers ``acquire()`` it for each sample; a
controller that is NOT a process of the job (started by the test) connects after ``GATE_S``
seconds and releases it once per sample (a plain Lock may be released by anyone). Until then no
process outside the job is connected, every thread of the job waits for a thread of the job and
the accepter waits in ``accept``: the closed wait holds, yet the job is healthy and ends by
itself with code 0.

The check (detect/manager_proof.closed_wait, collect.sockets.private_listeners): the accepter
is a step of the argument only when the manager listens where only the job could have learnt
the key: its listening Unix socket's path is multiprocessing's own
(``<tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX``, ``multiprocessing.util.get_temp_dir`` and
``connection.arbitrary_address``, a folder made 0700) and not a chosen address (read from
``/proc/net/unix`` for the listening socket's inode); any other listener (a chosen path, an
abstract name, TCP) leaves the hang suspected.

Every process here runs in its own session, bounded, and is killed whatever happens."""

from __future__ import annotations

from tests.real.helpers import run_beside_outsider

JOB = """
import sys, threading
from multiprocessing.managers import AcquirerProxy, BaseManager
import torch
from torch.utils.data import DataLoader, Dataset

ADDR = sys.argv[1]
gate = threading.Lock()

class QM(BaseManager):
    pass

QM.register("get_gate", callable=lambda: gate, proxytype=AcquirerProxy)

class Gated(Dataset):
    g = None
    def __len__(self):
        return 8
    def __getitem__(self, i):
        if self.g is None:
            m = QM(address=ADDR, authkey=b"gate")
            m.connect()
            self.g = m.get_gate()
        self.g.acquire()  # the controller opens the gate once per sample
        return torch.tensor(float(i))

if __name__ == "__main__":
    m = QM(address=ADDR, authkey=b"gate")
    m.start()
    g = m.get_gate()
    g.acquire()  # closed until the controller opens it
    del g
    print("gate closed", flush=True)
    for step, b in enumerate(DataLoader(Gated(), batch_size=2, num_workers=2)):
        print("step", step, b.tolist(), flush=True)
    m.shutdown()
"""

CONTROLLER = """
import sys, time
from multiprocessing.managers import AcquirerProxy, BaseManager
class QM(BaseManager):
    pass
QM.register("get_gate", proxytype=AcquirerProxy)
addr, delay = sys.argv[1], float(sys.argv[2])
time.sleep(delay)  # not connected meanwhile
m = QM(address=addr, authkey=b"gate")
m.connect()
g = m.get_gate()
for _ in range(40):
    try:
        g.release()
    except Exception:
        pass  # already open
    time.sleep(0.2)
print("opened", flush=True)
"""

# Seconds before the outside controller connects: well past the stall timeout (4 s) and the
# proof's two reads.
GATE_S = 35


def test_a_manager_gate_opened_by_an_outside_process_that_connects_later_is_never_ended(short_tmp_path):
    run_beside_outsider(
        short_tmp_path, JOB, CONTROLLER, "gate.sock", GATE_S, "a healthy job whose gate an outside process opens later"
    )
