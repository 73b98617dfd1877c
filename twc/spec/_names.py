"""Kubernetes and Temporal naming rules, as pure checks mirroring the API server's.

Each ``check_*`` returns the value unchanged or raises ``ValueError`` for a user.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from collections.abc import Callable
from decimal import Decimal

_ALNUM_ENDS = "starting and ending with an alphanumeric character"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
# Kubernetes resource.Quantity: number with an optional binary/decimal SI suffix or exponent.
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suf>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_SUFFIX = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3")}
_SUFFIX |= {s: Decimal(10) ** (3 * i) for i, s in enumerate("kMGTPE", 1)}
_SUFFIX |= {f"{s}i": Decimal(2) ** (10 * i) for i, s in enumerate("KMGTPE", 1)}
# A Go duration as time.ParseDuration (and metav1.Duration) reads it; no sign.
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_DURATION = re.compile(f"(?:{_DURATION_PART.pattern})+")
_DURATION_UNIT = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "\u00b5s": Decimal("1e-6")}
_DURATION_UNIT |= {"\u03bcs": Decimal("1e-6"), "ms": Decimal("1e-3"), "s": Decimal(1)}
_DURATION_UNIT |= {"m": Decimal(60), "h": Decimal(3600)}


def _rule(pattern: str | re.Pattern[str], max_len: float, rule: str) -> Callable[[str], str]:
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > max_len or not regex.match(value):
            raise ValueError(f"{value!r} {rule}")
        return value

    return check


check_dns_label = _rule(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    63,
    f"must be a DNS-1123 label: at most 63 lower-case alphanumeric characters or '-', "
    f"{_ALNUM_ENDS}",
)
check_dns_subdomain = _rule(
    _DNS_SUBDOMAIN,
    253,
    "must be a DNS-1123 subdomain: at most 253 lower-case alphanumeric characters, '-' "
    f"or '.', {_ALNUM_ENDS}",
)
check_label_value = _rule(
    _LABEL_VALUE,
    63,
    f"is not a valid label value: at most 63 alphanumeric characters, '-', '_' or '.', "
    f"{_ALNUM_ENDS}",
)
check_secret_key = _rule(
    r"^[-._a-zA-Z0-9]+$", 253, "is not a valid secret key: alphanumeric characters, '-', '_' or '.'"
)
check_env_name = _rule(
    r"^[A-Za-z_][A-Za-z0-9_]*$",
    float("inf"),
    "is not a valid environment variable name: letters, digits and '_', not starting with a digit",
)
check_temporal_namespace = _rule(
    r"^[A-Za-z0-9]([-A-Za-z0-9._]*[A-Za-z0-9])?$",
    255,
    f"is not a valid Temporal namespace: at most 255 alphanumeric characters, '-', '_' or "
    f"'.', {_ALNUM_ENDS}",
)
# An OCI reference, loose on purpose: it only rejects what can never pull.
check_image = _rule(
    r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._/-]+[a-z0-9]+)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+:[a-f0-9]{32,})?$",
    1024,
    "is not a valid image reference (expected [registry/]repository[:tag][@sha256:digest])",
)
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def check_label_key(value: str) -> str:
    """Check a label or annotation key: ``[prefix/]name`` with a DNS-subdomain prefix."""
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"{value!r} has an invalid prefix {prefix!r}")
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(
            f"{value!r} is not a valid key: the name part must be at most 63 alphanumeric "
            f"characters, '-', '_' or '.', {_ALNUM_ENDS}"
        )
    return value


def check_resource_name(value: str) -> str:
    """Check a compute resource name (``cpu``, ``memory``, ``nvidia.com/gpu``...)."""
    try:
        return check_label_key(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid resource name") from None


def label_value(value: str) -> str:
    """``value`` as a valid label value; a long one is cut and suffixed with a hash."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "-", value).strip("-_.")
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:8]
    head = cleaned[:54].rstrip("-_.")
    return f"{head}-{digest}" if head else digest


def check_task_queue_name(value: str) -> str:
    """Check a Temporal task queue name: what the server refuses, and outer whitespace."""
    if not value or value != value.strip():
        raise ValueError("task queue name must be non-empty without surrounding whitespace")
    if len(value.encode("utf-8")) > 1000:
        raise ValueError("task queue name must be at most 1000 bytes")
    if value.startswith("/_sys/"):
        raise ValueError(f"{value!r} uses the reserved '/_sys/' prefix")
    return value


@functools.lru_cache(maxsize=4096)  # checked at each resolution of every worker's connection
def split_host_port(value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6); ValueError unless a host and 1-65535."""
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
        if not _is_host(host):
            raise ValueError(f"{value!r}: {host!r} is not a valid host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{value!r}: port must be a number in 1-65535")
    return host, int(port_text)


def _is_host(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        # Host names are case-insensitive; the subdomain rule is written for lower case.
        lowered = host.lower().rstrip(".")
        return len(lowered) <= 253 and bool(_DNS_SUBDOMAIN.match(lowered))
    return True


def check_host_port(value: str) -> str:
    """Check ``host:port`` (see :func:`split_host_port`)."""
    split_host_port(value)
    return value


def parse_quantity(value: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``1e3``) as a number; ValueError otherwise."""
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 512Mi, 1Gi)")
    number, suffix = match["num"], match["suf"] or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(number + suffix)
    return Decimal(number) * _SUFFIX[suffix]


def check_quantity(value: str) -> str:
    """Check a non-negative Kubernetes quantity."""
    if parse_quantity(value) < 0:
        raise ValueError(f"{value!r} must not be negative")
    return value


def parse_duration(value: str) -> Decimal:
    """A Go duration (``30s``, ``1h30m``) in seconds; ValueError unless non-negative."""
    text = value.strip()
    if not text:
        raise ValueError("a duration must not be empty, e.g. 30s, 5m or 1h")
    if text == "0":
        return Decimal(0)
    if text[:1] in ("-", "+"):
        raise ValueError(f"{value!r} must be a duration without a sign, e.g. 30s, 5m or 1h")
    if not _DURATION.fullmatch(text):
        raise ValueError(
            f"{value!r} is not a duration: use a number and a unit (h, m, s, ms), "
            "e.g. 30s, 5m, 1h30m"
        )
    parts = _DURATION_PART.findall(text)
    return sum((Decimal(number) * _DURATION_UNIT[unit] for number, unit in parts), Decimal(0))


def check_duration(value: str) -> str:
    """Check a Go/Kubernetes duration string (see :func:`parse_duration`)."""
    parse_duration(value)
    return value
