"""Print the NIC calibration table (model vs published) as Markdown.

Run: ``python benchmarks/nic_calibration.py`` (the table in docs/nic-model.md is its output).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbtpsim.nic.calibration import compare_published


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print("| profile | test | size (B) | published | model | rel. error "
          "| row ([calibration.md](calibration.md)) |")
    print("|---|---|---|---|---|---|---|")
    for r in compare_published():
        print(f"| {r['profile']} | {r['test']} | {r['size']} | {r['published']} {r['unit']} "
              f"| {r['model']:.2f} {r['unit']} | {100 * r['rel_err']:+.1f}% | {r['row']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
