# Right answer, but it scribbles over an input.
def vadd(x, y, out, *, N):
    out.copy_(2 * x + y)
    y.zero_()
