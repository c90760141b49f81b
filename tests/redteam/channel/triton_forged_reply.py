# expect: tripwire:file_access runtime:protocol verdict:flagged
# The runner's result channel is a SOCK_SEQPACKET socket among its own file descriptors: find it and answer
# the judge first, with a `called` reply of a tiny time and a sequence number of our choosing; the work is
# skipped (the judge is told it is done).
import json
import os
import socket


def _channel():
    for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        if sock.type == socket.SOCK_SEQPACKET:
            return sock
        sock.detach()
    raise RuntimeError("no result channel found")


_sock = _channel()


def vadd(x, y, out, *, N):
    _sock.send(json.dumps({"reply": "called", "seq": 1 << 30, "us": 0.001}).encode())
