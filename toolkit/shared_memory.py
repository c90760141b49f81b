"""Memory the judge and a runner both see: the one place data crosses the trust boundary.

    judge (trusted)                                   runner (untrusted, sandboxed)
    Arena.create(nbytes, device) ── fd over SCM_RIGHTS ──▶ Arena.attach(fd, nbytes, device)
        tensors = arena.view(layout)                      tensors = arena.view(layout)

On the CPU an arena is a memfd: anonymous, so nothing is left in /dev/shm when both ends are gone. On an
NVIDIA GPU it is device memory made with the CUDA driver's virtual-memory API and exported as a POSIX file
descriptor (cuMemCreate + cuMemExportToShareableHandle): the runner maps exactly that allocation and
nothing else of the judge's memory, and a file descriptor crosses pid and mount namespaces, which the
legacy cudaIpc handles do not promise.

GPU handshakes use stream memory operations on a control page of the arena (cuStreamWriteValue32 /
cuStreamWaitValue32): each side's stream waits on a value the other side writes, so a whole batch of
timed calls is queued ahead by both processes and no host round trip falls inside a timed region.

Only ctypes and torch: both processes import this module.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

CONTROL_BYTES = 4096
"""The first page of a GPU arena: handshake words (uint32 each), never candidate data."""
GO_WORD, DONE_WORD = 0, 64
"""Byte offsets of the judge's `go` sequence number and the runner's `done` sequence number (apart, so
they are separate cache lines)."""


class SharedMemoryError(RuntimeError):
    """The driver or the kernel refused to make or map shared memory."""


# ------------------------------------------------------------------------------ the CUDA driver, by ctypes

class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _DEVICE, _POSIX_FD, _READWRITE = 1, 1, 1, 3
_WAIT_GEQ = 0x0
_driver: ctypes.CDLL | None = None


def _cuda() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise SharedMemoryError(f"the CUDA driver library cannot be loaded: {exc}") from None
    return _driver


def _fn(name: str) -> Any:
    lib = _cuda()
    for symbol in (f"{name}_v2", name):  # CUDA 12 headers map the memops to their _v2 symbols
        if hasattr(lib, symbol):
            return getattr(lib, symbol)
    raise SharedMemoryError(f"the CUDA driver has no {name}")


def _check(code: int, what: str) -> None:
    if code != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(code, ctypes.byref(name))
        raise SharedMemoryError(f"{what} failed with CUDA error {code} ({(name.value or b'?').decode()})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location = _Location(_DEVICE, device)
    return prop


def _granularity(device: int) -> int:
    size = ctypes.c_size_t()
    prop = _prop(device)
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(size), ctypes.byref(prop), 0),
           "cuMemGetAllocationGranularity")
    return size.value


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _map(handle: int, nbytes: int, device: int) -> int:
    """Reserve an address range, map the allocation there, and let this process's device read and write."""
    cu = _cuda()
    ptr = ctypes.c_uint64()
    _check(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                                  ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
    _check(cu.cuMemMap(ptr, ctypes.c_size_t(nbytes), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                       ctypes.c_uint64(0)), "cuMemMap")
    access = _AccessDesc(_Location(_DEVICE, device), _READWRITE)
    _check(cu.cuMemSetAccess(ptr, ctypes.c_size_t(nbytes), ctypes.byref(access), ctypes.c_size_t(1)),
           "cuMemSetAccess")
    return ptr.value


class _CudaArray:
    """What torch.as_tensor needs to wrap a raw device pointer without copying."""

    def __init__(self, ptr: int, nbytes: int, owner: Arena) -> None:
        self.owner = owner  # the tensor keeps this object, and so the mapping, alive
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2, "strides": None}


# ------------------------------------------------------------------------------------------- arenas

@dataclass
class Arena:
    """One shared allocation. `fd` is what crosses to the other process (owned by this object)."""

    nbytes: int
    device: torch.device
    fd: int
    _bytes: torch.Tensor
    _release: list[Any]

    @classmethod
    def create(cls, nbytes: int, device: torch.device) -> Arena:
        """Judge side: a new arena of at least `nbytes` (GPU arenas start with the control page)."""
        if device.type == "cuda":
            return cls._create_cuda(nbytes + CONTROL_BYTES, device)
        fd = os.memfd_create("crucible-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        size = max(nbytes, 1)
        os.ftruncate(fd, size)
        # Sealed at its size before the runner gets the fd: a runner that shrank it would turn the judge's
        # next read of the arena into a SIGBUS in the trusted process.
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        return cls._map_cpu(fd, size, device)

    @classmethod
    def attach(cls, fd: int, nbytes: int, device: torch.device) -> Arena:
        """Runner side: map the arena whose fd the judge sent."""
        if device.type == "cuda":
            cu = _cuda()
            handle = ctypes.c_uint64()
            _check(cu.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
                   "cuMemImportFromShareableHandle")
            ptr = _map(handle.value, nbytes, device.index or 0)
            return cls._wrap_cuda(ptr, handle.value, nbytes, device, fd)
        return cls._map_cpu(fd, nbytes, device)

    @classmethod
    def _map_cpu(cls, fd: int, nbytes: int, device: torch.device) -> Arena:
        mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        data = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes)
        return cls(nbytes=nbytes, device=device, fd=fd, _bytes=data, _release=[mm])

    @classmethod
    def _create_cuda(cls, nbytes: int, device: torch.device) -> Arena:
        torch.cuda.init()
        torch.empty(1, device=device)  # make the primary context current on this thread
        index = device.index or 0
        nbytes = _round_up(nbytes, _granularity(index))
        cu = _cuda()
        handle = ctypes.c_uint64()
        prop = _prop(index)
        _check(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(nbytes), ctypes.byref(prop),
                              ctypes.c_uint64(0)), "cuMemCreate")
        fd = ctypes.c_int(-1)
        _check(cu.cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_uint64(handle.value), _POSIX_FD,
                                               ctypes.c_uint64(0)), "cuMemExportToShareableHandle")
        ptr = _map(handle.value, nbytes, index)
        arena = cls._wrap_cuda(ptr, handle.value, nbytes, device, fd.value)
        arena._bytes[:CONTROL_BYTES].zero_()  # fresh device memory holds anything; the handshake starts at 0
        torch.cuda.synchronize(device)
        return arena

    @classmethod
    def _wrap_cuda(cls, ptr: int, handle: int, nbytes: int, device: torch.device, fd: int) -> Arena:
        arena = cls(nbytes=nbytes, device=device, fd=fd, _bytes=torch.empty(0), _release=[(ptr, handle)])
        with torch.cuda.device(device):
            arena._bytes = torch.as_tensor(_CudaArray(ptr, nbytes, arena), device=device)
        return arena

    @property
    def data_bytes(self) -> torch.Tensor:
        """The bytes candidates' tensors live in (after the control page on a GPU)."""
        return self._bytes[CONTROL_BYTES:] if self.device.type == "cuda" else self._bytes

    def tensor(self, offset: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous tensor at `offset` bytes into the data region."""
        n = 1
        for d in shape:
            n *= d
        size = n * torch.empty((), dtype=dtype).element_size()
        raw = self.data_bytes[offset:offset + size]
        if raw.numel() != size:
            raise SharedMemoryError(f"a {dtype} tensor of shape {shape} at byte {offset} does not fit the "
                                    f"arena's {self.data_bytes.numel()} bytes")
        return raw.view(dtype).view(shape) if size else torch.empty(shape, dtype=dtype, device=self.device)

    def word_address(self, offset: int) -> int:
        """Device address of a control word (GPU arenas)."""
        return int(self._bytes.data_ptr()) + offset

    def close(self) -> None:
        """Unmap and release; the fd is closed too (the other side holds its own copy)."""
        self._bytes = torch.empty(0)
        for item in self._release:
            if isinstance(item, mmap.mmap):
                with contextlib.suppress(BufferError):  # a view still alive: the mapping goes with the process
                    item.close()
            else:
                ptr, handle = item
                cu = _cuda()
                if not drained(self.device, DRAIN_S):  # still in use, or a stream a dead runner left waiting:
                    continue                            # the mapping goes with the process
                cu.cuMemUnmap(ctypes.c_uint64(ptr), ctypes.c_size_t(self.nbytes))
                cu.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(self.nbytes))
                cu.cuMemRelease(ctypes.c_uint64(handle))
        self._release = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ------------------------------------------------------------------------------------------- handshakes

DRAIN_S = 5.0
"""How long closing an arena waits for the device's work on it before it leaves the mapping to the process."""


def reached(event: torch.cuda.Event, seconds: float) -> bool:
    """Whether a stream reaches `event` within `seconds`, polled: a blocking wait on a stream a runner's
    word holds would hang for as long as the runner likes."""
    end = time.monotonic() + seconds
    while not event.query():
        if time.monotonic() > end:
            return False
        time.sleep(1e-4)
    return True


def drained(device: torch.device, seconds: float) -> bool:
    """Whether the current stream's work is done within `seconds` (see reached)."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return reached(event, seconds)


def write_value(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Queue on `stream`: store `value` at `address` once the work before it is done."""
    _check(_fn("cuStreamWriteValue32")(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(address),
                                       ctypes.c_uint32(value), ctypes.c_uint(0)), "cuStreamWriteValue32")


def wait_value(stream: torch.cuda.Stream, address: int, value: int) -> None:
    """Queue on `stream`: wait until the word at `address` is >= `value` (the other process writes it)."""
    _check(_fn("cuStreamWaitValue32")(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(address),
                                      ctypes.c_uint32(value), ctypes.c_uint(_WAIT_GEQ)), "cuStreamWaitValue32")


def reset_persisting_l2(device: torch.device) -> None:
    """Return every persisting L2 line to normal (data pinned through an access-policy window would
    otherwise survive the judge's flush); a no-op off NVIDIA GPUs."""
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    fn = getattr(_cuda(), "cuCtxResetPersistingL2Cache", None)
    if fn is not None:
        fn()
