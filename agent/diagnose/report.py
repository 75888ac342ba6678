"""The diagnosis: boundaries in order, each with evidence and a status, one verdict, and its
two renderings (text for a person, JSON for a script).

The JSON document is a contract (README "diagnose --json"): keys are only ever added, and
`apiVersion` changes if one is removed or changes meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

API_VERSION: Final = "diagnose.compute-domain.nvidia.com/v1"

OK: Final = "ok"
WAITING: Final = "waiting"  # expected bootstrap delay: still moving, give it time
BROKEN: Final = "broken"  # a stable failure: it will not fix itself
SKIPPED: Final = "skipped"  # does not apply (e.g. cleanup of a live domain)
UNCHECKED: Final = "unchecked"  # after the first boundary that is not ok
STATUSES: Final = (OK, WAITING, BROKEN, SKIPPED, UNCHECKED)

# Exit statuses of the command.
EXIT_OK: Final = 0
EXIT_BROKEN: Final = 1
EXIT_USAGE: Final = 2
EXIT_WAITING: Final = 3


@dataclass
class Boundary:
    """One boundary of the evidence chain; `cause` and `next` only when it is not ok."""

    name: str
    title: str
    status: str = OK
    evidence: list[str] = field(default_factory=list)
    cause: str = ""
    next: str = ""

    def see(self, line: str) -> None:
        self.evidence.append(line)

    def fail(self, status: str, cause: str, next_command: str) -> Boundary:
        """Record the first problem found (a later one never overrides it)."""
        if self.status in (OK, SKIPPED):
            self.status, self.cause, self.next = status, cause, next_command
        return self

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status,
                "evidence": list(self.evidence), "cause": self.cause, "next": self.next}


@dataclass
class Report:
    domain: dict[str, Any]
    boundaries: list[Boundary]
    unreadable: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Verdicts stop at the first boundary that is not ok; the evidence after it stays.
        seen_problem = False
        for boundary in self.boundaries:
            if seen_problem and boundary.status != SKIPPED:
                boundary.status, boundary.cause, boundary.next = UNCHECKED, "", ""
            elif boundary.status in (WAITING, BROKEN):
                seen_problem = True

    @property
    def first_problem(self) -> Boundary | None:
        return next((b for b in self.boundaries if b.status in (WAITING, BROKEN)), None)

    @property
    def exit_status(self) -> int:
        problem = self.first_problem
        if problem is None:
            return EXIT_OK
        return EXIT_WAITING if problem.status == WAITING else EXIT_BROKEN

    def verdict(self) -> dict[str, Any]:
        problem = self.first_problem
        if problem is None:
            return {"status": OK, "boundary": None,
                    "cause": "every boundary holds: the workload pods have their IMEX channel",
                    "next": ""}
        return {"status": problem.status, "boundary": problem.name, "cause": problem.cause,
                "next": problem.next}

    def to_json(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "computeDomain": self.domain,
                "verdict": self.verdict(),
                "boundaries": [b.to_json() for b in self.boundaries],
                "unreadable": dict(self.unreadable)}

    def render(self) -> str:
        d = self.domain
        head = f"ComputeDomain {d['namespace']}/{d['name']}"
        if d.get("uid"):
            where = f" (IMEX in the {d['placement']})" if d.get("placement") else ""
            head += (f" (uid {d['uid']}, {d.get('mode')}{where}, status "
                     f"{d.get('status') or '-'}, {d.get('ageSeconds', 0):.0f}s old)")
        lines = [head, ""]
        for i, b in enumerate(self.boundaries, 1):
            mark = {OK: "ok", WAITING: "WAITING", BROKEN: "BROKEN", SKIPPED: "skip",
                    UNCHECKED: "-"}[b.status]
            suffix = " (not evaluated: an earlier boundary is not ok)" if b.status == UNCHECKED \
                else ""
            lines.append(f"[{mark:>7}] {i}. {b.title}{suffix}")
            lines += [f"          - {e}" for e in b.evidence]
            if b.cause:
                lines.append(f"          cause: {b.cause}")
                lines.append(f"          next:  {b.next}")
        for path, why in sorted(self.unreadable.items()):
            lines.append(f"could not read {path}: {why}")
        verdict = self.verdict()
        lines.append("")
        if verdict["boundary"] is None:
            lines.append(f"Verdict: OK: {verdict['cause']}")
        else:
            title = next(b.title for b in self.boundaries if b.name == verdict["boundary"])
            word = "waiting" if verdict["status"] == WAITING else "BROKEN"
            lines.append(f"Verdict: {title}: {word}: {verdict['cause']}")
            lines.append(f"Next:    {verdict['next']}")
        return "\n".join(lines) + "\n"
