"""`python -m seqlake.cli`: the `seqlake` command."""

import sys

from seqlake.cli import main

sys.exit(main())
