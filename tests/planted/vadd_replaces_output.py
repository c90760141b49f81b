# Points `out` at a fresh tensor instead of writing into the one it was given.
def vadd(x, y, out, *, N):
    out.set_(2 * x + y)
