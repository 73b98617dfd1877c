"""A dynamic provider that runs under the real engine (proves the dynamic-provider wiring)."""

import hashlib
import os

from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult


class ProbeProvider(ResourceProvider):
    def create(self, props):
        return CreateResult(id_=props["name"], outs=self._outs(props))

    def diff(self, _id, olds, news):
        return DiffResult(changes=olds.get("greeting") != news.get("greeting"))

    def update(self, _id, _olds, news):
        return UpdateResult(outs=self._outs(news))

    @staticmethod
    def _outs(props):
        digest = hashlib.sha256(props["greeting"].encode()).hexdigest()[:16]
        # The pid proves this ran in the engine's provider process, not the program.
        return {**props, "digest": digest, "providerPid": os.getpid()}


class Probe(Resource):
    def __init__(self, name, greeting, opts=None):
        super().__init__(
            ProbeProvider(),
            name,
            {"name": name, "greeting": greeting, "digest": None, "providerPid": None},
            opts,
        )
