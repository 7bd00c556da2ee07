"""Helpers of tests/benches/peer/run.sh (standard library only).

    report.py check-idem SUMMARY.json EFFECTS OPS fresh|rerun
        idem run --json's summary: fresh must have executed every operation
        and nothing else, rerun replayed every one and nothing else; and the
        workers' own count of the effects they performed (EFFECTS: a number
        a line, one per worker, absent when none started) must be OPS after
        a fresh run and 0 after a re-run. Exits 1 naming the counts otherwise.
    report.py table RESULTS OPS
        RESULTS: lines "ROUND WORKERS SIDE PHASE SECONDS"; prints the table
        of idem ÷ Powertools ratios (ops/s) and each side's ops/s medians.
"""

from __future__ import annotations

import json
import statistics
import sys

IDEM_SIDES = [("idem-sqlite", "sqlite"), ("idem-postgres", "postgres")]
PT_SIDES = [("powertools", "redis"), ("powertools-fsync", "redis aof always")]


def check_idem(path: str, effects_path: str, n: int, phase: str) -> None:
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"report: no JSON summary from idem run in {path}")
    summary = json.loads(lines[-1])
    want = {"fresh": "executed", "rerun": "replayed"}[phase]
    counts = {k: v for k, v in summary.items() if isinstance(v, int)}
    others = {k: v for k, v in counts.items() if k != want and v}
    if counts.get(want) != n or others or "outage" in summary:
        sys.exit(
            f"idem {phase} run: expected {want} {n} and nothing else "
            f"({'each operation once' if phase == 'fresh' else 'all replays'}), got {summary}"
        )
    try:
        with open(effects_path, encoding="utf-8") as f:
            effects = sum(int(line) for line in f if line.strip())
    except FileNotFoundError:
        effects = 0
    if effects != (n if phase == "fresh" else 0):
        sys.exit(
            f"idem {phase} run: its workers performed {effects} effects for {n} operations "
            f"(expected {n if phase == 'fresh' else 0}), though its summary says {summary}"
        )


def fmt_ratio(values: list[float]) -> str:
    rounds = " ".join(f"{v:.2f}" for v in values)
    return f"{statistics.median(values):.2f}x [{rounds}]"


def table(path: str, n: int) -> None:
    seconds: dict[tuple[str, int, str], dict[int, float]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            rnd, workers, side, phase, secs = line.split()
            seconds.setdefault((side, int(workers), phase), {})[int(rnd)] = float(secs)
    workers = sorted({w for (_, w, _) in seconds})

    def ops(side: str, w: int, phase: str) -> dict[int, float]:
        return {r: n / s for r, s in seconds.get((side, w, phase), {}).items()}

    def median_ops(side: str, w: int, phase: str) -> str:
        got = ops(side, w, phase)
        return f"{statistics.median(got.values()):.0f}" if got else "-"

    head = (
        f"{'idem store':<10} {'Powertools on':<17} {'W':>3}  "
        f"{'fresh: idem/PT, median [rounds]':<34} {'re-run: idem/PT, median [rounds]':<34} "
        f"{'idem fresh':>10} {'PT fresh':>9} {'idem re-run':>11} {'PT re-run':>9}"
    )
    print(head)
    print("-" * len(head))
    for idem_side, store in IDEM_SIDES:
        for pt_side, pt_name in PT_SIDES:
            for w in workers:
                cells = []
                for phase in ("fresh", "rerun"):
                    a, b = ops(idem_side, w, phase), ops(pt_side, w, phase)
                    both = sorted(set(a) & set(b))
                    cells.append(fmt_ratio([a[r] / b[r] for r in both]) if both else "")
                if not any(cells):
                    continue
                print(
                    f"{store:<10} {pt_name:<17} {w:>3}  {cells[0]:<34} {cells[1]:<34} "
                    f"{median_ops(idem_side, w, 'fresh'):>10} {median_ops(pt_side, w, 'fresh'):>9} "
                    f"{median_ops(idem_side, w, 'rerun'):>11} {median_ops(pt_side, w, 'rerun'):>9}"
                )
    print(
        "idem/PT: idem's ops/s over Powertools' in the same round and W (above 1: idem is faster); "
        "ops/s columns: medians over the rounds"
    )


def main(argv: list[str]) -> None:
    if len(argv) == 5 and argv[0] == "check-idem":
        check_idem(argv[1], argv[2], int(argv[3]), argv[4])
    elif len(argv) == 3 and argv[0] == "table":
        table(argv[1], int(argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
