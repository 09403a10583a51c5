"""Servers the tests control: a private PostgreSQL, a reply-losing proxy, a PgBouncer.

``PrivatePostgres`` is a throw-away cluster (``initdb`` in a temporary
directory, a free port) that a test may restart or crash without touching the
server the rest of the suite uses. ``LostReplyProxy`` sits between a worker
and PostgreSQL and can drop the connection right after the server committed a
statement, before its reply reaches the worker. ``PgBouncer`` is Debian's
pooler in transaction mode in front of the suite's PostgreSQL.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

#: The longest a server start, stop or restart may take.
SERVER_WAIT = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def local_url(port: int, database: str, options: dict[str, str]) -> str:
    """``postgres://postgres@127.0.0.1:port/database?options``."""
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"postgres://postgres@127.0.0.1:{port}/{database}" + (f"?{query}" if query else "")


def run_as_postgres(what: str) -> str | None:
    """The user to run ``what`` as: ``postgres`` when root (skips the test if none), else us."""
    if why := no_user_to_run(what):
        pytest.skip(why)
    return "postgres" if os.geteuid() == 0 else None


def no_user_to_run(what: str) -> str | None:
    """Why ``what`` cannot run here (root, and no ``postgres`` user to run it as), or None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return f"running as root with no 'postgres' user to run {what} as"
    return None


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own, on 127.0.0.1 at a free port, trust auth.

    ``PrivatePostgres.create()`` skips the test (with the reason) where the
    suite cannot run one: no server binaries, or root without a ``postgres``
    user to run them as. ``destroy()`` stops it and deletes its files.
    """

    def __init__(self, bindir: Path, run_as: str | None, settings: dict[str, str]) -> None:
        self.bindir = bindir
        self.run_as = run_as
        self.settings = settings
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="dbqueue-pg-"))
        self.data = self.root / "data"
        if run_as is not None:
            self.root.chmod(0o755)
            os.chown(self.root, pwd.getpwnam(run_as).pw_uid, -1)

    @classmethod
    def create(cls, **settings: str) -> PrivatePostgres:
        """A new cluster, started with these server ``settings`` (``autovacuum_naptime="1"``)."""
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) to run one")
        server = cls(Path(found[-1]).parent, run_as_postgres("a server"), settings)
        server._run(
            "initdb", "-D", str(server.data), "--auth=trust", "-U", "postgres", "-E", "UTF8"
        )
        server.start()
        return server

    def url(self, database: str, **options: str) -> str:
        return local_url(self.port, database, options)

    def start(self) -> None:
        settings = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        settings += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            settings,
            "-w",
            "-t",
            "60",
            "-l",
            str(self.root / "server.log"),
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``fast`` ends sessions and shuts down cleanly; ``immediate`` is a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def psql(self, database: str, sql: str) -> str:
        """Run ``sql`` with psql; its unaligned output."""
        return self._run(
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        )

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> str:
        command = [str(self.bindir / program), *args]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SERVER_WAIT, check=False, cwd="/"
        )
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
        return done.stdout


class LostReplyProxy:
    """A TCP proxy to PostgreSQL that, once armed, loses the reply of one committed write.

    ``arm(marker)``: the first client message holding ``marker`` (the text of a
    statement, sent when it is prepared) dooms its connection. From the
    server's report of that statement done (CommandComplete, whatever its tag:
    a write inside ``WITH`` reports the ``SELECT`` around it) on, its messages
    are held back; once it reports no transaction open (ReadyForQuery, status
    idle), the write is committed and both sockets are closed: the client never
    hears it. ``cut`` is set then. Connect with ``sslmode=disable`` so the
    protocol can be read.
    """

    def __init__(self, upstream_port: int = 5432) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.cut = threading.Event()
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # Closed.
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._sockets += [client, server]
            doomed = threading.Event()
            threading.Thread(
                target=self._to_server, args=(client, server, doomed), daemon=True
            ).start()
            threading.Thread(
                target=self._to_client, args=(server, client, doomed), daemon=True
            ).start()

    def _to_server(
        self, client: socket.socket, server: socket.socket, doomed: threading.Event
    ) -> None:
        while data := _recv(client):
            with self._lock:
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    doomed.set()
            try:
                server.sendall(data)
            except OSError:
                break
        _close(server)

    def _to_client(
        self, server: socket.socket, client: socket.socket, doomed: threading.Event
    ) -> None:
        buffer = b""
        updated = False
        while data := _recv(server):
            buffer += data
            while len(buffer) >= 5:
                kind, length = buffer[:1], struct.unpack("!I", buffer[1:5])[0]
                if len(buffer) < 1 + length:
                    break
                message, buffer = buffer[: 1 + length], buffer[1 + length :]
                updated = updated or (doomed.is_set() and kind == b"C")
                if not updated:
                    try:
                        client.sendall(message)
                    except OSError:
                        break
                    continue
                if kind == b"Z" and message[5:6] == b"I":
                    _close(server)
                    _close(client)
                    self.cut.set()
                    return
        _close(client)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class PgBouncer:
    """PgBouncer in ``pool_mode = transaction`` on 127.0.0.1 at a free port, trust auth.

    It pools every database of the server at ``upstream_port`` with at most
    ``pool_size`` server connections per database. ``max_prepared_statements``
    (PgBouncer 1.21+) is written to its ini only when given; ``None`` leaves the
    version's default (no prepared statements tracked). ``PgBouncer.start()``
    skips the test (with the reason) where it cannot run: no ``pgbouncer``
    binary, root without a ``postgres`` user, or a version without
    ``max_prepared_statements`` when one is asked for. ``stop()`` ends it and
    deletes its files.
    """

    def __init__(self, run_as: str | None, upstream_port: int, pool_size: int) -> None:
        self.run_as = run_as
        self.upstream_port = upstream_port
        self.pool_size = pool_size
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="dbqueue-pgbouncer-"))
        self.root.chmod(0o755)
        if run_as is not None:
            os.chown(self.root, pwd.getpwnam(run_as).pw_uid, -1)
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(
        cls,
        *,
        upstream_port: int = 5432,
        pool_size: int = 4,
        max_prepared_statements: int | None = None,
    ) -> PgBouncer:
        if why := cls.missing(max_prepared_statements):
            pytest.skip(why)
        bouncer = cls(run_as_postgres("pgbouncer"), upstream_port, pool_size)
        bouncer._write_config(max_prepared_statements)
        bouncer._launch(pgbouncer_program())
        return bouncer

    @staticmethod
    def missing(max_prepared_statements: int | None = None) -> str | None:
        """Why ``start()`` cannot run one here, or None: what it skips a test with."""
        if not os.access(pgbouncer_program(), os.X_OK):
            return "no pgbouncer binary (apt-get install pgbouncer) to pool through"
        if max_prepared_statements is not None and pgbouncer_version() < (1, 21):
            return (
                f"PgBouncer {'.'.join(map(str, pgbouncer_version()))} has no "
                "max_prepared_statements: PgBouncer 1.21+ keeps prepared statements per "
                "client, which PREPARED_STATEMENTS = True behind a transaction pool needs"
            )
        return no_user_to_run("pgbouncer")

    def url(self, database: str, **options: str) -> str:
        return local_url(self.port, database, options)

    def log(self) -> str:
        return (self.root / "pgbouncer.log").read_text(errors="replace")

    def pid(self) -> int:
        """The pgbouncer process's id (a child of ``runuser`` when run as ``postgres``)."""
        return int((self.root / "pgbouncer.pid").read_text())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(SERVER_WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(SERVER_WAIT)
        shutil.rmtree(self.root, ignore_errors=True)

    def _write_config(self, max_prepared_statements: int | None) -> None:
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        lines = [
            "[databases]",
            f"* = host=127.0.0.1 port={self.upstream_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.root / 'userlist.txt'}",
            "pool_mode = transaction",
            f"default_pool_size = {self.pool_size}",
            "min_pool_size = 0",
            "max_client_conn = 500",
            "server_reset_query = DISCARD ALL",
            # Django's psycopg connections send none of these, but a test's psql might.
            "ignore_startup_parameters = extra_float_digits,options",
            f"logfile = {self.root / 'pgbouncer.log'}",
            f"pidfile = {self.root / 'pgbouncer.pid'}",
        ]
        if max_prepared_statements is not None:
            lines.append(f"max_prepared_statements = {max_prepared_statements}")
        (self.root / "pgbouncer.ini").write_text("\n".join(lines) + "\n")

    def _launch(self, program: str) -> None:
        # Popen switches user itself rather than through runuser: runuser, told to stop,
        # waits two seconds before it kills its child, while PgBouncer stops at once.
        self.process = subprocess.Popen(
            [program, str(self.root / "pgbouncer.ini")],
            cwd="/",
            user=self.run_as,
            group=None if self.run_as is None else pwd.getpwnam(self.run_as).pw_gid,
            extra_groups=None if self.run_as is None else [],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + SERVER_WAIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log() if (self.root / "pgbouncer.log").exists() else ""
                raise RuntimeError(f"pgbouncer exited with {self.process.returncode}:\n{log}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on port {self.port} in {SERVER_WAIT}s")


def pgbouncer_program() -> str:
    """Where the ``pgbouncer`` binary is (Debian puts it in /usr/sbin, often off PATH)."""
    return shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def pgbouncer_version() -> tuple[int, ...]:
    """The installed PgBouncer's version, as numbers: ``(1, 18, 0)``."""
    done = subprocess.run(
        [pgbouncer_program(), "--version"], capture_output=True, text=True, check=True
    )
    found = re.search(r"PgBouncer (\d+)\.(\d+)(?:\.(\d+))?", done.stdout)
    if found is None:
        raise RuntimeError(f"cannot read a version from {done.stdout!r}")
    return tuple(int(part) for part in found.groups(default="0"))
