"""Label selectors, parsed and matched as kube-apiserver does.

A port of k8s.io/apimachinery `labels.Parse`, down to its error texts, so that a selector a
client gets wrong fails here with the message `kubectl` would show against a real cluster, and
one it gets right selects the same objects (including the easily forgotten rule that `!=` and
`notin` also select objects without the key). Field selectors are in `field_selectors`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sim.apiserver.go_format import go_quote
from sim.apiserver.names_validation import label_value_problems, qualified_name_problems

__all__ = [
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "label_selector_from_dict",
    "parse_label_selector",
]


class SelectorError(ValueError):
    """A selector that the real server would refuse to parse; the text is its message."""


# --- field errors as selector parsing prints them -------------------------------------------


def _go_json(value: Any) -> str:
    """Go's json.Marshal, which field errors use to show a bad value that is not a string."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _invalid(path: str, shown_value: str, detail: str) -> str:
    """field.Invalid(...).Error(); a nil path prints as `<nil>`, as it does in Go."""
    return f"{path}: Invalid value: {shown_value}: {detail}"


def _aggregate(errs: list[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message as is, several deduplicated in []."""
    unique = list(dict.fromkeys(errs))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# --- label selector requirements -------------------------------------------------------------

IN, NOT_IN = "in", "notin"
EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
EXISTS, DOES_NOT_EXIST = "exists", "!"
GREATER_THAN, LESS_THAN = "gt", "lt"
_BINARY_OPERATORS = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_INT64 = re.compile(r"[+-]?[0-9]+")


def _parse_int64(s: str) -> int | None:
    """strconv.ParseInt(s, 10, 64): digits with an optional sign, in int64 range."""
    if len(s) > 20 or not _INT64.fullmatch(s):  # int64 has at most 19 digits and a sign
        return None
    n = int(s)
    return n if -(2**63) <= n < 2**63 else None


@dataclass(frozen=True)
class Requirement:
    """One `key op values` term; values are kept sorted, as the parser leaves them."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    @classmethod
    def new(cls, key: str, operator: str, values: Iterable[str] | None) -> Requirement:
        """labels.NewRequirement: validates the key, the value count and every value."""
        vals = None if values is None else list(values)
        n = len(vals or ())
        errs: list[str] = []
        key_errs = qualified_name_problems(key)
        if key_errs:
            errs.append(_invalid("key", go_quote(key), "; ".join(key_errs)))
        shown = _go_json(vals)
        if operator in (IN, NOT_IN):
            if n == 0:
                errs.append(
                    _invalid(
                        "values", shown, "for 'in', 'notin' operators, values set can't be empty"
                    )
                )
        elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
            if n != 1:
                errs.append(
                    _invalid("values", shown, "exact-match compatibility requires one single value")
                )
        elif operator in (EXISTS, DOES_NOT_EXIST):
            if n != 0:
                errs.append(
                    _invalid(
                        "values", shown, "values set must be empty for exists and does not exist"
                    )
                )
        elif operator in (GREATER_THAN, LESS_THAN):
            if n != 1:
                errs.append(
                    _invalid(
                        "values", shown, "for 'Gt', 'Lt' operators, exactly one value is required"
                    )
                )
            for i, v in enumerate(vals or ()):
                if _parse_int64(v) is None:
                    errs.append(
                        _invalid(
                            f"values[{i}]",
                            go_quote(v),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        )
                    )
        else:
            supported = ", ".join(go_quote(o) for o in (*_BINARY_OPERATORS, EXISTS, DOES_NOT_EXIST))
            errs.append(
                f"operator: Unsupported value: {go_quote(operator)}: supported values: {supported}"
            )
        for i, v in enumerate(vals or ()):
            value_errs = label_value_problems(v)
            if value_errs:
                errs.append(_invalid(f"values[{i}][{key}]", go_quote(v), "; ".join(value_errs)))
        if errs:
            raise SelectorError(_aggregate(errs))
        return cls(key, operator, tuple(vals or ()))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Requirement.Matches: `!=` and `notin` also hold where the key is absent."""
        present = self.key in labels
        op = self.operator
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return present and labels[self.key] in self.values
        if op in (NOT_IN, NOT_EQUALS):
            return not present or labels[self.key] not in self.values
        if op == EXISTS:
            return present
        if op == DOES_NOT_EXIST:
            return not present
        if op in (GREATER_THAN, LESS_THAN):
            if not present or len(self.values) != 1:
                return False
            have, want = _parse_int64(labels[self.key]), _parse_int64(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op == GREATER_THAN else have < want
        return False

    def __str__(self) -> str:
        op = self.operator
        prefix = "!" if op == DOES_NOT_EXIST else ""
        if op in (EXISTS, DOES_NOT_EXIST):
            return prefix + self.key
        symbol = {IN: " in ", NOT_IN: " notin ", GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        joined = ",".join(sorted(self.values))
        if op in (IN, NOT_IN):
            joined = f"({joined})"
        return f"{self.key}{symbol}{joined}"


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements, sorted by key; no requirements selects everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# --- the label selector lexer and parser (labels/selector.go) --------------------------------

_T_ERROR, _T_EOS, _T_CLOSE, _T_COMMA, _T_NOT = "error", "eos", ")", ",", "!"
_T_DEQ, _T_EQ, _T_GT, _T_ID, _T_IN, _T_LT, _T_NEQ, _T_NOTIN, _T_OPEN = (
    "==", "=", ">", "identifier", "in", "<", "!=", "notin", "(",
)  # fmt: skip
_STRING_TO_TOKEN = MappingProxyType(
    {
        ")": _T_CLOSE, ",": _T_COMMA, "!": _T_NOT, "==": _T_DEQ, "=": _T_EQ, ">": _T_GT,
        "in": _T_IN, "<": _T_LT, "!=": _T_NEQ, "notin": _T_NOTIN, "(": _T_OPEN,
    }
)  # fmt: skip
_WHITESPACE = frozenset(" \t\r\n")
_SPECIAL = frozenset("=!(),><")
_END = "\0"  # Go's lexer reads a NUL byte for "end of input", and treats a real NUL the same


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.pos = 0

    def _read(self) -> str:
        if self.pos < len(self.s):
            ch = self.s[self.pos]
            self.pos += 1
            return ch
        return _END

    def _unread(self) -> None:
        self.pos -= 1

    def lex(self) -> tuple[str, str]:
        ch = self._read()
        while ch in _WHITESPACE:
            ch = self._read()
        if ch == _END:
            return _T_EOS, ""
        self._unread()
        return self._special() if ch in _SPECIAL else self._identifier()

    def _identifier(self) -> tuple[str, str]:
        buf: list[str] = []
        while True:
            ch = self._read()
            if ch == _END:
                break
            if ch in _SPECIAL or ch in _WHITESPACE:
                self._unread()
                break
            buf.append(ch)
        text = "".join(buf)
        return _STRING_TO_TOKEN.get(text, _T_ID), text

    def _special(self) -> tuple[str, str]:
        last: tuple[str, str] | None = None
        buf = ""
        while True:
            ch = self._read()
            if ch == _END:
                break
            if ch not in _SPECIAL:
                self._unread()
                break
            buf += ch
            if buf in _STRING_TO_TOKEN:
                last = (_STRING_TO_TOKEN[buf], buf)
            elif last is not None:
                self._unread()
                break
        if last is None:
            return _T_ERROR, f"error expected: keyword found '{buf}'"
        return last


class _Parser:
    def __init__(self, text: str) -> None:
        lexer = _Lexer(text)
        self.items: list[tuple[str, str]] = []
        while True:
            item = lexer.lex()
            self.items.append(item)
            if item[0] == _T_EOS:
                break
        self.position = 0

    @staticmethod
    def _as_values(item: tuple[str, str]) -> tuple[str, str]:
        """In the values context the keywords `in` and `notin` are plain identifiers."""
        tok, lit = item
        return (_T_ID if tok in (_T_IN, _T_NOTIN) else tok), lit

    def lookahead(self, values: bool = True) -> tuple[str, str]:
        item = self.items[self.position]
        return self._as_values(item) if values else item

    def consume(self, values: bool = True) -> tuple[str, str]:
        self.position += 1
        item = self.items[self.position - 1]
        return self._as_values(item) if values else item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_T_ID, _T_NOT):
                try:
                    requirements.append(self._requirement())
                except SelectorError as err:
                    raise SelectorError(f"unable to parse requirement: {err}") from None
                tok, lit = self.consume()
                if tok == _T_EOS:
                    return requirements
                if tok != _T_COMMA:
                    raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
                tok2, lit2 = self.lookahead()
                if tok2 not in (_T_ID, _T_NOT):
                    raise SelectorError(f"found '{lit2}', expected: identifier after ','")
            elif tok == _T_EOS:
                return requirements
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        key, operator = self._key_and_inferred_operator()
        if operator in (EXISTS, DOES_NOT_EXIST):
            return Requirement.new(key, operator, [])
        operator = self._operator()
        values = self._values() if operator in (IN, NOT_IN) else self._exact_value()
        return Requirement.new(key, operator, sorted(values))

    def _key_and_inferred_operator(self) -> tuple[str, str]:
        operator = ""
        tok, lit = self.consume()
        if tok == _T_NOT:
            operator = DOES_NOT_EXIST
            tok, lit = self.consume()
        if tok != _T_ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key_errs = qualified_name_problems(lit)
        if key_errs:
            raise SelectorError(_invalid("<nil>", go_quote(lit), "; ".join(key_errs)))
        if self.lookahead()[0] in (_T_EOS, _T_COMMA) and operator != DOES_NOT_EXIST:
            operator = EXISTS
        return lit, operator

    def _operator(self) -> str:
        tok, lit = self.consume(values=False)
        ops = {
            _T_IN: IN, _T_EQ: EQUALS, _T_DEQ: DOUBLE_EQUALS, _T_GT: GREATER_THAN,
            _T_LT: LESS_THAN, _T_NOTIN: NOT_IN, _T_NEQ: NOT_EQUALS,
        }  # fmt: skip
        if tok not in ops:
            raise SelectorError(f"found '{lit}', expected: {', '.join(_BINARY_OPERATORS)}")
        return ops[tok]

    def _values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _T_OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_T_ID, _T_COMMA):
            values = self._identifier_list()
            if self.consume()[0] != _T_CLOSE:
                raise SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok == _T_CLOSE:
            self.consume()
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def _identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _T_ID:
                values.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == _T_COMMA:
                    continue
                if tok2 == _T_CLOSE:
                    return values
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _T_COMMA:
                if not values:
                    values.add("")  # "(,"
                tok2 = self.lookahead()[0]
                if tok2 == _T_CLOSE:
                    values.add("")  # ",)"
                    return values
                if tok2 == _T_COMMA:
                    self.consume()
                    values.add("")  # ",,"
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        if self.lookahead()[0] in (_T_EOS, _T_COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _T_ID:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """labels.Parse: the `labelSelector` query parameter, `kubectl get -l` syntax."""
    requirements = _Parser(text).parse()
    requirements.sort(key=lambda r: r.key)
    return LabelSelector(tuple(requirements))


_LABEL_SELECTOR_OPS = MappingProxyType(
    {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}
)


def label_selector_from_dict(sel: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector for `matchLabels`/`matchExpressions`.

    `None` and `{}` select everything (a DaemonSet's or a Role aggregation's empty selector);
    unlike Go, where a nil selector selects nothing, callers here never need that case.
    """
    if not sel:
        return LabelSelector()
    if not isinstance(sel, Mapping):
        raise SelectorError(f"a label selector must be an object, not {type(sel).__name__}")
    match_labels = sel.get("matchLabels") or {}
    expressions = sel.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        raise SelectorError("matchLabels must be an object and matchExpressions a list")
    requirements: list[Requirement] = []
    for key, value in match_labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SelectorError(f"matchLabels entries must be strings: {key!r}: {value!r}")
        requirements.append(Requirement.new(key, EQUALS, [value]))
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise SelectorError(f"a matchExpressions entry must be an object, not {expr!r}")
        op = expr.get("operator")
        if op not in _LABEL_SELECTOR_OPS:
            raise SelectorError(f"{go_quote(str(op))} is not a valid label selector operator")
        key, values = expr.get("key"), expr.get("values")
        if not isinstance(key, str) or not (
            values is None or (isinstance(values, list) and all(isinstance(v, str) for v in values))
        ):
            raise SelectorError(
                f"a matchExpressions entry needs a string key and string values: {expr!r}"
            )
        requirements.append(Requirement.new(key, _LABEL_SELECTOR_OPS[op], values or None))
    requirements.sort(key=lambda r: r.key)
    return LabelSelector(tuple(requirements))
