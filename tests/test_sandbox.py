"""The sandbox probe finds what isolation works here, and the launch command applies exactly that."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from worker_jobs import wait_gone

from crucible.toolkit import worker
from crucible.toolkit.jobs import JOBS
from crucible.toolkit.sandbox import RunCgroup, SandboxCaps, launch_prefix, namespace_flags, probe
from crucible.toolkit.worker import WorkerLimits, run_job

REPO = Path(__file__).resolve().parents[1]
BARE = SandboxCaps(is_root=False, unshare=None, netns=False, pidns=False, setpriv=None, landlock_abi=0,
                   cgroup_version=None, cgroup_memory=None, cgroup_pids=None)


def test_probe_is_cached_and_reports_every_mechanism() -> None:
    caps = probe()
    assert probe() is caps
    print(caps)  # visible with -s: what this machine gives
    assert caps.landlock_abi >= 0


def test_a_network_namespace_is_asked_for_only_when_the_network_is_denied() -> None:
    caps = SandboxCaps(is_root=True, unshare="/usr/bin/unshare", netns=True, pidns=True, setpriv="/usr/bin/setpriv",
                       landlock_abi=0, cgroup_version=None, cgroup_memory=None, cgroup_pids=None)
    denied = launch_prefix(WorkerLimits(), caps)
    assert denied[:2] == ["/usr/bin/unshare", "-n"] and "-p" in denied
    assert denied[-5:] == ["/usr/bin/setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
    allowed = launch_prefix(WorkerLimits(network=True), caps)
    assert "-n" not in allowed and "-p" in allowed


def test_a_non_root_user_gets_its_namespaces_through_a_user_namespace() -> None:
    caps = BARE.model_copy(update={"unshare": "/usr/bin/unshare", "netns": True})
    assert namespace_flags(caps, network=False) == ["-r", "-n"]
    assert namespace_flags(caps, network=True) == []  # nothing to unshare: no bare user namespace


def test_nothing_is_prefixed_when_no_mechanism_works() -> None:
    assert launch_prefix(WorkerLimits(), BARE) == []


@pytest.mark.skipif(probe().landlock_abi < 1, reason="no Landlock on this kernel")
def test_landlock_makes_everything_but_the_writable_dirs_read_only(tmp_path: Path) -> None:
    (tmp_path / "rw").mkdir()
    code = ("import sys; from crucible.toolkit.sandbox import restrict_filesystem as r; r([sys.argv[1]]);"
            "open(sys.argv[1] + '/ok', 'w').write('x')\n"
            "try:\n open(sys.argv[2], 'w')\nexcept PermissionError: print('denied')")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "rw"), str(tmp_path / "ro")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "denied"
    assert (tmp_path / "rw" / "ok").exists() and not (tmp_path / "ro").exists()


@pytest.mark.skipif(probe().cgroup_memory is None, reason="cannot create memory cgroups here")
def test_a_memory_cgroup_kill_is_recognised_as_oom() -> None:
    group = RunCgroup.create(probe(), memory_mb=64, max_processes=None)
    assert group is not None
    try:
        done = subprocess.run([*group.join_prefix(), sys.executable, "-c", "b = b'x' * (512 << 20)"],
                              capture_output=True, check=False)
        assert done.returncode == -9
        assert group.oom_killed()
    finally:
        group.kill_all()
        group.remove()
    assert all(not d.exists() for d in group.dirs)


@pytest.mark.skipif(probe().cgroup_pids is None, reason="cannot create pids cgroups here")
def test_a_pids_cgroup_caps_the_number_of_processes() -> None:
    group = RunCgroup.create(probe(), memory_mb=None, max_processes=8)
    assert group is not None
    code = ("import os, time\ntry:\n for _ in range(50):\n  if os.fork() == 0:\n   time.sleep(5); os._exit(0)\n"
            "except BlockingIOError:\n print('capped')")
    try:
        done = subprocess.run([*group.join_prefix(), sys.executable, "-c", code], capture_output=True,
                              text=True, check=False, timeout=20)
        assert "capped" in done.stdout
    finally:
        group.kill_all()
        group.remove()


BURN_IN_A_CHILD = ("import os, time\nif os.fork() == 0:\n end = time.process_time() + 0.4\n"
                   " while time.process_time() < end: pass\n os._exit(0)\nos.wait()\nprint('reaped', flush=True)\n"
                   "time.sleep(30)")
"""A process whose child burns 0.4 s of CPU and exits: the work of a process that is gone."""


@pytest.mark.skipif(probe().cgroup_cpu is None, reason="cannot create CPU accounting cgroups here")
def test_cpu_accounting_keeps_the_time_of_processes_that_exited() -> None:
    group = RunCgroup.create(probe(), memory_mb=None, max_processes=None, cpu_accounting=True)
    assert group is not None and group.cpu_seconds() == 0
    try:
        proc = subprocess.Popen([*group.join_prefix(), sys.executable, "-c", BURN_IN_A_CHILD], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "reaped"
        spent = group.cpu_seconds()
        assert spent is not None and spent >= 0.4
        proc.kill()
        proc.wait()
    finally:
        group.kill_all()
        group.remove()


HOP_AND_COUNT = ("import ctypes, os, sys\npath = sys.argv[1]\nctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
                 "if os.fork():\n while True: os.wait()\nwhile True:\n if os.fork() == 0:\n  os.setsid()\n"
                 "  with open(path, 'a') as f: f.write('.')\n  continue\n os._exit(0)")
"""Forks and dies in a loop, each child in a session of its own, each adding a byte to a file: at any moment
the newest process is one nobody has signalled yet (the first process only reaps what dies)."""


@pytest.mark.skipif(probe().cgroup_freezer is None, reason="cannot create freezer cgroups here")
def test_a_frozen_cgroup_stops_a_process_that_keeps_forking_until_it_is_let_go(tmp_path: Path) -> None:
    group = RunCgroup.create(probe(), memory_mb=None, max_processes=64, freezer=True)
    assert group is not None
    counter = tmp_path / "count"
    try:
        subprocess.Popen([*group.join_prefix(), sys.executable, "-c", HOP_AND_COUNT, str(counter)])
        deadline = time.monotonic() + 20
        while not counter.exists() or counter.stat().st_size < 20:
            assert time.monotonic() < deadline, "the hopping process never ran"
            time.sleep(0.05)
        assert group.freeze(True)
        frozen_at = counter.stat().st_size
        time.sleep(0.5)
        assert counter.stat().st_size == frozen_at
        assert group.freeze(False)
        time.sleep(0.5)
        assert counter.stat().st_size > frozen_at
    finally:
        group.freeze(True)  # stop the hopping before killing it, or a new child may slip out of the kill
        group.kill_all()
        group.remove()
    assert all(not d.exists() for d in group.dirs)


def test_without_a_cgroup_the_runner_counts_the_children_it_reaped() -> None:
    from crucible.toolkit.judge.link import _reaped_children_seconds

    proc = subprocess.Popen([sys.executable, "-c", BURN_IN_A_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "reaped"
        assert _reaped_children_seconds(proc.pid) >= 0.35  # clock ticks: 10 ms steps
    finally:
        proc.kill()
        proc.wait()
    assert _reaped_children_seconds(proc.pid) == 0.0  # gone: nothing, never an error


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "probe", lambda: BARE)
    for name in ("echo", "segfault", "abort", "os_exit_0", "fork_sleeper_and_return"):
        monkeypatch.setitem(JOBS, name, f"tests.worker_jobs:{name}")


@pytest.mark.usefixtures("no_sandbox")
@pytest.mark.parametrize(("kind", "status", "sig"), [("segfault", "crash", "SIGSEGV"), ("abort", "crash", "SIGABRT"),
                                                     ("os_exit_0", "exit", None), ("echo", "ok", None)])
def test_verdicts_are_the_same_without_any_sandbox(tmp_path: Path, kind: str, status: str, sig: str | None) -> None:
    outcome = run_job(kind, {}, limits=WorkerLimits(timeout_s=20), backend="cpu", scratch=tmp_path,
                      env={"PYTHONPATH": str(REPO)})
    assert (outcome.status, outcome.signal) == (status, sig), outcome
    assert outcome.isolation["network"].startswith("NOT isolated")


@pytest.mark.usefixtures("no_sandbox")
def test_without_any_sandbox_leftover_processes_are_still_killed_after_the_result(tmp_path: Path) -> None:
    marker = f"crucible-test-{uuid.uuid4().hex}"
    outcome = run_job("fork_sleeper_and_return", {"marker": marker}, limits=WorkerLimits(timeout_s=20),
                      backend="cpu", scratch=tmp_path, env={"PYTHONPATH": str(REPO)})
    assert outcome.status == "ok", outcome
    assert wait_gone(marker) == []


SYSV = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
key = int(sys.argv[1])
if sys.argv[2] == "make":
    print("made" if libc.shmget(key, 4096, 0o1000 | 0o600) >= 0 else "refused")
else:
    print("found" if libc.shmget(key, 0, 0) >= 0 else "absent")
"""


@pytest.mark.skipif(not probe().ipcns, reason="no IPC namespace here")
def test_system_v_shared_memory_is_no_store_between_sandboxed_processes() -> None:
    # Landlock covers files (/dev/shm), not System V segments: each sandboxed process has its own.
    key = str(0x5E000000 + uuid.uuid4().int % 0xFFFFFF)

    def sandboxed(mode: str) -> str:
        command = [*launch_prefix(WorkerLimits(), probe()), sys.executable, "-c", SYSV, key, mode]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout.strip()

    assert sandboxed("make") == "made"
    assert sandboxed("find") == "absent"  # a later evaluation does not find it
    outside = subprocess.run([sys.executable, "-c", SYSV, key, "make"], capture_output=True, text=True, check=True)
    try:
        assert outside.stdout.strip() == "made"
        assert sandboxed("find") == "absent"  # nor one made outside
    finally:
        subprocess.run(["ipcrm", "-M", key], capture_output=True, check=False)
