"""Property sweep of issue 18: replace one argument of every public callable by a bad value and judge the answer.

Usage (from the repository root, with the project on PYTHONPATH)::

    python tools/bad_arguments.py [--only PREFIX ...] [--timeout S] [--json FILE] [--gaps] [--inside-callback]

For each public callable of ``tests/_bad_arguments_cases.MODULES`` that has a valid example call, each parameter is
replaced in turn by each bad value kind of ``KINDS`` (0, negative, NaN, inf, None, string, ``object()``, complex,
huge size, wrong shape) while the other arguments stay valid. Every probe runs in a worker process with a wall-clock
limit (``--timeout``): no answer in time is a *hang*, and the worker is replaced. The verdicts are defined in
``tests/_bad_arguments_cases``; the tool prints the rate of clear errors overall and per module, the counts per
failure kind with examples, and the 20 worst callables. ``--gaps`` prints the ``KNOWN_GAPS`` table of the CI test
(one failing probe per callable that is not clean). The worker limits its address space to ``--memory`` GiB so that
a huge allocation fails fast instead of swapping. ``--inside-callback`` makes every call (valid and bad) from inside a
user's function run by ``dynamics.sweep(processes=1)``: a checked function called from a callback must check its
arguments as at the top level.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILURES = ("unclear", "library", "memory", "silent_nan", "accepted", "hang", "crash")


# ----------------------------------------------------------------------------------------------------------------
# worker side


def _worker(memory_gib: float) -> None:
    """Answer JSON requests on stdin, one per line, on a private copy of the original stdout."""
    import resource

    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the callables print goes to stderr
    sys.path.insert(0, ROOT)
    from tests import _bad_arguments_cases as C

    for line in sys.stdin:
        req = json.loads(line)
        t0 = time.process_time()
        try:
            depth = req.get("depth", "top")
            if req["op"] == "probes":
                verdict, detail = C.run_probe(req["q"], "", "", depth=depth)
                probes = C.probes(req["q"], C.example(req["q"])) if verdict == "ok" else []
                reply = {"verdict": verdict, "detail": detail, "probes": probes}
            else:
                verdict, detail = C.run_probe(req["q"], req["param"], req["kind"], depth=depth)
                reply = {"verdict": verdict, "detail": detail}
        except Exception as exc:  # noqa: BLE001  (no example call: reported, not fatal)
            reply = {"verdict": "no_example", "detail": f"{type(exc).__name__}: {exc}"[:300], "probes": []}
        reply["cpu_s"] = time.process_time() - t0
        proto.write(json.dumps(reply) + "\n")


class Worker:
    """A worker process started by this tool; replaced after a hang or a crash."""

    def __init__(self, memory_gib: float):
        self.memory_gib = memory_gib
        self.proc = None

    def _start(self):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "--memory", str(self.memory_gib)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def ask(self, req: dict, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.stop(grace_s=0.0)
            return {"verdict": "hang", "detail": f"no answer within {timeout:g} s"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            return {"verdict": "crash", "detail": f"worker exited with status {code}"}
        return json.loads(line)

    def stop(self, grace_s: float = 5.0):
        """End the worker: closing its input lets an idle one exit normally; a busy (hung) one is killed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # the worker this object started, by its own handle
                self.proc.wait()
        self.proc = None


# ----------------------------------------------------------------------------------------------------------------
# driver


def _sweep_one(worker: Worker, q: str, timeout: float, log, depth: str = "top") -> tuple[dict, list[dict]]:
    """Baseline and probes of one callable on ``worker``."""
    t0 = time.monotonic()
    base = worker.ask({"op": "probes", "q": q, "depth": depth}, timeout=max(120.0, timeout))
    info = {"baseline": base["verdict"], "detail": base.get("detail", "")}
    if base["verdict"] != "ok":
        print(f"  no valid example for {q}: {base.get('detail', '')[:150]}", file=log, flush=True)
        return info, []
    limit = max(timeout, 10 * base.get("cpu_s", 0.0))
    rows = []
    for param, kind in base["probes"]:
        r = worker.ask({"op": "run", "q": q, "param": param, "kind": kind, "depth": depth}, timeout=limit)
        rows.append(
            {
                "q": q,
                "param": param,
                "kind": kind,
                "verdict": r["verdict"],
                "detail": r.get("detail", ""),
                "cpu_s": r.get("cpu_s"),
            }
        )
    n_bad = sum(r["verdict"] in FAILURES for r in rows)
    info["wall_s"] = time.monotonic() - t0
    print(f"  {q}: {len(rows)} probes, {n_bad} failures, {info['wall_s']:.1f} s wall", file=log, flush=True)
    return info, rows


def sweep(
    only=(), timeout: float = 20.0, memory_gib: float = 6.0, jobs: int = 1, log=sys.stderr, depth: str = "top"
) -> dict:
    """Run the sweep on ``jobs`` worker processes; return {"callables", "probes", "all", "skipped"}. ``depth``:
    ``"top"`` calls each callable directly, ``"callback"`` from inside a user's function run by
    ``dynamics.sweep(processes=1)``."""
    import queue
    import threading

    sys.path.insert(0, ROOT)
    from tests import _bad_arguments_cases as C

    allq, skipped = C.covered_callables()
    todo = [q for q in allq if q not in skipped and not (only and not any(q.startswith(p) for p in only))]
    jobs_q = queue.Queue()
    for q in todo:
        jobs_q.put(q)
    done = {}

    def run(worker):
        try:
            while True:
                try:
                    q = jobs_q.get_nowait()
                except queue.Empty:
                    return
                done[q] = _sweep_one(worker, q, timeout, log, depth)
        finally:
            worker.stop()

    threads = [threading.Thread(target=run, args=(Worker(memory_gib),)) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    callables = {q: done[q][0] for q in todo if q in done}
    results = [r for q in todo if q in done for r in done[q][1]]
    return {"callables": callables, "probes": results, "all": allq, "skipped": skipped}


def summarize(res: dict, out=sys.stdout) -> None:
    probes = res["probes"]
    judged = [r for r in probes if r["verdict"] != "unjudged"]
    clear = sum(r["verdict"] == "clear" for r in judged)
    covered = [q for q, c in res["callables"].items() if c["baseline"] == "ok"]
    print(
        f"public callables: {len(res['all'])}; swept: {len(covered)}; excluded: {len(res['skipped'])}; "
        f"no valid example: {len(res['callables']) - len(covered)}",
        file=out,
    )
    print(
        f"probes: {len(probes)}; judged: {len(judged)}; unjudged (zero/negative/shape accepted where it may be "
        f"valid): {len(probes) - len(judged)}",
        file=out,
    )
    print(f"clear errors: {clear}/{len(judged)} = {100 * clear / max(len(judged), 1):.1f} %", file=out)
    counts = collections.Counter(r["verdict"] for r in judged)
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()), file=out)
    print("\nper module (clear / judged):", file=out)
    by_mod = collections.defaultdict(lambda: [0, 0])
    for r in judged:
        m = r["q"].rpartition(".")[0]
        by_mod[m][1] += 1
        by_mod[m][0] += r["verdict"] == "clear"
    for m, (c, n) in sorted(by_mod.items()):
        print(f"  {m:48s} {c:5d}/{n:<5d} {100 * c / n:5.1f} %", file=out)
    print("\nfailures by kind (verdict: bad-value kind counts; examples):", file=out)
    for v in FAILURES:
        rows = [r for r in judged if r["verdict"] == v]
        if not rows:
            continue
        kinds = collections.Counter(r["kind"] for r in rows)
        print(f"  {v} ({len(rows)}): " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()), file=out)
        for r in rows[:4]:
            print(f"      {r['q']}({r['param']}={r['kind']}) -> {r['detail'][:110]}", file=out)
    print("\n20 worst callables (failures / judged probes):", file=out)
    per = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for r in judged:
        per[r["q"]][1] += 1
        if r["verdict"] != "clear":
            per[r["q"]][0] += 1
            per[r["q"]][2][r["verdict"]] += 1
    worst = sorted(per.items(), key=lambda kv: (-kv[1][0], kv[0]))[:20]
    for q, (nf, n, c) in worst:
        print(f"  {nf:3d}/{n:<3d} {q}  ({', '.join(f'{k} {v}' for k, v in c.most_common())})", file=out)


def known_gaps(res: dict) -> dict:
    """{qualname: (param, kind, verdict)}: for each callable with a failing probe, one that is cheap to re-run and
    does not change between sweeps: the first in sweep order among those that raise (unclear, library, memory),
    else among those that return (silent_nan, accepted), else a hang or crash. For ``KNOWN_GAPS`` of the CI test."""
    rank = {"unclear": 0, "library": 0, "memory": 0, "silent_nan": 1, "accepted": 1, "hang": 2, "crash": 2}
    best = {}
    for i, r in enumerate(res["probes"]):
        if r["verdict"] not in FAILURES:
            continue
        cost = (rank[r["verdict"]], i)
        if r["q"] not in best or cost < best[r["q"]][0]:
            best[r["q"]] = (cost, (r["param"], r["kind"], r["verdict"]))
    return {q: v[1] for q, v in best.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=(), help="qualified-name prefixes to sweep (default: all)")
    ap.add_argument("--timeout", type=float, default=20.0, help="wall seconds per probe before it counts as a hang")
    ap.add_argument("--memory", type=float, default=6.0, help="address-space limit of the worker in GiB")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (callables are shared out)")
    ap.add_argument("--json", help="write every probe and verdict to this JSON file")
    ap.add_argument(
        "--gaps",
        action="store_true",
        help="print the KNOWN_GAPS and NO_EXAMPLE tables of tests/api/test_bad_arguments.py",
    )
    ap.add_argument(
        "--inside-callback",
        action="store_true",
        help="make every call from inside a user's function run by dynamics.sweep(processes=1), where the checks "
        "must hold as at the top level",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.memory)
        return 0
    depth = "callback" if args.inside_callback else "top"
    res = sweep(args.only, timeout=args.timeout, memory_gib=args.memory, jobs=args.jobs, depth=depth)
    summarize(res)
    if args.json:
        from dynamics import atomic_write

        def write(tmp):
            with open(tmp, "w") as fh:
                json.dump(res, fh, indent=1)

        atomic_write(args.json, write)
    if args.gaps:
        print("\nKNOWN_GAPS = {")
        for q, g in sorted(known_gaps(res).items()):
            print(f"    {q!r}: {g!r},")
        print("}\n\nNO_EXAMPLE = {")
        for q, c in sorted(res["callables"].items()):
            if c["baseline"] != "ok":
                print(f"    {q!r}: {c['detail'][:90]!r},")
        print("}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
