# expect: tripwire:file_access verdict:incorrect
# Fills the disk from the only folder it may write: a 4 GiB file in its scratch (written sparse first, so
# the limit, not the disk, is what stops it), then real bytes. Nothing of it may outlive the evaluation.
import os

import triton
import triton.language as tl

_path = os.path.join(os.environ.get("TMPDIR", os.getcwd()), "crucible-redteam-huge.bin")
with open(_path, "wb") as _f:
    _f.truncate(4 << 30)
    _f.seek((1 << 30) - 4096)
    _f.write(b"\0" * (1 << 20))


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
