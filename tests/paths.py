"""Where the repository is, for tests that read its files (README, conf/, notebooks/, jobs/)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
