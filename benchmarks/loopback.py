"""Loopback ports and listening sockets: pick free ports, check fixed ones, find listeners.

Everything the rehearsal starts must listen on 127.0.0.1 only, and other engineers run
servers on the same machine, so ports are picked free (bind port 0) and every listener of
the started processes can be listed (from /proc/net/tcp*) to prove where it is bound.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from benchmarks.process_table import PROC, process_table

LOOPBACK = "127.0.0.1"
_TCP_LISTEN = "0A"


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True when `host:port` cannot be bound right now (someone listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def accepts_connections(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket of a process."""

    pid: int
    address: str
    port: int

    @property
    def loopback_only(self) -> bool:
        return self.address in (LOOPBACK, "::1", "::ffff:127.0.0.1")


def _decode_address(hex_address: str) -> tuple[str, int]:
    host_hex, port_hex = hex_address.split(":")
    raw = bytes.fromhex(host_hex)
    if len(raw) == 4:
        host = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        # /proc prints IPv6 as four little-endian 32-bit words.
        words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
        host = socket.inet_ntop(socket.AF_INET6, b"".join(words))
    return host, int(port_hex, 16)


def _listening_inodes(proc: Path) -> dict[str, tuple[str, int]]:
    inodes: dict[str, tuple[str, int]] = {}
    for name in ("tcp", "tcp6"):
        table = proc / "net" / name
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _TCP_LISTEN:
                inodes[fields[9]] = _decode_address(fields[1])
    return inodes


def listening_ports(proc: Path = PROC) -> set[int]:
    """Every TCP port something listens on here, whoever owns it."""
    return {port for _, port in _listening_inodes(proc).values()}


def _socket_inodes(pid: int, proc: Path) -> set[str]:
    found: set[str] = set()
    fd_dir = proc / str(pid) / "fd"
    try:
        entries = list(fd_dir.iterdir())
    except OSError:
        return found
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:["):-1])
    return found


def listeners(pids: set[int], proc: Path = Path("/proc")) -> list[Listener]:
    """Every listening TCP socket owned by one of `pids`."""
    inodes = _listening_inodes(proc)
    found: list[Listener] = []
    for pid in sorted(pids):
        for inode in _socket_inodes(pid, proc):
            if inode in inodes:
                address, port = inodes[inode]
                found.append(Listener(pid=pid, address=address, port=port))
    return found


def process_group_members(pgid: int, proc: Path = PROC) -> set[int]:
    """Pids whose process group is `pgid` (a started server and anything it forked)."""
    return {entry.pid for entry in process_table(proc) if entry.pgid == pgid}
