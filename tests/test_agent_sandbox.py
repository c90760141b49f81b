"""The agent's sandbox (harness/sandbox.py): from inside it, every forbidden read and write fails, and the
agent's own folders work. A session's layout is planted under tmp_path, with a task suite, a store and
another session beside it; a settings file is planted in the real HOME, as a user's ~/.claude would be.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.harness import sandbox
from crucible.harness.sandbox import (
    AgentSandboxCaps,
    SandboxUnavailable,
    agent_sandbox_prefix,
    probe_agent_sandbox,
)

ROOT = Path(__file__).resolve().parents[1]
CAPS = probe_agent_sandbox()
needs_sandbox = pytest.mark.skipif(not CAPS.available, reason=f"no agent sandbox here: {CAPS.reason}")


class Layout:
    def __init__(self, base: Path) -> None:
        self.suite = base / "suite" / "triton2triton" / "vadd"
        self.hidden = self.suite / "hidden.toml"
        self.store = base / "run" / "store.db"
        self.other = base / "run" / "sessions" / "other" / "workspace" / "kernel.py"
        self.workspace = base / "run" / "sessions" / "me" / "workspace"
        self.home = base / "run" / "sessions" / "me" / "home"
        self.tools = base / "tools"
        for d in (self.suite, self.other.parent, self.workspace, self.home, self.tools / "suite"):
            d.mkdir(parents=True)
        self.hidden.write_text("[[configs]]\nname = 'secret'\n")
        self.store.write_text("scores")
        self.other.write_text("another agent's kernel")
        (self.workspace / "kernel.py").write_text("mine")
        (self.tools / "cli.txt").write_text("a tool")
        (self.tools / "suite" / "hidden.toml").write_text("masked inside a bound folder")


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.fixture
def real_home_settings() -> Iterator[Path]:
    """~/.claude/settings.json of the real HOME: the existing one, or one planted for the test."""
    settings = Path.home() / ".claude" / "settings.json"
    made_dir = not settings.parent.exists()
    made_file = not settings.exists()
    if made_file:
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text('{"planted": "by tests/test_agent_sandbox.py"}')
    try:
        yield settings
    finally:
        if made_file:
            settings.unlink()
        if made_dir:
            with contextlib.suppress(OSError):
                settings.parent.rmdir()


def run_in(layout: Layout, script: str, *, gpu: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = agent_sandbox_prefix(workspace=layout.workspace, home=layout.home, tools_ro=[layout.tools], gpu=gpu,
                                  hide=[layout.suite.parent.parent, layout.tools / "suite"])
    return subprocess.run([*prefix, "/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)


def fails(layout: Layout, script: str) -> bool:
    return run_in(layout, script).returncode != 0


# ------------------------------------------------------------------------------------------- probing

def test_probe_says_why_and_what_to_do_when_bubblewrap_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name, *a, **k: None)
    caps = probe_agent_sandbox.__wrapped__()  # type: ignore[attr-defined]
    assert not caps.available
    assert "bubblewrap" in caps.reason and "apt-get install bubblewrap" in caps.reason
    assert "--no-sandbox" in caps.reason


def test_no_prefix_is_built_without_a_sandbox(tmp_path: Path) -> None:
    caps = AgentSandboxCaps(available=False, reason="bubblewrap (`bwrap`) is not installed: ...")
    with pytest.raises(SandboxUnavailable, match="not installed"):
        agent_sandbox_prefix(workspace=tmp_path, home=tmp_path, tools_ro=[], gpu=False, caps=caps)


# ------------------------------------------------------------------------------------ what it may do

@needs_sandbox
def test_the_agent_reads_and_writes_its_workspace_and_home(layout: Layout) -> None:
    done = run_in(layout, f"cat kernel.py && echo && cat {layout.tools}/cli.txt && echo && pwd && "
                          f"echo new > {layout.workspace}/new.py && mkdir -p sub && echo cfg > {layout.home}/.config")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["mine", "a tool", str(layout.workspace)]
    assert (layout.workspace / "new.py").read_text() == "new\n" and (layout.workspace / "sub").is_dir()
    assert (layout.home / ".config").read_text() == "cfg\n"


@needs_sandbox
def test_the_agent_reaches_a_server_on_the_hosts_loopback(layout: Layout) -> None:
    """The MCP server is served by the harness on 127.0.0.1: the network namespace is shared."""
    if shutil.which("bash") is None:
        pytest.skip("bash is needed for /dev/tcp")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        done = run_in(layout, f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'")
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------ what it may not do

@needs_sandbox
def test_the_agent_cannot_read_the_suites_hidden_configs(layout: Layout) -> None:
    assert fails(layout, f"cat {layout.hidden}")
    assert fails(layout, f"ls {layout.suite}")
    # A suite inside a folder the agent may read (a tool folder, /usr, /opt) is masked all the same.
    assert fails(layout, f"cat {layout.tools}/suite/hidden.toml")


@needs_sandbox
def test_the_agent_cannot_read_another_sessions_folder(layout: Layout) -> None:
    assert fails(layout, f"cat {layout.other}")
    assert fails(layout, f"ls {layout.other.parent.parent}")


@needs_sandbox
def test_the_agent_cannot_read_or_write_the_store(layout: Layout) -> None:
    assert fails(layout, f"cat {layout.store}")
    assert fails(layout, f"echo forged > {layout.store}")
    assert layout.store.read_text() == "scores"


@needs_sandbox
def test_the_agent_cannot_read_the_hosts_agent_settings(layout: Layout, real_home_settings: Path) -> None:
    assert fails(layout, f"cat {real_home_settings}")
    for folder in (".claude", ".codex", ".cursor"):
        assert fails(layout, f"ls {Path.home() / folder}")


@needs_sandbox
def test_the_agent_cannot_see_the_crucible_checkout(layout: Layout) -> None:
    assert fails(layout, f"ls {ROOT / 'harness'}")
    assert fails(layout, f"cat {ROOT / 'pyproject.toml'}")


@needs_sandbox
def test_the_agent_cannot_write_outside_its_workspace(layout: Layout, tmp_path: Path) -> None:
    for target in (tmp_path / "outside.txt", Path("/usr/crucible-escape"), Path("/etc/crucible-escape"),
                   layout.workspace.parent / "beside.txt", Path("/tmp/crucible-escape"), Path("/crucible-escape")):
        assert fails(layout, f"echo escaped > {target}"), target
        assert not target.exists(), target
    # Scratch files go to TMPDIR, which the agent's launcher points into its HOME.
    assert run_in(layout, f"mkdir {layout.home}/tmp && TMPDIR={layout.home}/tmp mktemp").returncode == 0


@needs_sandbox
def test_the_agent_has_no_capabilities_and_sees_only_its_processes(layout: Layout) -> None:
    done = run_in(layout, "grep CapEff /proc/self/status; ls /proc | grep -c '^[0-9]'")
    assert done.returncode == 0, done.stderr
    cap_line, count = done.stdout.splitlines()
    assert cap_line.split()[1] == "0000000000000000"
    assert int(count) < 10
    assert fails(layout, "mount -t tmpfs none /mnt")


@pytest.fixture
def fake_gpu_device() -> Iterator[Path]:
    """A stand-in for /dev/nvidia0 on a machine without a GPU (skipped where /dev is not writable)."""
    dev = Path("/dev/nvidia-crucible-test")
    try:
        dev.write_text("")
    except OSError as exc:
        pytest.skip(f"cannot plant a fake device in /dev: {exc}")
    try:
        yield dev
    finally:
        dev.unlink()


@needs_sandbox
def test_gpus_are_hidden_unless_the_agent_gets_the_gpu(layout: Layout, fake_gpu_device: Path) -> None:
    script = f"test -e {fake_gpu_device} && echo device; ls /dev/nvidia* 2>/dev/null; echo cvd=${{CUDA_VISIBLE_DEVICES-unset}}"
    assert run_in(layout, script).stdout.splitlines() == ["cvd="]
    shown = run_in(layout, script, gpu=True).stdout.splitlines()
    assert shown[0] == "device" and str(fake_gpu_device) in shown and shown[-1] == "cvd=unset"
    # /dev/null and friends work either way.
    assert run_in(layout, "echo x > /dev/null && head -c 4 /dev/urandom | wc -c").stdout.strip() == "4"


@needs_sandbox
def test_real_gpu_devices_of_this_host_are_hidden(layout: Layout) -> None:
    host = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
    if not host:
        pytest.skip("no /dev/nvidia* on this host (see test_gpus_are_hidden_unless_the_agent_gets_the_gpu)")
    done = run_in(layout, "ls /dev")
    assert not [d for d in done.stdout.split() if d.startswith("nvidia")]


def test_probe_runs_in_the_environment_the_harness_has() -> None:
    """The probe's answer is cached per process and says what it found."""
    caps = probe_agent_sandbox()
    assert caps is probe_agent_sandbox()
    assert caps.available == (caps.reason == "")
    if caps.available:
        assert caps.mechanism and caps.mechanism.startswith("bubblewrap") and caps.is_root == (os.geteuid() == 0)


@needs_sandbox
def test_killing_every_process_it_can_see_kills_only_the_agents_own(layout: Layout) -> None:
    sentinel = subprocess.Popen(["sleep", "60"])  # stands for the harness, the server, other sessions
    try:
        # `kill -9 -1` in a pid namespace reaches only that namespace; this test's own python process
        # surviving `pkill -f python` is the second half of the check
        run_in(layout, "sleep 30 & kill -9 -1; pkill -9 -f python; pkill -9 sleep; echo done")
        assert sentinel.poll() is None, "a process outside the sandbox was killed from inside it"
    finally:
        sentinel.kill()
        sentinel.wait()
