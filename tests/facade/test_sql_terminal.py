"""`seqlake sql` at a terminal, as an analyst types into it: multi-line statements, `.tables` and `.schema`,
a statement recalled with the up arrow, Ctrl-C that cancels the running query and not the session, and
a session that stays read-only. The prompt runs in its own process on a pseudo-terminal (the pty
module), so readline, the terminal's line discipline and its SIGINT are the real ones."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.facade.test_sql import USER_ROWS, build_small_warehouse
from tests.paths import REPO_ROOT

# The child takes the pseudo-terminal as its controlling terminal (it leads a new session), so the
# terminal's Ctrl-C reaches it as SIGINT, then runs `seqlake sql` as the console script would.
BOOTSTRAP = (
    "import fcntl, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "from seqlake.cli import main; sys.exit(main(['sql']))"
)
# Only so that a prompt that stopped answering fails the test instead of hanging the suite.
PATIENCE_SECONDS = 300
KEY_PAUSE_SECONDS = 0.5  # between a prompt showing and a key typed at it
UP = "\x1b[A"
CTRL_C = "\x03"
PROMPT = "seqlake> "
ROW_THEN_PROMPT = r"\(1 row\)\s*" + PROMPT
ROWS_THEN_PROMPT = r"\(\d+ rows\)\s*" + PROMPT


class Terminal:
    """A process on a pseudo-terminal: `type` what a user types, `expect` what the screen shows next."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.fd, child = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP],
            stdin=child,
            stdout=child,
            stderr=child,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        os.close(child)
        self.screen = ""  # everything shown so far
        self.read_to = 0  # where the next expect starts looking

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # the process ended and closed the terminal
            return False
        self.screen += data.decode(errors="replace")
        return bool(data)

    def expect(self, pattern: str) -> str:
        """Wait until `pattern` (a regular expression) shows after what earlier expects consumed;
        the text up to its end."""
        deadline = time.monotonic() + PATIENCE_SECONDS
        while True:
            found = re.compile(pattern).search(self.screen, self.read_to)
            if found:
                shown, self.read_to = self.screen[self.read_to : found.end()], found.end()
                return shown
            if time.monotonic() > deadline or (not self._read(1.0) and self.process.poll() is not None):
                after = self.screen[self.read_to :]
                raise AssertionError(f"{pattern!r} never showed; the screen after the last match:\n{after}")

    def still_running_after(self, seconds: float) -> str:
        """What shows during `seconds` of waiting (the process reading, not answering)."""
        until = time.monotonic() + seconds
        start = len(self.screen)
        while (left := until - time.monotonic()) > 0:
            self._read(left)
        return self.screen[start:]

    def close(self) -> int:
        code = self.process.wait(timeout=PATIENCE_SECONDS)
        os.close(self.fd)
        return code


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return build_small_warehouse(tmp_path_factory.mktemp("terminal") / "warehouse")


def test_the_prompt_at_a_terminal_edits_recalls_cancels_and_stays_read_only(small, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLAKE_")}
    env |= {
        "SEQLAKE_WAREHOUSE": str(small.config.warehouse_path()),
        "HOME": str(home),  # the prompt's history file goes there
        "TERM": "xterm",
        "COLUMNS": "160",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    }
    terminal = Terminal(tmp_path, env)
    try:
        banner = terminal.expect(PROMPT)
        assert "tables: history, history_detail, raw_events, landing_events, quarantine" in banner
        assert "Ctrl-C cancels a statement" in banner

        # A statement over two lines: the second line gets the continuation prompt.
        terminal.type("SELECT count(*) AS n\r")
        terminal.expect(r"\.\.> ")
        terminal.type("  FROM history;\r")
        assert str(sum(USER_ROWS.values())) in terminal.expect(ROW_THEN_PROMPT)

        terminal.type(".tables\r")
        listed = terminal.expect(PROMPT)
        assert "history  (iceberg)" in listed and "landing_events  (delta)" in listed
        terminal.type(".schema history\r")
        described = terminal.expect(ROWS_THEN_PROMPT)
        assert "user_id" in described and "BIGINT" in described and "feature_group" in described

        # The up arrow recalls the last line, which runs again.
        terminal.type("SELECT 6 * 7 AS answer;\r")
        assert "42" in terminal.expect(ROW_THEN_PROMPT)
        terminal.type(UP)
        terminal.expect(re.escape("SELECT 6 * 7 AS answer;"))  # readline redraws the recalled line
        terminal.type("\r")
        assert "42" in terminal.expect(ROW_THEN_PROMPT)

        # Ctrl-C while typing drops the statement; the next one runs alone.
        terminal.type("SELECT 1 +\r")
        terminal.expect(r"\.\.> ")
        # As a person would: the key comes after the prompt has settled. CPython's readline looks
        # at signals only when one interrupts its wait for a key, so a SIGINT landing in the instant
        # between drawing the prompt and that wait is held until the next key is pressed.
        assert terminal.still_running_after(KEY_PAUSE_SECONDS) == ""
        terminal.type(CTRL_C)
        terminal.expect(PROMPT)
        terminal.type("SELECT 'after' || ' typing' AS words;\r")
        assert "after typing" in terminal.expect(ROW_THEN_PROMPT)

        # Ctrl-C during a query that would run for hours cancels it, and the session goes on.
        terminal.type("SELECT sum(i) AS total FROM range(1000000000000) AS t(i);\r")
        terminal.expect(re.escape("t(i);"))
        assert PROMPT not in terminal.still_running_after(2.0)  # the query is running
        terminal.type(CTRL_C)
        assert "cancelled" in terminal.expect(PROMPT)
        terminal.type("SELECT 40 + 2 AS after_cancel;\r")
        assert "42" in terminal.expect(ROW_THEN_PROMPT)

        # Read-only: writing a file is refused in one line, and the session goes on.
        terminal.type("COPY history TO 'history.csv';\r")
        refused = terminal.expect(PROMPT)
        assert "error: prompt: " in refused and "read-only" in refused, refused
        assert not (tmp_path / "history.csv").exists()
        terminal.type(".quit\r")
        assert terminal.close() == 0
    finally:
        if terminal.process.poll() is None:
            terminal.process.kill()
            terminal.process.wait()

    # Lines typed are kept for the next session (readline's history file).
    kept = (home / ".seqlake_sql_history").read_text()
    assert "SELECT 6 * 7 AS answer;" in kept and ".schema history" in kept
