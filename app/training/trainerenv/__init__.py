"""The trainer environment: which backend and packages (plan), which Python to build from
(python), building and recording it (build). The `rltray trainer-env` command is
``app/cli/trainerenv.py``."""
