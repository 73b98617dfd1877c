"""What a failed engine run said: the program's refusal, else the engine's error lines."""

from __future__ import annotations

from dataclasses import dataclass

from twc.errors import TemporaryError

PROGRAM_REFUSED = "nothing was changed"
"""The program says this when it refuses its input; retrying the same input cannot help."""
_FLEET_REFUSED = "invalid fleet; nothing was changed"
_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """A failed engine run: the program's refusal (``None`` if none) and the engine's error."""

    program: str | None
    reason: str

    @property
    def text(self) -> str:
        """What to show a person running the command."""
        return self.program or self.reason


class EngineInterrupted(TemporaryError):
    """The engine guard stopped a run: its term ended, its caller asked, or it died."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the engine run was interrupted: {reason}")
        self.reason = reason


class EngineDeadlineExceeded(EngineInterrupted):
    """The run took longer than its deadline and was interrupted."""


class EngineYielded(EngineInterrupted):
    """A refresh stopped so a change could run first; it runs again after (no failure)."""


def engine_failure(error: BaseException | str) -> EngineFailure:
    """Read a failed engine run from the Automation API's exception (or its text)."""
    text = str(error)
    return EngineFailure(_program_message(text), _reason(text, getattr(error, "stderr", None)))


def _program_message(text: str) -> str | None:
    idx = text.find(_FLEET_REFUSED)
    if idx < 0:
        idx = text.find(PROGRAM_REFUSED)
    if idx < 0:
        return None
    error_at = text.rfind("error:", 0, idx)
    start = text.rfind("\n", 0, max(0, error_at if error_at >= 0 else idx)) + 1
    # The CommandError frame repeats the message under "stderr:"; one copy is enough.
    found = text[start : start + _LIMIT].strip().split("\n stderr: ", 1)[0].strip()
    return found or "the program refused its input"


def _reason(text: str, stderr: object) -> str:
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip()
    if " code: " not in text or " stdout: " not in text:
        return text.strip()
    tail = text.rpartition(" stderr: ")[2].strip()
    if tail:
        return tail
    errors = [line.strip() for line in text.splitlines() if "error:" in line.lower()]
    return "\n".join(dict.fromkeys(errors)) or text.strip()
