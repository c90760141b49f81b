"""Triton's builds kept by content between runners: the same kernel source compiles once.

    engine                  KernelCache(store=<cache>/triton-jit/<key>, keep)   key: the kernel's content and
                                                                               the toolchain's versions
    judge, at hello         seed(store, runner scratch/triton)    a copy: the runner never sees the store
    runner                  Triton reads its cache, compiles what is missing into it (its only writable place)
    judge, after the end    harvest(scratch/triton, store)        only if keep, only once the runner is dead

A runner can write anything into its cache, so what comes back is treated as hostile: only plain files
(no symlink, no hard link, no device) in entry folders with plain names, a bounded number and size, read
through file descriptors opened without following links, so a planted link cannot make the judge copy a
file of its own (the task folder, a key) into the store. An entry already in the store is never replaced.
A store is only ever seeded into runners of the same kernel content, so a candidate's builds reach no other
kernel (never a baseline); and the engine asks to keep a candidate's builds only when its runner saw
nothing the agent may not see (a runner of hidden configs could hide them in its cache for a later one).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import uuid
from pathlib import Path

ENTRY_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""Triton names an entry by a hash (base32 or hex)."""
FILE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,160}$")
MAX_FILES = 512
MAX_FILE_BYTES = 64 << 20
MAX_TOTAL_BYTES = 256 << 20
"""What one harvest takes at most; the rest is left out (the next runner compiles it again)."""


def seed(store: Path, cache: Path) -> int:
    """Copy the store's entries into a runner's empty private cache; returns how many entries."""
    if not store.is_dir():
        return 0
    count = 0
    for entry in sorted(store.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir() or (cache / entry.name).exists():
            continue
        tmp = cache / f".seed-{entry.name}"
        shutil.copytree(entry, tmp, symlinks=True)
        try:
            tmp.rename(cache / entry.name)
            count += 1
        except OSError:  # the runner's own start-up wrote the same entry meanwhile (Triton's driver helpers)
            shutil.rmtree(tmp, ignore_errors=True)
    return count


def _open_dir(name: str, parent: int) -> int | None:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=None if parent < 0 else parent)
    except OSError:
        return None


def _read_entry(parent: int, name: str, budget: list[int]) -> dict[str, bytes] | None:
    """An entry folder's files, or None if anything in it is not a plain, small, singly linked file."""
    fd = _open_dir(name, parent)
    if fd is None:
        return None
    files: dict[str, bytes] = {}
    try:
        for child in os.listdir(fd):
            if not FILE_NAME.match(child) or child.startswith("."):
                return None
            try:
                f = os.open(child, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError:
                return None
            try:
                st = os.fstat(f)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_FILE_BYTES:
                    return None
                budget[0] -= 1
                budget[1] -= st.st_size
                if budget[0] < 0 or budget[1] < 0:
                    return None
                with os.fdopen(f, "rb", closefd=False) as stream:
                    data = stream.read(MAX_FILE_BYTES + 1)
            finally:
                os.close(f)
            if len(data) > MAX_FILE_BYTES:
                return None
            files[child] = data
    finally:
        os.close(fd)
    return files or None


def harvest(cache: Path, store: Path) -> int:
    """Move a finished runner's new builds from its private cache into the store (see the module's
    docstring for what is refused). Call it only once every process of the runner is dead. Returns how
    many entries were added."""
    # The runner may write its scratch, not the folder above it (the judge's): open the cache from there,
    # so a cache folder swapped for a link is not followed.
    parent = _open_dir(str(cache.parent), -1)
    if parent is None:
        return 0
    root = _open_dir(cache.name, parent)
    os.close(parent)
    if root is None:
        return 0
    added = 0
    budget = [MAX_FILES, MAX_TOTAL_BYTES]
    try:
        for name in sorted(os.listdir(root)):
            if not ENTRY_NAME.match(name) or (store / name).exists():
                continue
            files = _read_entry(root, name, budget)
            if files is None:
                continue
            store.mkdir(parents=True, exist_ok=True)
            tmp = store / f".{name}.{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            for file, data in files.items():
                (tmp / file).write_bytes(data)
            try:
                tmp.rename(store / name)  # a concurrent harvest of the same entry: the first one stays
                added += 1
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os.close(root)
    return added
