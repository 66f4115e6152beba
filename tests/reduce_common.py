"""What the reduction tests share (test_reduce.py: segment_reduce; test_masked_reduce.py:
reduce over a dimension with a mask): the ops, the inputs that suit each, and the error scale."""
import torch

OPS = ("sum", "mean", "max", "min", "prod", "logsumexp")
# The scan operator whose typical inputs suit each reduction (helpers.draw).
DRAW_OP = {"sum": "add", "mean": "add", "max": "max", "min": "min", "prod": "mul", "logsumexp": "logaddexp"}
INT_OPS = ("sum", "max", "min", "prod")


def reduction_scale(x, expected, op, counts):
    """The magnitude the error of a floating reduction is measured against, per output:
    ``counts`` is the number of elements in each output (broadcastable to ``expected``)."""
    e = expected.detach().cpu().double()
    finite = lambda t: torch.where(t.isfinite(), t, torch.zeros((), dtype=t.dtype))
    counts = torch.as_tensor(counts, dtype=torch.float64)
    if op in ("max", "min"):
        return torch.zeros(e.shape, dtype=torch.float64)
    if op in ("sum", "mean"):
        return x  # the caller passes the same reduction of |x|
    if op == "prod":
        return finite(e.abs()) * counts.clamp(min=1).sqrt()
    return (finite(e.abs()) + 1) * counts.clamp(min=1).sqrt()


# opcheck compares outputs and gradients without equal_nan: finite inputs only.
FINITE = ("normal", "ties", "zeros")
