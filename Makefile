# Two entry points, both from a fresh clone:
#   make demo   install everything, then diagnose the bundled MLP example
#   make test   install everything, then run the test suite
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin

.PHONY: install demo test clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	@command -v dot >/dev/null 2>&1 || { echo "installing graphviz (dot)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq graphviz; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq graphviz; fi; }
	@command -v shellcheck >/dev/null 2>&1 || { echo "installing shellcheck (vtune_scripts/ lint)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y -qq shellcheck || { apt-get update -qq && apt-get install -y -qq shellcheck; }; \
	  else sudo apt-get install -y -qq shellcheck || { sudo apt-get update -qq && sudo apt-get install -y -qq shellcheck; }; fi; }
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'

demo: install
	$(BIN)/diagnose examples/mlp.py

test: install
	@[ -x /usr/bin/chromium ] || { echo "installing chromium (the HTML report's browser test)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi; }
	$(BIN)/python -m pytest -q

clean-venv:
	rm -rf $(VENV)
