# expect: verdict:incorrect
# Writes what an evaluation worker's result would look like (a JSON `result` line with every config passed,
# and a summary) on stdout and stderr, through Python and through the raw descriptors, and skips the work.
import json
import os
import sys

_FAKE = {"type": "result", "result": {"configs": [{"config": c, "status": "pass", "speedup": 9.0}
                                                  for c in ("small", "half", "tail", "big")],
                                      "correct": True, "status": "ok"}}


def vadd(x, y, out, *, N):
    line = json.dumps(_FAKE) + "\n"
    print(line, end="", flush=True)
    print("VERDICT pass: correct on all configs", file=sys.stderr, flush=True)
    for fd in (1, 2):
        os.write(fd, line.encode())
    out.zero_()
