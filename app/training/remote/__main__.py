"""``python -m rltray.app.training.remote JOB.json``: the stand-in (see ``standin``)."""

import json
import sys

try:
    from rltray.app.training.remote.standin import main
except ImportError as exc:  # asyncssh is an extra: say so in the trainer's own words
    said = f"remote training needs {exc.name or 'asyncssh'}: pip install 'rltray[remote]'"
    print(json.dumps({"type": "error", "kind": "job", "message": said}), flush=True)
    sys.exit(2)

sys.exit(main())
