"""Training, as the app runs it: the runner (one trainer child process at a time), job
building, versions, publishing, outcomes, the backends table and the trainer environment.

The package itself imports nothing, so reading one part (``outcome`` for the tray's
status line) does not load the runner.
"""
