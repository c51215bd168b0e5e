# Two entry points: `make run` starts rltray, `make test` runs every test.
# Both build .venv first; nothing else must be installed by hand.
#   make run      the app (what the tray/CLI need) + the training extras this machine can use
#   make test     everything: app, both training backends, bench and test tools
#   make check    the fast suite while working: lint, import contracts, tests not marked
#                 slow or ml (about six minutes on 2 cores; `make test` before pushing)
#   make install  links .venv/bin/rltray into ~/.local/bin so `rltray` is on PATH
# Windows (`make` from Git Bash): the venv keeps its programs in Scripts, and `py -3` is
# the Python launcher every python.org install puts on PATH.
ifeq ($(OS),Windows_NT)
PYTHON ?= py -3
VENV   := .venv
BIN    := $(VENV)/Scripts
else
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
endif
APP    := $(VENV)/.app-installed
TRAIN  := $(VENV)/.training-installed
FULL   := $(VENV)/.test-installed
# torch is pinned to the CPU build that installs quickly here; a bare `torch`
# requirement would pull several GB of CUDA wheels.
TORCH  := torch==2.13.0
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check

.PHONY: run test check lint bench install venv desktop clean package

venv: $(APP)

# setuptools >= 77 reads pyproject's SPDX `license`; the venv's own (ensurepip's 65.x
# on Python 3.11) refuses it, and `make package` builds the wheel with it.
# A too-old Python (a stock Mac's python3 is 3.9) stops here with one sentence naming
# one to use, not with pip's "requires a different Python" after the venv is made.
$(APP): pyproject.toml Makefile
	@$(PYTHON) packaging/check_python.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip "setuptools>=77"
	$(PIP) -e .
	touch $(APP)

# The tray and the settings window need PyGObject (gi): the desktop's own when this
# Python can load it, else a build where a compiler and headers are, else one sentence
# naming the packages (packaging/desktop_gi.py decides and says why). It runs every time
# (well under a second) so a package installed later counts at the next `make run`.
desktop: $(APP)
	@$(BIN)/python packaging/desktop_gi.py

# Training extras only where they can run: MLX on Apple Silicon, torch elsewhere
# when the machine has the memory for a small model (packaging/training_extras.py
# decides and says why). A failure here leaves the app working: training waits.
$(TRAIN): $(APP)
	@extras=$$($(BIN)/python packaging/training_extras.py); \
	if [ -n "$$extras" ]; then \
	  echo "installing training extras: $$extras"; \
	  $(PIP) $$extras || echo "training extras failed to install; rltray runs without training"; \
	fi
	touch $(TRAIN)

$(FULL): $(APP)
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[torch,mlx,bench,test,export,package,remote,ray-head]" "$(TORCH)"
	touch $(FULL) $(TRAIN)

# Ctrl+C reaches make and rltray together; rltray stops cleanly and exits 0, and make
# then prints nothing. `exec` keeps it that way: a shell between them (any recipe with
# shell syntax runs under /bin/sh) re-raises the Ctrl+C after rltray exits, and make
# prints "make: *** [Makefile:NN: run] Interrupt" (tests/packaging/test_fresh_clone.py).
run: $(TRAIN) desktop
	@exec $(BIN)/rltray run

test: $(FULL)
	@bash tests/system_deps.sh
	@$(BIN)/python packaging/desktop_gi.py
	@$(BIN)/python packaging/fetch_test_model.py >/dev/null || echo "tests that need SmolLM2 will be skipped"
	@$(BIN)/python -c "import llama_cpp" 2>/dev/null || CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 \
	  $(PIP) "llama-cpp-python==0.3.36" \
	  || echo "llama-cpp-python did not build: the llama.cpp export tests will be skipped"
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	@bash tests/run_suite.sh $(BIN)/python --durations=30

check: $(FULL)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -m "not slow and not ml"

lint: $(FULL)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(FULL)
	$(BIN)/python bench/hook_latency.py
	$(BIN)/python bench/ingest_speed.py
	$(BIN)/python bench/scrub_speed.py
	$(BIN)/python bench/cli_startup.py
	$(BIN)/python bench/notify_latency.py
	$(BIN)/python bench/service_footprint.py
	$(BIN)/python bench/dashboard_paint.py

# The installable one-folder bundle for this OS (PyInstaller) and its archive, in
# build/package; tests/packaging/test_bundle.py builds and runs it (slow tests).
package: $(APP) desktop
	$(PIP) -e ".[package]"
	$(BIN)/python packaging/build.py

ifeq ($(OS),Windows_NT)
install: $(APP)
	@echo "add $(CURDIR)/$(BIN) to your user PATH (Settings, Environment Variables) to run 'rltray' from anywhere"
else
install: $(APP)
	mkdir -p $(HOME)/.local/bin
	ln -sf "$(CURDIR)/$(BIN)/rltray" "$(HOME)/.local/bin/rltray"
	@echo "linked $(HOME)/.local/bin/rltray -> $(CURDIR)/$(BIN)/rltray"
	@case ":$$PATH:" in *":$(HOME)/.local/bin:"*) ;; \
	  *) echo "add $(HOME)/.local/bin to PATH to run 'rltray' from anywhere";; esac
endif

clean:
	rm -rf $(VENV) build *.egg-info
