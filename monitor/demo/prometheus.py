"""The demo's Prometheus: scrapes the daemon and evaluates the project's rules, when installed.

The rules are `prometheus_rules.yaml` beside this module: the chart's recording and alert rules
rendered by `rules/render.py` with short windows and `for` durations, so that alerts go pending
and fire within minutes of demo traffic (in production they use 1h/6h windows and `for: 15m`).
Without a `prometheus` binary on PATH (Debian: `apt-get install prometheus`) the demo runs
without it and says so.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import time
from contextlib import AsyncExitStack
from importlib import resources
from pathlib import Path

import aiohttp
import yaml

from monitor.demo.processes import ChildProcess

DEFAULT_PORT = 9090
SCRAPE_INTERVAL = "5s"
READY_SECONDS = 20.0


def rules_text() -> str:
    return resources.files("monitor.demo").joinpath("prometheus_rules.yaml").read_text("utf-8")


def prometheus_config(daemon_port: int, rules_file: Path) -> dict[str, object]:
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            {
                # The job the chart's availability alerts select (job="rag-monitor").
                "job_name": "rag-monitor",
                "static_configs": [{"targets": [f"127.0.0.1:{daemon_port}"]}],
            }
        ],
    }


def _free(port: int) -> int | None:
    """`port` (0: any) when it can be bound on loopback now, else None."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
        bound: int = sock.getsockname()[1]
        return bound


def _port(preferred: int | None) -> int | None:
    """`preferred` if free (None if not), else 9090 when free, else any free port."""
    if preferred is not None:
        return _free(preferred)
    return _free(DEFAULT_PORT) or _free(0)


async def _wait_ready(url: str, child: ChildProcess) -> bool:
    deadline = time.monotonic() + READY_SECONDS
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while time.monotonic() < deadline and child.process.returncode is None:
            try:
                async with session.get(f"{url}/-/ready") as response:
                    if response.status == 200:
                        return True
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.25)
    return False


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


async def start_prometheus(
    stack: AsyncExitStack, *, daemon_port: int, port: int | None = None
) -> dict[str, str]:
    """Start Prometheus scraping the daemon; returns the banner lines to add (`prometheus`).

    Never raises for a missing or failing Prometheus: the demo goes on without it.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        return {
            "prometheus": "not installed; install it (Debian: apt-get install prometheus) "
            "to watch the alerts fire"
        }
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-demo-prometheus-"))
    stack.callback(shutil.rmtree, workdir, True)
    rules = workdir / "rules.yaml"
    rules.write_text(rules_text(), encoding="utf-8")
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(daemon_port, rules)), encoding="utf-8")
    listen = _port(port)
    if listen is None:
        return {"prometheus": f"not started: port {port} is in use (--prometheus-port)"}
    log_file = workdir / "prometheus.log"
    child = await ChildProcess.start(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{listen}",
        ],
        log_file=log_file,
        cwd=workdir,
    )
    stack.push_async_callback(child.stop)
    url = f"http://127.0.0.1:{listen}"
    if not await _wait_ready(url, child) or child.process.returncode is not None:
        await child.stop()
        return {"prometheus": f"failed to start: {_last_line(log_file) or 'no output'}"}
    return {"prometheus": f"{url}/alerts"}
