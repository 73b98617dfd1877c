"""``ConnectionFingerprint``: a Temporal connection's fingerprint, as a resource.

Inputs: the non-secret spec and a digest of the credential secret; output: the fingerprint
its workers' pods carry, so a connection change rolls exactly the workers using it. Input
``twcCredential``, the name of twc's own credential (``twcCredentials``), is shown in
previews and kept out of the fingerprint: workers never use it.
"""

from __future__ import annotations

from typing import Any

from pulumi import Input, Output, ResourceOptions, dynamic

_HEX = frozenset("0123456789abcdef")
_INPUTS = ("spec", "secretDigest", "twcCredential")


def _with_fingerprint(props: dict[str, Any]) -> dict[str, Any]:
    from twc.connections import fingerprint_of

    fingerprint = fingerprint_of(props["spec"], props.get("secretDigest") or None)
    return {**props, "fingerprint": fingerprint}


class ConnectionFingerprintProvider(dynamic.ResourceProvider):
    """Dynamic provider behind :class:`ConnectionFingerprint` (pure: no I/O)."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        failures = []
        spec = news.get("spec")
        if not isinstance(spec, dict) or not spec.get("hostPort"):
            failures.append(dynamic.CheckFailure("spec", "must be a connection spec with hostPort"))
        digest = news.get("secretDigest")
        if digest and not (len(digest) == 64 and set(digest) <= _HEX):
            # A digest is 64 hex digits; anything else may be secret material pasted in.
            failures.append(dynamic.CheckFailure("secretDigest", "must be a sha256 hex digest"))
        return dynamic.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        outs = _with_fingerprint(props)
        return dynamic.CreateResult(id_=outs["fingerprint"][:16], outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = any(olds.get(k) != news.get(k) for k in _INPUTS)
        return dynamic.DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs=_with_fingerprint(news))

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        # A pure function of its inputs: refresh recomputes and finds no drift.
        inputs = {k: props.get(k) for k in _INPUTS}
        return dynamic.ReadResult(id_=id_, outs=_with_fingerprint(props), inputs=inputs)


class ConnectionFingerprint(dynamic.Resource, module="twc", name="ConnectionFingerprint"):
    """The fingerprint of one connection (output ``fingerprint``, 64 hex digits)."""

    fingerprint: Output[str]

    def __init__(
        self,
        name: str,
        *,
        spec: Input[dict[str, Any]],
        secret_digest: Input[str] | None = None,
        twc_credential: str | None = None,
        opts: ResourceOptions | None = None,
    ) -> None:
        props = {"spec": spec, "secretDigest": secret_digest, "fingerprint": None}
        props["twcCredential"] = twc_credential
        super().__init__(ConnectionFingerprintProvider(), name, props, opts)
