"""Regenerate the pinned results (tests/run/golden/) and list every changed figure.

    python -m tests.run.regen_golden            # all cases
    python -m tests.run.regen_golden quickstart # one case
    python -m tests.run.regen_golden --check    # list differences, write nothing

Run it only after a change that is meant to move simulated figures (a recalibrated NIC
cost, a model fix), and quote the listed figures in the commit message.
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.run.golden_cases import CASES, changed_figures, golden_paths, run_case


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.run.regen_golden")
    p.add_argument("cases", nargs="*", help="case names (default: all): "
                   + ", ".join(c.name for c in CASES))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 on change")
    args = p.parse_args(argv)
    unknown = set(args.cases) - {c.name for c in CASES}
    if unknown:
        p.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    changed = 0
    for case in CASES:
        if args.cases and case.name not in args.cases:
            continue
        text, digest = run_case(case)
        res_path, ts_path = golden_paths(case)
        old_text = res_path.read_text(encoding="utf-8") if res_path.exists() else "{}"
        old_digest = ts_path.read_text(encoding="utf-8").strip() if ts_path.exists() else ""
        lines = changed_figures(json.loads(old_text), json.loads(text))
        if digest != old_digest:
            lines.append(f"timeseries.csv sha256: {old_digest or '<absent>'} -> {digest}")
        if not res_path.exists():
            print(f"{case.name}: no golden file yet")
        else:
            print(f"{case.name}: {len(lines)} changed" if lines else f"{case.name}: unchanged")
            for line in lines:
                print(f"  {line}")
        changed += bool(lines)
        if lines and not args.check:
            res_path.parent.mkdir(parents=True, exist_ok=True)
            res_path.write_text(text, encoding="utf-8")
            ts_path.write_text(digest + "\n", encoding="utf-8")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
