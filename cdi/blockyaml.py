"""A fast block-YAML writer that produces exactly PyYAML's bytes for simple documents.

PyYAML's representer and serializer are pure Python even with the libyaml dumper, and a
claim spec with 2048 IMEX channels has ~12,000 nodes: dumping it took most of a Prepare.
Spec documents are dicts, lists, ints and path-like strings, whose block layout is
simple, so `dump` writes those directly and returns None for anything it cannot prove
PyYAML would write the same way (a float, a string that needs quoting, a shared object),
leaving the caller to fall back to `yaml.dump`. tests/unit/test_cdi_blockyaml.py checks
the output against PyYAML's on generated documents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# Strings PyYAML writes plain (unquoted) in block context whatever the column: no
# spaces (so no line folding), no indicator characters, no leading `-`, `.` or `:`
# (`---`, `...`). The implicit resolvers then say whether the text would read back as a
# string; if not (`true`, `null`, `0x1f`, `1_000`), PyYAML quotes it.
_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./=+-]*")
# A mapping key is written inline only while short enough (emitter.py, check_simple_key:
# under 128 with its `!!str` tag; libyaml: at most 128 without it); longer ones take the
# `? key` form. Keys this long or longer are left to PyYAML.
_SIMPLE_KEY_MAX = 100
_STR_TAG = "tag:yaml.org,2002:str"

Resolvers = Mapping[str | None, Sequence[tuple[str, re.Pattern[str]]]]


class _NotSimpleError(Exception):
    """The document has something only PyYAML itself can write correctly."""


class _Writer:
    """One document's writer: the output parts, the containers already written and the
    strings already checked (keys and values repeat across 2048 device nodes)."""

    def __init__(self, resolvers: Resolvers) -> None:
        self.out: list[str] = []
        self._resolvers = resolvers
        self._seen: set[int] = set()
        self._plain: dict[str, str] = {}
        self._keys: dict[object, str] = {}
        self._by_first: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    def plain(self, text: str) -> str:
        """`text` as PyYAML writes it plain, or _NotSimpleError when it would be quoted."""
        known = self._plain.get(text)
        if known is not None:
            return known
        if not _PLAIN.fullmatch(text) or self._implicit_tag(text) not in (None, _STR_TAG):
            raise _NotSimpleError
        self._plain[text] = text
        return text

    def _implicit_tag(self, text: str) -> str | None:
        """The tag of the first implicit resolver matching `text` (resolver.py, resolve:
        those of its first character, then the wildcard ones)."""
        resolvers = self._by_first.get(text[0])
        if resolvers is None:
            resolvers = [*self._resolvers.get(text[0], ()), *self._resolvers.get(None, ())]
            self._by_first[text[0]] = resolvers
        for tag, pattern in resolvers:
            if pattern.match(text):
                return tag
        return None

    def key(self, key: object) -> str:
        """A mapping key as PyYAML writes it inline, or _NotSimpleError."""
        known = self._keys.get(key)
        if known is not None:
            return known
        if type(key) is not str or len(key) >= _SIMPLE_KEY_MAX:
            raise _NotSimpleError
        self._keys[key] = self.plain(key)
        return key

    def scalar(self, value: Any) -> str | None:
        """A scalar's or empty container's text, or None for a non-empty container."""
        kind = type(value)
        if kind is dict or kind is list:
            if value:
                return None
            self._enter(value)  # an empty one met twice is an alias too
            return "{}" if kind is dict else "[]"
        return self.atom(value)

    def atom(self, value: Any) -> str:
        """A non-container's text; exact types only, as the representer dispatches on
        `type(value)` (an int subclass or a float is left to PyYAML)."""
        kind = type(value)
        if kind is str:
            return self.plain(value)
        if kind is int:
            return int.__repr__(value)
        if kind is bool:
            return "true" if value else "false"
        if value is None:
            return "null"
        raise _NotSimpleError

    def _enter(self, container: object) -> None:
        # PyYAML writes an object met twice as an anchor and an alias.
        if id(container) in self._seen:
            raise _NotSimpleError
        self._seen.add(id(container))

    def _flat(self, value: dict[Any, Any], first: str, pad: str) -> bool:
        """Write a mapping of scalars only, its first line after `first`, the others
        after `pad`; False (nothing written) if it holds a list or dict. Device nodes take
        this path, 2048 of them in a claim spec: cached strings and ints are looked up
        inline, without a call per key and value."""
        out = self.out
        mark = len(out)
        keys = self._keys
        known = self._plain
        prefix = first
        for key, item in value.items():
            name = keys.get(key) or self.key(key)
            kind = type(item)
            if kind is str:
                text = known.get(item) or self.plain(item)
            elif kind is int:
                text = int.__repr__(item)
            elif kind is dict or kind is list:  # even empty: `mapping` writes those
                del out[mark:]
                return False
            else:
                text = self.atom(item)
            out.append(f"{prefix}{name}: {text}\n")
            prefix = pad
        self._enter(value)
        return True

    def mapping(self, value: dict[Any, Any], indent: int, inline_first: bool) -> None:
        """A block mapping at `indent`; its first key follows a `- ` when `inline_first`."""
        self._enter(value)
        pad = " " * indent
        out = self.out
        for index, (key, item) in enumerate(value.items()):
            if index or not inline_first:
                out.append(pad)
            name = self.key(key)
            text = self.scalar(item)
            if text is not None:
                out.append(f"{name}: {text}\n")
            elif type(item) is dict:
                out.append(f"{name}:\n")
                self.mapping(item, indent + 2, False)
            else:  # a sequence in a mapping is written level with its key
                out.append(f"{name}:\n")
                self.sequence(item, indent, False)

    def sequence(self, value: list[Any], indent: int, inline_first: bool) -> None:
        """A block sequence at `indent`; its first `- ` follows a `- ` when `inline_first`."""
        self._enter(value)
        pad = " " * indent
        item_pad = " " * (indent + 2)
        out = self.out
        for index, item in enumerate(value):
            if index or not inline_first:
                out.append(pad)
            text = self.scalar(item)
            if text is not None:
                out.append(f"- {text}\n")
            elif type(item) is dict:
                if not self._flat(item, "- ", item_pad):
                    out.append("- ")
                    self.mapping(item, indent + 2, True)
            else:
                out.append("- ")
                self.sequence(item, indent + 2, True)


def dump(document: Any, resolvers: Resolvers) -> str | None:
    """`yaml.dump(document, sort_keys=False, default_flow_style=False)`'s text for a
    non-empty dict of simple content, or None when only PyYAML can tell.

    `resolvers` are the dumper's implicit resolvers (`Dumper.yaml_implicit_resolvers`).
    """
    if type(document) is not dict or not document:
        return None
    writer = _Writer(resolvers)
    try:
        writer.mapping(document, 0, False)
    except _NotSimpleError:
        return None
    return "".join(writer.out)
