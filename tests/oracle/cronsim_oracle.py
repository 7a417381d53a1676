#!/usr/bin/env python3
"""Oracle for tests/time_vs_cronsim.rs: fire times according to cronsim.

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
"""

import json
import sys
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

UTC = timezone.utc


def fmt(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(case: dict) -> dict:
    tz = ZoneInfo(case["tz"])
    start = datetime.fromisoformat(case["start"].replace("Z", "+00:00"))
    local = start.astimezone(tz)
    try:
        it = CronSim(case["expr"], local)
    except CronSimError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        return {"crash": f"{type(e).__name__}: {e}"}
    fires = []
    skipped = 0
    last = start
    try:
        while len(fires) < case["n"]:
            try:
                fire = next(it)
            except StopIteration:
                break
            if fire.astimezone(UTC) <= last:
                skipped += 1
                if skipped > 100_000:
                    return {"crash": "too many non-increasing fires"}
                continue
            last = fire.astimezone(UTC)
            fires.append(fmt(fire))
    except Exception as e:  # noqa: BLE001
        return {"crash": f"{type(e).__name__}: {e}"}
    return {"fires": fires, "skipped": skipped}


def main() -> None:
    out = sys.stdout
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.write(json.dumps(run(json.loads(line))) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
