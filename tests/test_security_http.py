"""The HTTP server binds to the configured address only (RAGMON_HTTP__HOST).

The daemon runs the file source on a stdin that stays open, so it keeps serving without Kafka.
Its listening sockets are read from /proc (the process's socket inodes matched against
/proc/net/tcp), and other loopback addresses (127.0.0.0/8 is all local on Linux) must refuse.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests.support.faults import DaemonProcess, free_port, wait_until


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every IPv4/IPv6 TCP socket the process listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address_hex, port_hex = local.split(":")
            raw = bytes.fromhex(address_hex)
            if family == socket.AF_INET:
                address = socket.inet_ntop(family, raw[::-1])
            else:
                words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
                address = socket.inet_ntop(family, b"".join(words))
            found.add((address, int(port_hex, 16)))
    return found


def _refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("host", "other"), [("127.0.0.1", "127.0.0.2"), ("127.0.0.3", "127.0.0.1")]
)
def test_the_http_server_listens_only_on_the_configured_address(
    tmp_path: Path, host: str, other: str
) -> None:
    port = free_port()
    daemon = DaemonProcess(
        {
            "RAGMON_HTTP__HOST": host,
            "RAGMON_HTTP__PORT": str(port),
            "RAGMON_STORE__URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        },
        tmp_path,
        command=[sys.executable, "-m", "monitor.cli", "run", "--source", "file:-"],
        stdin_pipe=True,
    )
    daemon.start()
    assert daemon.proc is not None
    try:
        wait_until(lambda: daemon.status("/healthz") == 200 or not daemon.alive, 60, "healthz")
        assert daemon.alive, daemon.stderr_tail()
        assert _listening(daemon.pid) == {(host, port)}
        assert _refused(other, port), f"reachable on {other}"
        print(f"\nbound {_listening(daemon.pid)}; {other}:{port} refused")
    finally:
        daemon.ensure_stopped()
