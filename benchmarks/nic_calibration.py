"""Print the NIC calibration table (model vs published) as Markdown.

Run: ``python benchmarks/nic_calibration.py`` (the table in docs/nic-model.md is its output).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbtpsim.nic.calibration import OTHER_DEVICE, compare_published, geomean_error


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    rows = compare_published()
    print("| profile | test | size (B) | published | model | rel. error | sample "
          "| row ([calibration.md](calibration.md)) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        sample = "in" if r["in_sample"] else ("check" if r["row"] in OTHER_DEVICE else "out")
        print(f"| {r['profile']} | {r['test']} | {r['size']} | {r['published']} {r['unit']} "
              f"| {r['model']:.2f} {r['unit']} | {100 * r['rel_err']:+.1f}% | {sample} "
              f"| {r['row']} |")
    print()
    for prof in dict.fromkeys(r["profile"] for r in rows):
        err, n = geomean_error(rows, prof)
        print(f"Out-of-sample geomean error, {prof}: "
              + (f"{100 * err:.1f}% over {n} figures." if n else "no out-of-sample figure."))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
