"""Engine values made printable: property paths and URNs parsed as the Go SDK does, and
secrets scrubbed (:func:`scrub`: Pulumi secrets, a ``Secret``'s data, the last-applied
annotation, credential-named env values, PEM blocks)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import JsonValue

Path = tuple[str | int, ...]  # object keys and array indices

# Go's requiresQuote: anything but ASCII letters, digits and '_' forces the ["..."] form.
_BARE_KEY = re.compile(r"[A-Za-z0-9_]+")
_STEP = re.compile(r'\.(?=[\s\S])|\["((?:\\"|[^"\\]|\\(?!"))*)"\]|\[(\d+|\*)\]|([^.\[]+)')


def parse_path(text: str) -> Path:
    """Parse a property path like the Go SDK (``a.b[0]["c.d"]``); one that does not parse
    is kept whole as one key."""
    keys: list[str | int] = []
    pos = 0
    while pos < len(text):
        step = _STEP.match(text, pos)
        if step is None or (pos == 0 and text.startswith(".")):
            return (text,)
        quoted, index, bare = step.groups()
        if quoted is not None:
            keys.append(quoted.replace('\\"', '"'))
        elif index is not None:
            keys.append(index if index == "*" else int(index))
        elif bare is not None:
            keys.append(bare)
        pos = step.end()
    return tuple(keys)


def format_path(path: Path) -> str:
    """A path in the engine's canonical form."""
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


class Urn(NamedTuple):
    """A Pulumi URN's parts; ``type_chain`` ends with the resource's own type."""

    stack: str
    project: str
    type_chain: tuple[str, ...]
    name: str

    @property
    def type(self) -> str:
        return self.type_chain[-1]


def parse_urn(urn: str) -> Urn | None:
    """The parts of ``urn``, or None when it is not a Pulumi URN."""
    parts = urn.split("::")
    if not urn.startswith("urn:pulumi:") or len(parts) < 4 or not parts[2]:
        return None
    stack = parts[0].removeprefix("urn:pulumi:")
    return Urn(stack, parts[1], tuple(parts[2].split("$")), "::".join(parts[3:]))


def kind_label(rtype: str, name: str) -> str:
    """A short kind for messages: the type's last segment, or what a dynamic resource is."""
    last = rtype.rsplit(":", 1)[-1] if rtype else "resource"
    if last != "Resource" or not rtype.startswith("pulumi-python:dynamic"):
        return last
    if name.endswith("-fingerprint") or "-fingerprint-" in name:
        return "ConnectionFingerprint"
    return "TaskQueueCheck" if name.endswith("-check") else "dynamic resource"


SECRET = "[secret]"  # noqa: S105 - the mask shown instead of a secret
UNKNOWN = "[unknown]"  # a value known only after apply

# Pulumi's special values: a secret is hidden, any other kind shows only that it is there.
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # noqa: S105 - Pulumi's secret marker
# The engine serializes a computed (unknown) value as this placeholder string.
_COMPUTED = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

SECRET_TYPES = frozenset({"kubernetes:core/v1:Secret", "kubernetes:core/v1:SecretPatch"})

_SECRET_DATA_KEYS = frozenset({"data", "stringData"})
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# TEMPORAL_API_KEY or DB_PASSWORD, but not a path to a credential (..._KEY_PATH).
_SENSITIVE_ENV = re.compile(
    r"(?!.*_(PATH|FILE|DIR)$).*(KEY|SECRET|TOKEN|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|AUTH)",
    re.IGNORECASE | re.DOTALL,
)
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----")


def scrub(value: Any, *, secret_resource: bool = False) -> JsonValue:
    """A JSON copy of an engine value, secrets :data:`SECRET` and unknowns :data:`UNKNOWN`;
    ``secret_resource``: the value is a ``Secret``'s."""
    if isinstance(value, Mapping):
        if _SIG_KEY in value:
            return SECRET if value[_SIG_KEY] == _SECRET_SIG else "[value]"
        out: dict[str, JsonValue] = {}
        for raw_key, item in value.items():
            key = str(raw_key)
            hidden = key == _LAST_APPLIED or (secret_resource and key in _SECRET_DATA_KEYS)
            out[key] = SECRET if hidden else scrub(item, secret_resource=secret_resource)
        name = out.get("name")
        if "value" in out and isinstance(name, str) and _SENSITIVE_ENV.match(name):
            out["value"] = SECRET
        return out
    if isinstance(value, list | tuple):
        return [scrub(item, secret_resource=secret_resource) for item in value]
    if isinstance(value, str):
        return UNKNOWN if value == _COMPUTED else SECRET if _PEM.search(value) else value
    if value is None or isinstance(value, bool | int | float):
        return value
    # Nothing else comes out of JSON; refuse to print what we cannot classify.
    return SECRET


def lookup(root: JsonValue, path: Path) -> tuple[bool, JsonValue]:
    """``(found, value)`` at ``path`` of a scrubbed value; inside a marker, that marker."""
    current = root
    for key in path:
        if current in (SECRET, UNKNOWN):
            return True, current
        if isinstance(current, list) and isinstance(key, int) and 0 <= key < len(current):
            current = current[key]
            continue
        if not (isinstance(current, dict) and isinstance(key, str) and key in current):
            return False, None
        current = current[key]
    return True, current
