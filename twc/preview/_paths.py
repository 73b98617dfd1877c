"""Pulumi property paths and URNs, parsed without the engine.

The engine names changed properties with property-path strings
(``spec.template.metadata.annotations["temporal.io/connection-spec-hash"]``) and
resources with URNs (``urn:pulumi:STACK::PROJECT::PARENT$TYPE::NAME``). Both grammars are
mirrored here from the Go SDK (``resource.ParsePropertyPath``/``PropertyPath.String``) so
paths we print look exactly like the ones ``pulumi preview --diff`` prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PathKey = str | int
"""One step of a property path: an object key or an array index."""

Path = tuple[PathKey, ...]
"""A parsed property path."""

# Go's requiresQuote: anything but ASCII letters, digits and '_' forces the ["..."] form.
_BARE_KEY = re.compile(r"[A-Za-z0-9_]+")


def parse_path(text: str) -> Path:
    """Parse a property path the way the engine does (loosely, like the Go SDK).

    Args:
        text: A path such as ``spec.containers[0]["app.kubernetes.io/name"]``.

    Returns:
        The keys and indices; a path that does not parse is kept whole as one key, so an
        odd path from a provider is still shown rather than dropped.
    """
    try:
        return _parse(text)
    except ValueError:
        return (text,)


def _parse(text: str) -> Path:
    keys: list[PathKey] = []
    i, n = 0, len(text)
    if text.startswith("."):
        raise ValueError("path starts with '.'")
    while i < n:
        c = text[i]
        if c == ".":
            i += 1
            if i == n:
                raise ValueError("path ends with '.'")
        elif c == "[":
            if i + 1 < n and text[i + 1] == '"':
                j, buf = i + 2, []
                while True:
                    if j >= n:
                        raise ValueError("missing closing quote")
                    if text[j] == '"':
                        j += 1
                        break
                    if text[j] == "\\" and j + 1 < n and text[j + 1] == '"':
                        buf.append('"')
                        j += 2
                    else:
                        buf.append(text[j])
                        j += 1
                if j >= n or text[j] != "]":
                    raise ValueError("missing closing bracket")
                keys.append("".join(buf))
                i = j + 1
            else:
                end = text.find("]", i)
                if end == -1:
                    raise ValueError("missing closing bracket")
                segment = text[i + 1 : end]
                keys.append(segment if segment == "*" else int(segment))
                i = end + 1
        else:
            j = i
            while j < n and text[j] not in ".[":
                j += 1
            keys.append(text[i:j])
            i = j
    return tuple(keys)


def format_path(path: Path) -> str:
    """Format a path in the engine's canonical form (the inverse of :func:`parse_path`).

    Args:
        path: Keys and indices.

    Returns:
        For example ``metadata.labels["app.kubernetes.io/name"]`` or ``env[2].value``.
    """
    out: list[str] = []
    for i, key in enumerate(path):
        if isinstance(key, int):
            out.append(f"[{key}]")
        elif _BARE_KEY.fullmatch(key):
            out.append(key if i == 0 else f".{key}")
        else:
            escaped = key.replace('"', '\\"')
            out.append(f'["{escaped}"]')
    return "".join(out)


def path_sort_key(path: Path) -> tuple[tuple[int, int, str], ...]:
    """Order paths naturally: ``env[2]`` before ``env[10]``, indices before keys."""
    return tuple((0, k, "") if isinstance(k, int) else (1, 0, k) for k in path)


@dataclass(frozen=True)
class Urn:
    """The parts of a Pulumi URN."""

    stack: str
    """The stack name."""
    project: str
    """The project name."""
    type_chain: tuple[str, ...]
    """Ancestor types, outermost first, ending with the resource's own type."""
    name: str
    """The resource's logical name."""

    @property
    def type(self) -> str:
        """The resource's own type token."""
        return self.type_chain[-1]


def parse_urn(urn: str) -> Urn | None:
    """Split ``urn:pulumi:STACK::PROJECT::A$B$TYPE::NAME``.

    Args:
        urn: A Pulumi URN.

    Returns:
        The parts, or None when ``urn`` is not a Pulumi URN.
    """
    prefix = "urn:pulumi:"
    if not urn.startswith(prefix):
        return None
    parts = urn.split("::")
    if len(parts) < 4 or not parts[2]:
        return None
    # A name may itself contain "::"; the type never does.
    return Urn(
        stack=parts[0][len(prefix) :],
        project=parts[1],
        type_chain=tuple(parts[2].split("$")),
        name="::".join(parts[3:]),
    )


def kind_label(rtype: str, name: str) -> str:
    """A short kind for messages: ``Deployment``, ``TemporalWorker``, ``ConnectionFingerprint``.

    Args:
        rtype: The Pulumi type token.
        name: The resource's logical name (names a plain ``dynamic.Resource``).

    Returns:
        The token's last segment, or what the child-naming convention says a plain
        dynamic resource is.
    """
    last = rtype.rsplit(":", 1)[-1] if rtype else "resource"
    if last == "Resource" and rtype.startswith("pulumi-python:dynamic"):
        if name.endswith("-fingerprint") or "-fingerprint-" in name:
            return "ConnectionFingerprint"
        if name.endswith("-check"):
            return "TaskQueueCheck"
        return "dynamic resource"
    return last
