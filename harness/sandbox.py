"""The agent's sandbox: a command prefix that runs an agent CLI with a filesystem built from an allow-list.

Mechanism: bubblewrap (`bwrap`, Debian/Ubuntu package `bubblewrap`). It builds a fresh root on a tmpfs and
mounts into it only what is named, so anything not listed (the task suite, the run's store, other
sessions, the real HOME with ~/.claude ~/.codex ~/.cursor, the crucible checkout, the harness's /tmp)
simply does not exist inside. An allow-list fails closed: a new secret folder stays hidden without anyone
remembering to mask it, which a deny-list (tmpfs over known folders) cannot promise.

What the agent sees:

    /usr /etc /bin /sbin /lib*   read-only (the system: shell, node, certificates, DNS config)
    tools_ro                     read-only (the CLI's install folder, node's if outside /usr)
    workspace                    read-write, at its own path (also the working directory)
    home                         read-write: the session's fresh HOME with the config the harness wrote
    /tmp, /                      read-only and empty but for mount points (TMPDIR points into HOME), so a
                                 write anywhere but the workspace and HOME fails
    /proc                        its own (pid namespace: it sees only its processes)
    /dev                         a minimal one (null, zero, random, tty, shm, pts); the host's whole /dev,
                                 GPUs included, only with gpu=True; /sys only with gpu=True (CUDA reads it)
    network                      shared with the host: it must reach the MCP server on 127.0.0.1 and its
                                 model API. Other sessions' MCP endpoints are reachable but need their token.

As root, bubblewrap is told to drop every capability, so the agent cannot remount its way out. The
/etc/shadow and /etc/gshadow files are replaced by /dev/null. `hide` masks folders with an empty tmpfs
when they sit inside a bound folder (a suite installed under /usr or /opt, say).

Not a container engine: no seccomp filter. Resource limits are set where the agent is launched
(harness/agents/process.py, AgentLimits): a pids and memory cgroup per session, a disk watch over the
workspace and HOME, the wall-clock limit, and a kill of the whole process group and cgroup at the end. The
evaluation worker has its own sandbox (toolkit/sandbox.py).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

INSTALL_HINT = ("install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`), "
                "or run without an agent sandbox with --no-sandbox (recorded with the results)")

SYSTEM_RO = ("/usr", "/etc")
"""Read-only system folders every CLI needs (shell, libc, node under /usr, certificates and DNS in /etc)."""
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Merged-/usr systems make these symlinks into /usr; older ones have real folders."""
MASKED_FILES = ("/etc/shadow", "/etc/gshadow")
NO_GPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}


class SandboxUnavailable(Exception):
    """No agent sandbox can be set up here; the message says why and what to do."""


class AgentSandboxCaps(BaseModel):
    """Whether the agent sandbox works on this machine, found by running one."""

    model_config = ConfigDict(frozen=True)

    available: bool
    mechanism: str | None = None
    """`bubblewrap <version>` when available."""
    bwrap: str | None = None
    """Path of the bwrap executable."""
    is_root: bool = False
    reason: str = ""
    """Why it is unavailable (with what to do), or empty."""


def _bind(flag: str, path: Path | str) -> list[str]:
    return [flag, str(path), str(path)]


def _system_args() -> list[str]:
    args: list[str] = []
    for d in SYSTEM_RO:
        if Path(d).is_dir():
            args += _bind("--ro-bind", d)
    for d in SYSTEM_LINKS:
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += _bind("--ro-bind", d)
    # A resolv.conf that links out of /etc (systemd-resolved: /run/systemd/resolve/...) needs its target.
    resolv = Path("/etc/resolv.conf")
    if resolv.is_symlink() and resolv.exists():
        target = resolv.resolve()
        if not target.is_relative_to("/etc") and not target.is_relative_to("/usr"):
            args += _bind("--ro-bind", target.parent)
    for f in MASKED_FILES:
        if Path(f).exists():
            args += ["--ro-bind", "/dev/null", f]
    return args


def _with_targets(paths: Sequence[Path]) -> list[Path]:
    """Each path, and where it resolves to when that differs (a symlinked install folder needs both)."""
    out: list[Path] = []
    for p in paths:
        p = Path(p).absolute()
        for q in (p, p.resolve()):
            if q.exists() and q not in out:
                out.append(q)
    return out


def _bwrap_args(*, workspace: Path, home: Path, tools_ro: Sequence[Path], gpu: bool,
                hide: Sequence[Path], is_root: bool) -> list[str]:
    # Mount order matters: a later mount goes on top of an earlier one. So: the system, fresh /tmp /dev
    # /proc, the tools, masks over hidden folders inside them, then the session's own folders (last, so
    # that a mask over a parent folder cannot cover them).
    args = [*_system_args(), "--tmpfs", "/tmp"]
    if gpu:
        args += _bind("--dev-bind", "/dev") + _bind("--ro-bind", "/sys")
    else:
        args += ["--dev", "/dev"]
    args += ["--proc", "/proc"]
    tools = _with_targets(tools_ro)
    for p in tools:
        args += _bind("--ro-bind", p)
    bound = [*(Path(d) for d in SYSTEM_RO), *tools]
    for h in hide:
        h = Path(h).absolute()
        if h.exists() and any(h.is_relative_to(b) for b in bound):
            args += ["--tmpfs", str(h)]
    for p in (workspace, home):
        args += _bind("--bind", Path(p).absolute())
    # Read-only from here: the root and /tmp hold only mount points (the parents of the workspace and
    # HOME), so a write beside the workspace fails instead of landing in a scratch copy that vanishes.
    args += ["--remount-ro", "/tmp", "--remount-ro", "/"]
    args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    if is_root:
        args += ["--cap-drop", "ALL"]
    if not gpu:
        for k, v in NO_GPU_ENV.items():
            args += ["--setenv", k, v]
    return [*args, "--chdir", str(Path(workspace).absolute())]


@functools.cache
def probe_agent_sandbox() -> AgentSandboxCaps:
    """Try the sandbox once per process: bubblewrap present, and able to start a shell the way we use it."""
    is_root = os.geteuid() == 0
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return AgentSandboxCaps(available=False, is_root=is_root,
                                reason=f"bubblewrap (`bwrap`) is not installed: {INSTALL_HINT}")
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    args = _bwrap_args(workspace=scratch, home=scratch, tools_ro=[], gpu=False, hide=[], is_root=is_root)
    try:
        done = subprocess.run([bwrap, *args, "--", "/bin/sh", "-c", "test -d /proc/self && test ! -e /root/."],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return AgentSandboxCaps(available=False, bwrap=bwrap, is_root=is_root,
                                reason=f"bubblewrap failed to start: {exc}; {INSTALL_HINT}")
    if done.returncode != 0:
        why = done.stderr.strip() or f"exit code {done.returncode}"
        hint = "" if is_root else (" (as a non-root user bubblewrap needs unprivileged user namespaces: "
                                   "sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu an AppArmor "
                                   "profile for bwrap)")
        return AgentSandboxCaps(available=False, bwrap=bwrap, is_root=is_root,
                                reason=f"bubblewrap cannot make a sandbox here: {why}{hint}; {INSTALL_HINT}")
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return AgentSandboxCaps(available=True, mechanism=version or "bubblewrap", bwrap=bwrap, is_root=is_root)


def default_hidden() -> list[Path]:
    """Folders masked even when they lie inside a bound folder: the task suite, the crucible checkout."""
    from crucible.toolkit.task import suite_root

    return [suite_root(), Path(__file__).resolve().parents[1]]


def agent_sandbox_prefix(*, workspace: Path, home: Path, tools_ro: list[Path], gpu: bool,
                         hide: Sequence[Path] | None = None, caps: AgentSandboxCaps | None = None) -> list[str]:
    """The command prefix that runs an agent in its sandbox (see the module docstring for what it sees).

    `tools_ro`: folders the agent's CLI needs read-only (see `cli_tools_ro`). `hide`: folders to mask even
    inside a bound folder (default: the task suite and the crucible checkout). Paths inside keep their
    outside names, so the workspace and HOME paths given to the CLI need no translation.
    Raises SandboxUnavailable with the reason when the sandbox cannot be set up."""
    caps = caps or probe_agent_sandbox()
    if not caps.available or caps.bwrap is None:
        raise SandboxUnavailable(caps.reason)
    for p in (workspace, home):
        if not Path(p).is_dir():
            raise SandboxUnavailable(f"{p} does not exist; create it before building the sandbox prefix")
    args = _bwrap_args(workspace=workspace, home=home, tools_ro=tools_ro, gpu=gpu,
                       hide=default_hidden() if hide is None else hide, is_root=caps.is_root)
    return [caps.bwrap, *args, "--"]


def cli_tools_ro(binary: str | Path) -> list[Path]:
    """What a CLI needs read-only: its npm install folder (the `node_modules` holding it: native binaries
    sit in sibling packages), and node's install prefix when node is not under /usr."""
    out: list[Path] = []
    path = Path(binary).absolute()
    for p in (path, path.resolve()):
        modules = next((a for a in p.parents if a.name == "node_modules"), None)
        out.append(modules if modules is not None else p.parent)
    node = shutil.which("node")
    if node is not None:
        prefix = Path(node).resolve().parent.parent  # <prefix>/bin/node
        if not any(prefix.is_relative_to(s) for s in SYSTEM_RO):
            out.append(prefix)
    return list(dict.fromkeys(out))
