"""A lossy, slow piece of cable in userspace, standing in for ``tc netem``
(this machine's kernel is built without ``sch_netem``): every Ethernet frame
that arrives on one of two interfaces is sent out of the other after
``delay`` ± ``jitter`` seconds (uniform, so frames may overtake each other,
as with netem), or dropped with probability ``loss``; and now and then,
for about ``outage`` seconds about every ``outage_gap`` seconds (both ±
half, uniform), every frame towards DEV_A is dropped: requests from the
host behind DEV_A still arrive, the answers (and TCP's acknowledgements)
never come back. Run inside the switch namespace by ``netlab.Lab.impair``.

    python wire.py DEV_A DEV_B --delay 0.04 --jitter 0.02 --loss 0.05 --outage 0.4 --outage-gap 2 [--seed N]

Prints ``ready`` once both interfaces are bound, and on SIGTERM one JSON
line with its counts (frames relayed and dropped each way, outages)."""

from __future__ import annotations

import argparse
import heapq
import json
import random
import select
import signal
import socket
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4   # a copy of a frame this host sent: not ours to relay
MAX_FRAME = 65536


class Outages:
    """Spells of silence: about ``length`` seconds each, about ``gap``
    seconds apart (none when ``length`` is 0)."""

    def __init__(self, rng: random.Random, length: float, gap: float):
        self._rng, self._length, self._gap = rng, length, gap
        self._count = 0
        self._schedule(time.monotonic() if length else float("inf"))

    def _spread(self, mean: float) -> float:
        return self._rng.uniform(mean / 2, mean * 3 / 2)

    def _schedule(self, after: float) -> None:
        self._start = after + self._spread(self._gap)
        self._end = self._start + self._spread(self._length)

    def dead(self, now: float) -> bool:
        if now >= self._end:
            self._count += 1
            self._schedule(now)
        return now >= self._start

    def passed(self, now: float) -> int:
        """Outages begun by ``now``."""
        return self._count + (now >= self._start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--delay", type=float, required=True)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--outage", type=float, default=0.0, help="seconds nothing reaches DEV_A, ± half")
    parser.add_argument("--outage-gap", type=float, default=0.0, help="seconds between outages, ± half")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    ports = {}
    for name in (args.a, args.b):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((name, 0))
        sock.setblocking(False)
        ports[name] = sock
    across = {args.a: ports[args.b], args.b: ports[args.a]}
    counts = {f"{name}_{what}": 0 for name in ports for what in ("relayed", "dropped")}
    outages = Outages(rng, args.outage, args.outage_gap)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print("ready", flush=True)

    due: list[tuple[float, int, str, bytes]] = []   # (send at, order, arrived on, frame)
    order = 0
    while not stop:
        wait = max(0.0, due[0][0] - time.monotonic()) if due else 0.5
        try:
            readable, _, _ = select.select(list(ports.values()), [], [], wait)
        except InterruptedError:
            continue
        for sock in readable:
            name = args.a if sock is ports[args.a] else args.b
            while True:
                try:
                    frame, address = sock.recvfrom(MAX_FRAME)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING:
                    continue
                if (name == args.b and outages.dead(time.monotonic())) or rng.random() < args.loss:
                    counts[f"{name}_dropped"] += 1
                    continue
                order += 1
                at = time.monotonic() + max(0.0, rng.uniform(args.delay - args.jitter, args.delay + args.jitter))
                heapq.heappush(due, (at, order, name, frame))
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, name, frame = heapq.heappop(due)
            try:
                across[name].send(frame)
                counts[f"{name}_relayed"] += 1
            except OSError:   # the far side went away (teardown): the frame is lost, as on a cable
                counts[f"{name}_dropped"] += 1
    counts["outages"] = outages.passed(time.monotonic())
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    sys.exit(main())
