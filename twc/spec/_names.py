"""Kubernetes and Temporal naming rules, as pure checks.

Each ``check_*`` function returns the value unchanged or raises ``ValueError`` with a
message meant for a user (pydantic turns it into a field error). They mirror the API
server's own rules so a file that validates here is not rejected later by Kubernetes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "check_dns_label",
    "check_dns_subdomain",
    "check_duration",
    "check_env_name",
    "check_host_port",
    "check_image",
    "check_label_key",
    "check_label_value",
    "check_quantity",
    "check_resource_name",
    "check_secret_key",
    "check_task_queue_name",
    "check_temporal_namespace",
    "label_value",
    "parse_duration",
    "parse_quantity",
    "split_host_port",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEMPORAL_NAMESPACE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$")
# An OCI reference: [registry[:port]/]path[:tag][@digest]. Loose on purpose (registries
# differ); it only rejects what can never pull: empty, whitespace, upper-case repository.
_IMAGE = re.compile(
    r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._/-]+[a-z0-9]+)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+:[a-f0-9]{32,})?$"
)
# Kubernetes resource.Quantity: number with an optional binary/decimal SI suffix or exponent.
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suf>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

# A Go duration as time.ParseDuration (and Kubernetes' metav1.Duration) reads it:
# "1h30m", "90s", "1.5h", "500ms"; the bare "0" too. No sign: twc's durations are delays.
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_DURATION_UNIT: dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "\u00b5s": Decimal("1e-6"),
    "\u03bcs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}

_DNS_LABEL_RULE = (
    "must be a DNS-1123 label: at most 63 lower-case alphanumeric characters or '-', "
    "starting and ending with an alphanumeric character"
)
_DNS_SUBDOMAIN_RULE = (
    "must be a DNS-1123 subdomain: at most 253 lower-case alphanumeric characters, '-' "
    "or '.', starting and ending with an alphanumeric character"
)


def check_dns_label(value: str) -> str:
    """Check a Kubernetes DNS-1123 label (namespaces, workers, queues)."""
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} {_DNS_LABEL_RULE}")
    return value


def check_dns_subdomain(value: str) -> str:
    """Check a Kubernetes DNS-1123 subdomain (connections, secrets)."""
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} {_DNS_SUBDOMAIN_RULE}")
    return value


def check_label_key(value: str) -> str:
    """Check a label or annotation key: ``[prefix/]name`` with a DNS-subdomain prefix."""
    prefix, _, name = value.rpartition("/")
    if prefix:
        try:
            check_dns_subdomain(prefix)
        except ValueError:
            raise ValueError(f"{value!r} has an invalid prefix {prefix!r}") from None
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"{value!r} is not a valid key: the name part must be at most 63 alphanumeric "
            "characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        )
    return value


def check_label_value(value: str) -> str:
    """Check a Kubernetes label value (may be empty)."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(
            f"{value!r} is not a valid label value: at most 63 alphanumeric characters, "
            "'-', '_' or '.', starting and ending with an alphanumeric character"
        )
    return value


def label_value(value: str) -> str:
    """Return ``value`` as a valid label value, shortened with a hash suffix if needed.

    Temporal task queue names may hold characters labels cannot, so labels carry a
    stable, recognisable rendering: invalid characters become ``-`` and long values are
    cut to 54 characters plus ``-`` and 8 hex digits of the original's sha256, so two
    different names never share a label by truncation alone.
    """
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "-", value).strip("-_.")
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:8]
    head = cleaned[:54].rstrip("-_.")
    return f"{head}-{digest}" if head else digest


def check_secret_key(value: str) -> str:
    """Check a key inside a Secret's data."""
    if len(value) > 253 or not _SECRET_KEY.match(value):
        raise ValueError(
            f"{value!r} is not a valid secret key: alphanumeric characters, '-', '_' or '.'"
        )
    return value


def check_env_name(value: str) -> str:
    """Check an environment variable name (C identifier rules, which shells require)."""
    if not _ENV_NAME.match(value):
        raise ValueError(
            f"{value!r} is not a valid environment variable name: letters, digits and '_', "
            "not starting with a digit"
        )
    return value


def check_temporal_namespace(value: str) -> str:
    """Check a Temporal namespace name (e.g. ``default`` or ``orders.a1b2c``)."""
    if not 1 <= len(value) <= 255 or not _TEMPORAL_NAMESPACE.match(value):
        raise ValueError(
            f"{value!r} is not a valid Temporal namespace: at most 255 alphanumeric "
            "characters, '-', '_' or '.', starting and ending with an alphanumeric character"
        )
    return value


def check_task_queue_name(value: str) -> str:
    """Check a Temporal task queue name.

    Temporal accepts almost any string; we reject what the server refuses (empty,
    over-long, the reserved ``/_sys/`` prefix) and surrounding whitespace, which is
    always a typo that would make workers poll a queue nobody writes to.
    """
    if not value or value != value.strip():
        raise ValueError("task queue name must be non-empty without surrounding whitespace")
    if len(value.encode("utf-8")) > 1000:
        raise ValueError("task queue name must be at most 1000 bytes")
    if value.startswith("/_sys/"):
        raise ValueError(f"{value!r} uses the reserved '/_sys/' prefix")
    return value


def check_image(value: str) -> str:
    """Check a container image reference."""
    if len(value) > 1024 or not _IMAGE.match(value):
        raise ValueError(
            f"{value!r} is not a valid image reference "
            "(expected [registry/]repository[:tag][@sha256:digest])"
        )
    return value


def split_host_port(value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) into its parts.

    Raises:
        ValueError: If the value is not a host (DNS name or IP) and a port in 1-65535.
    """
    if value.startswith("["):
        host, sep, port_text = value[1:].partition("]:")
        if not sep:
            raise ValueError(f"{value!r} must be [ipv6]:port")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{value!r}: {host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{value!r} must be host:port")
        if ":" in host:
            raise ValueError(f"{value!r}: write IPv6 addresses as [address]:port")
        if not _is_ipv4(host) and not _is_dns_name(host):
            raise ValueError(f"{value!r}: {host!r} is not a valid host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{value!r}: port must be a number in 1-65535")
    return host, int(port_text)


def check_host_port(value: str) -> str:
    """Check ``host:port`` (see :func:`split_host_port`)."""
    split_host_port(value)
    return value


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _is_dns_name(host: str) -> bool:
    # Host names are case-insensitive; the subdomain rule is written for lower case.
    lowered = host.lower().rstrip(".")
    return len(lowered) <= 253 and bool(_DNS_SUBDOMAIN.match(lowered))


def parse_quantity(value: str) -> Decimal:
    """Parse a Kubernetes quantity (``500m``, ``2Gi``, ``1e3``) to a number.

    Raises:
        ValueError: If ``value`` is not a quantity.
    """
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 512Mi, 1Gi)")
    number, suffix = match["num"], match["suf"] or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


def check_quantity(value: str) -> str:
    """Check a non-negative Kubernetes quantity."""
    if parse_quantity(value) < 0:
        raise ValueError(f"{value!r} must not be negative")
    return value


def check_resource_name(value: str) -> str:
    """Check a compute resource name (``cpu``, ``memory``, ``nvidia.com/gpu``...)."""
    try:
        return check_label_key(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid resource name") from None


def parse_duration(value: str) -> Decimal:
    """Parse a Go/Kubernetes duration string (``30s``, ``1h30m``, ``1.5h``) to seconds.

    The same syntax the official worker controller's ``metav1.Duration`` fields take,
    so its manifests carry over unchanged.

    Raises:
        ValueError: If ``value`` is not a non-negative duration.
    """
    text = value.strip()
    if not text:
        raise ValueError("a duration must not be empty, e.g. 30s, 5m or 1h")
    if text == "0":
        return Decimal(0)
    if text[:1] in ("-", "+"):
        raise ValueError(f"{value!r} must be a duration without a sign, e.g. 30s, 5m or 1h")
    total = Decimal(0)
    position = 0
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            raise ValueError(
                f"{value!r} is not a duration: use a number and a unit (h, m, s, ms), "
                "e.g. 30s, 5m, 1h30m"
            )
        total += Decimal(match[1]) * _DURATION_UNIT[match[2]]
        position = match.end()
    return total


def check_duration(value: str) -> str:
    """Check a Go/Kubernetes duration string (see :func:`parse_duration`)."""
    parse_duration(value)
    return value
