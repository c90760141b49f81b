# Returns a fresh tensor instead of writing into `out`.
def vadd(x, y, out, *, N):
    return 2 * x + y
