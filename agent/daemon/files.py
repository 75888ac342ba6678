"""The files the daemon writes: the IMEX config, the nodes config and the pod's /etc/hosts.

IMEX reads all of them while running, so every write is atomic where the filesystem allows
it; the hosts file is rewritten idempotently so repeated peer updates never make it grow.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from api import names
from cdi.atomic import NotRegularFileError, atomic_write, read_file

FILE_MODE: Final = 0o644
TEMPLATE_LIMIT: Final = 1 << 20  # the shipped template is a few KiB

# TEST-NET-1 (RFC 5737): never routable, so IMEX's connect to an unused slot fails fast
# locally and the name never falls through to cluster DNS. The fake IMEX treats
# 192.0.2.0/24 as an empty slot.
SENTINEL: Final = "192.0.2.1"

MARKER_PREFIX: Final = f"# {names.DRIVER_NAME} IMEX peers of ComputeDomain"
# The reference driver's separator; it appended one more on every rewrite
# (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1466).
REFERENCE_MARKER: Final = "# Compute Domain Daemon mappings"
_REFERENCE_NAME: Final = re.compile(
    rf"(?<![-\w]){re.escape(names.REFERENCE_DNS_NAME_PREFIX)}\d{{4}}(?![-\w])"
)

_PLACEHOLDERS: Final = ("IMEXCmdBindInterfaceIP", "IMEXDaemonNodesConfigPath")
_PLACEHOLDER: Final = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


class TemplateError(ValueError):
    """The IMEX config template is missing or has placeholders we cannot fill."""


def render_config(template: str, *, cmd_bind_ip: str, nodes_config_path: str) -> str:
    """Fill the two Go-template placeholders of the IMEX config template.

    We do not implement Go templates; anything else in `{{ }}` outside a `#` comment line is
    an error so a newer template cannot silently produce a broken config.
    """
    values = dict(zip(_PLACEHOLDERS, (cmd_bind_ip, nodes_config_path), strict=True))

    def substitute(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    out_lines = []
    for number, line in enumerate(template.split("\n"), start=1):
        if line.lstrip().startswith("#"):
            out_lines.append(line)  # IMEX ignores comments; leave prose about {{ }} alone
            continue
        rendered = _PLACEHOLDER.sub(substitute, line)
        if "{{" in rendered or "}}" in rendered:
            raise TemplateError(
                f"IMEX config template line {number} has an unsupported placeholder "
                f"{line.strip()!r}: only {{{{ .{_PLACEHOLDERS[0]} }}}} and "
                f"{{{{ .{_PLACEHOLDERS[1]} }}}} are filled in"
            )
        out_lines.append(rendered)
    return "\n".join(out_lines)


def write_config(imexd_dir: Path, ip: str) -> Path:
    """Render `<imexd_dir>/imexd.cfg.tmpl` into `<imexd_dir>/imexd.cfg` (0644); return its path."""
    template_path = imexd_dir / names.IMEXD_CONFIG_TEMPLATE
    try:
        template = read_file(template_path, TEMPLATE_LIMIT).decode()
    except FileNotFoundError:
        raise TemplateError(
            f"IMEX config template {template_path} is missing: the kubelet plugin copies it "
            "there when it prepares the daemon claim; check the claim was prepared and "
            f"{names.IMEXD_DIR} is mounted"
        ) from None
    except (NotRegularFileError, UnicodeDecodeError) as err:
        raise TemplateError(
            f"IMEX config template {template_path} is not the plain file the kubelet plugin "
            f"writes ({err}); it is not read: the next prepare of a daemon claim on this node "
            "puts the right one back"
        ) from None
    text = render_config(
        template,
        cmd_bind_ip=ip,
        nodes_config_path=str(imexd_dir / names.IMEXD_NODES_CONFIG),
    )
    config_path = imexd_dir / names.IMEXD_CONFIG
    atomic_write(config_path, text.encode(), FILE_MODE)
    return config_path


# --- nodes config --------------------------------------------------------------------------


def dns_nodes_config(cd_uid: str, max_nodes: int) -> str:
    """DNS mode: one domain-scoped name per index; static, since /etc/hosts does the mapping."""
    return "".join(f"{names.dns_name(cd_uid, index)}\n" for index in range(max_nodes))


def check_peer_ip(ip: object) -> str:
    """`ip` if it is a plain IPv4/IPv6 address, else ValueError naming it.

    Peer IPs come from API objects other daemons write; Python accepts an IPv6 zone ID
    (`fe80::1%<anything>`, newlines included), which would inject lines into the hosts
    file or the nodes config, so zone IDs are refused too (pod IPs never have one).
    """
    if not isinstance(ip, str):
        raise ValueError(f"peer IP address {ip!r} is not a string")
    address = ipaddress.ip_address(ip)  # raises ValueError naming the bad address
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise ValueError(f"peer IP address {ip!r} has a zone ID: a pod IP never has one")
    return ip


def ip_nodes_config(ips: list[str]) -> str:
    """IP mode: one peer IP per line, in the given order (IMEX may care about the order).

    ValueError (naming the address) for anything that is not a plain IP address.
    """
    return "".join(f"{check_peer_ip(ip)}\n" for ip in ips)


def write_nodes_config(path: Path, text: str) -> None:
    """Atomically replace the nodes config so IMEX never reads a half-written peer list."""
    atomic_write(path, text.encode(), FILE_MODE)


# --- hosts file ------------------------------------------------------------------------------


def marker(cd_uid: str) -> str:
    """The comment line that starts our block in the hosts file."""
    return f"{MARKER_PREFIX} {cd_uid} (managed; do not edit)"


def _is_ours(line: str, own_prefix: str) -> bool:
    stripped = line.strip()
    return (
        own_prefix in line
        or stripped.startswith(MARKER_PREFIX)
        or stripped == REFERENCE_MARKER
        or _REFERENCE_NAME.search(line) is not None
    )


def render_hosts(
    existing: str,
    cd_uid: str,
    mappings: Mapping[int, str],
    max_nodes: int,
    sentinel: str = SENTINEL,
) -> str:
    """The hosts file with our peer block replaced; idempotent and never growing.

    Keeps every foreign line (localhost, the kubelet's line for the pod's own hostname, ...)
    and drops our own block and the reference driver's `compute-domain-daemon-NNNN` lines
    and separators. Every index 0..max_nodes-1 gets exactly one line; unused slots point at
    `sentinel` so resolving them never reaches cluster DNS, whose answer could belong to
    another ComputeDomain (https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1447).
    """
    for index, ip in mappings.items():
        if not 0 <= index < max_nodes:
            raise ValueError(f"IMEX daemon index {index} is outside 0..{max_nodes - 1}")
        check_peer_ip(ip)
    own_prefix = f"{names.DNS_NAME_PREFIX}{cd_uid}-"
    kept = [line for line in existing.split("\n") if not _is_ours(line, own_prefix)]
    while kept and kept[-1].strip() == "":
        kept.pop()
    block = [marker(cd_uid)] + [
        f"{mappings.get(index, sentinel)}\t{names.dns_name(cd_uid, index)}"
        for index in range(max_nodes)
    ]
    return "".join(f"{line}\n" for line in [*kept, *block])


def write_hosts(path: Path, text: str) -> bool:
    """Write the hosts file if its content differs; return whether it changed.

    Prefers an atomic rename. A container's /etc/hosts is usually a file bind mount from the
    kubelet, where rename over it fails (EBUSY, EXDEV) or the directory is not writable;
    then the file is truncated and rewritten in place and fsynced, which is not atomic: a
    concurrent reader may briefly see a partial file, and the next lookup sees the whole one.
    """
    data = text.encode()
    try:
        if read_file(path) == data:
            return False
    except FileNotFoundError:
        pass
    try:
        atomic_write(path, data, FILE_MODE)
    except OSError as err:
        if err.errno not in (errno.EBUSY, errno.EXDEV, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        _write_in_place(path, data)
    return True


def _write_in_place(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


# --- peer map helpers ---------------------------------------------------------------------------


def peers_changed(old: Mapping[int, str], new: Mapping[int, str]) -> bool:
    """Whether the index -> IP map changed: the hosts file needs a rewrite, IMEX a SIGUSR1."""
    return dict(old) != dict(new)


def index_of(mappings: Mapping[int, str], ip: str) -> int | None:
    """The lowest index mapped to `ip`, or None."""
    return min((index for index, mapped in mappings.items() if mapped == ip), default=None)


def own_index_changed(old: Mapping[int, str], new: Mapping[int, str], own_ip: str) -> bool:
    """Whether this daemon's own slot moved (IMEX finds itself by resolving names to its IP)."""
    return index_of(old, own_ip) != index_of(new, own_ip)
