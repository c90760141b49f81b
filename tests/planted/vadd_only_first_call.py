# Right on its first call only (a kernel that "caches" and then skips the work).
CALLS = [0]


def vadd(x, y, out, *, N):
    CALLS[0] += 1
    if CALLS[0] == 1:
        out.copy_(2 * x + y)
    else:
        out.zero_()
