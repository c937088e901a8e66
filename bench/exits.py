"""How a bench script stops (shared by the bench scripts, run as ``python bench/NAME.py``): bad input is one line
on stderr and exit 2; a failure of what it measures (a process that did not start, a drain left incomplete) is one
line and exit 3; exit 1 is never used (recon's own exit codes: 1 means "done, items need review")."""

from __future__ import annotations

import sys
from typing import NoReturn

USAGE = 2
FAILED = 3


def usage(message: str) -> NoReturn:
    """Bad input (an argument, an environment variable): ``message`` on stderr, exit 2."""
    print(f"{sys.argv[0]}: {message}", file=sys.stderr)
    raise SystemExit(USAGE)


def failed(message: str) -> NoReturn:
    """What the bench runs failed: ``message`` on stderr, exit 3."""
    print(f"{sys.argv[0]}: {message}", file=sys.stderr)
    raise SystemExit(FAILED)
