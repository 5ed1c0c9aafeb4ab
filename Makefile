# seqlake: two commands for a newcomer.
#   make demo   set up (if needed) and run the main job end to end on the embedded warehouse
#   make test   set up (if needed) and run the whole test suite (what CI runs)
# Set-up creates .venv/ and resolves the Spark jars (and the test servers' jars) into .jars/ once;
# later runs reuse both.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
JARS := .jars/.resolved
# Spark's driver class-data archive (seqlake/engines/spark_classes.py), made once the jars are in place.
CLASS_ARCHIVE := .jars/.class-archive
# Test files run in parallel processes (pytest-xdist), each file whole in one of them (its fixtures
# shared); much of a test's time is a JVM, a subprocess or a commit waiting, so two overlap on two cores.
TEST_WORKERS ?= 2

.PHONY: demo test explore setup jars lint clean

demo: setup
	$(BIN)/seqlake demo

# The property tests on fresh random examples (the suite draws the same ones on every run).
explore: setup
	$(BIN)/pytest -n $(TEST_WORKERS) --hypothesis-profile explore --hypothesis-seed $$RANDOM -m "not spark" $$(grep -rl "from hypothesis" tests --include "test_*.py")

test: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

setup: $(INSTALLED) $(JARS) $(CLASS_ARCHIVE)

jars: $(JARS)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# seqlake and, beside it, the benchmarks (a distribution of their own: benchmarks/pyproject.toml).
$(INSTALLED): pyproject.toml benchmarks/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[dev]' -e ./benchmarks
	touch $@

# Resolved from Maven Central once; Spark loads them with spark.jars and never resolves at start.
# jvm/s3/pom.xml's jars (S3A and the AWS SDK) go to .jars/s3/, loaded only for s3:// warehouses.
# The servers the tests start go to folders Spark never loads: Iceberg's REST catalog server
# (jvm/rest/pom.xml, .jars/rest/) and a Kafka broker (jvm/kafka/pom.xml, .jars/kafka/).
JAR_FOLDERS := s3 rest kafka

$(JARS): jvm/pom.xml $(JAR_FOLDERS:%=jvm/%/pom.xml)
	rm -rf .jars
	mvn --batch-mode --quiet -f jvm/pom.xml dependency:copy-dependencies \
		-DoutputDirectory=../.jars -DincludeScope=runtime
	for folder in $(JAR_FOLDERS); do \
		mvn --batch-mode --quiet -f jvm/$$folder/pom.xml dependency:copy-dependencies \
			-DoutputDirectory=../../.jars/$$folder -DincludeScope=runtime || exit 1; \
	done
	touch $@

# A driver without the archive still runs, only slower to start: set-up goes on if the JVM cannot write one.
$(CLASS_ARCHIVE): $(INSTALLED) $(JARS)
	$(BIN)/python -m seqlake.engines.spark_classes || echo "seqlake: Spark drivers will start without a class archive"
	touch $@

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .jars warehouse
