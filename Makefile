# Two entry points, both from a fresh clone:
#   make demo   install everything, then diagnose a bundled example with a typical problem (a Python loop
#               over a batch's rows); examples/mlp.py is the healthy control
#   make test   install everything, then run the test suite
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin

.PHONY: install demo test clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# apt-get as root, else through sudo; `update` first only when a package is missing
APT := $(shell [ "$$(id -u)" = 0 ] && echo apt-get || echo sudo apt-get)

install: $(BIN)/python
	@command -v dot >/dev/null 2>&1 || { echo "installing graphviz (dot)"; \
	  $(APT) update -qq && $(APT) install -y -qq graphviz; }
	@command -v shellcheck >/dev/null 2>&1 || { echo "installing shellcheck (vtune_scripts/ lint)"; \
	  $(APT) install -y -qq shellcheck || { $(APT) update -qq && $(APT) install -y -qq shellcheck; }; }
	@ls /usr/lib/*/libjemalloc.so.2 /usr/lib/*/libtcmalloc.so.4 >/dev/null 2>&1 || { \
	  echo "installing jemalloc and tcmalloc (the environment doctor's allocator trials)"; \
	  $(APT) install -y -qq libjemalloc2 libgoogle-perftools4 || \
	  { $(APT) update -qq && $(APT) install -y -qq libjemalloc2 libgoogle-perftools4; }; }
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'

demo: install
	$(BIN)/diagnose examples/python_row_loop.py

# --dist worksteal: an idle worker takes tests queued on the other. With --dist load one worker finished its
# queue at 303 s while the other ran its queued e2e tests until 567 s (a clean clone, 2026-11-28)
test: install
	@[ -x /usr/bin/chromium ] || { echo "installing chromium (the HTML report's browser test)"; \
	  $(APT) update -qq && $(APT) install -y -qq chromium; }
	$(BIN)/python -m pytest -q -m parallel_safe -n 2 --dist worksteal --durations=15
	$(BIN)/python -m pytest -q -m "not parallel_safe" --durations=15

clean-venv:
	rm -rf $(VENV)
