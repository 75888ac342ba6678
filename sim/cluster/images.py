"""Container images as the simulated kubelet knows them.

The project's own image is described by its Dockerfile (the final stage's `USER`,
`ENTRYPOINT`, `CMD`, `ENV`, `WORKDIR` and the programs it copies into `/usr/bin`), read
from the file itself so the sim runs the image a cluster would run: a pod that does not
set `runAsUser` runs as the Dockerfile's user, exactly as under containerd. The programs
are this checkout's (the venv's console scripts or the frozen binaries), bind-mounted
where the image has them.

Any other image is a "host image": the host's own file system, user root, no entrypoint.
A container of such an image without a command runs a stand-in that sleeps until it is
stopped (the sim cannot know what the image would have run).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a host-image container without a command runs (a pause-like process).
IDLE_COMMAND = ("sleep", "infinity")


@dataclass(frozen=True)
class Image:
    """What a runtime takes from an image's config, plus the files the sim provides."""

    ref: str
    user: str = ""  # "uid[:gid]" as in the image config; "" is root
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    workdir: str = ""
    # Container path -> host path of the programs the image holds.
    files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    known: bool = False  # False: a host image (see the module doc)
    # Host paths the programs need besides themselves (the interpreter of a venv's scripts).
    runtime: tuple[str, ...] = ()

    def ids(self) -> tuple[int | None, int | None]:
        """(uid, gid) of `USER`; None where the image leaves it to the default (root)."""
        if not self.user:
            return None, None
        uid, _, gid = self.user.partition(":")
        return _number(uid, "user"), (_number(gid, "group") if gid else None)

    def argv(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        """The process to run, by the rules of the pod API: `command` replaces the
        entrypoint and `args` the cmd; `args` alone keep the entrypoint."""
        if command:
            return [*command, *args]
        if not self.known and not self.entrypoint:
            return [*IDLE_COMMAND] if not args else [*args]
        return [*self.entrypoint, *(args or self.cmd)]

    def base_env(self) -> dict[str, str]:
        env = {"PATH": DEFAULT_PATH}
        env.update(self.env)
        return env


def _number(value: str, what: str) -> int:
    if not value.isdigit():
        raise ValueError(f"image {what} {value!r} is not numeric (the sim reads no /etc/passwd)")
    return int(value)


def host_image(ref: str) -> Image:
    return Image(ref=ref)


def _exec_form(value: str) -> tuple[str, ...]:
    """`["a", "b"]` (exec form) or `a b` (shell form, run through /bin/sh -c)."""
    value = value.strip()
    if value.startswith("["):
        parsed = json.loads(value)
        return tuple(str(v) for v in parsed)
    return ("/bin/sh", "-c", value)


def _env_pairs(value: str) -> dict[str, str]:
    """`ENV A=1 B="two words"` or the legacy `ENV A value`."""
    words = shlex.split(value)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words if "=" in w)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def from_dockerfile(
    dockerfile: Path, ref: str, programs: Mapping[str, Path], runtime: Sequence[str] = ()
) -> Image:
    """The image the final stage of `dockerfile` builds; `programs` (basename -> host
    path) supply the files it copies into place, `runtime` what they need to run."""
    try:
        steps = _instructions(Path(dockerfile).read_text())
    except OSError as err:
        raise ValueError(f"cannot read {dockerfile}: {err.strerror}") from None
    starts = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    if not starts:
        raise ValueError(f"{dockerfile} has no FROM")
    user, workdir = "", ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = {}
    files: dict[str, str] = {}
    for word, rest in steps[starts[-1] + 1 :]:
        if word == "USER":
            user = rest
        elif word == "ENTRYPOINT":
            entrypoint, cmd = _exec_form(rest), ()  # a new entrypoint resets the cmd
        elif word == "CMD":
            cmd = _exec_form(rest)
        elif word == "ENV":
            env.update(_env_pairs(rest))
        elif word == "WORKDIR":
            workdir = rest
        elif word == "COPY":
            files.update(_copied(rest, programs))
    return Image(
        ref=ref,
        user=user,
        entrypoint=entrypoint,
        cmd=cmd,
        env=MappingProxyType(env),
        workdir=workdir,
        files=MappingProxyType(files),
        known=True,
        runtime=tuple(runtime),
    )


def _copied(rest: str, programs: Mapping[str, Path]) -> dict[str, str]:
    """The programs a `COPY [--from=...] src... dest/` puts in place."""
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    if len(words) < 2:
        return {}
    *sources, dest = words
    out: dict[str, str] = {}
    for source in sources:
        name = PurePosixPath(source).name
        if name in programs:
            target = dest if not dest.endswith("/") else dest + name
            out[str(PurePosixPath(target))] = str(programs[name])
    return out


@dataclass(frozen=True)
class ImageCatalog:
    """Image references -> images: the repositories given are the project's image (any
    tag or digest); every other reference is a host image."""

    project: Image
    repositories: frozenset[str]

    def lookup(self, ref: str) -> Image:
        if repository(ref) in self.repositories:
            return self.project
        return host_image(ref)


def repository(ref: str) -> str:
    """`nvcr.io/nvidia/x:1.0@sha256:...` -> `nvcr.io/nvidia/x`."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name
