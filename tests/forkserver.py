"""``populace`` (or ``python -c``) in a subprocess without paying for its start-up: a fork
server (test infrastructure; the product never uses it).

The suite starts some 300 ``populace`` processes, and each spent ~0.55 s of CPU importing
Python, numpy, pyarrow, pydantic and populace before doing its ~0.2 s of work: about a fifth
of the suite's CPU on 2 cores. Here one process per test worker imports them once and forks
a child for each command, so a test still gets a process of its own (its own pid and exit
status, its pipes, signals, ``kill -9``, a new session) but not a fresh interpreter.

What a fork shares that a fresh start would not, and so where :func:`spawn` falls back to a
real ``python -m populace.cli``:

- the environment read at import time: a server starts with the environment of the
  commands it forks, so each environment has a server of its own (beyond ``PATH`` and
  ``PYTEST_CURRENT_TEST``, which a command may have of its own);
- ``preexec_fn``, ``pass_fds`` and the other rare options of ``Popen``: started afresh;
- the hash seed: every child has the server's (a fresh process draws its own).

Each worker's server is started on first use and stops when the worker ends. If it cannot
start or has died, commands are started afresh; with ``POPULACE_TESTS_NO_FORKSERVER`` set,
always.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

#: The module a command runs, as ``python -m`` would...
MODULE = "populace.cli"
#: ... or the ``populace`` script of this environment (as the documentation's commands do).
SCRIPT = os.path.join(os.path.dirname(sys.executable), "populace")
_MAX_MESSAGE = 1 << 20
#: Variables a command may have of its own (set in the child; nothing reads them on import).
_PER_COMMAND = frozenset({"PATH", "PYTEST_CURRENT_TEST"})
#: Set (to anything) in the tests' environment, every command starts afresh.
OFF = "POPULACE_TESTS_NO_FORKSERVER"


class _Server:
    """This test process's fork server: its process and socket."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._dir = tempfile.mkdtemp(prefix="populace-forkserver-")
        self.path = os.path.join(self._dir, "socket")
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.path], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()  # the server says "ready" once it listens
        self.process.stdout.close()
        if ready.strip() != b"ready":
            self.process.kill()
            self.process.wait()
            raise OSError("the fork server did not start")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


#: The servers of this test process, by the environment they were started with (a test
#: module that joins a Ray cluster runs its commands with RAY_ADDRESS, say); the oldest
#: stops when a fourth is needed.
_servers: dict[frozenset[tuple[str, str]], _Server] = {}
_MAX_SERVERS = 3
_lock = threading.Lock()


def _the_server(env: dict[str, str]) -> _Server | None:
    """A server for commands with environment ``env`` (None: start them afresh)."""
    key = frozenset((k, v) for k, v in env.items() if k not in _PER_COMMAND)
    with _lock:
        server = _servers.pop(key, None)
        if server is not None and not server.alive():
            server.stop()
            server = None
        if server is None:
            while len(_servers) >= _MAX_SERVERS:
                _servers.pop(next(iter(_servers))).stop()
            try:
                server = _Server(dict(env))
            except OSError:
                return None
            atexit.register(server.stop)
        _servers[key] = server  # the most recent last
        return server


class ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` of a command :func:`spawn` accepts, whose child the fork server
    makes: fork instead of exec, its status read from the server instead of ``waitpid``."""

    def __init__(self, server: _Server, *args: Any, **kwargs: Any) -> None:
        self._server = server
        self._channel: socket.socket | None = None
        super().__init__(*args, **kwargs)

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any,
                       pass_fds: Any, cwd: Any, env: Any, startupinfo: Any,
                       creationflags: Any, shell: Any, p2cread: int, p2cwrite: int,
                       c2pread: int, c2pwrite: int, errread: int, errwrite: int,
                       *rest: Any) -> None:
        start_new_session, process_group = rest[-2], rest[-1]
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
               errwrite if errwrite != -1 else 2]
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel.connect(self._server.path)
            argv = [str(a) for a in args]
            request = {"argv": argv if argv[0] == SCRIPT else argv[1:],  # -m or -c on
                       "cwd": os.fspath(cwd or os.getcwd()),
                       "env": dict(os.environ if env is None else env),
                       "session": bool(start_new_session),
                       "group": process_group if process_group not in (None, -1) else None}
            socket.send_fds(channel, [json.dumps(request).encode()], fds)
            self.pid = int(channel.recv(64))
        except BaseException:
            channel.close()
            raise
        self._channel = channel
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _status(self, block: bool) -> int | None:
        """The child's raw wait status, once the server reports it."""
        channel = self._channel
        if channel is None:
            return 255 << 8  # read already: a caller that asks again learns nothing
        channel.setblocking(block)
        try:
            data = channel.recv(64)
        except BlockingIOError:
            return None
        finally:
            channel.setblocking(True)
        channel.close()
        self._channel = None
        # A server gone cannot say how its child ended: exit status 255, never a success.
        return int(data) if data else 255 << 8

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        status = self._status(block=not wait_flags & os.WNOHANG)
        return (0, 0) if status is None else (self.pid, status)

    def _internal_poll(self, _deadstate: Any = None, **_: Any) -> int | None:
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    status = self._status(block=False)
                    if status is not None:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def spawn(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **kwargs)``, forked by this worker's server when ``args`` is
    ``python -m populace.cli ...``, ``python -c CODE ...`` or the ``populace`` script, with
    an environment it can serve (see the module docstring)."""
    env = kwargs.get("env")
    if env is None:
        env = dict(os.environ)
    if os.environ.get(OFF) or not hasattr(os, "pidfd_open"):  # Linux only
        env = None
    plain = not ({"preexec_fn", "pass_fds", "user", "group", "extra_groups", "umask",
                  "executable", "shell"} & {k for k, v in kwargs.items() if v})
    command = [str(a) for a in args]
    if env is not None and plain and (command[:3] == [sys.executable, "-m", MODULE]
                                      or command[:2] == [sys.executable, "-c"]
                                      or command[:1] == [SCRIPT]):
        server = _the_server(env)
        if server is not None:
            return ForkedPopen(server, args, **kwargs)
    return subprocess.Popen(args, **kwargs)


def run(args: list[str], *, timeout: float | None = None, check: bool = False,
        input: Any = None, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` through :func:`spawn` (the same ``capture_output``, ``input``,
    ``timeout``, ``check``: the child is killed when it runs out of time)."""
    if kwargs.pop("capture_output", False):
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with spawn(args, **kwargs) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            process.kill()
            e.output, e.stderr = process.communicate()
            raise
    if check and process.returncode:
        raise subprocess.CalledProcessError(process.returncode, args, out, err)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


# -- the server ------------------------------------------------------------------------------
def _serve(path: str) -> dict[str, Any] | None:
    """Listen on ``path``; fork a child per request and report its status. Returns, in a
    child, its request (the caller runs the command); in the server, never (SIGTERM or the
    parent's death ends it)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd: (pid, channel)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                channel, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(channel, _MAX_MESSAGE, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:  # the child: leave the server behind
                    selector.close()
                    listener.close()
                    for pidfd, (_, other) in children.items():
                        os.close(pidfd)
                        other.close()
                    channel.close()
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                    for fd in set(fds):
                        if fd > 2:
                            os.close(fd)
                    return request
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, channel)
                selector.register(pidfd, selectors.EVENT_READ)
                channel.send(str(pid).encode())
            else:
                pidfd = key.fd
                pid, channel = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                try:
                    channel.send(str(status).encode())
                except OSError:
                    pass  # the client is gone
                channel.close()
        if os.getppid() != parent:  # the test worker died: so does its server
            sys.exit(0)


def _child(request: dict[str, Any]) -> None:
    """Run the command of ``request`` in this forked child, as ``python -m``, ``python -c``
    or the console script would."""
    import runpy
    import types

    if request["session"]:
        os.setsid()
    elif request["group"] is not None:
        os.setpgid(0, request["group"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # sys.stdin, stdout, stderr: the server's, on file descriptors 0-2, now the child's
    argv = request["argv"]
    if argv[0] == SCRIPT:
        from populace.cli import main

        sys.argv = argv
        sys.exit(main())
    if argv[0] == "-c":  # in a __main__ of its own, as python -c runs it
        main_module = types.ModuleType("__main__")
        sys.modules["__main__"] = main_module
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<string>", "exec"), main_module.__dict__)
        sys.exit(0)
    sys.argv = ["-m", *argv[2:]]  # runpy puts the module's path first, as python -m does
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    # Import what every command imports, once (the point of this server).
    import populace.cli  # noqa: F401

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    todo = _serve(sys.argv[1])
    if todo is not None:
        _child(todo)
