"""The README's shell blocks run as written, so its examples cannot rot (its Python blocks run in
tests/facade/test_lake.py).

Each block runs in bash, in the README's words, with `seqlake` (and `.venv/bin/seqlake`) being this
checkout's command on the base install's engines: pyspark cannot be imported, as after `pip install
seqlake`. "Your own data, end to end" runs first, on a small CSV of ratings whose mapping is the
README's own, and a CSV of requests and one of labels; the 5-minute tour and the operations then run
on the lake it made. Every block is either run or listed below with the reason it cannot run here, so
a new block fails this test until it is classified.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"

# The blocks that run, by their first line, in the order they run.
RUN = {
    "source .venv/bin/activate": "setup",  # seqlake init my-lake && cd my-lake
    "seqlake import --mapping ratings.yaml --input ratings.csv": "own data",
    ".venv/bin/seqlake tables": "tour",
    "seqlake fsck --repair-plan": "operations",
}
# The blocks that cannot run here, by their first line.
NOT_RUN = {
    "make demo": "make: set-up and the full demo on Spark (tests/end_to_end/test_demo.py runs the demo)",
    "pip install seqlake": "installs packages",
    "SEQLAKE_WAREHOUSE=s3://my-bucket/seqlake seqlake --profile s3 demo": "needs an S3 bucket and Spark",
    "seqlake --profile kafka ingest --source events": "needs a Kafka broker",
}
# Lines of the blocks that run which cannot run here.
LINES_NOT_RUN = {
    "source .venv/bin/activate": "the test puts seqlake on the PATH itself",
    "seqlake maintain": "vacuums the landing tier on Spark",
    "seqlake forget --user 1000000": "removes the user's landing rows on Spark",
}

USERS = (1_000_000, 1_000_001, 1_000_002)  # the tour and the operations name user 1000000
START = datetime(2026, 1, 5, tzinfo=UTC)
# seqlake on the base install: this checkout's code, pyspark and delta-spark not importable.
COMMAND = f"""#!{sys.executable}
import sys
sys.modules.update(pyspark=None, delta=None)
from seqlake.cli import main
sys.exit(main())
"""


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.DOTALL | re.MULTILINE)


def command_lines(block: str) -> list[str]:
    """The block's commands, each without its trailing comment."""
    lines = (re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def install_command(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "seqlake").write_text(COMMAND)
    (folder / "seqlake").chmod(0o755)


def run_block(block: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The block's lines in one bash (so a `cd` holds for the lines after it), stopping at the first
    that fails, each line echoed before it runs."""
    kept = [line for line in block.splitlines() if re.sub(r"\s+#.*$", "", line).strip() not in LINES_NOT_RUN]
    script = "set -euo pipefail -x\n" + "\n".join(kept) + "\n"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"README block failed in {cwd}:\n{script}\n{done.stderr[-3000:]}"
    return done


def own_files(lake: Path) -> None:
    """What the walkthrough names: the README's mapping as ratings.yaml, ratings.csv, requests.csv and
    labels.csv (every user rates a film every 10 minutes for 6 hours)."""
    [mapping] = [block for block in blocks(README, "yaml") if block.startswith("format: csv")]
    assert yaml.safe_load(mapping)["user"] == "userId"
    (lake / "ratings.yaml").write_text(mapping)
    ratings = ["userId,movieId,rating,timestamp"]
    for n in range(36):
        moment = int((START + timedelta(minutes=10 * n)).timestamp())
        ratings += [f"{user},{1000 + (user * 7 + n) % 50},{1 + n % 5},{moment}" for user in USERS]
    (lake / "ratings.csv").write_text("\n".join(ratings) + "\n")
    asked = (START + timedelta(hours=7)).isoformat()
    requests = ["request_id,user_id,request_ts,label_click"]
    requests += [f"q{user},{user},{asked},{'true' if user % 2 else 'false'}" for user in USERS]
    (lake / "requests.csv").write_text("\n".join(requests) + "\n")
    labelled = (START + timedelta(hours=3)).isoformat()
    (lake / "labels.csv").write_text("user_id,ts\n" + "".join(f"{user},{labelled}\n" for user in USERS))


def test_every_shell_block_of_the_readme_runs_or_says_why_not(tmp_path: Path) -> None:
    found = {command_lines(block)[0]: block for block in blocks(README, "bash") + blocks(README, "sh")}
    unclassified = sorted(set(found) - set(RUN) - set(NOT_RUN))
    assert not unclassified, f"README shell blocks neither run nor listed in NOT_RUN: {unclassified}"
    assert set(RUN) | set(NOT_RUN) <= set(found), "listed blocks the README no longer has"
    lines = {line for block in found.values() for line in command_lines(block)}
    assert set(LINES_NOT_RUN) <= lines, "listed lines the README no longer has"

    bin_dir = tmp_path / "bin"
    install_command(bin_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    env |= {
        "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
        "COLUMNS": "200",
    }
    outputs = {}
    lake = tmp_path / "my-lake"
    for first, part in RUN.items():  # in the order they run
        if part == "setup":
            outputs[part] = run_block(found[first], tmp_path, env)
            assert (lake / "seqlake.yaml").is_file()
            own_files(lake)
            # The tour's paths: the command in .venv/bin/ and the analyst SQL in sql/ of a checkout.
            install_command(lake / ".venv" / "bin")
            (lake / "sql").symlink_to(REPO_ROOT / "sql")
            continue
        outputs[part] = run_block(found[first], lake, env)

    own = outputs["own data"].stdout
    assert f"{len(USERS)} requests captured into training_ranking" in own
    assert f"ranking: {len(USERS):,} requests, {len(USERS):,} verified samples, 0 quarantined" in own
    assert f"{len(USERS)} label rows backfilled (event-time, duckdb)" in own
    tour = outputs["tour"].stdout
    assert "history" in tour and "training_ranking" in tour  # the tables
    assert f"ranking: {len(USERS):,} requests, {len(USERS):,} verified samples, 0 quarantined" in tour
    assert "migrate: 0 table(s) would change" in outputs["operations"].stdout
