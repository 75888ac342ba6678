"""RESULTS.md: one section per benchmark, each a table of figures with the machine and date,
replaced in place when that benchmark runs again."""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(title: str, rows: Sequence[tuple[str, str]], note: str = "") -> str:
    """Replace (or append) the `## title` section; returns its text for printing."""
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [f"## {title}", "", f"Machine: {machine()}. Date: {date}.", ""]
    if note:
        lines += [note, ""]
    lines += ["| figure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows], ""]
    section = "\n".join(lines)
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
    pattern = re.compile(rf"## {re.escape(title)}\n.*?(?=\n## |\Z)", flags=re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)
    return section


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
