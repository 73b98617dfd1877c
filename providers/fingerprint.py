"""``ConnectionFingerprint``: the fingerprint of a Temporal connection, as a resource.

Inputs are the connection's non-secret spec document and a digest of its credential
secret's data (never the data itself); the output is the fingerprint that every worker
using the connection carries in its pod annotation ``temporal.io/connection-spec-hash``.
Keeping it a resource makes a connection change visible in the preview as its own step
("fingerprint changed") and lets every worker depend on it, so a rotated certificate
rolls exactly the workers that use the connection.
"""

from __future__ import annotations

from typing import Any

from pulumi import Input, Output, ResourceOptions
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

_HEX = frozenset("0123456789abcdef")


def _fingerprint(props: dict[str, Any]) -> str:
    from twc.connections import fingerprint_of

    return fingerprint_of(props["spec"], props.get("secretDigest") or None)


class ConnectionFingerprintProvider(ResourceProvider):
    """Dynamic provider behind :class:`ConnectionFingerprint` (pure: no I/O)."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        spec = news.get("spec")
        if not isinstance(spec, dict) or not spec.get("hostPort"):
            failures.append(CheckFailure("spec", "must be a connection spec with hostPort"))
        digest = news.get("secretDigest")
        if digest and not (len(digest) == 64 and set(digest) <= _HEX):
            # A digest is 64 hex digits; anything else may be secret material pasted in.
            failures.append(CheckFailure("secretDigest", "must be a sha256 hex digest"))
        return CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> CreateResult:
        fp = _fingerprint(props)
        return CreateResult(id_=fp[:16], outs={**props, "fingerprint": fp})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = olds.get("spec") != news.get("spec") or olds.get("secretDigest") != news.get(
            "secretDigest"
        )
        return DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs={**news, "fingerprint": _fingerprint(news)})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # Pure function of its inputs: refresh recomputes and finds no drift.
        inputs = {"spec": props.get("spec"), "secretDigest": props.get("secretDigest")}
        return ReadResult(
            id_=id_, outs={**props, "fingerprint": _fingerprint(props)}, inputs=inputs
        )


class ConnectionFingerprint(Resource, module="twc", name="ConnectionFingerprint"):
    """The fingerprint of one connection (output ``fingerprint``, 64 hex digits)."""

    fingerprint: Output[str]

    def __init__(
        self,
        name: str,
        *,
        spec: Input[dict[str, Any]],
        secret_digest: Input[str] | None = None,
        opts: ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            ConnectionFingerprintProvider(),
            name,
            {"spec": spec, "secretDigest": secret_digest, "fingerprint": None},
            opts,
        )
