"""Processes for the chaos suite: the PSP sandbox and `recon worker`s as real OS processes that can be
killed, frozen and restarted; PostgreSQL restarts; a simulated cron. Everything talks to 127.0.0.1 only
and every wait is bounded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
[engine]
lease_ttl_seconds = 2.0
heartbeat_interval_seconds = 0.5
watcher_interval_seconds = 0.5
poll_interval_seconds = 0.1
concurrency = 8
drain_timeout_seconds = 2.0

[retry.default]
base_seconds = 0.1
cap_seconds = 1.0
max_attempts = 30
{retries}

[reconcile]
schedule = ["1s", "1s", "2s", "2s", "3s", "5s", "5s", "5s"]
grace_period = "2s"

# Stripe's built-in grace period is 1 h (its search may lag); the sandbox's search does not
[reconcile.psp.stripe]
grace_period = "2s"

[reconcile.psp.adyen]
grace_period = "2s"

# the breaker still opens (the sandbox restart alone trips it), but for seconds, not the default 30 s, in
# runs of 15 s: the runs through the real adapters stay bounded (the native run keeps the default)
[psp.stripe]
breaker_open_seconds = 3.0

[psp.adyen]
breaker_open_seconds = 3.0
"""

#: test values, not credentials: what the Stripe and Adyen sandboxes require, and what recon sends them
PSP_API_KEYS = {"stripe": "sk_test_chaos", "adyen": "chaos-adyen-api-key", "sandbox": "chaos-sandbox-api-key"}
#: every chaos payment's merchant account (through Adyen: the account charged and whose reports are read)
MERCHANT_ACCOUNT = "chaos-shop"
ADYEN_REPORT_USERNAME = "report@Company.SandboxCompany"
ADYEN_REPORT_PASSWORD = "chaos-report-password"
#: test values, not credentials: the webhook signing secrets the sandbox signs with and `recon serve` verifies
WEBHOOK_SECRETS = {"stripe": "whsec_chaos0123456789abcdef", "adyen": "00112233445566778899aabbccddeeff" * 2}
#: the sandbox's webhook faults in the runs through the real adapters: some never come, some twice, some late
WEBHOOK_FAULTS = ("--webhook-drop-fraction", "0.1", "--webhook-duplicate-fraction", "0.1", "--webhook-reorder", "0.1")
#: the zone of the Adyen reports' days: recon must read them in the zone the sandbox writes them in
ADYEN_REPORT_TIMEZONE = "Europe/Amsterdam"


def write_config(path: Path) -> Path:
    kinds = ["network", "unknown_outcome", "rate_limited", "psp_busy", "psp_unavailable", "conflict", "protocol",
             "db_transient", "bug"]
    retries = "\n".join(f"[retry.{k}]\nbase_seconds = 0.1\ncap_seconds = 1.0\nmax_attempts = 30\n" for k in kinds)
    path.write_text(CONFIG.format(retries=retries))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(config: Path, sandbox_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(REPO), "RECON_CONFIG": str(config), "RECON_SANDBOX_BASE_URL": sandbox_url,
                "RECON_SANDBOX_API_KEY": PSP_API_KEYS["sandbox"], "RECON_SANDBOX_READ_TIMEOUT": "1",
                "RECON_SANDBOX_CONNECT_TIMEOUT": "1"})
    env.update(extra)
    return env


def sandbox_flags(psp: str) -> tuple[str, ...]:
    """The `recon psp-sandbox` flags that make it speak ``psp``'s wire, with the run's api key."""
    if psp == "stripe":
        return ("--flavor", "stripe", "--api-key", PSP_API_KEYS["stripe"])
    if psp == "adyen":
        return ("--flavor", "adyen", "--api-key", PSP_API_KEYS["adyen"], "--report-username", ADYEN_REPORT_USERNAME,
                "--report-password", ADYEN_REPORT_PASSWORD, "--report-timezone", ADYEN_REPORT_TIMEZONE)
    assert psp == "sandbox", psp
    return ("--api-key", PSP_API_KEYS["sandbox"])  # the sandbox always requires a key


def admin_headers(psp: str) -> dict[str, str]:
    """The PSP API's credentials, which admin changes (POST /_admin/...) need (the sandbox always has a key)."""
    if psp == "stripe":
        return {"Authorization": f"Bearer {PSP_API_KEYS['stripe']}"}
    if psp == "adyen":
        return {"X-API-Key": PSP_API_KEYS["adyen"]}
    return {"Authorization": f"Bearer {PSP_API_KEYS['sandbox']}"}


def psp_env(psp: str, sandbox_url: str) -> dict[str, str]:
    """recon's RECON_<PSP>_* settings (psp_adapters.registry.settings_from_env) for the real ``psp`` adapter
    against the sandbox at ``sandbox_url``, with the same short timeouts as the native run."""
    if psp == "sandbox":
        return {}
    prefix = f"RECON_{psp.upper()}_"
    env = {prefix + "BASE_URL": sandbox_url, prefix + "API_KEY": PSP_API_KEYS[psp], prefix + "READ_TIMEOUT": "1",
           prefix + "CONNECT_TIMEOUT": "1"}
    env["RECON_STRIPE_WEBHOOK_SECRET" if psp == "stripe" else "RECON_ADYEN_HMAC_KEY"] = WEBHOOK_SECRETS[psp]
    if psp == "adyen":
        env.update({prefix + "MERCHANT_ACCOUNT": MERCHANT_ACCOUNT, prefix + "REPORT_BASE_URL": sandbox_url,
                    prefix + "REPORT_USERNAME": ADYEN_REPORT_USERNAME,
                    prefix + "REPORT_PASSWORD": ADYEN_REPORT_PASSWORD,
                    prefix + "REPORT_TIMEZONE": ADYEN_REPORT_TIMEZONE})
    return env


class ReadyProcess:
    """A recon command in its own process that prints one line when it is ready, restartable on the same port:
    ``kill`` is SIGKILL (counted in ``kills``), ``stop`` is SIGTERM (SIGKILL after 10 s)."""

    ready_text = ""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self.kills = 0
        #: the process's environment (None: this one's)
        self.env: dict[str, str] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "recon", *self.argv()], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True,
                                     env=self.env if self.env is not None else dict(os.environ))
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert self.ready_text in line, line

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.kills += 1
        self._close()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def _close(self) -> None:
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()


class Sandbox(ReadyProcess):
    """`recon psp-sandbox` on the same port and state file across restarts, speaking the wire of ``psp``
    (recon's adapter name: sandbox, stripe or adyen; ``sandbox_flags``)."""

    ready_text = "listening"

    def __init__(self, state: Path, *flags: str, psp: str = "sandbox") -> None:
        super().__init__()
        self.state = state
        self.flags = (*flags, *sandbox_flags(psp))
        self.psp = psp

    def argv(self) -> list[str]:
        return ["psp-sandbox", "--port", str(self.port), "--state-file", str(self.state), *self.flags]

    def set_faults(self, **faults: object) -> None:
        httpx.post(f"{self.url}/_admin/faults", json=faults, headers=admin_headers(self.psp),
                   timeout=5).raise_for_status()


def webhook_flags(psp: str, serve_url: str) -> tuple[str, ...]:
    """The `recon psp-sandbox` flags that send ``psp``'s webhooks to `recon serve` at ``serve_url``, signed with
    the run's secret, with ``WEBHOOK_FAULTS``."""
    return ("--webhook-url", f"{serve_url}/webhooks/{psp}", "--webhook-secret", WEBHOOK_SECRETS[psp],
            *WEBHOOK_FAULTS)


class ServeProcess(ReadyProcess):
    """`recon serve` (the webhook endpoints) on the same port across restarts."""

    ready_text = "webhooks on "

    def __init__(self, db_url: str, env: dict[str, str]) -> None:
        super().__init__()
        self.db_url, self.env = db_url, env

    def argv(self) -> list[str]:
        return ["--database-url", self.db_url, "--log-level", "ERROR", "serve", "--port", str(self.port)]


class WorkerProcess:
    """One `recon worker` process; ``kill`` is SIGKILL, ``freeze``/``thaw`` are SIGSTOP/SIGCONT."""

    def __init__(self, db_url: str, env: dict[str, str], log: Path, *args: str, unfenced: bool = False,
                 module: str = "recon") -> None:
        #: run the planted bug (tests.chaos.unfenced_worker) instead of `recon` (or ``module``'s recon)
        self.module = "tests.chaos.unfenced_worker" if unfenced else module
        self.db_url = db_url
        self.env = env
        self.log = log
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "--database-url", self.db_url, "--log-level", "WARNING", "worker",
                 *self.args], env=self.env, stdout=fh, stderr=fh)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.kills += 1

    def freeze(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def recon(db_url: str, env: dict[str, str], *args: str, timeout: float = 60,
          module: str = "recon") -> subprocess.CompletedProcess[str]:
    """`recon ARGS` (``module``: an entry point that runs recon, e.g. tests.chaos.compressed), bounded."""
    return subprocess.run([sys.executable, "-m", module, "--database-url", db_url, "--log-level", "ERROR", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


def restart_postgres() -> None:
    """Restart the local PostgreSQL cluster (the workers must reconnect by themselves)."""
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True,
                   capture_output=True, timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"]).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError("PostgreSQL did not come back within 30 s")


def can_restart_postgres() -> bool:
    return os.geteuid() == 0 and os.path.isdir("/etc/postgresql") and \
        os.environ.get("RECON_CHAOS_RESTART_POSTGRES", "1") != "0"
