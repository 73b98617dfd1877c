"""A defensive YAML reader for fleet files.

Fleet files may come from pull requests, so the reader refuses anything that can make
a small file expensive or ambiguous: anchors and aliases (the "billion laughs" bomb),
deep nesting, huge documents, duplicate keys (YAML keeps the last one silently), more
than one document, and non-UTF-8 bytes. Only YAML's safe tags are constructed.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, NodeEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "YamlDocument",
    "YamlRejected",
    "parse_yaml",
]

MAX_BYTES = 16 * 1024 * 1024
"""Largest accepted document: a fleet of 5000 workers with full pod templates is a few
megabytes. Without anchors and aliases a document's cost grows with its size, so the
limits only stop what no fleet needs."""
MAX_DEPTH = 64
"""Deepest accepted nesting of collections."""
MAX_NODES = 1_000_000
"""Most accepted YAML nodes (scalars and collections)."""


_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
"""What YAML does not allow in a document (PyYAML's reader refuses the same), looked for
before parsing so the message names the place whichever parser reads the file."""


class YamlRejected(Exception):
    """The document is not acceptable YAML; ``str()`` is a user-facing reason."""


if getattr(yaml, "__with_libyaml__", False):  # pragma: no branch - PyYAML's wheels have it
    from yaml._yaml import CParser as _Parser

    class _Base(Composer, SafeConstructor, Resolver, _Parser):
        """libyaml scans and parses (the slow part, in C); composition stays in Python,
        where the checks below intercept it."""

        def __init__(self, stream: str) -> None:
            _Parser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML built without libyaml

    class _Base(yaml.SafeLoader):  # type: ignore[no-redef]
        """The pure-Python loader."""


_ENTRY_DEPTH = 3
"""How deep a fleet's worker entries are: the document's mapping, ``workers``, the entry."""


class _StrictLoader(_Base):
    """A safe loader that rejects anchors, aliases, deep nesting and duplicate keys.

    Composition is intercepted, so it runs in Python; scanning and parsing run in
    libyaml when PyYAML has it (four times faster on a 1000-worker fleet).
    """

    def __init__(self, stream: str, *, depth: int = 0) -> None:
        """Read ``stream``, whose root sits ``depth`` levels deep in its document (1:
        a worker entry parsed on its own, in its sequence, see :class:`YamlDocument`);
        the size of every node three levels deep (the workers' entries) is recorded."""
        super().__init__(stream)
        self._depth = depth
        self._nodes = 0
        self.sizes: dict[int, int] = {}
        """Per entry node (by ``id``), the nodes it is made of, itself included."""

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
            before = self._nodes
            node = super().compose_node(parent, index)
            if self._depth == _ENTRY_DEPTH and node is not None:
                self.sizes[id(node)] = self._nodes - before + 1
            return node
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
                # An unhashable key (a list or mapping used as a key) cannot be a
                # field name; report it here rather than crash in the constructor.
                raise YamlRejected(f"mapping keys must be scalars ({_where(key_node)})") from None
            if duplicate:
                raise YamlRejected(f"duplicate key {key!r} ({_where(key_node)})")
        return super().construct_mapping(node, deep=deep)


def _where(item: object) -> str:
    mark = getattr(item, "start_mark", None)
    if mark is None:
        return "unknown position"
    return f"line {mark.line + 1}, column {mark.column + 1}"


def parse_yaml(raw: bytes) -> object:
    """Parse one YAML document from ``raw`` bytes.

    Args:
        raw: The file's bytes.

    Returns:
        The parsed document (``None`` for an empty document).

    Raises:
        YamlRejected: For any unacceptable or malformed input.
    """
    return YamlDocument.parse(raw).data


@dataclass(frozen=True, slots=True)
class _Entry:
    """One entry of the document's ``workers`` sequence."""

    start: int
    """Offset of the first character of its ``-`` line."""
    end: int
    """Offset just past it: the next entry's ``-`` line, or the sequence's end."""
    nodes: int
    """The YAML nodes it is made of."""


@dataclass(frozen=True, slots=True, eq=False)
class YamlDocument:
    """A parsed fleet file, kept so that its next version costs what changed.

    An edit of one worker (an image, a replica count) left the rest of a 5000-worker
    file as it was, yet the daemon parsed all of it again (a quarter of a second of
    composition in Python, holding the interpreter, on every edit: in the benchmark's
    busy load, one every 2 s). :meth:`then` finds the characters that changed; when they
    lie within one entry of the ``workers`` sequence, only that entry is parsed again,
    on its own, and put in place of the old one. It is used only where the result is
    certainly the whole parse's: a block sequence whose entries each start a line with
    their ``-`` in one column, an entry that still parses as exactly one entry of that
    column, and no line of it reaching back to that column (which would end the
    sequence, or start another entry, in the whole file). Anything else, and every
    failure, is parsed whole, so the error names the place in the file.
    """

    text: str
    """The decoded document."""
    data: object
    """What it parses to."""
    nodes: int
    """Its YAML nodes (checked against :data:`MAX_NODES`)."""
    entries: tuple[_Entry, ...] | None
    """The ``workers`` sequence's entries; ``None`` when it cannot be re-parsed by
    entry (no such sequence, flow style, entries sharing lines or columns)."""
    dash: int = 0
    """The column of the entries' ``-``."""
    parsed: int = 0
    """How many characters this version parsed: all of them, or the changed entry's."""

    @classmethod
    def parse(cls, raw: bytes) -> YamlDocument:
        """Parse a whole document.

        Raises:
            YamlRejected: For any unacceptable or malformed input.
        """
        text = _decode(raw)
        node, data, loader = _compose(text)
        nodes = loader._nodes
        entries, dash = _entries(text, node, loader.sizes)
        return cls(text, data, nodes, entries, dash, len(text))

    def then(self, raw: bytes) -> YamlDocument:
        """The next version of the document, parsed in part when only one worker
        entry changed (see the class), whole otherwise.

        Raises:
            YamlRejected: For any unacceptable or malformed input.
        """
        text = _decode(raw)
        found = self._one_entry(text)
        if found is None:
            return YamlDocument.parse(raw)
        return found

    def _one_entry(self, text: str) -> YamlDocument | None:
        entries = self.entries
        old = self.text
        if entries is None or not isinstance(self.data, dict) or not entries:
            return None
        workers = self.data.get("workers")
        if not isinstance(workers, list) or len(workers) != len(entries):
            return None
        head = _common_prefix(old, text)
        if head == len(old) == len(text):
            return YamlDocument(text, self.data, self.nodes, entries, self.dash, 0)
        # From the start of its line: an entry deleted or added shares its first
        # characters with the next one ("- name: w-1"), which would put the change
        # across two entries.
        head = old.rfind("\n", 0, head) + 1
        tail = _common_prefix(old[head:][::-1], text[head:][::-1])
        old_end = len(old) - tail
        index = next(
            (i for i, e in enumerate(entries) if e.start <= head and old_end <= e.end), None
        )
        if index is None:
            return None
        entry = entries[index]
        delta = len(text) - len(old)
        chunk = text[entry.start : entry.end + delta]
        if chunk and entry.end + delta < len(text) and not chunk.endswith("\n"):
            return None  # its last line runs on into the next entry's
        if _reaches_back(self.dash).search(chunk, 1) is not None:
            return None
        try:
            node, data, loader = _compose(chunk, depth=1)
        except YamlRejected:
            return None  # parsed whole: the error names its place in the file
        before = entries[:index]
        if node is None:
            # The entry deleted (only blank lines or comments left in its place).
            if len(entries) == 1:
                return None  # ``workers:`` with nothing after it is null, not a list
            if any(line.strip() and line.lstrip()[0] != "#" for line in chunk.splitlines()):
                return None  # a document marker ("...") is nothing on its own, not here
            found: tuple[_Entry, ...] = ()
            items: list[Any] = []
            if before:
                last = before[-1]
                before = (*before[:-1], _Entry(last.start, entry.end + delta, last.nodes))
        else:
            if not isinstance(node, SequenceNode) or node.flow_style:
                return None
            parts, dash = _entries(chunk, node, loader.sizes, root=False)
            if parts is None or dash != self.dash or parts[0].start != 0:
                return None
            if not isinstance(data, list) or len(data) != len(parts):
                return None
            # The entry changed, or new ones added after it.
            found = tuple(
                _Entry(entry.start + p.start, entry.start + p.end, p.nodes) for p in parts
            )
            items = data
        nodes = self.nodes - entry.nodes + sum(e.nodes for e in found)
        if nodes > MAX_NODES:
            raise YamlRejected(f"document has more than {MAX_NODES} nodes")
        after = tuple(_Entry(e.start + delta, e.end + delta, e.nodes) for e in entries[index + 1 :])
        document = dict(self.data)
        document["workers"] = [*workers[:index], *items, *workers[index + 1 :]]
        return YamlDocument(text, document, nodes, (*before, *found, *after), self.dash, len(chunk))


_LINE_BREAKS = re.compile("[\r\x85\u2028\u2029]")
"""Line breaks other than a newline: YAML counts them, the offsets here would not."""


def _reaches_back(dash: int) -> re.Pattern[str]:
    """A line after the first that is not blank and not indented past ``dash``, other
    than a new entry's ``-`` in that column (the parse then says how many there are)."""
    shallower = f" {{0,{dash - 1}}}[^ \\n]|" if dash > 0 else ""
    return re.compile(f"\\n(?:{shallower} {{{dash}}}[^ \\n-]|\\t)")


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share (string compares in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _decode(raw: bytes) -> str:
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
    return text


def _compose(text: str, *, depth: int = 0) -> tuple[Node | None, object, _StrictLoader]:
    """Compose and construct ``text``: its root node, its data and the loader."""
    loader: _StrictLoader | None = None
    try:
        # The constructor already scans for unprintable characters, so it belongs
        # inside the try too.
        loader = _StrictLoader(text, depth=depth)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
        return node, data, loader
    except YamlRejected:
        raise
    except yaml.MarkedYAMLError as err:
        problem = err.problem or "invalid YAML"
        raise YamlRejected(f"invalid YAML: {problem} ({_where_mark(err)})") from None
    except yaml.YAMLError as err:
        raise YamlRejected(f"invalid YAML: {err}") from None
    except RecursionError:
        # Defence in depth: MAX_DEPTH should stop this long before the interpreter does.
        raise YamlRejected("nesting too deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def _entries(
    text: str, node: Node | None, sizes: dict[int, int], *, root: bool = True
) -> tuple[tuple[_Entry, ...] | None, int]:
    """The entries of the ``workers`` block sequence (``root``) or of ``node`` itself
    (an entry parsed on its own), with the column of their ``-``; ``None`` when they
    cannot be re-parsed one by one."""
    if _LINE_BREAKS.search(text) is not None:
        return None, 0
    sequence: Node | None = node
    if root:
        sequence = None
        if isinstance(node, MappingNode):
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.value == "workers":
                    sequence = value
    if not isinstance(sequence, SequenceNode) or sequence.flow_style or not sequence.value:
        return None, 0
    lines = _LineStarts(text)
    starts: list[int] = []
    dash = -1
    for item in sequence.value:
        line_start = lines.at(item.start_mark.line)
        lead = _DASH.fullmatch(text, line_start, line_start + item.start_mark.column)
        if lead is None or (dash >= 0 and len(lead.group(1)) != dash) or id(item) not in sizes:
            return None, 0
        dash = len(lead.group(1))
        if starts and line_start <= starts[-1]:
            return None, 0
        starts.append(line_start)
    end_mark = sequence.end_mark
    end = lines.at(end_mark.line) if end_mark.line < lines.count else len(text)
    if end_mark.line < lines.count and text[end : end + end_mark.column].strip(" "):
        return None, 0
    bounds = [*starts[1:], end]
    return (
        tuple(
            _Entry(start, stop, sizes[id(item)])
            for start, stop, item in zip(starts, bounds, sequence.value, strict=True)
        ),
        dash,
    )


_DASH = re.compile(r"( *)- +")
"""What precedes an entry's first node on its line: its ``-``, indented."""


class _LineStarts:
    """Offsets of the lines' first characters."""

    def __init__(self, text: str) -> None:
        self._starts = [0, *itertools.accumulate(len(line) for line in text.splitlines(True))]
        self.count = len(self._starts)

    def at(self, line: int) -> int:
        return self._starts[min(line, self.count - 1)]


def _where_mark(err: yaml.MarkedYAMLError) -> str:
    mark = err.problem_mark or err.context_mark
    if mark is None:
        return "unknown position"
    return f"line {mark.line + 1}, column {mark.column + 1}"
