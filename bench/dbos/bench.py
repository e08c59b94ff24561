"""DBOS Transact (Python): the workloads run-bench and pg-bench compare Reel with.

On its SQLite system database (the default, for run-bench), or on PostgreSQL, its native
database, with --database-url (for pg-bench, on the same server as Reel):

1. one workflow of N sequential steps (each a trivial @DBOS.step returning its argument);
2. a fan-out of N: one async workflow that runs N trivial async steps at once
   (asyncio.gather), each step checkpointed in the system database as in (1);
3. with --database-url also: --runs concurrent short workflows of --short-steps sequential
   steps each, all started at once (DBOS.start_workflow), timed until the last has ended;
   and the time from a message (DBOS.send) to the next step of the workflow waiting for it
   (DBOS.recv), --signals times, with nothing else running.

Prints one JSON object: {"version", "sequential": {"steps", "seconds", "steps_per_s"},
"fanout": {...}} and with --database-url also "concurrent": {...} and "signal_ms": [...].
Usage: python bench.py [--steps 1000] [--reps 3] [--out FILE.json] [--database-url URL]
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


@DBOS.step()
def stamp() -> float:
    return time.time()


@DBOS.workflow()
def waiter() -> float:
    DBOS.recv("go", timeout_seconds=120)
    # The step after the message: when it runs is what is measured.
    return stamp()


def concurrent(runs: int, steps: int) -> float:
    """Seconds from starting `runs` workflows of `steps` steps at once to the last one's end."""
    t = time.perf_counter()
    handles = [DBOS.start_workflow(sequential, steps) for _ in range(runs)]
    expected = steps * (steps - 1) // 2
    for h in handles:
        assert h.get_result() == expected
    return time.perf_counter() - t


def signal_latency() -> float:
    """Milliseconds from DBOS.send to the start of the waiting workflow's next step."""
    h = DBOS.start_workflow(waiter)
    # Let it reach recv and wait there, as Reel's run waits parked with its workers idle.
    time.sleep(0.3)
    sent = time.time()
    DBOS.send(h.workflow_id, None, "go")
    return (h.get_result() - sent) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--database-url", help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--short-steps", type=int, default=5)
    parser.add_argument("--signals", type=int, default=10)
    args = parser.parse_args()
    n = args.steps
    expected = n * (n - 1) // 2
    conc, signals = [], []

    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or "sqlite:///" + os.path.join(tmp, "dbos.sqlite")
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
                if args.database_url:
                    conc.append(concurrent(args.runs, args.short_steps))
            if args.database_url:
                signals = [signal_latency() for _ in range(args.signals)]
        finally:
            DBOS.destroy()

    def figure(samples, steps=n):
        s = statistics.median(samples)
        return {"steps": steps, "seconds": s, "steps_per_s": steps / s}

    result = {
        "version": version("dbos"),
        "python": sys.version.split()[0],
        "sequential": figure(seq),
        "fanout": figure(fan),
    }
    if args.database_url:
        result["concurrent"] = figure(conc, args.runs * args.short_steps)
        result["signal_ms"] = signals
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
