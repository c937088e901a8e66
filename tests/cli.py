"""One way for tests to run the ``recon`` command line: ``run(*args, db_url=…, env=…)`` -> ``Result``.

By default the command runs **in this process**: ``recon.cli.main(argv)`` with stdout and stderr captured
(``contextlib.redirect_stdout``/``redirect_stderr``: click and recon's log handler write to ``sys.stdout`` /
``sys.stderr`` as they are at call time), the exit code taken from its ``SystemExit``, and everything the call
changes in the process put back afterwards: ``os.environ`` (``env`` replaces it for the call, as
``subprocess.run(env=…)`` replaces a child's), the working directory, the log handler recon installs on the
root logger, every logger's level (``recon.cli`` sets the root's, alembic's and httpx's), and the signal
handlers ``recon worker`` installs in the main thread. Every thread the command started must have stopped
when it returns (the worker's, the sweep's, HTTP servers'): one still running fails the test.

``subprocess=True`` runs ``python -m recon`` instead, for what needs a real process: signals, crashes,
several processes at once, the interpreter's own start-up. Both return the same ``Result``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess as _subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
#: how long the threads a command started may take to finish after it returned
THREAD_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Result:
    """What a ``recon`` run left: its exit code and everything it wrote (text, as ``subprocess`` gives it)."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    """``run``'s signature (the ``recon`` fixture's type)."""

    def __call__(self, *args: str, db_url: str | None = None, env: Mapping[str, str] | None = None,
                 log_level: str | None = None, cwd: str | Path | None = None, timeout: float = 60,
                 subprocess: bool = False) -> Result: ...


def argv(*args: str, db_url: str | None = None, log_level: str | None = None) -> list[str]:
    """The command line after ``recon``: the global options given, then ``args``."""
    head = ["--database-url", db_url] if db_url is not None else []
    if log_level is not None:
        head += ["--log-level", log_level]
    return [*head, *args]


def run(*args: str, db_url: str | None = None, env: Mapping[str, str] | None = None, log_level: str | None = None,
        cwd: str | Path | None = None, timeout: float = 60, subprocess: bool = False) -> Result:
    """Run ``recon [--database-url DB_URL] [--log-level LEVEL] ARGS…`` and return what it left.

    ``env``: the whole environment of the run (None: this process's). ``cwd``: its working directory.
    ``timeout`` bounds a subprocess; in-process, it bounds the wait for the command's threads.
    """
    line = argv(*args, db_url=db_url, log_level=log_level)
    if subprocess:
        return _in_subprocess(line, env=env, cwd=cwd, timeout=timeout)
    return _in_process(line, env=env, cwd=cwd, timeout=min(timeout, THREAD_GRACE_SECONDS))


def python_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the repository on PYTHONPATH, so that a ``python -m recon``
    child imports this checkout and the test handlers (``--handlers tests.integration.handlers``)."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


def _in_subprocess(line: list[str], *, env: Mapping[str, str] | None, cwd: str | Path | None,
                   timeout: float) -> Result:
    r = _subprocess.run([sys.executable, "-m", "recon", *line], capture_output=True, text=True, timeout=timeout,
                        env=None if env is None else dict(env), cwd=cwd)
    return Result(tuple(line), r.returncode, r.stdout, r.stderr)


class _Capture(io.TextIOWrapper):
    """A text stream with a ``buffer`` (as ``sys.stdout`` has) whose text can be read back."""

    def __init__(self) -> None:
        self._bytes = io.BytesIO()
        super().__init__(self._bytes, encoding="utf-8", errors="backslashreplace", write_through=True)

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        """Everything written, decoded as ``subprocess.run(text=True)`` would (universal newlines)."""
        self.flush()
        return self._bytes.getvalue().decode("utf-8", errors="replace").replace("\r\n", "\n")


def _in_process(line: list[str], *, env: Mapping[str, str] | None, cwd: str | Path | None,
                timeout: float) -> Result:
    import recon.cli

    out, err = _Capture(), _Capture()
    threads_before = set(threading.enumerate())
    code: int
    with _restored_process_state(env=env, cwd=cwd), _engines_disposed(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            recon.cli.main(line)
        except SystemExit as exc:
            code = _exit_code(exc.code, err)
        else:  # main() always exits; returning is a bug in it
            raise AssertionError(f"recon.cli.main({line!r}) returned instead of exiting")
        finally:
            _join_new_threads(threads_before, timeout=timeout, line=line)
    return Result(tuple(line), code, out.text(), err.text())


def _exit_code(code: object, err: io.TextIOBase) -> int:
    """``SystemExit.code`` as the interpreter turns it into a process's exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=err)  # sys.exit("message"): printed to stderr, status 1
    return 1


@contextlib.contextmanager
def _restored_process_state(*, env: Mapping[str, str] | None, cwd: str | Path | None) -> Iterator[None]:
    """Everything a command may change in the process, put back when the block ends."""
    saved_environ = dict(os.environ)
    saved_cwd = os.getcwd()
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    saved_levels = {logger: (logger.level, logger.disabled) for logger in _loggers()}
    saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        os.chdir(saved_cwd)
        for handler in [h for h in root.handlers if h not in saved_handlers]:
            root.removeHandler(handler)
            handler.close()
        for handler in saved_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        for logger in _loggers():  # a logger first made during the call goes back to inheriting its level
            level, disabled = saved_levels.get(logger, (logging.NOTSET, False))
            logger.setLevel(level)
            logger.disabled = disabled
        if threading.current_thread() is threading.main_thread():
            for sig, handler in saved_signals.items():
                if signal.getsignal(sig) is not handler and handler is not None:
                    signal.signal(sig, handler)


@contextlib.contextmanager
def _engines_disposed() -> Iterator[None]:
    """Dispose of every SQLAlchemy engine made during the block: ``App.close`` disposes of a command's pool as
    the command ends, but an engine made elsewhere, or an App a command did not close, would keep its
    connections open in-process until the garbage collector found it (an unclosed psycopg connection warns,
    and warnings are errors here).
    An engine stays usable after ``dispose()`` (it makes a new pool), so one another thread made is safe."""
    import sqlalchemy

    made: list[sqlalchemy.Engine] = []
    create_engine = sqlalchemy.create_engine

    def recording(*args: Any, **kwargs: Any) -> sqlalchemy.Engine:
        engine = create_engine(*args, **kwargs)
        made.append(engine)
        return engine

    sqlalchemy.create_engine = recording  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlalchemy.create_engine = create_engine
        for engine in made:
            engine.dispose()


def _loggers() -> list[logging.Logger]:
    """The root logger and every named one made so far."""
    manager = logging.Logger.manager
    return [logging.getLogger(), *(lg for lg in manager.loggerDict.values() if isinstance(lg, logging.Logger))]


def _join_new_threads(before: set[threading.Thread], *, timeout: float, line: list[str]) -> None:
    """Wait for the threads started during the call; fail when one outlives ``timeout``."""
    deadline = time.monotonic() + timeout
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = sorted(t.name for t in set(threading.enumerate()) - before if t.is_alive())
    if alive:
        raise AssertionError(f"recon {' '.join(line)}: threads still running {timeout:.0f}s after it "
                             f"returned: {', '.join(alive)}")
