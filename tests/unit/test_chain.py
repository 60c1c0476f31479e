"""Wait chains (watchdog/collect/chain.py): the /proc texts they read, and the remedy chosen
from the last link (FUSE, NFS, TCP, a terminal, a child's standard input). The real chain
through a pipe is tests/real/test_chain.py."""

from __future__ import annotations

from watchdog.collect import chain
from watchdog.diagnose.common import chain_remedy, chain_text
from watchdog.types import LinkKind, WaitLink

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A0F1 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 33592 1 0 20 4 30 10 -1
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1599 1 0 100 0 0 10 0
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr
   0: 00000000000000000000000001000000:A0F2 00000000000000000000000001000000:0050 01 00000000:00000000 00:00000000 00000000     0        0 4242 1
"""  # noqa: E501
MOUNTINFO = """22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
90 27 0:52 / /mnt/bucket rw,nosuid,nodev,relatime - fuse.gcsfuse my-bucket rw,user_id=0,group_id=0
91 27 0:53 / /mnt/my\\040data rw - nfs4 server:/export rw
"""


def test_tcp_tables_give_each_sockets_peer():
    assert chain.parse_tcp(TCP)[33592] == ("127.0.0.1:41201", "127.0.0.1:8080")
    assert chain.parse_tcp(TCP)[1599][1] == "0.0.0.0:0"  # a listener has no peer
    assert chain.parse_tcp(TCP6)[4242] == ("[::1]:41202", "[::1]:80")


def test_mountinfo_gives_each_mount_its_type_and_device_minor():
    mounts = chain.parse_mountinfo(MOUNTINFO)
    assert ("/mnt/bucket", "fuse.gcsfuse", 52) in mounts
    assert ("/mnt/my data", "nfs4", 53) in mounts


def _link(kind, **kw):
    fields = dict(pid=7, tid=7, name="pt_data_worker", kind=kind, target="/mnt/bucket/shard-0.tar", wait="read")
    fields.update(kw)
    return WaitLink(**fields)


def test_the_remedy_is_for_what_the_chain_ends_at():
    fuse = chain_remedy([_link(LinkKind.FUSE, peer="/mnt/bucket fuse.gcsfuse", fuse_connection=52)])
    assert "/sys/fs/fuse/connections/52/abort" in fuse and "umount -l /mnt/bucket" in fuse and "kill -9" in fuse
    nfs = chain_remedy([_link(LinkKind.NFS, peer="/mnt/data nfs4")])
    assert "soft,timeo" in nfs
    curl = [
        _link(LinkKind.PIPE, target="pipe:[5]", peer="9", reading=True),
        _link(LinkKind.TCP, pid=9, name="curl", target="socket:[8]", peer="10.0.0.5:443"),
    ]
    assert "curl --max-time" in chain_remedy(curl) and "10.0.0.5:443" in chain_remedy(curl)
    assert "pid 9 (curl) waits on a TCP connection to 10.0.0.5:443" in chain_text(curl)
    prompt = [_link(LinkKind.CHILD, peer="9"), _link(LinkKind.TERMINAL, pid=9, name="unzip", target="/dev/pts/3")]
    assert "unzip -o" in chain_remedy(prompt) and "stdin=subprocess.DEVNULL" in chain_remedy(prompt)
    assert chain_remedy([_link(LinkKind.FILE)]) is None  # a plain file: the storage advice of the rule
