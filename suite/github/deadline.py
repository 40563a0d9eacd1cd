"""A total deadline for one HTTP exchange (connect, send, headers and body together).

requests' `timeout` bounds each socket read, not the exchange: a server that sends one byte every 5 s never
trips a 30 s read timeout and holds the call forever. Inside `limit(seconds)`, every connection the calling
thread uses is registered with a timer; when it fires, their sockets are shut down, which wakes the blocked
read at once, and `Limit.expired` tells the caller why the exchange ended.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from requests.adapters import HTTPAdapter
from urllib3 import connection, connectionpool

_active = threading.local()


class Limit:
    """The deadline of the exchange running in this thread: the connections it used, and whether it fired."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()
        self.expired = False
        self._conns: list[connection.HTTPConnection] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def add(self, conn: connection.HTTPConnection) -> None:
        with self._lock:
            if conn not in self._conns:
                self._conns.append(conn)
            if self.expired:
                _shut(conn)

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            for conn in self._conns:
                _shut(conn)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def _shut(conn: connection.HTTPConnection) -> None:
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


def _register(conn: connection.HTTPConnection) -> None:
    current = getattr(_active, "limit", None)
    if current is not None:
        current.add(conn)


@contextmanager
def limit(seconds: float) -> Iterator[Limit]:
    """Everything this thread sends or reads through a `session()` inside the block ends by `seconds`."""
    lim = Limit(seconds)
    outer = getattr(_active, "limit", None)
    _active.limit = lim
    lim._timer.start()
    try:
        yield lim
    finally:
        lim._timer.cancel()
        _active.limit = outer


class _Watched:
    """Registers the connection with the thread's deadline before it connects and before each request on it
    (a kept-alive connection is reused without connecting again)."""

    def connect(self) -> None:
        _register(self)  # type: ignore[arg-type]
        super().connect()  # type: ignore[misc]
        _register(self)  # type: ignore[arg-type]  # now with its socket: shut at once if the deadline passed

    def request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _register(self)  # type: ignore[arg-type]
        return super().request(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_Watched, connection.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, connection.HTTPSConnection):
    pass


class _HTTPPool(connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _Adapter(HTTPAdapter):
    POOLS = {"http": _HTTPPool, "https": _HTTPSPool}

    def init_poolmanager(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self.POOLS

    def proxy_manager_for(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = self.POOLS
        return manager


def session() -> requests.Session:
    """A requests session whose connections obey `limit()`."""
    s = requests.Session()
    adapter = _Adapter()
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s
