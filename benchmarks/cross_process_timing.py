"""How well can a judge time, from its own process, the GPU work of a runner process? (needs a GPU)

    python3 benchmarks/cross_process_timing.py [--sandboxed] [--out FILE]

The judge makes one shared arena (toolkit/shared_memory.py), starts a runner process and hands it the
arena's fd. Per timed call the judge's stream does: flush L2, event A, write go=k, wait done>=k, event B;
the runner's stream: wait go>=k, event a, call, event b, write done=k. Both processes queue a whole batch
ahead. Compared per size of a device copy:

    truth      the judge times the same copy in its own process (events around the call)
    runner     b - a, as the runner reports it
    judge      B - A minus the median of the same chain with an empty call (the cross-process overhead)

The runner runs in its own pid, mount and network namespaces with Landlock, as in an evaluation. Four
variants: the runner queues the whole batch ahead, or one call at a time (`lockstep`: it waits for each
call's end before queuing the next); the copy on the runner's stream, or on a side stream joined back. Figures go to benchmarks/results/cross_process_timing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
from crucible.toolkit import shared_memory as sm  # noqa: E402

ARENA = 2 << 30
SIZES_MB = [0, 8, 48, 240, 960]  # 0: the empty call; the rest aim near 5, 25, 120, 500 us of copying


def send(sock: socket.socket, obj: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def recv(sock: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
    return json.loads(data), fds


def runner(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    msg, fds = recv(sock)
    if msg.get("landlock"):
        from crucible.toolkit.sandbox import restrict_filesystem
        restrict_filesystem(msg["landlock"])
    device = torch.device("cuda", 0)
    torch.cuda.init()
    torch.empty(1, device=device)
    arena = sm.Arena.attach(fds[0], msg["nbytes"], device)
    stream = torch.cuda.current_stream()
    send(sock, {"ready": True, "pid": os.getpid()})
    while True:
        msg, _ = recv(sock)
        if msg["op"] == "stop":
            return
        n, base, nbytes = msg["n"], msg["base"], msg["bytes"]
        src = arena.tensor(0, (max(nbytes, 1),), torch.uint8)
        dst = arena.tensor(ARENA // 2, (max(nbytes, 1),), torch.uint8)
        side = torch.cuda.Stream()
        pairs = []
        for k in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            sm.wait_value(stream, arena.word_address(sm.GO_WORD), base + k)
            a.record(stream)
            if nbytes and msg["side"]:
                side.wait_stream(stream)
                with torch.cuda.stream(side):
                    dst.copy_(src)
                stream.wait_stream(side)
            elif nbytes:
                dst.copy_(src)
            b.record(stream)
            sm.write_value(stream, arena.word_address(sm.DONE_WORD), base + k)
            pairs.append((a, b))
            if msg["lockstep"]:
                b.synchronize()
        torch.cuda.synchronize()
        send(sock, {"us": [a.elapsed_time(b) * 1e3 for a, b in pairs]})


def judge(sandboxed: bool, lockstep: bool = False, side: bool = False) -> dict:
    device = torch.device("cuda", 0)
    arena = sm.Arena.create(ARENA, device)
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    prefix = ["unshare", "-p", "-f", "-m", "--mount-proc", "-n", "--kill-child", "--"] if sandboxed else []
    env = dict(os.environ)
    proc = subprocess.Popen([*prefix, sys.executable, __file__, "--runner-fd", str(child.fileno())],
                            pass_fds=(child.fileno(),), env=env)
    child.close()
    send(parent, {"nbytes": arena.nbytes, "landlock": ["/dev", "/tmp"] if sandboxed else None}, [arena.fd])
    ready, _ = recv(parent)
    stream = torch.cuda.current_stream()
    props = torch.cuda.get_device_properties(device)
    flush_buf = torch.ones(2 * props.L2_cache_size // 4, dtype=torch.int32, device=device)
    flush_out = torch.empty((), dtype=torch.int64, device=device)
    seq = 0
    rows = []
    for mb in SIZES_MB:
        nbytes = mb << 20
        # truth: the same copy, timed in this process on private buffers
        truth = []
        if nbytes:
            s, d = torch.empty(nbytes, dtype=torch.uint8, device=device), torch.empty(nbytes, dtype=torch.uint8,
                                                                                     device=device)
            for _ in range(60):
                torch.sum(flush_buf, dim=0, out=flush_out)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                d.copy_(s)
                b.record()
                truth.append((a, b))
            torch.cuda.synchronize()
            truth = [a.elapsed_time(b) * 1e3 for a, b in truth][10:]
            del s, d
        n = 200
        base = seq + 1
        t0 = time.perf_counter()
        send(parent, {"op": "run", "n": n, "base": base, "bytes": nbytes, "lockstep": lockstep, "side": side})
        pairs = []
        for k in range(n):
            torch.sum(flush_buf, dim=0, out=flush_out)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            sm.write_value(stream, arena.word_address(sm.GO_WORD), base + k)
            sm.wait_value(stream, arena.word_address(sm.DONE_WORD), base + k)
            b.record(stream)
            pairs.append((a, b))
        torch.cuda.synchronize()
        reply, _ = recv(parent)
        wall = time.perf_counter() - t0
        seq = base + n
        judge_us = [a.elapsed_time(b) * 1e3 for a, b in pairs][20:]
        runner_us = reply["us"][20:]
        rows.append({"mb": mb, "truth_us": statistics.median(truth) if truth else 0.0,
                     "runner_us": statistics.median(runner_us), "judge_raw_us": statistics.median(judge_us),
                     "judge_raw_p10": statistics.quantiles(judge_us, n=10)[0],
                     "judge_raw_p90": statistics.quantiles(judge_us, n=10)[-1],
                     "runner_p90": statistics.quantiles(runner_us, n=10)[-1], "wall_s": wall})
    send(parent, {"op": "stop"})
    proc.wait(timeout=30)
    overhead = rows[0]["judge_raw_us"]
    for r in rows:
        r["judge_net_us"] = r["judge_raw_us"] - overhead
        if r["truth_us"]:
            r["judge_vs_truth"] = r["judge_net_us"] / r["truth_us"] - 1
            r["runner_vs_truth"] = r["runner_us"] / r["truth_us"] - 1
    arena.close()
    return {"sandboxed": sandboxed, "lockstep": lockstep, "side_stream": side, "runner_pid_seen": ready.get("pid"),
            "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner-fd", type=int)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/cross_process_timing.json"))
    args = ap.parse_args()
    if args.runner_fd is not None:
        runner(args.runner_fd)
        return
    results = [judge(True, lockstep, side) for lockstep in (False, True) for side in (False, True)]
    for res in results:
        print(f"sandboxed={res['sandboxed']} lockstep={res['lockstep']} side_stream={res['side_stream']}")
        print(f"{'MB':>5} {'truth':>9} {'runner':>9} {'judge raw':>10} {'p10':>8} {'p90':>8} {'judge net':>10} "
              f"{'j/t-1':>7} {'r/t-1':>7}")
        for r in res["rows"]:
            print(f"{r['mb']:>5} {r['truth_us']:9.2f} {r['runner_us']:9.2f} {r['judge_raw_us']:10.2f} "
                  f"{r['judge_raw_p10']:8.2f} {r['judge_raw_p90']:8.2f} {r['judge_net_us']:10.2f} "
                  f"{r.get('judge_vs_truth', 0):7.3f} {r.get('runner_vs_truth', 0):7.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
