"""A private network of hosts made of Linux network namespaces: one
"switch" namespace with a bridge, and one namespace per host (the database
host and the worker hosts), each joined to the bridge by a veth pair.
Addresses come from 10.213.0.0/24 and exist only inside these namespaces,
so no traffic can leave them.

Faults are applied at the switch, where a cable would be pulled:

- ``cut(host)`` / ``heal(host)``: the host's switch port goes down / up (the
  host sees no carrier; its packets go nowhere);
- ``impair(host, ...)`` / ``restore(host)``: latency and loss on the host's
  link, both directions, and short outages towards the host (its requests
  arrive, the answers are lost): the port is taken off the
  bridge and a userspace relay (``wire.py``) carries its frames. ``tc
  netem`` would do the same in the kernel, but this machine's kernel (and
  so CI's) is built without ``sch_netem``; the relay needs ``ethtool`` to
  turn off checksum and segmentation offloads, so that the frames it copies
  are whole.

Every namespace is named ``fqh<pid>-<host>`` after the process that made it,
so a run can remove what an earlier, crashed run left (``remove_stale``)
without touching a run still going. Processes started inside the
namespaces are ended before the namespaces are deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PREFIX = "fqh"
SUBNET = "10.213.0"
NETWORK = f"{SUBNET}.0/24"
SWITCH = "sw"
BRIDGE = "br0"
HOST_DEVICE = "eth0"
WIRE = Path(__file__).resolve().parent / "wire.py"
STALE = re.compile(rf"^{PREFIX}(\d+)-")


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def unavailable() -> str | None:
    """Why this machine cannot run the multi-host test, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, e.g. in CI)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    try:
        bridged = run("ip", "-n", probe, "link", "add", BRIDGE, "type", "bridge", check=False)
        if bridged.returncode != 0:
            return f"cannot make a bridge in a namespace: {bridged.stderr.strip()}"
        paired = run("ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1", check=False)
        if paired.returncode != 0:
            return f"cannot make a veth pair in a namespace: {paired.stderr.strip()}"
    finally:
        run("ip", "netns", "delete", probe, check=False)
    return None


def namespaces() -> list[str]:
    listed = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_processes(namespace: str, grace: float = 5.0) -> None:
    """SIGTERM every process inside ``namespace``, then SIGKILL what is left."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in run("ip", "netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)


def remove_stale() -> list[str]:
    """Delete namespaces left by runs whose process is gone; their names."""
    removed = []
    for name in namespaces():
        match = STALE.match(name)
        if match and not _alive(int(match.group(1))):
            end_processes(name)
            run("ip", "netns", "delete", name, check=False)
            removed.append(name)
    return removed


class Lab:
    """The switch and its hosts. ``hosts`` maps a host name to the last
    byte of its address."""

    def __init__(self, hosts: dict[str, int], run_id: str | None = None):
        self.run_id = run_id or f"{PREFIX}{os.getpid()}"
        self.hosts = dict(hosts)
        self._relays: dict[str, subprocess.Popen] = {}
        self._made: list[str] = []

    def namespace(self, host: str) -> str:
        return f"{self.run_id}-{host}"

    def address(self, host: str) -> str:
        return f"{SUBNET}.{self.hosts[host]}"

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run inside the host's namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def _switch(self, *argv: str) -> None:
        run("ip", "-n", self.namespace(SWITCH), *argv)

    def up(self) -> None:
        if shutil.which("ethtool") is None:
            raise RuntimeError("the link impairment relay needs ethtool (apt-get install ethtool)")
        for host in [SWITCH, *self.hosts]:
            name = self.namespace(host)
            run("ip", "netns", "add", name)
            self._made.append(name)
            run("ip", "-n", name, "link", "set", "lo", "up")
        self._switch("link", "add", BRIDGE, "type", "bridge")
        self._switch("link", "set", BRIDGE, "up")
        for host in self.hosts:
            self._switch("link", "add", host, "type", "veth", "peer", "name", HOST_DEVICE,
                         "netns", self.namespace(host))
            self._switch("link", "set", host, "master", BRIDGE)
            self._switch("link", "set", host, "up")
            ns = self.namespace(host)
            run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", HOST_DEVICE)
            run("ip", "-n", ns, "link", "set", HOST_DEVICE, "up")
            # The relay copies frames verbatim: they must carry real checksums
            # and be no larger than the MTU.
            self._plain_frames(host, HOST_DEVICE)
            self._plain_frames(SWITCH, host)

    def _plain_frames(self, host: str, device: str) -> None:
        run("ip", "netns", "exec", self.namespace(host), "ethtool", "-K", device,
            "tx", "off", "tso", "off", "gso", "off", "gro", "off")

    # Faults ------------------------------------------------------------------------

    def cut(self, host: str) -> None:
        self._switch("link", "set", host, "down")

    def heal(self, host: str) -> None:
        self._switch("link", "set", host, "up")

    def impair(self, host: str, delay: float, jitter: float, loss: float, outage: float, outage_gap: float,
               seed: int = 0) -> None:
        """Frames to and from ``host`` take ``delay`` ± ``jitter`` seconds,
        a share ``loss`` of them is dropped, and for about ``outage`` seconds
        about every ``outage_gap`` seconds nothing reaches ``host``."""
        relay_port, bridge_port = f"{host}r", f"{host}b"
        self._switch("link", "add", relay_port, "type", "veth", "peer", "name", bridge_port)
        for device in (relay_port, bridge_port):
            self._plain_frames(SWITCH, device)
        self._switch("link", "set", host, "nomaster")
        self._switch("link", "set", bridge_port, "master", BRIDGE)
        self._switch("link", "set", bridge_port, "up")
        self._switch("link", "set", relay_port, "up")
        relay = subprocess.Popen(
            self.exec_argv(SWITCH, [sys.executable, str(WIRE), host, relay_port, "--delay", str(delay),
                                    "--jitter", str(jitter), "--loss", str(loss), "--outage", str(outage),
                                    "--outage-gap", str(outage_gap), "--seed", str(seed)]),
            stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        self._relays[host] = relay
        assert relay.stdout is not None
        if relay.stdout.readline().strip() != "ready":
            raise RuntimeError("the impairment relay did not start")

    def restore(self, host: str) -> dict:
        """Lift ``impair``; the relay's counts."""
        relay = self._relays.pop(host)
        relay.send_signal(signal.SIGTERM)
        out, _ = relay.communicate(timeout=30)
        self._switch("link", "del", f"{host}r")
        self._switch("link", "set", host, "master", BRIDGE)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}

    # Teardown -----------------------------------------------------------------------

    def down(self) -> None:
        """End every process in the namespaces, then delete them."""
        for relay in self._relays.values():
            with contextlib.suppress(ProcessLookupError):
                relay.kill()
        self._relays.clear()
        for name in reversed(self._made):
            end_processes(name)
            run("ip", "netns", "delete", name, check=False)
        self._made.clear()

    def leftovers(self) -> list[str]:
        """Namespaces of this run that still exist (none after ``down``)."""
        return [name for name in namespaces() if name.startswith(f"{self.run_id}-")]


def die_with_parent() -> None:
    """preexec_fn: the child is killed if the process that started it dies,
    so a crashed run leaves no worker, relay or server behind."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
