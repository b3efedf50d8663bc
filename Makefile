# The two commands of the README.  Everything else is `gnnflow ...` or `snakemake ...`.
.PHONY: run test lint clean

export DGLBACKEND := pytorch
export OUTDATED_IGNORE := 1
# Rules call `gnnflow`; make the environment's commands visible without activation.
export PATH := $(CURDIR)/.venv/bin:$(PATH)

# Install, then run the default workflow end to end on the embedded synthetic dataset.
run:
	scripts/setup-env.sh
	.venv/bin/snakemake --profile profiles/default

# Install (with test tools) if needed, lint every module, then run the test suite in
# TEST_WORKERS pytest-xdist workers (a test file stays in one worker: its fixtures are built once;
# files are handed out in the order tests/conftest.py gives them, long ones first, not re-sorted
# by xdist by their number of tests).
TEST_WORKERS ?= 2
test:
	scripts/setup-env.sh --test
	.venv/bin/ruff check src tests
	.venv/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint:
	.venv/bin/ruff check src tests

clean:
	rm -rf results .snakemake
