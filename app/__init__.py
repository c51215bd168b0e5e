"""rltray's user-session side: capture, the store, the CLI, the service and its parts."""

from typing import Any


def __getattr__(name: str) -> Any:
    # Looked up on demand: importlib.metadata costs ~20 ms that every command would pay.
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("rltray")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(name)
