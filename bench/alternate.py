#!/usr/bin/env python3
"""Times whole `reel` commands of two or more builds, alternated, on the same file.

On a machine whose speed moves from one minute to the next (the benchmark machines of
bench/README.md changed by a third), a figure taken with one build and then another compares
the minutes, not the builds. This runs each build once in turn, N rounds, each `reel run` on a
fresh store in a scratch directory, and prints for each build the medians of the wall time, of
the process's CPU time (user + system, from wait4) and of its minor page faults.

    bench/alternate.py FLOW.reel ROUNDS BUILD [BUILD ...] [-- ARGS...]

A BUILD is the path of a `reel` binary, optionally preceded by VAR=value words (one argument,
quoted), set in its environment: "REEL_X=1 target/release/reel". ARGS go to every command
after the file (`-- --durability durable`). With `--command check` (or `build`) it times
`reel check FLOW` instead, which needs no store.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("flow", help="the .reel file")
    p.add_argument("rounds", type=int, help="how many times each build runs")
    p.add_argument("builds", nargs="+", help='"[VAR=value ...] path/to/reel"')
    p.add_argument("--command", default="run", choices=["run", "check", "build"])
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("ROUNDS must be at least 1")
    return args, extra


def build_of(text):
    """The environment and binary a BUILD argument names."""
    words = text.split()
    env = dict(os.environ)
    for word in words[:-1]:
        if "=" not in word:
            sys.exit(f"`{word}` in `{text}` is neither VAR=value nor the binary (which goes last)")
        name, value = word.split("=", 1)
        env[name] = value
    binary = os.path.abspath(words[-1])
    if not os.access(binary, os.X_OK):
        sys.exit(f"`{binary}` is not an executable file")
    return env, binary


def main():
    args, extra = parse()
    flow = os.path.abspath(args.flow)
    if not os.path.isfile(flow):
        sys.exit(f"`{args.flow}` is not a file")
    builds = [(text, *build_of(text)) for text in args.builds]
    samples = {text: [] for text in args.builds}
    with tempfile.TemporaryDirectory(prefix="reel-alternate-") as scratch:
        for _ in range(args.rounds):
            for text, env, binary in builds:
                store = os.path.join(scratch, ".reel")
                shutil.rmtree(store, ignore_errors=True)
                command = [binary, args.command, flow] + extra
                if args.command == "build":
                    command += ["-o", os.path.join(scratch, "spec.json")]
                began = time.perf_counter()
                child = subprocess.Popen(
                    command,
                    cwd=scratch,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                _, status, usage = os.wait4(child.pid, 0)
                wall = (time.perf_counter() - began) * 1000
                code = os.waitstatus_to_exitcode(status)
                if code != 0:
                    sys.exit(f"`{' '.join(command)}` exited with {code} (run it alone to see why)")
                cpu = (usage.ru_utime + usage.ru_stime) * 1000
                samples[text].append((wall, cpu, usage.ru_minflt))
    width = max(len(text) for text in args.builds)
    print(f"reel {args.command} {args.flow}, {args.rounds} rounds alternated; medians")
    for text in args.builds:
        rows = samples[text]
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        faults = statistics.median(r[2] for r in rows)
        print(f"{text:<{width}}  wall {wall:8.1f} ms  cpu {cpu:8.1f} ms  minor faults {faults:8.0f}")


if __name__ == "__main__":
    main()
