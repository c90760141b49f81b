# Never returns.
def vadd(x, y, out, *, N):
    while True:
        pass
