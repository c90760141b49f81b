# expect: verdict:incorrect
# The buffers the judge shares with the runner are a memory file whose descriptor the runner holds. Cut to
# nothing under the judge's own mapping, the judge's next read of it (the outputs, the input check) is a
# SIGBUS in the trusted process, and a judge that dies reads as an infrastructure failure. The file must be
# sealed at its size before the runner gets it; refused, this cheat fails loudly.
import os

import triton
import triton.language as tl

_shrunk = [False]


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
    if _shrunk[0]:
        return
    _shrunk[0] = True
    arenas = [int(fd) for fd in os.listdir("/proc/self/fd")
              if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:crucible-arena")]
    if not arenas:
        raise RuntimeError("no arena descriptor found")
    for fd in arenas:
        os.ftruncate(fd, 0)  # PermissionError once sealed: the cheat fails loudly
