"""``python -m twc``."""

from twc.cli import console

console()
