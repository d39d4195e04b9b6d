# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/faultline run --tasks 20 --trials 2 --error-rates 0.05 --journal runs/demo.sqlite
	@echo
	@echo "Look at the result (the simulator made mistakes at 5% of its decisions):"
	@echo "  $(BIN)/faultline journal episodes runs/demo.sqlite              # one line per episode"
	@echo "  $(BIN)/faultline journal show runs/demo.sqlite --episode <id>   # an episode's timeline"
	@echo "  $(BIN)/faultline replay runs/demo.sqlite                        # re-execute it exactly"
	@echo "  $(BIN)/faultline attribute runs/demo.sqlite --all-failed        # which decision broke each failure"

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) runs .faultline *.egg-info
