"""What a failed engine run said, in the few forms twc shows it.

A ``CommandError``'s text is the CLI's whole output. Users get the program's own
refusal when it rejected its input, else the engine's error lines; Events and
TemporalWorker status (readable by every tenant of a namespace) get only the first of
those lines, as the progress output names other namespaces' resources.

Pure: text in, text out (no engine import), so the daemon's pure core uses it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from twc.errors import TemporaryError

__all__ = [
    "PROGRAM_REFUSED",
    "EngineDeadlineExceeded",
    "EngineFailure",
    "EngineInterrupted",
    "EngineYielded",
    "engine_failure",
]

PROGRAM_REFUSED = "nothing was changed"
"""The program says this when it refuses its input; retrying the same input cannot help."""
_FLEET_REFUSED = "invalid fleet; nothing was changed"
_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """A failed engine run, read."""

    program: str | None
    """The program's own error when it refused its input (which fields are wrong),
    else ``None``."""
    reason: str
    """The engine's error: its ``stderr``, else the ``error:`` lines of its
    diagnostics, else the text as it was."""

    @property
    def refused(self) -> bool:
        """Whether the program refused its input (retrying it unchanged cannot help)."""
        return self.program is not None

    @property
    def text(self) -> str:
        """What to show a person running the command."""
        return self.program or self.reason

    @property
    def summary(self) -> str:
        """One line for Events and object status: the first error line, nothing else."""
        for line in self.text.splitlines():
            line = line.strip()
            if line:
                return line[:500]
        return "the engine failed"


class EngineInterrupted(TemporaryError):
    """The engine guard stopped a run: its term ended, its caller asked, or it died."""

    def __init__(self, reason: str) -> None:
        """Say why (the guard's own words)."""
        super().__init__(f"the engine run was interrupted: {reason}")
        self.reason = reason


class EngineDeadlineExceeded(EngineInterrupted):
    """The run took longer than its deadline and was interrupted."""


class EngineYielded(EngineInterrupted):
    """A run that may give way (a refresh) was stopped so a change could run first; it
    runs again after the change, so it is no failure to report."""


def engine_failure(error: BaseException | str) -> EngineFailure:
    """Read a failed engine run.

    Args:
        error: The exception the Automation API raised, or its text.

    Returns:
        The program's refusal (if any) and the engine's reason.
    """
    text = str(error)
    stderr = getattr(error, "stderr", None)
    return EngineFailure(program=_program_message(text), reason=_reason(text, stderr))


def _program_message(text: str) -> str | None:
    # The program's own message (which fields are wrong) rather than the engine's frame.
    idx = text.find(_FLEET_REFUSED)
    if idx < 0:
        idx = text.find(PROGRAM_REFUSED)
    if idx < 0:
        return None
    error_at = text.rfind("error:", 0, idx)
    start = text.rfind("\n", 0, max(0, error_at if error_at >= 0 else idx)) + 1
    found = text[start : start + _LIMIT].strip()
    # The CommandError frame repeats the message under "stderr:"; one copy is enough.
    found = found.split("\n stderr: ", 1)[0].strip()
    return found or "the program refused its input"


def _reason(text: str, stderr: object) -> str:
    if isinstance(stderr, str) and stderr.strip():
        return stderr.strip()
    if " code: " not in text or " stdout: " not in text:
        return text.strip()
    _, _, tail = text.rpartition(" stderr: ")
    if tail.strip():
        return tail.strip()
    errors = [line.strip() for line in text.splitlines() if "error:" in line.lower()]
    return "\n".join(dict.fromkeys(errors)) or text.strip()
