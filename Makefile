# seqlake: two commands for a newcomer.
#   make demo   set up (if needed) and run the main job end to end on the embedded warehouse
#   make test   set up (if needed) and run the whole test suite (what CI runs)
# Set-up creates .venv/ and resolves the Spark jars into .jars/ once; later runs reuse both.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
JARS := .jars/.resolved
# Test files run in parallel processes (pytest-xdist), each file whole in one of them (its fixtures
# shared); much of a test's time is a JVM, a subprocess or a commit waiting, so two overlap on two cores.
TEST_WORKERS ?= 2

.PHONY: demo test setup jars lint clean

demo: setup
	$(BIN)/seqlake demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

setup: $(INSTALLED) $(JARS)

jars: $(JARS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# Resolved from Maven Central once; Spark loads them with spark.jars and never resolves at start.
# jvm/s3/pom.xml's jars (S3A and the AWS SDK) go to .jars/s3/, loaded only for s3:// warehouses.
$(JARS): jvm/pom.xml jvm/s3/pom.xml
	rm -rf .jars
	mvn --batch-mode --quiet -f jvm/pom.xml dependency:copy-dependencies \
		-DoutputDirectory=../.jars -DincludeScope=runtime
	mvn --batch-mode --quiet -f jvm/s3/pom.xml dependency:copy-dependencies \
		-DoutputDirectory=../../.jars/s3 -DincludeScope=runtime
	touch $@

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .jars warehouse
