"""Running the studio: uvicorn on a socket we bind ourselves (so port 0 and errors are known
before anything starts), in the calling thread or in a background one."""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

from populace.launch import Terminated

from ._app import create_app
from ._runs import Runs
from ._security import is_loopback, new_token


class StudioServer:
    """The studio over ``runs``, listening on ``host:port``.

    >>> server = StudioServer(Runs("runs"), port=0)   # doctest: +SKIP
    >>> server.start(); print(server.url); ...; server.stop()

    Bound anywhere but loopback without a ``token``, one is generated (see :attr:`token`).
    """

    def __init__(self, runs: Runs, *, host: str = "127.0.0.1", port: int = 8765,
                 token: str | None = None, interval: float = 0.5,
                 sock: socket.socket | None = None) -> None:
        self.runs = runs
        self.host = host
        self.token = token or (None if is_loopback(host) else new_token())
        self.asgi = create_app(runs, host=host, token=self.token, interval=interval)
        # ``sock``: a socket bound already (by a supervisor, or a test); ``host`` is then
        # what the studio tells users it serves, and decides whether a token is needed.
        self._sock = sock if sock is not None else _bind(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address to open; with the token in it when one is needed."""
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    def _make(self) -> Any:
        import uvicorn

        config = uvicorn.Config(self.asgi, log_level="warning", access_log=False,
                                proxy_headers=False, lifespan="off",
                                timeout_graceful_shutdown=2, timeout_keep_alive=2)
        self._server = uvicorn.Server(config)
        return self._server

    def serve(self) -> None:
        """Serve in this thread until Ctrl-C or SIGTERM; then stop the runs started here
        (each saves what its step received and ends ``stopped``). SIGTERM raises
        :class:`~populace.launch.Terminated` once they have."""
        def terminate(signum: int, frame: Any) -> None:
            raise Terminated()

        # uvicorn handles both signals while it serves, then hands each to the handler that
        # was there before it: a default SIGTERM would end the process on the spot,
        # abandoning the runs started here.
        before = signal.signal(signal.SIGTERM, terminate)
        try:
            self._make().run(sockets=[self._sock])
        finally:
            self.runs.shutdown()
            signal.signal(signal.SIGTERM, before)

    def start(self) -> None:
        """Serve from a background thread (for ``populace run --studio`` and tests)."""
        server = self._make()
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [self._sock]},
                                        name="populace-studio", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self, linger: float = 0.0) -> None:
        """Stop serving: live pages get the latest state for ``linger`` seconds first."""
        if linger > 0:
            time.sleep(linger)
        self.asgi.app.state.closing = True
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)  # connections made before uvicorn starts wait instead of failing
    return sock
