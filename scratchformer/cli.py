"""``scratchformer <command>``: the command-line interface.

Each command lives in its own module that defines ``add_parser(subparsers)``; the
parser it adds sets ``func`` to a function taking the parsed arguments and returning
an exit code. Modules are listed in ``COMMANDS`` and imported on start.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from scratchformer import __version__, backend
from scratchformer.errors import ScratchformerError

#: Modules that contribute sub-commands, in the order ``--help`` lists them.
COMMANDS = [
    "scratchformer.commands.gradcheck",
    "scratchformer.commands.train",
    "scratchformer.commands.average",
    "scratchformer.commands.translate",
    "scratchformer.commands.evaluate",
    "scratchformer.commands.plot",
    "scratchformer.commands.data",
    "scratchformer.commands.generate",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scratchformer",
        description="The Transformer of 'Attention Is All You Need', from scratch on NumPy.",
    )
    parser.add_argument(
        "--backend",
        choices=["numpy", "cupy"],
        default=None,
        help="array backend (default: $SCRATCHFORMER_BACKEND or numpy)",
    )
    parser.add_argument("--version", action="version", version=f"scratchformer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    _plain_help(parser)
    return parser


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Help as plain text: the commands' descriptions are their module docstrings, whose
    ``literal`` marks are for the API documentation; the layout of their examples is kept."""
    if parser.description:
        parser.description = re.sub(r"``([^`]+)``", r"\1", parser.description)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _plain_help(sub)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.backend:
            backend.set_backend(args.backend)
        return int(args.func(args) or 0)
    except (ScratchformerError, OSError, RuntimeError) as e:
        print(f"scratchformer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"scratchformer {args.command}: interrupted (a training run continues from its "
            "last checkpoint with --resume)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
