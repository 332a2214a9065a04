"""The ``scratchformer`` program (and ``python -m scratchformer``): ``cli.main``.

Loading NumPy and every command's module takes a few tenths of a second before the
command's own handling of Ctrl-C begins; Ctrl-C in that time ends the program in one
line with the shell's code for it (130), not a traceback. The package's ``__init__`` and
this module import nothing else, so only Python's own start-up comes before the guard."""

import sys


def main() -> int:
    try:
        from scratchformer.cli import main as run

        return run()
    except KeyboardInterrupt:  # before the command's own handling began (or after it ended)
        print("scratchformer: stopped by Ctrl-C", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
