"""One vector add per kernel language, checked against torch: does the language run on this machine?
Called by scripts/dsl-probe.sh with the language's packages on PYTHONPATH."""

from __future__ import annotations

import sys
import time
import traceback

import torch

N = 1 << 20


def cute() -> None:
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    @cute.kernel
    def add_kernel(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, n: cutlass.Int32):
        tid, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        i = bid * 256 + tid
        if i < n:
            c[i] = a[i] + b[i]

    @cute.jit
    def add(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, n: cutlass.Int32):
        add_kernel(a, b, c, n).launch(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))

    print("cutlass-dsl", getattr(cutlass, "__version__", "?"))
    run("cute", lambda a, b, c: cute.compile(add, *(from_dlpack(t) for t in (a, b, c)), N),
        lambda fn, a, b, c: fn(*(from_dlpack(t) for t in (a, b, c)), N))


def cutile() -> None:
    import cuda.tile as ct

    tile = 1024

    @ct.kernel
    def add_kernel(a, b, c):
        i = ct.bid(0)
        ct.store(c, index=(i,), tile=ct.load(a, index=(i,), shape=(tile,)) + ct.load(b, index=(i,), shape=(tile,)))

    print("cuda-tile", getattr(ct, "__version__", "?"))
    stream = torch.cuda.current_stream().cuda_stream
    run("cutile", lambda a, b, c: None,
        lambda _, a, b, c: ct.launch(stream, (N // tile, 1, 1), add_kernel, (a, b, c)))


def tilelang() -> None:
    import tilelang
    import tilelang.language as T

    @tilelang.jit
    def make(n: int, block: int = 1024):
        @T.prim_func
        def add(a: T.Tensor((n,), "float32"), b: T.Tensor((n,), "float32"), c: T.Tensor((n,), "float32")):
            with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
                for i in T.Parallel(block):
                    c[bx * block + i] = a[bx * block + i] + b[bx * block + i]
        return add

    print("tilelang", getattr(tilelang, "__version__", "?"))
    run("tilelang", lambda a, b, c: make(N), lambda fn, a, b, c: fn(a, b, c))


def run(name: str, build, call) -> None:
    a, b = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    c = torch.empty_like(a)
    t0 = time.perf_counter()
    try:
        fn = build(a, b, c)
        built = time.perf_counter() - t0
        call(fn, a, b, c)
        torch.cuda.synchronize()
        ok = torch.equal(c, a + b)
        print(f"PROBE {name}: {'ran, right' if ok else 'ran, WRONG'} (build {built:.1f} s)")
    except Exception:  # noqa: BLE001 - a probe reports every failure
        print(f"PROBE {name}: FAILED\n{traceback.format_exc()[-3000:]}")


if __name__ == "__main__":
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))
    for probe in {"cute": (cute, cutile), "tilelang": (tilelang,)}[sys.argv[1]]:
        try:
            probe()
        except Exception:  # noqa: BLE001
            print(f"PROBE {probe.__name__}: FAILED at import\n{traceback.format_exc()[-3000:]}")
