# Tries to take far more host memory than the worker may have.
def vadd(x, y, out, *, N):
    hog = bytearray(64 << 30)
    out.copy_(2 * x + y + len(hog))
