"""Pass the job's stderr through to ours, byte for byte, keeping the last bytes for diagnosis
(PyTorch prints the cause of most DataLoader crashes there: "killed by signal", "Bus error",
"received 0 items of ancdata", pickling tracebacks of queue feeder threads)."""

from __future__ import annotations

import os
import threading


class StderrTail:
    """Copies everything from ``src_fd`` to ``dst_fd`` in a thread until EOF, keeping the last
    ``limit_bytes`` bytes. A write error on ``dst_fd`` (a closed terminal) stops the copy but
    keeps draining ``src_fd``, so the job never blocks on a full pipe.

    Args:
        src_fd: the read end of the job's stderr pipe (closed at EOF).
        dst_fd: where the bytes go (our stderr).
        limit_bytes: how many trailing bytes to keep.
    """

    def __init__(self, src_fd: int, dst_fd: int, limit_bytes: int) -> None:
        self.src_fd = src_fd
        self.dst_fd = dst_fd
        self.limit_bytes = limit_bytes
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name="stderr-tail", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        forward = True
        try:
            while True:
                chunk = os.read(self.src_fd, 65536)
                if not chunk:
                    break
                if forward:
                    try:
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(self.dst_fd, view) :]
                    except OSError:
                        forward = False
                with self._lock:
                    self._buf += chunk
                    if len(self._buf) > self.limit_bytes:
                        del self._buf[: len(self._buf) - self.limit_bytes]
        except OSError:
            pass
        finally:
            try:
                os.close(self.src_fd)
            except OSError:
                pass

    def text(self) -> str:
        """The kept tail, decoded as UTF-8 (invalid bytes replaced)."""
        with self._lock:
            return self._buf.decode("utf-8", "replace")

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for EOF (processes that outlive the job may hold the
        pipe open; then the tail so far is used)."""
        self._thread.join(timeout_s)
