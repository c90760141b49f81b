"""Isolation for evaluation workers: probe what this machine gives, build the launch command.

The worker's process tree, outermost first (each layer only where `probe()` found it works):

    sh -c 'echo 0 > <cgroup>/cgroup.procs ...; exec "$@"'   join a per-run memory/pids cgroup
      unshare [-r] -i -n -p -f -m --mount-proc --kill-child   own IPC, network, pid and mount namespaces
        setpriv --bounding-set=-all --no-new-privs            as root: drop every capability
          python -m crucible.toolkit.worker_main               supervisor (pid 1, or a child subreaper):
            worker: rlimits, Landlock, then the job            reaps, kills leftovers, reports the status

Everything here is stdlib only (plus pydantic for SandboxCaps). Landlock and rlimits, which a process applies
to itself, live in sandbox_exec.py (stdlib only, with a launcher that applies them to a command) and are
re-exported here.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import os
import shlex
import shutil
import signal
import site
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

# What a process applies to itself (Landlock, rlimits) lives in sandbox_exec, stdlib only; re-exported here.
from .sandbox_exec import apply_rlimits as apply_rlimits
from .sandbox_exec import landlock_abi
from .sandbox_exec import restrict_filesystem as restrict_filesystem

if TYPE_CHECKING:
    from .worker import WorkerLimits


class SandboxCaps(BaseModel):
    """What isolation this machine lets us apply (found by trying each mechanism once)."""

    model_config = ConfigDict(frozen=True)

    is_root: bool
    """Root needs capabilities dropped; a non-root user needs a user namespace (`unshare -r`)."""
    unshare: str | None
    """Path of util-linux `unshare`, if found."""
    netns: bool
    """A network namespace (no interfaces but a down loopback) can be created."""
    pidns: bool
    """A pid namespace with a mount namespace and a private /proc can be created."""
    ipcns: bool = False
    """An IPC namespace can be created: System V shared memory, semaphores and message queues (which no
    filesystem rule covers) are then the process's own, not a store between evaluations or sessions."""
    setpriv: str | None
    """Path of `setpriv`, if found and able to drop capabilities (root only)."""
    landlock_abi: int
    """Landlock ABI version of the kernel; 0 when unavailable."""
    cgroup_version: Literal[1, 2] | None
    """Which cgroup hierarchy per-run cgroups are made in; None when we cannot make them."""
    cgroup_memory: str | None
    """Parent directory for per-run memory cgroups."""
    cgroup_pids: str | None
    """Parent directory for per-run pids cgroups."""
    cgroup_cpu: str | None = None
    """Parent directory for per-run CPU accounting (v1 cpuacct; v2 the unified group's cpu.stat): CPU time
    that stays counted when the process that spent it has exited."""
    cgroup_freezer: str | None = None
    """Parent directory for per-run freezers (v1 freezer; v2 the unified group's cgroup.freeze): every
    process of a run stopped at once, those it forks while being stopped too (signals miss those)."""


def _runs(cmd: list[str]) -> bool:
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def namespace_flags(caps: SandboxCaps, *, network: bool) -> list[str]:
    """unshare flags for the namespaces `caps` allows (empty: run without unshare)."""
    ns = ["-i"] if caps.ipcns else []
    ns += ["-n"] if not network and caps.netns else []
    if caps.pidns:
        ns += ["-p", "-f", "-m", "--mount-proc", "--kill-child"]
    if not ns:
        return []
    return ns if caps.is_root else ["-r", *ns]  # as non-root, namespaces need a user namespace


SETPRIV_FLAGS = ["--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]


@functools.cache
def probe() -> SandboxCaps:
    """Find out, once per process, which isolation mechanisms work here."""
    is_root = os.geteuid() == 0
    unshare = shutil.which("unshare")
    user = [] if is_root else ["-r"]
    netns = bool(unshare) and _runs([unshare, *user, "-n", "true"])
    pidns = bool(unshare) and _runs([unshare, *user, "-p", "-f", "-m", "--mount-proc", "--kill-child", "true"])
    ipcns = bool(unshare) and _runs([unshare, *user, "-i", "true"])
    setpriv = shutil.which("setpriv") if is_root else None
    if setpriv and not _runs([setpriv, *SETPRIV_FLAGS, "true"]):
        setpriv = None
    version, memory, pids, cpu, freezer = _probe_cgroups()
    return SandboxCaps(is_root=is_root, unshare=unshare, netns=netns, pidns=pidns, ipcns=ipcns, setpriv=setpriv,
                       landlock_abi=landlock_abi(), cgroup_version=version, cgroup_memory=memory,
                       cgroup_pids=pids, cgroup_cpu=cpu, cgroup_freezer=freezer)


# ---------------------------------------------------------------------------------------------- cgroups

def _own_cgroup_paths() -> dict[str, str]:
    """controller name ("" for the v2 unified hierarchy) -> our cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _try_make_child(parent: Path, limit_file: str) -> bool:
    """Whether we can create a cgroup under `parent` that has `limit_file`, and remove it again."""
    probe_dir = parent / f"crucible-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe_dir.mkdir()
    except OSError:
        return False
    try:
        return (probe_dir / limit_file).exists() and os.access(probe_dir / "cgroup.procs", os.W_OK)
    finally:
        with contextlib.suppress(OSError):
            probe_dir.rmdir()


def _candidate_parents(mount: Path, own: str | None) -> list[Path]:
    # Inside a container the mount often shows our own cgroup as its root, so try both.
    out = [mount / own.lstrip("/")] if own and own != "/" else []
    return [*out, mount]


def _probe_cgroups() -> tuple[Literal[1, 2] | None, str | None, str | None, str | None, str | None]:
    """(version, memory parent, pids parent, CPU accounting parent, freezer parent)."""
    own = _own_cgroup_paths()
    root = Path("/sys/fs/cgroup")

    def v1_parent(controller: str, mounts: tuple[str, ...], limit_file: str) -> str | None:
        for mount in mounts:
            for parent in _candidate_parents(root / mount, own.get(controller)):
                if parent.is_dir() and _try_make_child(parent, limit_file):
                    return str(parent)
        return None

    v1_memory = v1_parent("memory", ("memory",), "memory.limit_in_bytes")
    v1_pids = v1_parent("pids", ("pids",), "pids.max")
    if v1_memory or v1_pids:
        return (1, v1_memory, v1_pids, v1_parent("cpuacct", ("cpuacct", "cpu,cpuacct"), "cpuacct.usage"),
                v1_parent("freezer", ("freezer",), "freezer.state"))
    if (root / "cgroup.controllers").exists():
        for parent in _candidate_parents(root, own.get("")):
            memory = parent.is_dir() and _try_make_child(parent, "memory.max")
            pids = parent.is_dir() and _try_make_child(parent, "pids.max")
            cpu = parent.is_dir() and _try_make_child(parent, "cpu.stat")  # core stats: no controller needed
            freezer = parent.is_dir() and _try_make_child(parent, "cgroup.freeze")
            if memory or pids:
                return (2, str(parent) if memory else None, str(parent) if pids else None,
                        str(parent) if cpu else None, str(parent) if freezer else None)
    return None, None, None, None, None


class RunCgroup:
    """The per-run cgroup(s) of one worker: limits, OOM detection, kill-all, removal."""

    def __init__(self, caps: SandboxCaps, name: str) -> None:
        self.version = caps.cgroup_version
        self.memory_dir = Path(caps.cgroup_memory) / name if caps.cgroup_memory else None
        self.pids_dir = Path(caps.cgroup_pids) / name if caps.cgroup_pids else None
        self.cpu_dir = Path(caps.cgroup_cpu) / name if caps.cgroup_cpu else None
        self.freezer_dir = Path(caps.cgroup_freezer) / name if caps.cgroup_freezer else None

    @property
    def dirs(self) -> list[Path]:
        return list(dict.fromkeys(d for d in (self.memory_dir, self.pids_dir, self.cpu_dir, self.freezer_dir) if d))

    @classmethod
    def create(cls, caps: SandboxCaps, *, memory_mb: int | None, max_processes: int | None,
               cpu_accounting: bool = False, freezer: bool = False) -> RunCgroup | None:
        """Make the cgroup(s) with the asked limits (and CPU accounting, and a freezer, when asked); None
        when cgroups are unavailable or nothing was asked for."""
        if caps.cgroup_version is None:
            return None
        group = cls(caps, f"crucible-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        if memory_mb is None:
            group.memory_dir = None
        if max_processes is None:
            group.pids_dir = None
        if not cpu_accounting:
            group.cpu_dir = None
        if not freezer:
            group.freezer_dir = None
        if not group.dirs:
            return None
        try:
            for d in group.dirs:
                d.mkdir(exist_ok=True)
            group.set_limits(memory_mb=memory_mb, max_processes=max_processes)
        except OSError:
            group.remove()
            return None
        return group

    def set_limits(self, *, memory_mb: int | None, max_processes: int | None) -> None:
        """Write the limits (also later: a runner started ahead of its job gets the job's). Raises OSError."""
        if self.memory_dir and memory_mb is not None:
            limit = str(memory_mb << 20)
            if self.version == 1:
                (self.memory_dir / "memory.limit_in_bytes").write_text(limit)
                if (self.memory_dir / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                    (self.memory_dir / "memory.memsw.limit_in_bytes").write_text(limit)
            else:
                (self.memory_dir / "memory.max").write_text(limit)
                if (self.memory_dir / "memory.swap.max").exists():
                    (self.memory_dir / "memory.swap.max").write_text("0")
        if self.pids_dir and max_processes is not None:
            (self.pids_dir / "pids.max").write_text(str(max_processes))

    def join_prefix(self) -> list[str]:
        """A command prefix that moves the process into the cgroup(s), then execs the rest."""
        joins = "; ".join(f"echo 0 > {shlex.quote(str(d / 'cgroup.procs'))} || exit 125" for d in self.dirs)
        return ["/bin/sh", "-c", f'{joins}; exec "$@"', "sh"]

    def cpu_seconds(self) -> float | None:
        """CPU time every process that was ever in the cgroup has spent, the exited ones included; None
        without CPU accounting."""
        if self.cpu_dir is None:
            return None
        try:
            if self.version == 1:
                return int((self.cpu_dir / "cpuacct.usage").read_text()) / 1e9
            for line in (self.cpu_dir / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def freeze(self, frozen: bool, wait_s: float = 1.0) -> bool:
        """Stop (or let go) every process of the run at once, those it forks meanwhile too; True once the
        kernel says all are stopped (or all let go). False without a freezer, or when it would not settle."""
        if self.freezer_dir is None:
            return False
        v1 = self.version == 1
        try:
            (self.freezer_dir / ("freezer.state" if v1 else "cgroup.freeze")).write_text(
                ("FROZEN" if frozen else "THAWED") if v1 else ("1" if frozen else "0"))
        except OSError:
            return False
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(OSError):
                if v1:
                    state = (self.freezer_dir / "freezer.state").read_text().strip()
                    if state == ("FROZEN" if frozen else "THAWED"):
                        return True
                elif f"frozen {int(frozen)}" in (self.freezer_dir / "cgroup.events").read_text().splitlines():
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)

    def pids(self) -> list[int]:
        """Every process in the cgroup(s) now."""
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return sorted(found)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this cgroup for exceeding its memory limit."""
        if not self.memory_dir:
            return False
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            text = (self.memory_dir / name).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def kill_all(self) -> None:
        """SIGKILL every process left in the cgroup (those that escaped the process group too)."""
        self.freeze(False, wait_s=0)  # a v1 freezer holds a SIGKILL back until its processes are let go
        for d in self.dirs:
            if (d / "cgroup.kill").exists():
                try:
                    (d / "cgroup.kill").write_text("1")
                    continue
                except OSError:
                    pass
            for _ in range(10):  # a process may fork while we kill; go round until empty
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the cgroup(s); the killed processes may take a moment to leave."""
        deadline = time.monotonic() + wait_s
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


# ---------------------------------------------------------------------------------------------- launch

def launch_prefix(limits: WorkerLimits, caps: SandboxCaps, cgroup: RunCgroup | None = None) -> list[str]:
    """The command prefix that puts the worker into its cgroup, namespaces and capability set."""
    prefix: list[str] = cgroup.join_prefix() if cgroup else []
    flags = namespace_flags(caps, network=limits.network)
    if flags and caps.unshare:
        prefix += [caps.unshare, *flags, "--"]
    if caps.is_root and caps.setpriv:
        prefix += [caps.setpriv, *SETPRIV_FLAGS, "--"]
    return prefix


def describe(limits: WorkerLimits, caps: SandboxCaps, cgroup: RunCgroup | None) -> dict[str, str]:
    """What the launch prefix applies, for WorkerOutcome.isolation (the worker adds rlimits and Landlock)."""
    flags = namespace_flags(caps, network=limits.network)
    out = {"process_group": "yes (own session; the whole group is SIGKILLed on timeout or cancel)"}
    if limits.network:
        out["network"] = "allowed (asked for)"
    elif "-n" in flags:
        out["network"] = "netns (unshare -n)" if caps.is_root else "netns (unshare -rn, user namespace)"
    else:
        out["network"] = "NOT isolated: no network namespace available"
    out["ipc_namespace"] = ("yes (own System V shared memory, semaphores, message queues)" if "-i" in flags
                            else "NOT isolated: System V IPC is shared with the host")
    out["pid_namespace"] = ("yes (own /proc; every process dies with the worker's init)" if "-p" in flags
                            else "no (leftovers are killed by process group, subreaper" + (" and cgroup)" if cgroup else ")"))
    if caps.is_root:
        out["capabilities"] = ("dropped (setpriv --bounding-set=-all --no-new-privs)" if caps.setpriv
                               else "NOT dropped: runs as root with all capabilities (no setpriv)")
    else:
        out["capabilities"] = "unprivileged user"
    if cgroup and cgroup.pids_dir:
        out["pids"] = f"cgroup v{cgroup.version} pids.max {limits.max_processes}"
    if cgroup and cgroup.memory_dir:
        out["memory"] = f"cgroup v{cgroup.version} {limits.memory_mb} MiB"
    return out


SYSTEM_READABLE = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys")
"""The system a runner reads: shared libraries, compilers and ptxas's needs, config, and what the CUDA driver
and torch read from /proc and /sys; and /dev but for DEV_UNREADABLE. Only the devices in GPU_DEVICES and
PLAIN_DEVICES are writable."""
DEV_UNREADABLE = ("shm", "mqueue")
"""Other processes' shared memory and message queues (a Ray object store, NCCL's buffers, another
session's files): nothing a runner needs, and a store it must not read."""


def _dev_readable() -> list[str]:
    """/dev's folders and character devices, but for DEV_UNREADABLE; its links (fd, stdin, ...) point into
    /proc. Never a block device, nor a folder holding one: a runner runs as root, and a disk's node is
    readable by its owner whatever capabilities are dropped (a filesystem reader then finds every file on
    it, the task's hidden configs and solutions too)."""
    out = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir("/dev"), key=lambda e: e.name):
            if entry.name in DEV_UNREADABLE or entry.is_symlink():
                continue
            mode = entry.stat(follow_symlinks=False).st_mode
            if (stat.S_ISDIR(mode) and not _holds_block_device(entry.path)) or stat.S_ISCHR(mode) \
                    or stat.S_ISREG(mode):
                out.append(entry.path)
    return out


def _holds_block_device(folder: str) -> bool:
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                if stat.S_ISBLK(os.lstat(os.path.join(root, name)).st_mode):
                    return True
    return False


def _package_dirs(name: str) -> list[str]:
    """Where a top-level package lives, found without importing it (torch takes seconds to import)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or ([os.path.dirname(spec.origin)] if spec.origin else []))


def _libcuda_dirs() -> list[str]:
    """Folders holding the CUDA driver library: as loaded here, or where the loader would find it."""
    dirs = []
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        dirs += [os.path.dirname(line.split(None, 5)[-1].strip()) for line in maps if "/libcuda.so" in line]
    candidates = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    if os.environ.get("TRITON_LIBCUDA_PATH"):
        candidates.append(os.environ["TRITON_LIBCUDA_PATH"])
    for conf in glob.glob("/etc/ld.so.conf.d/*.conf"):
        with contextlib.suppress(OSError), open(conf) as f:
            candidates += [line.strip() for line in f if line.startswith("/")]
    dirs += [d for d in candidates if d and glob.glob(os.path.join(d, "libcuda.so*"))]
    return dirs


def _compiler_prefixes() -> list[str]:
    """Install trees of the C compiler and binutils on PATH: Triton builds its launcher module with $CC (else
    gcc, else clang) at run time, e.g. /opt/gcc on the GPU machine. A tool in HOME's bin is not followed."""
    names = [os.environ.get("CC", ""), "gcc", "clang", "cc", "as", "ld"]
    home = os.path.realpath(os.path.expanduser("~"))
    out = []
    for found in filter(None, (shutil.which(n) for n in names if n)):
        binary = os.path.realpath(found)
        folder = os.path.dirname(binary)
        prefix = os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder
        if prefix not in ("/", home):
            out += [os.path.dirname(found), prefix]
    return out


def exposing(secret: str, readable: list[str]) -> str | None:
    """The entry of a read allow-list that holds `secret` (a task folder: hidden configs, solutions), if
    one does. Landlock grants whole trees and cannot take a subtree back, so a suite installed under one
    (a clone in /usr/local, CRUCIBLE_TASKS under /opt) must be refused, not worked around."""
    target = os.path.realpath(secret)
    for path in readable:
        real = os.path.realpath(path)
        if target == real or target.startswith(real.rstrip("/") + "/"):
            return path
    return None


def runner_readable(extra: list[str]) -> list[str]:
    """The read allow-list for a process that runs only candidate code (Python, torch, Triton with its
    interpreter, bundled ptxas and the C compiler it builds launchers with, a shared library built
    elsewhere, the CUDA driver), plus `extra` (the snapshot and build folders).

    Not readable: the task suite, the repo's root, stores, other workspaces, /tmp, HOME. Each entry comes
    with its symlink target, since Landlock binds the resolved inode; missing paths are left out.
    """
    toolkit = os.path.dirname(os.path.realpath(__file__))  # this package only, not the repo around it
    python = [sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix]
    sites = [p for p in [*sys.path, *site.getsitepackages()]
             if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    packages = [d for name in ("torch", "triton", "nvidia") for d in _package_dirs(name)]
    system = [*SYSTEM_READABLE, *_dev_readable(), *glob.glob("/usr/local/cuda*"), *glob.glob("/run/nvidia*")]
    out: list[str] = []
    for path in [*python, *sites, toolkit, *packages, *_libcuda_dirs(), *_compiler_prefixes(), *system, *extra]:
        out += [os.path.abspath(path), os.path.realpath(path)]
    return [p for p in dict.fromkeys(out) if os.path.exists(p)]
