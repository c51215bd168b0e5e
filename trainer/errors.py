"""The trainer's one error for what the user must fix (a job, an input, a setting).

Its own module so the job reader and the presets (which validate a job's
"hyper" values) share it without importing each other.
"""


class JobError(Exception):
    """A job or input the user must fix; ``str(err)`` is one sentence, shown as is."""
