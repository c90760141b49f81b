"""A runaway agent hurts only its own session (harness/agents/process.py, AgentLimits): a fork bomb meets
the session's pids cgroup, a disk filler is stopped at the disk limit, and processes that leave the agent's
process group die with the session all the same."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from crucible.harness.agents.process import AgentLimits, folder_usage, run_headless
from crucible.toolkit.sandbox import probe

CAPS = probe()
needs_pids_cgroup = pytest.mark.skipif(CAPS.cgroup_pids is None, reason="no pids cgroup can be made here")


def run(tmp_path: Path, script: str, limits: AgentLimits, writable: list[Path] | None = None, time_limit_s: float = 30):
    return run_headless([sys.executable, "-c", script], cwd=tmp_path, env={"PATH": os.environ["PATH"]},
                        events_path=tmp_path / "session" / "events.jsonl", stderr_path=tmp_path / "session" / "err",
                        time_limit_s=time_limit_s, cancel=threading.Event(), limits=limits,
                        writable=writable or [])


FORK_BOMB = """
import os, time
made = 0
for _ in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print(made, flush=True)
"""


@needs_pids_cgroup
def test_a_fork_bomb_meets_the_sessions_process_limit_and_dies_with_it(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run(tmp_path, FORK_BOMB, AgentLimits(max_processes=40))
    made = int(result.lines[0])
    assert 0 < made < 40, made  # the cgroup refused the rest; the host's process table never noticed
    assert time.monotonic() - started < 20  # its sleeping children died with the session, not after 60 s


def test_a_disk_filler_is_stopped_at_the_disk_limit(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    ws.mkdir()
    filler = f"""
import time
with open({str(ws / 'fill.bin')!r}, 'wb') as f:
    while True:
        f.write(b'x' * (1 << 20)); f.flush(); time.sleep(0.01)
"""
    result = run(tmp_path, filler, AgentLimits(disk_mb=8, disk_check_s=0.1), writable=[ws])
    assert result.stopped == "resource_limit" and "8 MB disk limit" in result.limit_note
    assert (ws / "fill.bin").stat().st_size < 64 << 20  # stopped within a few checks, not at the time limit
    assert result.wall_s < 15


@needs_pids_cgroup
def test_a_process_that_leaves_the_process_group_dies_with_the_session(tmp_path: Path) -> None:
    pidfile = tmp_path / "escapee.pid"
    escape = f"""
import os, time
if os.fork() == 0:
    os.setsid()  # a new session and process group: the group kill cannot reach it
    if os.fork() == 0:
        open({str(pidfile)!r}, 'w').write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
time.sleep(0.5)
"""
    run(tmp_path, escape, AgentLimits())
    pid = int(pidfile.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail("the escaped process outlived its session")


def test_folder_usage_counts_what_is_written_and_every_entry(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * (1 << 20))
    (tmp_path / "g").write_bytes(b"y" * (1 << 20))
    used, entries = folder_usage([tmp_path])
    assert used >= 2 << 20 and entries == 3
    assert folder_usage([tmp_path / "missing"]) == (0, 0)
    # links with long targets take blocks, empty files take inodes: both were invisible to a count of
    # regular files' bytes
    links = tmp_path / "links"
    links.mkdir()
    for i in range(200):
        (links / f"l{i}").symlink_to("t" * 3000)
        (links / f"e{i}").touch()
    used_after, entries_after = folder_usage([tmp_path])
    assert used_after - used >= 200 * 4096 and entries_after == entries + 1 + 400
    assert folder_usage([tmp_path], stop_entries=10)[1] < entries_after  # stops counting early


def test_an_agent_that_floods_its_stdout_is_stopped_at_the_output_limit(tmp_path: Path) -> None:
    # Its stream is kept in the harness's memory (every session's MCP server lives in that process).
    flood = "import sys\nline = 'a' * 1000 + '\\n'\nwhile True: sys.stdout.write(line)"
    result = run(tmp_path, flood, AgentLimits(output_mb=2))
    assert result.stopped == "resource_limit" and "2 MB to its stdout or stderr" in result.limit_note
    assert sum(len(line) for line in result.lines) <= 2 << 20
    spill = "import sys\nwhile True: sys.stderr.write('b' * 100000)"
    result = run(tmp_path, spill, AgentLimits(output_mb=2))
    assert result.stopped == "resource_limit" and len(result.stderr_tail) <= 4000
