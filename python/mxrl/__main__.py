"""``python -m mxrl SUBCOMMAND``: mxrl's Python-side tools (the C++ ``mxrl`` binary has the rest).

  python -m mxrl diverge CHECKPOINT --plan mxfp8 --engine NAME [--engine NAME ...]
                         [--tokens 1,2,3 | --prompt-len N --seed S] --out DIR
"""

import sys

USAGE = "usage: python -m mxrl diverge ... (python -m mxrl diverge --help)"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "diverge":
        from .diverge import main as diverge_main

        return diverge_main(rest)
    print(f"python -m mxrl: error: unknown subcommand {cmd!r} (known: diverge)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
