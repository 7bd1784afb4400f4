"""``python -m tools.mutation``: mechanical mutation of the reference (see tools/mutation/run.py).

list                    sites per area and kind
run [--sample N|ci|full] [--seed S] [--jobs J] [--timeout T] [--area A ...] [--out DIR]
cover [--verify] [--tries N] [--jobs J] [--timeout T] [--area A ...] [--id ID ...]
                        mechanical proofs for invariants without a hand-written mutant
                        (tools/mutation/cover.py); gaps lists the invariants with neither
unrun [--area A ...] [--jobs J] [--out DIR]
                        sites no conformance test of their area executes (tools/mutation/unrun.py)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from tools.mutation import cover as coverage
from tools.mutation import run as runner
from tools.mutation import unrun as unrun_
from tools.mutation.sites import all_sites


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.mutation")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="mutation sites per area and kind")
    r = sub.add_parser("run", help="run a sample of mutants")
    r.add_argument(
        "--sample",
        default=os.environ.get("DC_MUTATION_SAMPLE", "default"),
        help="mutants in all (spread evenly over areas), 'ci', 'default' (400) or 'full'",
    )
    r.add_argument("--seed", type=int, default=int(os.environ.get("DC_MUTATION_SEED", "2026")))
    r.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    r.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant")
    r.add_argument("--area", action="append", help="only these areas")
    r.add_argument("--out", type=Path, default=Path("reports"))
    c = sub.add_parser("cover", help="prove invariants with mechanical mutants")
    c.add_argument("--verify", action="store_true", help="re-run the proofs in covered.txt")
    c.add_argument("--tries", type=int, default=3, help="sites tried per invariant")
    c.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    c.add_argument("--timeout", type=float, default=180.0, help="seconds per mutant")
    c.add_argument("--area", action="append", help="only invariants of these areas")
    c.add_argument("--id", action="append", help="only these invariants")
    sub.add_parser("gaps", help="active invariants with no mutant proof of either kind")
    u = sub.add_parser("unrun", help="sites no conformance test of their area executes")
    u.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    u.add_argument("--area", action="append", help="only these areas")
    u.add_argument("--out", type=Path, default=Path("reports"))
    args = ap.parse_args(argv)
    if args.cmd == "cover":
        missing = coverage.cover(
            max(1, args.jobs), args.timeout, args.tries, args.area, args.id, args.verify
        )
        return 1 if missing and args.verify else 0
    if args.cmd == "gaps":
        left = coverage.gaps()
        print("\n".join(left) if left else "every active invariant has a mutant proof")
        print(f"{len(left)} without a proof", file=sys.stderr)
        return 1 if left else 0
    if args.cmd == "unrun":
        return unrun_.unrun(args.area, args.jobs, args.out)
    if args.cmd == "list":
        sites = all_sites()
        per = Counter(s.area for s in sites)
        kinds = Counter(s.kind for s in sites)
        for area, n in sorted(per.items()):
            print(f"{area:12s} {n}")
        print(
            f"{'TOTAL':12s} {len(sites)}  ({', '.join(f'{k} {v}' for k, v in kinds.most_common())})"
        )
        return 0
    n = {"full": 0}.get(args.sample, runner.SAMPLES.get(args.sample, 0))
    if args.sample not in ("full", *runner.SAMPLES):
        n = int(args.sample)
    return runner.run(n, args.seed, max(1, args.jobs), args.timeout, args.out, args.area)


if __name__ == "__main__":
    sys.exit(main())
