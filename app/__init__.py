"""rltray's user-session side: capture, the store, the CLI, and (soon) tray and notifier."""

from importlib import metadata

try:
    __version__ = metadata.version("rltray")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
