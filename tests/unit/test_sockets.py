"""collect.sockets (NOTE [ Manager lock proof ] in watchdog/manager_proof.py): who holds the
other end of each of a process's connected sockets, read from the kernel (sock_diag(7)'s
``UNIX_DIAG_PEER`` and ``/proc/PID/fd``) on real sockets and a real second process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from watchdog.collect import sockets

pytestmark = pytest.mark.skipif(sockets.unix_peers() is None, reason="no sock_diag netlink here")

CLIENT = (
    "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('on', flush=True); "
    "sys.stdin.read()"
)


def test_a_socket_pair_is_listed_with_its_peer():
    a, b = socket.socketpair()
    with a, b:
        table = sockets.unix_peers()
        assert table is not None
        ia, ib = os.fstat(a.fileno()).st_ino, os.fstat(b.fileno()).st_ino
        assert table[ia] == ib and table[ib] == ia
        assert sockets.peer_holders(os.getpid(), [os.getpid()]) is not None


def test_the_process_holding_a_connections_other_end_is_named_and_an_outsider_is_not(short_tmp_path):
    path = str(short_tmp_path / "srv.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout.readline().strip() == "on"
        conn, _ = server.accept()
        with conn:
            me = os.getpid()
            held = sockets.peer_holders(me, [me, client.pid])
            assert held is not None and client.pid in held  # the listener (no peer) is left out
            outside = sockets.peer_holders(me, [me])  # the client is not among the processes given
            assert outside is not None and None in outside
    finally:
        client.kill()
        client.wait(timeout=10)
        server.close()


def test_a_tcp_connection_cannot_be_told_and_counts_as_outside():
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as c:
        conn, _ = listener.accept()
        with conn:
            me = os.getpid()
            held = sockets.peer_holders(me, [me])
            assert held is not None and None in held
    del c


def test_an_unreadable_process_gives_none():
    assert sockets.socket_inodes(2**22 + 12345) is None
    assert sockets.peer_holders(2**22 + 12345, []) is None


def test_a_managers_own_listener_is_private_and_a_chosen_address_is_not(short_tmp_path):
    # multiprocessing.Manager() listens at <tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX (0700);
    # BaseManager(address=<chosen path>) does not: anyone told the path and key may connect.
    import multiprocessing as mp
    from multiprocessing.managers import BaseManager

    ctx = mp.get_context("fork")
    own = ctx.Manager()
    chosen = BaseManager(address=str(short_tmp_path / "chosen.sock"), authkey=b"feed", ctx=ctx)
    chosen.start()
    try:
        assert len(sockets.private_listeners(own._process.pid)) == 1
        assert sockets.private_listeners(chosen._process.pid) == ()
        assert sockets.private_listeners(os.getpid()) == ()  # listens nowhere
    finally:
        own.shutdown()
        chosen.shutdown()
