"""Run every ``benchmarks/bench_*.py`` and merge ``benchmarks/results/*.md`` into RESULTS.md.

    python benchmarks/run_all.py [--quick] [--only broker,network] [--skip spark]
                                 [--timeout S] [--merge-only]

Each benchmark runs as its own process (``python benchmarks/bench_X.py ...``), one after the
other, bounded by ``--timeout`` seconds (its process group is killed after that). In quick
mode the arguments in :data:`QUICK` make each one a smoke-sized run (seconds, not minutes),
and every benchmark also sees ``JOSEF_BENCH_QUICK=1``; a benchmark not listed there runs
without arguments. Benchmarks in :data:`NEEDS_BROKER` get a Josef broker started for them
(``python -m broker`` on an ephemeral loopback port, temporary log dir, stopped by PID
afterwards) and its address as ``--bootstrap``.

Each benchmark writes its own ``benchmarks/results/<name>.md``; afterwards this script writes
``benchmarks/RESULTS.md``: a date and machine line, then every results file (headings moved
down so that each file's top level is ``##``) with the time it was last written, and a line
per benchmark that failed in this invocation. Ratios inside one file come from one run; numbers in different files do not.

Quick mode leaves the committed results alone: it saves ``results/*.md`` first, merges the
smoke-run files into ``$TMPDIR/josef-RESULTS-quick.md`` (``--out`` overrides), then puts the
saved files back.
"""

from __future__ import annotations

import argparse
import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
RESULTS_MD = BENCH_DIR / "RESULTS.md"

#: Smoke-sized arguments (and extra environment) per benchmark for ``--quick``.
QUICK: dict[str, tuple[list[str], dict[str, str]]] = {
    "broker": (["--quick"], {"JOSEF_BENCH_FETCH_MB": "128"}),
    "network": (["--quick"], {}),
    "storage": ([], {"JOSEF_BENCH_STORAGE_MB": "128", "JOSEF_BENCH_SEGMENT_MB": "32"}),
    "purgatory": (["--sizes", "10000,100000", "--repeat", "1"], {}),
    "records": (["100", "100"], {}),
    "spark": (["--records", "20000", "--repeat", "1"], {}),
    "controller": (["--quick"], {}),
    "transactions": (["--quick"], {}),
    "metrics": (["--quick"], {}),
    "security": (["--quick"], {}),
    "replication": (["--quick"], {}),
    "share": (["--quick"], {}),
}
#: Benchmarks that measure against a running broker given as ``--bootstrap host:port``.
NEEDS_BROKER = {"spark"}
#: Order of sections in RESULTS.md. Every ``results/*.md`` is merged: names not listed here
#: follow alphabetically.
ORDER = ["broker", "network", "storage", "purgatory", "records", "codec", "groups", "controller",
         "replication", "transactions", "share", "spark", "metrics", "security"]


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs{mem}, "
            f"Python {platform.python_version()}, load average "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def discover() -> list[str]:
    names = [p.stem.removeprefix("bench_") for p in sorted(BENCH_DIR.glob("bench_*.py"))]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def run_one(name: str, quick: bool, timeout: float) -> tuple[int | None, str]:
    """Run one benchmark; returns (exit code or None on timeout, tail of its output)."""
    args, env_extra = QUICK.get(name, ([], {})) if quick else ([], {})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if quick:
        env["JOSEF_BENCH_QUICK"] = "1"
        env.update(env_extra)
    broker = None
    try:
        if name in NEEDS_BROKER:
            sys.path.insert(0, str(ROOT))
            from tests.integration.harness import BrokerProcess

            broker = BrokerProcess(Path(tempfile.mkdtemp(prefix=f"josef-bench-{name}-")),
                                   startup_timeout=60).start()
            args = [*args, "--bootstrap", broker.bootstrap]
        cmd = [sys.executable, str(BENCH_DIR / f"bench_{name}.py"), *args]
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        out_lines: list[str] = []
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = t0 + timeout
        timed_out = False
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if time.monotonic() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if not sel.select(timeout=1.0):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            print(f"   {line}", end="", flush=True)
            out_lines.append(line.rstrip("\n"))
        sel.close()
        rc = proc.wait(30)
        print(f"== {name}: exit code {rc} after {time.monotonic() - t0:.0f} s", flush=True)
        return (None if timed_out else rc), "\n".join(out_lines[-15:])
    finally:
        if broker is not None:
            broker.stop()


def written_at(path: Path) -> str:
    """When ``path``'s content was produced: its last commit time if git has it unmodified,
    else its mtime (a restore or checkout resets the mtime, not the content)."""
    try:
        rel = str(path.relative_to(ROOT))
        dirty = subprocess.run(["git", "status", "--porcelain", "--", rel], cwd=ROOT,
                               capture_output=True, text=True, timeout=10)
        if dirty.returncode == 0 and not dirty.stdout.strip():
            log = subprocess.run(["git", "log", "-1", "--format=%ct", "--", rel], cwd=ROOT,
                                 capture_output=True, text=True, timeout=10)
            if log.returncode == 0 and log.stdout.strip():
                return time.strftime("%Y-%m-%d %H:%M", time.localtime(int(log.stdout)))
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))


def merge(quick: bool, failures: dict[str, str]) -> str:
    files = {p.stem: p for p in RESULTS_DIR.glob("*.md")}
    order = sorted(files, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    parts = [
        "# Benchmark results",
        "",
        f"Merged {time.strftime('%Y-%m-%d %H:%M %Z')} by `python benchmarks/run_all.py"
        f"{' --quick' if quick else ''}`"
        f"{' (quick mode: smoke-sized runs, not for conclusions)' if quick else ''}.",
        f"Machine: {machine_line()}.",
        "",
        "Each section is one benchmark's `benchmarks/results/<name>.md`; ratios in a section "
        "were measured in one run, numbers from different sections were not.",
        "",
    ]
    for name, why in failures.items():
        parts += [f"**{name}: no new result in this run** ({why}).", ""]
    for name in order:
        text = files[name].read_text().rstrip("\n")
        written = written_at(files[name])
        lines = text.splitlines()
        # headings move down so that the file's top level becomes "##" (a file may start at
        # "#" or at "##")
        top = min((len(line) - len(line.lstrip("#")) for line in lines
                   if line.startswith("#")), default=2)
        shift = "#" * max(0, 2 - top)
        body = [(shift + line) if line.startswith("#") else line for line in lines]
        if body and body[0].startswith("## "):
            parts += [body[0], "", f"_results/{name}.md, written {written}_", *body[1:], ""]
        else:
            parts += [f"## {name}", "", f"_results/{name}.md, written {written}_", "",
                      *body, ""]
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-sized runs")
    ap.add_argument("--only", default="", help="comma-separated names (bench_<name>.py)")
    ap.add_argument("--skip", default="", help="comma-separated names to leave out")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds per benchmark (default 600 quick, 3600 full)")
    ap.add_argument("--merge-only", action="store_true", help="only rebuild RESULTS.md")
    ap.add_argument("--out", help="merged file (default RESULTS.md; quick: a temp file)")
    args = ap.parse_args()
    out = Path(args.out) if args.out else (
        Path(tempfile.gettempdir()) / "josef-RESULTS-quick.md" if args.quick else RESULTS_MD)
    saved = ({p: (p.read_bytes(), p.stat()) for p in RESULTS_DIR.glob("*.md")}
             if args.quick else {})
    timeout = args.timeout or (600 if args.quick else 3600)
    names = discover()
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    unknown = (only | skip) - set(names)
    if unknown:
        ap.error(f"unknown benchmark(s) {sorted(unknown)}; have {names}")
    failures: dict[str, str] = {}
    try:
        if not args.merge_only:
            for name in names:
                if (only and name not in only) or name in skip:
                    continue
                rc, tail = run_one(name, args.quick, timeout)
                if rc != 0:
                    why = "timed out" if rc is None else f"exit code {rc}"
                    failures[name] = why
                    print(f"!! {name} {why}; last output:\n{tail}", file=sys.stderr)
        out.write_text(merge(args.quick, failures))
        print(f"wrote {out}")
    finally:
        if args.quick:
            for path in RESULTS_DIR.glob("*.md"):
                if path not in saved:
                    path.unlink()
            for path, (data, st) in saved.items():
                path.write_bytes(data)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
