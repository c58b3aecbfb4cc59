"""How every ``kbtpsim`` subcommand reports a user error: one line on stderr, exit 2.

Foundation-level (knows nothing of KBTP, NICs or targets) so that each subcommand, which
lives beside the code it drives, can use it without depending on :mod:`kbtpsim.cli`.
"""

from __future__ import annotations

import sys

#: Exit status of a user error (bad arguments, files, scenarios or scripts).
EXIT_USAGE = 2


def fail(message: str) -> int:
    """Print ``kbtpsim: error: MESSAGE`` on stderr and return :data:`EXIT_USAGE`."""
    print(f"kbtpsim: error: {message}", file=sys.stderr)
    return EXIT_USAGE
