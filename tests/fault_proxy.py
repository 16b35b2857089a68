"""A fault-injecting TCP proxy on 127.0.0.1, for putting real network faults between the pipeline and
the test S3 server (tests/conftest.py's ``s3_server``).

    with FaultProxy(upstream_port) as proxy:      # forwards 127.0.0.1:proxy.port -> upstream
        env = {..., "AWS_ENDPOINT_URL": proxy.endpoint}
        proxy.fault("refuse", seconds=5)           # for 5 s from now: connections are refused

Faults, each for a set period (``fault(kind, seconds)``), or until ``heal()``:

- ``refuse``: nothing listens on the port (ECONNREFUSED), and open connections are reset;
- ``stall``:  connections are accepted and kept, but no byte moves either way (a frozen server);
- ``cut``:    every connection is reset after ``cut_after`` bytes from the server (mid-transfer);
- ``throttle``: every request is answered ``503 Slow Down`` (S3's throttling answer) and closed.

``latency`` (seconds, default 0) delays every chunk from the client to the server: a slow network
where a request's round trip exceeds any fixed wait.  Nothing here is mocked: the client is
pyarrow's real S3 client, the server moto's real server; only the bytes between them are bent.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

__all__ = ["FaultProxy", "FAULTS"]

FAULTS = ("refuse", "stall", "cut", "throttle")
_SLOW_DOWN = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
)
_SLOW_DOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class FaultProxy:
    """A TCP proxy from ``127.0.0.1:port`` to ``127.0.0.1:upstream`` that injects faults on demand."""

    def __init__(self, upstream: int, latency: float = 0.0, cut_after: int = 2048):
        self.upstream = upstream
        self.latency = latency
        self.cut_after = cut_after
        self.port = 0
        self._kind: str | None = None
        self._until = 0.0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.injected: list[tuple[str, float]] = []  # (kind, seconds) of every fault set

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._listen()
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed.set()
        self._thread.join(timeout=10)
        self._stop_listening()
        self._reset_all()

    # ----------------------------------------------------------------------------------- control

    def fault(self, kind: str, seconds: float | None = None) -> None:
        """Inject ``kind`` for ``seconds`` from now (None: until ``heal``)."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}: one of {', '.join(FAULTS)}")
        with self._lock:
            self._kind = kind
            self._until = float("inf") if seconds is None else time.monotonic() + seconds
        self.injected.append((kind, seconds or 0.0))
        if kind in ("refuse", "cut"):
            self._reset_all()  # what was open dies now, as with a server that went away

    def heal(self) -> None:
        with self._lock:
            self._kind = None

    def current(self) -> str | None:
        """The fault in force now (None when the network is healthy)."""
        with self._lock:
            if self._kind is not None and time.monotonic() >= self._until:
                self._kind = None
            return self._kind

    # ------------------------------------------------------------------------------------ serving

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener

    def _stop_listening(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _serve(self) -> None:
        while not self._closed.is_set():
            refusing = self.current() == "refuse"
            if refusing and self._listener is not None:
                self._stop_listening()  # the port refuses connections, as a closed port does
            elif not refusing and self._listener is None:
                self._listen()
            if self._listener is None:
                time.sleep(0.02)
                continue
            ready, _, _ = select.select([self._listener], [], [], 0.05)
            if ready:
                client, _ = self._listener.accept()
                threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:  # noqa: C901 -- a test double: one dispatch over every fault it can play
        if self.current() == "throttle":
            self._slow_down(client)
            return
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._connections.update((client, server))
        sent_back = 0
        try:
            while not self._closed.is_set():
                kind = self.current()
                if kind == "stall":
                    time.sleep(0.02)
                    continue
                ready, _, _ = select.select([client, server], [], [], 0.05)
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    if source is client:
                        if self.latency:
                            time.sleep(self.latency)
                        server.sendall(data)
                    else:
                        if kind == "cut" and sent_back + len(data) > self.cut_after:
                            client.sendall(data[: max(self.cut_after - sent_back, 0)])
                            return
                        client.sendall(data)
                        sent_back += len(data)
        except (OSError, ValueError):  # reset from another thread: its descriptor is gone
            return
        finally:
            with self._lock:
                self._connections.difference_update((client, server))
            _reset(client)
            server.close()

    def _slow_down(self, client: socket.socket) -> None:
        try:
            client.settimeout(2)
            client.recv(65536)  # the request line and headers, at least
            client.sendall(_SLOW_DOWN % (len(_SLOW_DOWN_BODY), _SLOW_DOWN_BODY))
        except OSError:
            pass
        finally:
            client.close()

    def _reset_all(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _reset(connection)


def _reset(connection: socket.socket) -> None:
    """Close with a TCP reset, as a dropped connection looks to the other side."""
    try:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    connection.close()
