# Two entry points: `make run` starts rltray, `make test` runs every test.
# Both build their own virtual environment first; nothing else must be installed by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench venv clean

venv: $(STAMP)

# torch is pinned to the CPU build that installs quickly here; a bare `torch`
# requirement would pull several GB of CUDA wheels.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[torch,mlx,bench,test]" "torch==2.13.0"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/rltray run

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/hook_latency.py

clean:
	rm -rf $(VENV) build *.egg-info
