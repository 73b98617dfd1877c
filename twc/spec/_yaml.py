"""A defensive YAML reader for fleet files: refuses anchors, aliases, deep nesting, huge
documents, duplicate keys, several documents and non-UTF-8; only safe tags."""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml._yaml import CParser
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, NodeEvent
from yaml.nodes import MappingNode, Node
from yaml.resolver import Resolver

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 1_000_000

# What YAML does not allow, looked for before parsing so the message names the place.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


class YamlRejected(Exception):
    """The document is not acceptable YAML; ``str()`` is the reason, for a user."""


class _StrictLoader(Composer, SafeConstructor, Resolver, CParser):
    """A safe loader (libyaml parses, composition checks in Python) that rejects anchors,
    aliases, deep nesting and duplicate keys."""

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            raise YamlRejected(f"YAML aliases are not allowed ({_where(event)})")
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise YamlRejected(f"YAML anchors are not allowed ({_where(event)})")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlRejected(f"document has more than {MAX_NODES} nodes")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlRejected(f"nesting deeper than {MAX_DEPTH} levels ({_where(event)})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                # Merge keys only make sense with aliases, which are refused anyway.
                raise YamlRejected(f"YAML merge keys (<<) are not allowed ({_where(key_node)})")
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                # A list or mapping used as a key cannot be a field name.
                raise YamlRejected(f"mapping keys must be scalars ({_where(key_node)})") from None
            if duplicate:
                raise YamlRejected(f"duplicate key {key!r} ({_where(key_node)})")
        return super().construct_mapping(node, deep=deep)


def _where(item: object, mark: Any = None) -> str:
    mark = mark or getattr(item, "start_mark", None)
    return "unknown position" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}"


def parse_yaml(raw: bytes) -> object:
    """The one YAML document in ``raw`` (``None`` if empty); YamlRejected if unacceptable."""
    if len(raw) > MAX_BYTES:
        raise YamlRejected(f"file is larger than {MAX_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise YamlRejected(f"file is not valid UTF-8 (byte {err.start})") from None
    text = text.removeprefix("\ufeff")
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise YamlRejected(
            f"invalid YAML: special characters are not allowed (#x{ord(bad.group()):04x}, "
            f"line {line}, column {column})"
        )
    loader: _StrictLoader | None = None
    try:
        # The constructor already scans for unprintable characters: inside the try.
        loader = _StrictLoader(text)
        node = loader.get_single_node()
        return loader.construct_document(node) if node is not None else None
    except YamlRejected:
        raise
    except yaml.MarkedYAMLError as err:
        where = _where(None, err.problem_mark or err.context_mark)
        raise YamlRejected(f"invalid YAML: {err.problem or 'invalid YAML'} ({where})") from None
    except yaml.YAMLError as err:
        raise YamlRejected(f"invalid YAML: {err}") from None
    except RecursionError:
        # Defence in depth: MAX_DEPTH should stop this long before the interpreter does.
        raise YamlRejected("nesting too deep") from None
    finally:
        if loader is not None:
            loader.dispose()
