"""How every ``kbtpsim`` subcommand reports a user error: one line on stderr, exit 2.

Foundation-level (knows nothing of KBTP, NICs or targets) so that each subcommand, which
lives beside the code it drives, can use it without depending on :mod:`kbtpsim.cli`.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: Exit status of a user error (bad arguments, files, scenarios or scripts).
EXIT_USAGE = 2


def fail(message: str) -> int:
    """Print ``kbtpsim: error: MESSAGE`` on stderr and return :data:`EXIT_USAGE`."""
    print(f"kbtpsim: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def _unwritable(directory: Path) -> str | None:
    """Why no file can be created in the existing ``directory`` (a real try: mode bits,
    read-only file systems, root alike), or None."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".kbtpsim-probe-"):
            pass
    except OSError as exc:
        return f"cannot create a file in {directory} ({exc.strerror or exc})"
    return None


def output_dir_problem(out: str | Path) -> str | None:
    """Why ``out`` cannot be an output directory (None if it can): it names a file, lies
    under a file, or cannot be created or written. Checked before any work; creates
    nothing."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        return "names an existing file, not a directory"
    probe = _nearest_existing(out)
    if not probe.is_dir():
        return f"{probe} is a file, not a directory"
    return _unwritable(probe)


def output_file_problem(out: str | Path, suffixes: Sequence[str] = (),
                        create_dirs: bool = False) -> str | None:
    """Why ``out`` cannot be an output file (None if it can): a directory, a suffix not
    in ``suffixes`` (when given), a missing directory (unless
    ``create_dirs``), a path under a file, or an unwritable place. Creates nothing."""
    out = Path(out)
    if out.is_dir():
        return "is a directory"
    if suffixes and out.suffix.lower() not in suffixes:
        got = f"{out.suffix!r}" if out.suffix else "no extension"
        return f"unsupported file type ({got}; use {', '.join(suffixes)})"
    probe = _nearest_existing(out.parent)
    if not probe.is_dir():
        return f"{probe} is a file, not a directory"
    if probe != out.parent and not create_dirs:
        return f"directory {out.parent} does not exist"
    return _unwritable(probe)


def figure_types() -> tuple[str, ...]:
    """The file suffixes a matplotlib figure can be written as (``.png``, ``.pdf``,
    ``.svg``, ...): what ``plot -o`` and ``chains draw -o`` accept."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return tuple(f".{ext}" for ext in FigureCanvasAgg.get_supported_filetypes())


def block_size_arg(value: str, largest: int) -> int | str:
    """``--block-size VALUE`` in octets (``4096``, ``16KiB``), or the one-line error: a
    multiple of 8 from 64 octets to ``largest``."""
    from kbtpsim.units import UnitError, format_size, parse_size

    try:
        size = parse_size(value)
    except UnitError as exc:
        return f"--block-size: {exc}"
    if size < 64 or size % 8 or size > largest:
        return (f"--block-size: must be a multiple of 8 from 64 octets to "
                f"{format_size(largest)}, got {value!r}")
    return size
