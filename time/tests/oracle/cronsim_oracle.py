#!/usr/bin/env python3
"""Oracle for time/tests/vs_cronsim.rs: fire times according to cronsim 2.9 or newer
(2.9 reads a stepped range whose ends are equal, `5-5/2`, as the single value 5;
2.8 read it as `5/2`). Exits non-zero, saying so, with an older cronsim.

Usage: cronsim_oracle.py CASES.jsonl

Each input line is a JSON object {"expr": str, "tz": IANA name,
"start": RFC 3339 instant, "n": int}. For each line, one output line (same
order) is printed, a JSON object with either

  {"fires": ["2024-03-31T01:00:00Z", ...], "skipped": k}
      up to n fire instants in UTC, strictly increasing, as cronrun's
      `next_after` chain would produce them: cronsim's iterator, started at
      `start` converted to ZoneInfo(tz), with fires at or before the previous
      one (or the start) skipped (`skipped` counts them; cronsim yields such
      fires when the start is in the second pass of a repeated hour);
      fewer than n when cronsim stops (its 50-year give-up);
  {"error": "..."}   cronsim refused the expression (CronSimError);
  {"crash": "..."}   any other exception inside cronsim.

A "fires" answer may also carry "loop": "...": cronsim never returns the
next fire. Its search is deterministic in its state `self.dt` (wall time,
fold, zone), so a state seen twice at the top of one `advance()` loop, or
after yielding the same non-increasing fire twice, means an endless loop (this happens around some DST changes, e.g.
`27-46 59 3 * * *` in Pacific/Chatham from 2027-04-03T13:55Z: the minute jump
crosses the transition and `replace(minute=0)` jumps back before it). The
subclass below only observes the state and stops such a loop; it does not
change any result cronsim returns.
"""

import json
import sys
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from importlib.metadata import version

from cronsim import CronSim, CronSimError

UTC = timezone.utc


class Loop(Exception):
    pass


class ObservedCronSim(CronSim):
    def advance(self) -> None:
        self._seen = set()
        super().advance()

    def advance_month(self) -> None:
        key = (self.dt.replace(tzinfo=None), self.dt.fold)
        if key in self._seen:
            raise Loop(f"state {self.dt.isoformat()} fold={self.dt.fold} repeats")
        self._seen.add(key)
        super().advance_month()


def fmt(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(case: dict) -> dict:
    tz = ZoneInfo(case["tz"])
    start = datetime.fromisoformat(case["start"].replace("Z", "+00:00"))
    local = start.astimezone(tz)
    try:
        it = ObservedCronSim(case["expr"], local)
    except CronSimError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        return {"crash": f"{type(e).__name__}: {e}"}
    fires = []
    skipped = 0
    last = start
    seen = set()
    try:
        while len(fires) < case["n"]:
            try:
                fire = next(it)
            except StopIteration:
                break
            except Loop as e:
                return {"fires": fires, "skipped": skipped, "loop": str(e)}
            if fire.astimezone(UTC) <= last:
                # Also a loop when the iterator's state after yielding a
                # non-increasing fire repeats (it would yield it forever).
                key = (it.dt.replace(tzinfo=None), it.dt.fold)
                if key in seen:
                    msg = f"yields {fire.isoformat()} again and again"
                    return {"fires": fires, "skipped": skipped, "loop": msg}
                seen.add(key)
                skipped += 1
                continue
            seen.clear()
            last = fire.astimezone(UTC)
            fires.append(fmt(fire))
    except Exception as e:  # noqa: BLE001
        return {"crash": f"{type(e).__name__}: {e}"}
    return {"fires": fires, "skipped": skipped}


def main() -> None:
    found = version("cronsim")
    major_minor = tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in found.split(".")[:2])
    if major_minor < (2, 9):
        sys.exit(f"cronsim {found} found; the oracle needs cronsim 2.9 or newer: pip install cronsim==2.9")
    out = sys.stdout
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.write(json.dumps(run(json.loads(line))) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
