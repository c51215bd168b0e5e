"""What tests (and benchmarks) share: fake servers, tiny models, job files, data checks.

Imported as ``tests.support.<module>`` from the repository root (pytest's
``pythonpath``; a benchmark puts the root on ``sys.path``), so no test edits ``sys.path``
to reach another test folder.
"""
