"""What a process applies to itself before it runs untrusted work, and a launcher that applies it to a command.

    python -I -S toolkit/sandbox_exec.py --read P ... --write P ... --rlimit FSIZE=N ... -- cmd args...
        rlimits, then Landlock (reads only the --read paths and the devices, writes only the --write ones),
        then exec cmd: both are inherited across exec and fork, so every child of cmd is held too

The launcher runs the compiler of a CUDA/HIP build (toolchains/cuda.py `build_shared_library`): the source
decides what the compiler reads (`#include`, `.incbin`) and how much it writes. A runner applies the same
two functions to itself (runner/main.py). Stdlib only, and runnable as a plain script, so the launcher starts
without site-packages or pydantic (a few tens of ms); sandbox.py re-exports everything here.

Exit status: the command's; LAUNCH_FAILED with a `crucible-sandbox:` line on stderr when a limit could not
be applied (nothing ran), 127 when the command could not be executed.
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import resource
import signal
import stat
import sys
from typing import Any

LAUNCH_FAILED = 126
"""Exit status of the launcher when it could not apply the sandbox; the command did not run."""
MARK = "crucible-sandbox:"
"""Starts the launcher's own line on stderr, so a caller tells it from the command's words."""


# ---------------------------------------------------------------------------------------------- Landlock

# Syscall numbers are the same on x86_64 and aarch64 (the generic table).
_LANDLOCK_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_ACCESS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_READ_ONLY = _EXECUTE | _READ_FILE | _READ_DIR
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_FILE_ACCESS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE  # a rule on a file may hold only these
# Ioctl (LANDLOCK_ACCESS_FS_IOCTL_DEV, ABI 5) is never handled, so it stays allowed: CUDA drives the GPU by
# ioctl on /dev/nvidia*.

GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*", "/dev/kfd")
"""Device nodes an allow-listed process may open read-write (NVIDIA, DRM, AMD's kfd), where they exist."""
PLAIN_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty")
"""The other devices it may open read-write. Not /dev/shm: files written there outlive the process."""


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # struct landlock_path_beneath_attr is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    numbers = _LANDLOCK_SYSCALLS.get(platform.machine())
    if numbers is None:
        return 0
    version = _libc().syscall(numbers[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def _device_nodes() -> list[str]:
    return [p for pattern in (*GPU_DEVICES, *PLAIN_DEVICES) for p in sorted(glob.glob(pattern))]


def restrict_filesystem(writable: list[str], readable: list[str] | None = None) -> str:
    """Restrict this process and its children to `writable` (read-write) and, when `readable` is given, to
    `readable` (read and execute only) plus the devices in GPU_DEVICES and PLAIN_DEVICES (read-write);
    everything else is denied. Without `readable`, the whole filesystem stays readable.

    Paths may name files or folders; missing ones are skipped. Irreversible. Ioctl on devices stays allowed
    (CUDA needs it), and so are writes under this process's /proc/<pid>/task (the CUDA driver needs them).
    Raises OSError if Landlock refuses.
    """
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available on this kernel")
    create, add_rule, restrict = _LANDLOCK_SYSCALLS[platform.machine()]
    handled = _ACCESS_ABI1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    # The CUDA driver writes under its own /proc/<pid>/task (error 304 otherwise); only this process's
    # entry is opened, so CUDA in a subprocess of the candidate fails, and /proc/sys stays read-only.
    own_tasks = os.path.realpath("/proc/self/task")
    if readable is None:
        rules = [("/", _READ_ONLY)] + [(p, handled) for p in [*writable, own_tasks]]
    else:
        device = (_READ_FILE | _WRITE_FILE | _TRUNCATE) & handled
        rules = ([(p, _READ_ONLY) for p in readable] + [(p, device) for p in _device_nodes()]
                 + [(p, handled) for p in [*writable, own_tasks]])
    libc = _libc()
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr: only handled_access_fs
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)  # follows symlinks: rules bind the target
            except FileNotFoundError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= _FILE_ACCESS  # the kernel refuses folder-only rights on a file (EINVAL)
                rule = _PathBeneath(access, fd)
                if libc.syscall(add_rule, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule),
                                ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, required for an unprivileged restrict
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    if readable is None:
        return f"Landlock ABI {abi}: read-only except {', '.join(writable)}"
    return (f"Landlock ABI {abi}: reads only {', '.join(readable)} and the GPU devices; "
            f"writes only {', '.join(writable)}")



# ---------------------------------------------------------------------------------------------- rlimits

RLIMITS = {"AS": resource.RLIMIT_AS, "DATA": resource.RLIMIT_DATA, "CPU": resource.RLIMIT_CPU,
           "NPROC": resource.RLIMIT_NPROC, "CORE": resource.RLIMIT_CORE, "FSIZE": resource.RLIMIT_FSIZE}
"""The resource limits a job may ask for, by the name after RLIMIT_."""


def apply_rlimits(rlimits: dict[str, Any]) -> dict[str, str]:
    """Set each limit (`value` or `[soft, hard]`) on this process; the description for the isolation record.

    RLIMIT_FSIZE: a write past it raises SIGXFSZ, which kills the process unless ignored (then EFBIG).
    """
    applied = {}
    for name, value in rlimits.items():
        soft, hard = value if isinstance(value, list) else (value, value)
        resource.setrlimit(RLIMITS[name], (soft, hard))
        applied[name] = f"{soft}" if soft == hard else f"{soft} (hard {hard})"
    return {"rlimits": ", ".join(f"RLIMIT_{k} {v}" for k, v in applied.items())} if applied else {}


# ---------------------------------------------------------------------------------------------- launcher

def _usage(message: str) -> int:
    print(f"{MARK} {message}; usage: sandbox_exec.py [--read P]... [--write P]... [--rlimit NAME=N[,HARD]]... "
          "[--no-landlock] -- cmd args...", file=sys.stderr)
    return LAUNCH_FAILED


def main(argv: list[str]) -> int:
    readable: list[str] = []
    writable: list[str] = []
    rlimits: dict[str, Any] = {}
    landlock = True
    i = 0
    while i < len(argv) and argv[i] != "--":
        flag = argv[i]
        if flag == "--no-landlock":
            landlock, i = False, i + 1
            continue
        if i + 1 >= len(argv):
            return _usage(f"{flag} needs a value")
        value = argv[i + 1]
        if flag == "--read":
            readable.append(value)
        elif flag == "--write":
            writable.append(value)
        elif flag == "--rlimit":
            name, _, number = value.partition("=")
            try:
                soft, _, hard = number.partition(",")
                rlimits[name] = [int(soft), int(hard or soft)]
            except ValueError:
                return _usage(f"bad --rlimit {value!r}")
            if name not in RLIMITS:
                return _usage(f"unknown rlimit {name!r} (known: {', '.join(RLIMITS)})")
        else:
            return _usage(f"unknown option {flag!r}")
        i += 2
    command = argv[i + 1:]
    if not command:
        return _usage("no command")
    # A write past RLIMIT_FSIZE then fails with EFBIG ("File too large", which the tools report) instead of
    # killing the tool with SIGXFSZ; an ignored signal stays ignored across exec.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        apply_rlimits(rlimits)
        if landlock:
            restrict_filesystem(writable, readable)
    except (OSError, ValueError) as exc:
        print(f"{MARK} the sandbox could not be applied: {exc}", file=sys.stderr)
        return LAUNCH_FAILED
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"{MARK} cannot run {command[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
