"""The README is a front page: at most 200 lines, the two commands first (both real
Makefile targets), and every verb of ``twc --help`` in its table."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from twc.cli import build_parser

README = (ROOT / "README.md").read_text()


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.splitlines()
    assert len(lines) <= 200
    top = "\n".join(lines[:5])
    assert "make run" in top
    assert "make test" in top
    targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
    assert {"run", "test"} <= set(targets)


def test_every_verb_is_in_the_commands_table() -> None:
    found = re.search(r"\{([\w,]+)\}", build_parser().format_help())
    assert found is not None
    verbs = found.group(1).split(",")
    assert "approve" in verbs
    rows = [line for line in README.splitlines() if line.startswith("| `")]
    listed = {re.match(r"\| `(\w+)", row).group(1) for row in rows}  # type: ignore[union-attr]
    assert set(verbs) <= listed, set(verbs) - listed
