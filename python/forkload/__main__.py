"""python -m forkload, and the forkload command pip installs: the
command-line tool of forkload(1) (run, doctor, exhaust, soak, cleanup,
gen), a C program of its own, which this process becomes (exec), so that
its signals, exit status and file descriptors are its own, not Python's.
pip's builds put it in the package (bin/forkload); the build tree has a
link to examples/forkload there; `make install` puts it in BINDIR
instead."""

import os
import sys

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin",
                    "forkload")


def main() -> None:
    if not os.access(TOOL, os.X_OK):
        sys.exit("forkload: the command-line tool is not in this install "
                 "(%s): pip's wheel and sdist build it there, and make "
                 "install puts it in its bindir as forkload" % TOOL)
    os.execv(TOOL, ["forkload"] + sys.argv[1:])


if __name__ == "__main__":
    main()
