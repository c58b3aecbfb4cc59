"""The ``kbtpsim`` command line.

Each subcommand lives beside the code it drives and registers itself here through an
``add_*_parser(subparsers)`` function that sets ``func``; ``main`` only dispatches.
User errors print one line, ``kbtpsim: error: ...``, and exit 2; there is no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kbtpsim import __version__
from kbtpsim.usage import EXIT_USAGE, fail
from kbtpsim.wire import DecodeError, decode, encode
from kbtpsim.wire.jsonform import JsonFormError, from_json, to_json


def _cmd_decode(args: argparse.Namespace) -> int:
    text = "".join(args.hex).replace(" ", "").replace(":", "")
    if text.startswith(("0x", "0X")):
        text = text[2:]
    try:
        data = bytes.fromhex(text)
    except ValueError:
        return fail(f"HEX: not a hex string: {''.join(args.hex)[:60]!r}")
    try:
        msg = decode(data, addr_le=args.addr_le)
    except DecodeError as exc:
        return fail(f"MALFORMED at octet {exc.offset}: {exc.reason}")
    print(json.dumps(to_json(msg), indent=None if args.compact else 2))
    return 0


def _cmd_encode(args: argparse.Namespace) -> int:
    source = args.file
    try:
        if source in (None, "-"):
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        return fail(f"cannot read {source}: {exc.strerror}")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return fail(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    try:
        msg = from_json(obj)
    except JsonFormError as exc:
        return fail(str(exc))
    print(encode(msg, addr_le=args.addr_le).hex())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbtpsim",
        description="Simulate KBTP targets offloaded to RDMA NICs.",
    )
    parser.add_argument("--version", action="version", version=f"kbtpsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("decode", help="decode a KBTP message given in hex; print it as JSON")
    p.add_argument("hex", nargs="+", metavar="HEX", help="message octets in hex (spaces allowed)")
    p.add_argument("--addr-le", action="store_true", help="address fields are little-endian")
    p.add_argument("--compact", action="store_true", help="print JSON on one line")
    p.set_defaults(func=_cmd_decode)

    p = sub.add_parser("encode", help="encode a KBTP message from its JSON form; print hex")
    p.add_argument("file", nargs="?", metavar="FILE", help="JSON file (default: stdin)")
    p.add_argument("--addr-le", action="store_true", help="address fields are little-endian")
    p.set_defaults(func=_cmd_encode)

    for register in _plugin_registrars():
        register(sub)
    return parser


def _plugin_registrars() -> list[Callable[[Any], None]]:
    """Subcommands defined beside the code they drive (imported lazily: fast startup)."""
    from kbtpsim.chains.cli import add_chains_parser, replay_chain_main
    from kbtpsim.nic.bench import add_nicbench_parser
    from kbtpsim.oracle.cli import add_oracle_parsers
    from kbtpsim.run.cli import add_run_parsers
    from kbtpsim.target.replay import add_replay_parser, register_chain_replay

    # `kbtpsim replay --target chain` runs in kbtpsim.chains; the target package, which
    # must not import the NIC or the chains, finds it through this registration.
    register_chain_replay(replay_chain_main)

    return [add_run_parsers, add_replay_parser, add_nicbench_parser, add_chains_parser,
            add_oracle_parsers]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
