"""Make engine property values safe to print: secrets become ``[secret]``.

Every value the preview shows passes through :func:`scrub` once, when the event is read,
so no later step (field tables, reasons, summaries) can see secret material at all. The
rules, from certain to defensive:

* a Pulumi secret (the engine's ``{"4dabf181…": "1b470612…", "ciphertext"|"plaintext"|
  "value": …}`` object, whatever its payload) and the engine's ``"[secret]"`` string;
* everything under ``data`` and ``stringData`` of a Kubernetes ``Secret``, secret-marked
  or not (a program can forget to mark them);
* the ``kubectl.kubernetes.io/last-applied-configuration`` annotation, which repeats a
  whole object, ``data`` included;
* the literal ``value`` of an environment variable whose name says it holds a credential
  (``TEMPORAL_API_KEY``, ``*_TOKEN``, ``*_PASSWORD``…); ``valueFrom`` references stay
  visible because they name a secret, they do not contain it;
* any string holding a PEM block (a certificate or private key pasted somewhere).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from twc.preview._paths import Path

__all__ = ["SECRET", "UNKNOWN", "is_sensitive_env_name", "lookup", "scrub"]

SECRET = "[secret]"  # noqa: S105 - the mask shown instead of a secret
"""What a secret value becomes in every output."""

UNKNOWN = "[unknown]"
"""What a value the engine only knows after apply becomes."""

SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # noqa: S105 - Pulumi's secret marker
_ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"
_ARCHIVE_SIG = "0def7320c3a5731c473e5ecbe6d01bc7"
_RESOURCE_REF_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
# The engine serializes a computed (unknown) value as this placeholder string.
_COMPUTED = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

SECRET_TYPES = frozenset({"kubernetes:core/v1:Secret", "kubernetes:core/v1:SecretPatch"})
"""Resource types whose ``data``/``stringData`` are always hidden."""

_SECRET_DATA_KEYS = frozenset({"data", "stringData"})
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SENSITIVE_NAME = re.compile(
    r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|AUTH", re.IGNORECASE
)
# Variables that point at a credential (a mounted file) are not the credential.
_REFERENCE_SUFFIX = re.compile(r"_(PATH|FILE|DIR)$", re.IGNORECASE)
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----")


def is_sensitive_env_name(name: str) -> bool:
    """Whether an environment variable's literal value must be hidden.

    Args:
        name: The variable's name.

    Returns:
        True for names such as ``TEMPORAL_API_KEY`` or ``DB_PASSWORD``; False for
        ``TEMPORAL_TLS_CLIENT_KEY_PATH`` (a file path, not the key).
    """
    return bool(_SENSITIVE_NAME.search(name)) and not _REFERENCE_SUFFIX.search(name)


def scrub(value: Any, *, secret_resource: bool = False) -> JsonValue:
    """Return a JSON value with every secret replaced by :data:`SECRET`.

    Args:
        value: A property value as the engine serialized it (inputs or outputs).
        secret_resource: The value belongs to a Kubernetes ``Secret``: hide ``data`` and
            ``stringData`` wherever they appear.

    Returns:
        A new value made of dicts, lists, strings, numbers, booleans and None only;
        unknowns become :data:`UNKNOWN`.
    """
    if isinstance(value, Mapping):
        if SIG_KEY in value:
            return _special(value)
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            key = str(key)
            if key == _LAST_APPLIED or (secret_resource and key in _SECRET_DATA_KEYS):
                out[key] = SECRET
            else:
                out[key] = scrub(item, secret_resource=secret_resource)
        name = out.get("name")
        if "value" in out and isinstance(name, str) and is_sensitive_env_name(name):
            out["value"] = SECRET
        return out
    if isinstance(value, list | tuple):
        return [scrub(item, secret_resource=secret_resource) for item in value]
    if isinstance(value, str):
        if value == _COMPUTED:
            return UNKNOWN
        if _PEM.search(value):
            return SECRET
        return value
    if value is None or isinstance(value, bool | int | float):
        return value
    # Nothing else comes out of JSON; refuse to print what we cannot classify.
    return SECRET


def _special(value: Mapping[str, Any]) -> JsonValue:
    sig = value.get(SIG_KEY)
    if sig == _SECRET_SIG:
        return SECRET
    if sig == _ASSET_SIG:
        return "[asset]"
    if sig == _ARCHIVE_SIG:
        return "[archive]"
    if sig == _RESOURCE_REF_SIG:
        urn = value.get("urn")
        return urn if isinstance(urn, str) else "[resource]"
    # Byte strings, non-finite floats and future kinds: show that a value is there.
    return "[value]"


def lookup(root: JsonValue, path: Path) -> tuple[bool, JsonValue]:
    """Find the (already scrubbed) value at ``path``.

    Args:
        root: A scrubbed object.
        path: Keys and indices.

    Returns:
        ``(found, value)``. Walking into a hidden or unknown value yields that marker,
        so ``data.password`` of a hidden ``data`` is :data:`SECRET`, never missing.
    """
    current = root
    for key in path:
        if current in (SECRET, UNKNOWN):
            return True, current
        if isinstance(key, int) and isinstance(current, list):
            if not 0 <= key < len(current):
                return False, None
            current = current[key]
        elif isinstance(key, str) and isinstance(current, dict):
            if key not in current:
                return False, None
            current = current[key]
        else:
            return False, None
    return True, current
