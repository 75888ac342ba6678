"""SIGUSR2 writes the process's stacks where the reference's runbooks read them, and never
through a link a local user planted (runtime/stackdump.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from eventually import eventually

from runtime import stackdump

PROGRAM = textwrap.dedent("""
    import asyncio, logging, sys
    from pathlib import Path
    from runtime import stackdump

    async def serve_claims():
        await asyncio.Event().wait()

    async def main():
        loop = asyncio.get_running_loop()
        stackdump.install(loop, Path(sys.argv[1]))
        loop.create_task(serve_claims(), name="claims")
        print("ready", flush=True)
        await asyncio.sleep(60)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    asyncio.run(main())
""")


def test_sigusr2_writes_every_thread_and_task(tmp_path: Path) -> None:
    dump = tmp_path / "goroutine-stacks.dump"
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(dump)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[2])
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGUSR2)
        eventually(lambda: dump.exists() and "serve_claims" in dump.read_text(), "the dump")
        text = dump.read_text()
        assert "thread MainThread" in text and "task claims" in text, text
        assert dump.stat().st_mode & 0o777 == 0o600
        assert proc.poll() is None, "SIGUSR2 must not end the process"
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert f"Wrote: {dump}" in err


def test_a_planted_symlink_or_hard_link_is_not_written(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "dump-symlink"
    link.symlink_to(victim)
    hard = tmp_path / "dump-hardlink"
    os.link(victim, hard)
    for planted in (link, hard):
        fallback = _Sink()
        assert not stackdump.write(planted, "stacks", fallback)
        assert fallback.text == "stacks"
    assert victim.read_text() == "keep"
    mine = tmp_path / "dump"
    mine.write_text("an older, longer dump")
    assert stackdump.write(mine, "new")
    assert mine.read_text() == "new"


class _Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)
