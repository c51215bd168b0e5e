"""`python -m rltray.app.cli`: the `rltray` command (what the console script runs)."""

import sys

from rltray.app.cli import main

sys.exit(main())
