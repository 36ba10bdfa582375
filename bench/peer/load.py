"""The other load on the machine, phase by phase: CPU used by processes that are neither the
bench, this service, mem0's server, nor their PostgreSQL and Redis.

Each phase is wrapped in `Machine.phase`: one sample of every known process's CPU time and of
the machine's busy time before it, one after; what the machine spent beyond the known
processes, as a percentage of all cores over the phase, is its `other_pct`. Before a phase the
bench waits (bounded per phase and over the whole run) for a one-second window in which the
other load is under the threshold. A machine that is busier than the threshold before the
run starts makes it refuse, unless the caller allows load (then every row a loaded phase
touches is flagged in the report, report.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from bench.infra import _proc_cpu, _system_busy


class TooBusy(SystemExit):
    """The machine is busier than the threshold before the run: a comparison on it would
    favour whichever system spends less CPU per request, by an amount nobody can repeat."""


@dataclass
class Machine:
    """The known processes by system: pids with their children (PostgreSQL's backends), and
    the bench itself (this process, its model threads included)."""

    max_other_pct: float
    quiet_wait_s: float = 15.0  # at most this long before one phase
    quiet_budget_s: float = 240.0  # at most this long over the whole run
    pids: dict[str, list[int]] = field(default_factory=dict)  # component -> pids
    waited_s: float = 0.0

    def add(self, component: str, pid: int | None) -> None:
        if pid is not None:
            self.pids.setdefault(component, []).append(pid)

    def sample(self) -> dict[str, float | None]:
        """CPU seconds so far: per component, `bench`, and `system` (the machine's busy
        time, all cores)."""
        out: dict[str, float | None] = {"bench": time.process_time(), "system": _system_busy()}
        for comp, pids in self.pids.items():
            times = [_proc_cpu(p, children=True) for p in pids]
            out[comp] = sum(t for t in times if t is not None)
        return out

    @staticmethod
    def delta(
        a: dict[str, float | None], b: dict[str, float | None], seconds: float
    ) -> dict[str, Any]:
        """CPU seconds per component between two samples, and `other_pct`: the machine's busy
        time beyond all of them, as a percentage of all cores over `seconds`."""
        cpu = {
            k: max(0.0, b[k] - a[k])  # type: ignore[operator]
            for k in a
            if k != "system" and a[k] is not None and b.get(k) is not None
        }
        other = None
        if a["system"] is not None and b["system"] is not None and seconds > 0:
            busy = b["system"] - a["system"]
            other = round(
                100.0 * max(0.0, busy - sum(cpu.values())) / (seconds * (os.cpu_count() or 1)), 1
            )
        return {"cpu_s": cpu, "other_pct": other, "seconds": round(seconds, 2)}

    async def window(self, seconds: float = 1.0) -> float | None:
        a = self.sample()
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        return self.delta(a, self.sample(), time.perf_counter() - t0)["other_pct"]

    async def wait_for_quiet(self) -> dict[str, Any]:
        """Up to quiet_wait_s (and what is left of quiet_budget_s) for a one-second window
        with the other load under the threshold."""
        t0 = time.monotonic()
        limit = min(self.quiet_wait_s, max(0.0, self.quiet_budget_s - self.waited_s))
        while True:
            pct = await self.window()
            waited = time.monotonic() - t0
            if pct is None or pct <= self.max_other_pct or waited >= limit:
                self.waited_s += waited
                return {"waited_s": round(waited, 1), "other_pct": pct}

    @contextlib.asynccontextmanager
    async def phase(self, record: dict[str, Any], *, wait: bool = True) -> AsyncIterator[None]:
        """Wait for quiet (bounded), then measure the body: record gets `quiet` (the wait),
        `other_pct`, `seconds` and `cpu_s` by component."""
        if wait:
            record["quiet"] = await self.wait_for_quiet()
        a = self.sample()
        t0 = time.perf_counter()
        yield
        record.update(self.delta(a, self.sample(), time.perf_counter() - t0))

    async def preflight(self, *, allow: bool, say: Any = print) -> dict[str, Any]:
        """Before anything starts: wait (up to a minute) for three quiet seconds in a row;
        refuse when they do not come, unless `allow`."""
        seen: list[float] = []
        t0 = time.monotonic()
        quiet = 0
        while time.monotonic() - t0 < 60:
            pct = await self.window()
            if pct is None:
                return {"other_pct": None, "waited_s": 0.0, "refused": False}
            seen.append(pct)
            quiet = quiet + 1 if pct <= self.max_other_pct else 0
            if quiet >= 3:
                break
        out = {
            "other_pct": round(sorted(seen)[len(seen) // 2], 1),
            "max_pct": max(seen),
            "waited_s": round(time.monotonic() - t0, 1),
            "quiet": quiet >= 3,
        }
        if not out["quiet"]:
            msg = (
                f"other processes use a median {out['other_pct']} % of this machine's "
                f"{os.cpu_count()} cores (over {out['waited_s']:.0f} s; threshold "
                f"--max-other-load {self.max_other_pct:g} %): the comparison would favour "
                "whichever system spends less CPU per request. Run it on a quiet machine, or "
                "pass --allow-load to run anyway (every row a phase above the threshold "
                "touches is then flagged)."
            )
            if not allow:
                raise TooBusy(f"bench-peer refuses: {msg}")
            say(f"peer: WARNING (--allow-load): {msg}")
        return out
