#!/usr/bin/env bash
# Every test, as two pytest processes side by side: the trainer's and the benchmarks'
# tests in one, everything else in the other. `make test` runs this.
#
# Why two: run one after the other, the suite kept one of CI's two cores idle most of
# the time (a trainer subprocess on one thread while pytest waits; a browser, Xvfb or an
# agent while the CPU waits on them), and passed 45 minutes. The two halves share no
# state: each test has its own data folder, ports are the system's free ones, Xvfb picks
# its display with -displayfd, and the caches both read (the SmolLM2 GGUF, converted
# GGUF folders) are written once, atomically, before or by whichever gets there first.
#
#   bash tests/run_suite.sh PYTHON [PYTEST ARGS...]
set -u
python=$1
shift
log=$(mktemp "${TMPDIR:-/tmp}/rltray-tests-trainer.XXXXXX")
"$python" -m pytest tests/trainer tests/bench "$@" >"$log" 2>&1 &
beside=$!
trap 'kill "$beside" 2>/dev/null; rm -f "$log"' EXIT
"$python" -m pytest --ignore=tests/trainer --ignore=tests/bench "$@"
rest=$?
wait "$beside"
trainer=$?
echo
echo "==================== tests/trainer and tests/bench (run beside the rest) ===================="
cat "$log"
echo
echo "everything but tests/trainer and tests/bench: pytest exit $rest; tests/trainer and tests/bench: pytest exit $trainer"
[ "$rest" -eq 0 ] && [ "$trainer" -eq 0 ]
