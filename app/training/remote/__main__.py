"""``python -m rltray.app.training.remote JOB.json``: the stand-in (see ``standin``)."""

import sys

from rltray.app.training.remote.standin import main

sys.exit(main())
