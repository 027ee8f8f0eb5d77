# Petrel: `make run` starts a broker on the defaults, `make test` runs the whole
# suite.  Both create and fill .venv first when it is missing or older than
# pyproject.toml, so they work on a fresh machine with only python3 (>= 3.11).

PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.petrel-installed
PIP_FLAGS ?= --quiet --disable-pip-version-check
PYTEST_ARGS ?=
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv .venv run test bench

help:
	@echo "make run    start a broker on the defaults (data in ./data); extra flags: ARGS='--port-offset 1'"
	@echo "make test   run the whole test suite (extra pytest flags: PYTEST_ARGS=...)"
	@echo "make bench  run the benchmarks (bench/run)"
	@echo "make venv   create or refresh $(VENV) only"

# The stamp is (re)made when missing or older than pyproject.toml.  A venv whose
# interpreter no longer runs (Python moved or upgraded) is recreated; a working
# one is only updated in place.
$(STAMP): pyproject.toml
	@if ! $(VENV)/bin/python -c "import sys" >/dev/null 2>&1; then \
		echo "make: creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -c "import sys; sys.exit(sys.version_info < (3, 11))" \
			|| { echo "make: Petrel needs Python >= 3.11 ($(PYTHON) is older)" >&2; exit 1; }; \
		$(PYTHON) -m venv --clear $(VENV) \
			|| { echo "make: '$(PYTHON) -m venv' failed (on Debian: apt-get install python3-venv)" >&2; exit 1; }; \
	fi
	@echo "make: installing Petrel with its dev and spark dependencies into $(VENV)"
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[dev,spark]'
	@touch $@

venv .venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/petrel run $(ARGS)

# pytest exit codes: 0 all passed; 5 nothing collected, which is a failure here
# because the suite is never empty; anything else is a failure as it is.
test: $(STAMP)
	@rc=0; $(VENV)/bin/python -m pytest -n 2 -p no:cacheprovider -q $(PYTEST_ARGS) tests || rc=$$?; \
	case $$rc in \
		0) echo "make test: passed" ;; \
		5) echo "make test: FAILED: pytest collected no tests (exit 5)" >&2; exit 1 ;; \
		*) echo "make test: FAILED (pytest exit $$rc)" >&2; exit 1 ;; \
	esac

bench: $(STAMP)
	@test -x bench/run || { echo "make: bench/run is missing or not executable" >&2; exit 1; }
	./bench/run $(ARGS)
