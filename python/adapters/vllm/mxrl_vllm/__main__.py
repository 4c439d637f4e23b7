"""The ``mxrl-vllm`` command (``python -m mxrl_vllm``): a placeholder until the engine commands land."""

import sys

USAGE = "usage: mxrl-vllm COMMAND [OPTIONS]\n(no commands yet: this placeholder only reserves the entry point)\n"


def main(argv=None) -> int:
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
