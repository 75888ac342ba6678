"""Qualified CDI device names, `<vendor>/<class>=<name>`, as container runtimes parse them.

The rules are those of tags.cncf.io/container-device-interface/pkg/parser, which
containerd and CRI-O use: a name accepted here is accepted there, and vice versa.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from cdi.cdi_error import CDIError

_LETTERS = frozenset(string.ascii_letters)
_ALNUM = frozenset(string.ascii_letters + string.digits)
_QUALIFIER_MIDDLE = _ALNUM | frozenset("_-.")
_DEVICE_MIDDLE = _QUALIFIER_MIDDLE | frozenset(":")


def _check_chars(
    what: str, value: str, first: frozenset[str], first_rule: str, middle: frozenset[str]
) -> None:
    if not value:
        raise CDIError(f"invalid {what} name: it is empty")
    if value[0] not in first:
        raise CDIError(f"invalid {what} name {value!r}: it must start with {first_rule}")
    for char in value[1:-1]:
        if char not in middle:
            raise CDIError(f"invalid {what} name {value!r}: character {char!r} is not allowed")
    if len(value) > 1 and value[-1] not in _ALNUM:
        raise CDIError(f"invalid {what} name {value!r}: it must end with a letter or digit")


def validate_vendor_name(vendor: str) -> None:
    """Raise CDIError unless `vendor` may be the vendor part of a kind."""
    _check_chars("vendor", vendor, _LETTERS, "a letter", _QUALIFIER_MIDDLE)


def validate_class_name(class_: str) -> None:
    """Raise CDIError unless `class_` may be the class part of a kind."""
    _check_chars("class", class_, _LETTERS, "a letter", _QUALIFIER_MIDDLE)


def validate_device_name(name: str) -> None:
    """Raise CDIError unless `name` may name a device within a spec."""
    _check_chars("device", name, _ALNUM, "a letter or digit", _DEVICE_MIDDLE)


def parse_kind(kind: str) -> tuple[str, str]:
    """Split a spec kind `<vendor>/<class>` at its first `/`, validating both parts."""
    vendor, sep, class_ = kind.partition("/")
    if not vendor:
        raise CDIError(f"invalid kind {kind!r}: missing vendor (expected <vendor>/<class>)")
    if not sep or not class_:
        raise CDIError(f"invalid kind {kind!r}: missing class (expected <vendor>/<class>)")
    try:
        validate_vendor_name(vendor)
        validate_class_name(class_)
    except CDIError as err:
        raise CDIError(f"invalid kind {kind!r}: {err}") from None
    return vendor, class_


def validate_kind(kind: str) -> None:
    """Raise CDIError unless `kind` is a valid `<vendor>/<class>`."""
    parse_kind(kind)


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """Split `<vendor>/<class>=<name>` into its validated parts.

    A runtime treats an empty string or a path (leading `/`) as an unqualified device,
    so those are rejected as missing a vendor rather than parsed.
    """
    if not device or device.startswith("/") or "=" not in device:
        raise CDIError(
            f"unqualified device {device!r}: missing vendor (expected <vendor>/<class>=<name>)"
        )
    qualifier, _, name = device.partition("=")
    vendor, sep, class_ = qualifier.partition("/")
    if not vendor:
        raise CDIError(f"invalid device {device!r}: missing vendor")
    if not sep or not class_:
        raise CDIError(f"invalid device {device!r}: missing class")
    if not name:
        raise CDIError(f"invalid device {device!r}: missing device name")
    try:
        validate_vendor_name(vendor)
        validate_class_name(class_)
        validate_device_name(name)
    except CDIError as err:
        raise CDIError(f"invalid device {device!r}: {err}") from None
    return vendor, class_, name


def format_qualified_name(vendor: str, class_: str, name: str) -> str:
    """Join validated parts into `<vendor>/<class>=<name>`; refusing bad parts keeps
    unparseable names out of ResourceClaim status and CDI specs."""
    validate_vendor_name(vendor)
    validate_class_name(class_)
    validate_device_name(name)
    return f"{vendor}/{class_}={name}"


def validate_qualified_name(device: str) -> None:
    """Raise CDIError unless `device` is a valid qualified device name."""
    parse_qualified_name(device)


def is_qualified_name(device: str) -> bool:
    """Whether `device` parses as a qualified name, for callers that branch rather than fail."""
    try:
        parse_qualified_name(device)
    except CDIError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class QualifiedName:
    """A validated `<vendor>/<class>=<name>`; holding one proves the string is usable."""

    vendor: str
    class_: str
    name: str

    def __post_init__(self) -> None:
        validate_vendor_name(self.vendor)
        validate_class_name(self.class_)
        validate_device_name(self.name)

    @classmethod
    def parse(cls, device: str) -> QualifiedName:
        """Parse and validate a qualified device name."""
        return cls(*parse_qualified_name(device))

    @classmethod
    def for_device(cls, kind: str, name: str) -> QualifiedName:
        """The qualified name of device `name` in a spec of the given kind."""
        vendor, class_ = parse_kind(kind)
        return cls(vendor, class_, name)

    @property
    def kind(self) -> str:
        """The `<vendor>/<class>` of the spec that must define this device."""
        return f"{self.vendor}/{self.class_}"

    def __str__(self) -> str:
        return f"{self.vendor}/{self.class_}={self.name}"
