"""PostgreSQL servers of a test's own, for failover tests: a primary and its standbys built from Debian's
PostgreSQL binaries (``/usr/lib/postgresql/<version>/bin``: initdb, pg_ctl, pg_basebackup -R, pg_rewind) on free
ports of 127.0.0.1, in a temporary directory, removed afterwards (``Cluster.close``, also after a failure).
Never the shared server on 5432: these tests kill, promote and rewind their own servers only.

PostgreSQL refuses to run as root. When the tests run as root (CI does), every server command runs as the
``postgres`` OS user (Debian's package creates it) through ``runuser -u postgres --``, and the temporary
directory is given to that user; as any other user, the commands run as that user.

Settings: ``wal_level = replica`` with ``wal_log_hints = on`` (pg_rewind needs it, or data checksums), a few
WAL senders and slots-free streaming (``pg_basebackup -R`` writes ``primary_conninfo`` and ``standby.signal``),
``cluster_name`` = the node's name (a standby's ``application_name``, which ``synchronous_standby_names``
names), the Unix socket in the temporary directory (never in /var/run/postgresql, the shared server's), small
buffers. ``fsync`` is off unless asked (``durable=True``): a killed server process loses nothing the operating
system holds, which is all these tests kill; the benchmarks that compare synchronous and asynchronous
replication turn it on.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.harness import free_port

BASE_SETTINGS = {
    "listen_addresses": "'127.0.0.1'", "wal_level": "replica", "wal_log_hints": "on", "max_wal_senders": "10",
    "hot_standby": "on", "shared_buffers": "32MB", "max_connections": "200", "wal_keep_size": "256MB",
    "wal_receiver_status_interval": "1s", "log_min_messages": "warning", "logging_collector": "off",
}


def bin_dir() -> Path | None:
    """Debian's newest PostgreSQL binaries, or None when they are not installed."""
    root = Path("/usr/lib/postgresql")
    versions = sorted((p for p in root.glob("*/bin") if (p / "initdb").exists()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0) if root.is_dir() else []
    return versions[-1] if versions else None


def available() -> str | None:
    """Why servers of our own cannot be built here, or None when they can."""
    if bin_dir() is None:
        return "Debian's PostgreSQL server binaries are not installed (/usr/lib/postgresql/*/bin/initdb)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres OS user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


class Node:
    """One server of a ``Cluster``: its data directory, port and log. ``url(database)`` is recon's URL for it."""

    def __init__(self, cluster: Cluster, name: str, *, port: int | None = None) -> None:
        self.cluster = cluster
        self.name = name
        self.port = port or free_port()
        self.data = cluster.root / name
        self.log = cluster.root / f"{name}.log"
        #: the postmaster (under runuser when we are root), our child: a killed one is reaped at once, never a
        #: zombie whose pid still looks alive to the next postmaster's lock-file check
        self.proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"Node({self.name}, port {self.port})"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database} connect_timeout=5"

    def configure(self, **settings: str) -> None:
        """Append settings to postgresql.conf (the last of a name wins), this node's own always among them."""
        own = {"port": str(self.port), "cluster_name": f"'{self.name}'",
               "unix_socket_directories": f"'{self.cluster.root}'"}
        lines = [f"{k} = {v}" for k, v in {**own, **settings}.items()]
        with (self.data / "postgresql.conf").open("a") as fh:
            fh.write("\n" + "\n".join(lines) + "\n")

    def start(self, *, timeout: float = 60) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.cluster.argv("postgres", "-D", str(self.data)), stdout=log, stderr=log,
                                         cwd=self.cluster.root)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.query("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self} did not start: {exc}; see {self.log}") from exc
                time.sleep(0.05)

    def stop(self, mode: str = "fast") -> None:
        if self.pid() is not None:
            self.cluster.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self._reap()

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend of this server at once: a crash, as a dying host would.
        Every process working in the data directory (PostgreSQL's all do) is killed, again until none is left:
        a backend forked while the first ones died would otherwise serve its client on, for a moment."""
        pid = self.pid()
        if pid is None:
            return
        data = str(self.data.resolve())
        for _ in range(50):
            found = [p for p in _pids() if _cwd(p) == data]
            if not found:
                break
            for p in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.01)
        self._reap()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)

    def _reap(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            self.proc = None

    def promote(self) -> None:
        self.cluster.run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def pid(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        return pid if _alive(pid) else None

    def walsender_pid(self, standby: Node) -> int | None:
        """This primary's WAL sender to ``standby``: SIGSTOP it and the standby falls behind while this server
        commits on (asynchronous replication), as behind a slow network. (Stopping the standby's WAL receiver
        instead loses nothing on one host: what was sent waits in its socket's buffers, megabytes of it.)"""
        row = self.query("SELECT pid FROM pg_stat_replication WHERE application_name = %s", (standby.name,))
        return int(row[0][0]) if row else None

    def query(self, sql: str, params: Any = None, *, database: str = "postgres") -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []

    def in_recovery(self) -> bool:
        return bool(self.query("SELECT pg_is_in_recovery()")[0][0])

    def wait_streaming(self, standby: Node, *, timeout: float = 30) -> None:
        """Until ``standby`` streams from this node (it shows in pg_stat_replication)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.query("SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND state = 'streaming'",
                          (standby.name,)):
                return
            time.sleep(0.1)
        raise AssertionError(f"{standby} did not stream from {self} within {timeout} s")


class Cluster:
    """Servers in one temporary directory (module docstring). Use as a context manager, or call ``close``."""

    def __init__(self, *, durable: bool = False) -> None:
        reason = available()
        if reason:
            raise RuntimeError(reason)
        self.bin = bin_dir()
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="recon-pg-"))
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self.nodes: list[Node] = []

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def argv(self, tool: str, *args: str) -> list[str]:
        """The command line of a PostgreSQL tool of ``bin``, as the postgres OS user when we are root."""
        assert self.bin is not None
        argv = [str(self.bin / tool), *args]
        return ["runuser", "-u", "postgres", "--", *argv] if self._as_postgres else argv

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL tool (``argv``); raises with its output when it fails."""
        done = subprocess.run(self.argv(tool, *args), capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done

    def primary(self, name: str, **settings: str) -> Node:
        """A new primary, initialised and started."""
        node = Node(self, name)
        self.run("initdb", "-D", str(node.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync",
                 "--no-instructions")
        node.configure(**BASE_SETTINGS, fsync="on" if self.durable else "off", **settings)
        node.start()
        self.nodes.append(node)
        return node

    def standby(self, name: str, of: Node) -> Node:
        """A new streaming standby of ``of`` (``pg_basebackup -R``), started; its settings are a copy of the
        primary's (``synchronous_standby_names`` included: the promotion trap) plus its own."""
        node = Node(self, name)
        self.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(of.port), "-U", "postgres", "-D", str(node.data),
                 "-R", "-X", "stream", "-c", "fast", "--no-sync")
        node.configure()
        node.start()
        self.nodes.append(node)
        of.wait_streaming(node)
        return node

    def rewind(self, node: Node, *, source: Node) -> None:
        """Make the old primary ``node`` (stopped, or killed: pg_rewind recovers it first) a standby of
        ``source``: ``pg_rewind -R`` (its diverged blocks replaced by the source's, ``standby.signal`` and
        ``primary_conninfo`` written), its own settings again (pg_rewind copies the source's configuration
        files), then started and streaming."""
        node.stop("immediate")
        source.query("CHECKPOINT")  # pg_rewind reads the source's timeline from its control file: after a promotion
        self.run("pg_rewind", "--target-pgdata", str(node.data), "--source-server", source.dsn(), "-R",
                 "--no-sync")
        node.configure()
        node.start()
        source.wait_streaming(node)

    def close(self) -> None:
        """Stop every server at once and remove the directory."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _cwd(pid: int) -> str | None:
    """The working directory of ``pid`` (None once it is gone, or a zombie)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed postmaster waits for whoever started pg_ctl to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@contextlib.contextmanager
def pair(*, synchronous: bool, durable: bool = False) -> Iterator[tuple[Cluster, Node, Node]]:
    """A primary ``a`` and a streaming standby ``b``; ``synchronous``: ``b`` is its synchronous standby
    (``synchronous_standby_names`` set with ALTER SYSTEM, as an operator or Patroni would)."""
    with Cluster(durable=durable) as cluster:
        a = cluster.primary("a")
        if synchronous:  # before the base backup, as a deployment would be: the standby gets a copy of it
            a.query("ALTER SYSTEM SET synchronous_standby_names = 'b'")
            a.query("SELECT pg_reload_conf()")
        b = cluster.standby("b", of=a)
        if synchronous:
            deadline = time.monotonic() + 10
            while not a.query("SELECT 1 FROM pg_stat_replication WHERE application_name = 'b' AND sync_state = 'sync'"):
                assert time.monotonic() < deadline, "b never became a synchronous standby"
                time.sleep(0.05)
        yield cluster, a, b
