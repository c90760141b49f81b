# Dereferences a null pointer: the worker dies of SIGSEGV.
import ctypes


def vadd(x, y, out, *, N):
    ctypes.string_at(0)
