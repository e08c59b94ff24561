"""DBOS Transact (Python) on its SQLite system database: the two workloads run-bench compares.

1. one workflow of N sequential steps (each a trivial @DBOS.step returning its argument);
2. a fan-out of N: one async workflow that runs N trivial async steps at once
   (asyncio.gather), each step checkpointed in the system database as in (1).

Prints one JSON object: {"version", "sequential": {"steps", "seconds", "steps_per_s"},
"fanout": {...}}. Usage: python bench.py [--steps 1000] [--reps 3] [--out FILE.json]
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from importlib.metadata import version

from dbos import DBOS, DBOSConfig


@DBOS.step()
def trivial(i: int) -> int:
    return i


@DBOS.workflow()
def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total += trivial(i)
    return total


@DBOS.step()
async def trivial_async(i: int) -> int:
    return i


@DBOS.workflow()
async def fanout(n: int) -> int:
    results = await asyncio.gather(*[trivial_async(i) for i in range(n)])
    return sum(results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    n = args.steps
    expected = n * (n - 1) // 2

    with tempfile.TemporaryDirectory() as tmp:
        url = "sqlite:///" + os.path.join(tmp, "dbos.sqlite")
        config: DBOSConfig = {
            "name": "reel-bench",
            "system_database_url": url,
            "log_level": "WARNING",
        }
        DBOS(config=config)
        DBOS.launch()
        try:
            # One warm-up of each, untimed.
            assert sequential(10) == 45
            assert asyncio.run(fanout(10)) == 45
            seq, fan = [], []
            for _ in range(args.reps):
                t = time.perf_counter()
                assert sequential(n) == expected
                seq.append(time.perf_counter() - t)
                t = time.perf_counter()
                assert asyncio.run(fanout(n)) == expected
                fan.append(time.perf_counter() - t)
        finally:
            DBOS.destroy()

    def figure(samples):
        s = statistics.median(samples)
        return {"steps": n, "seconds": s, "steps_per_s": n / s}

    result = {
        "version": version("dbos"),
        "python": sys.version.split()[0],
        "sequential": figure(seq),
        "fanout": figure(fan),
    }
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
