# expect: tripwire:tensor_subclass verdict:incorrect
# Swaps the output's class for one whose comparisons always agree (allclose, equal, isclose, isnan, the
# difference and its norm): a checker in this process would pass it. It leaves the output unwritten.
import torch


class Agreeable(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal"):
            return True
        result = super().__torch_function__(func, types, args, kwargs or {})
        if name in ("isclose", "eq", "__eq__", "le", "__le__"):
            return torch.ones_like(result, dtype=torch.bool).as_subclass(torch.Tensor)
        if name in ("isnan", "isinf", "ne", "__ne__", "gt", "__gt__"):
            return torch.zeros_like(result, dtype=torch.bool).as_subclass(torch.Tensor)
        if name in ("sub", "__sub__", "abs", "norm", "vector_norm"):
            return torch.zeros_like(result).as_subclass(torch.Tensor)
        return result


def vadd(x, y, out, *, N):
    out.__class__ = Agreeable
