"""Argument checks of the public wrappers: a TypeError naming the argument, before the dispatcher.

The dispatcher answers a list or a NumPy array where a tensor is expected with a dump of the op's
schema; these checks say instead which argument is wrong and how to pass it. Everything the
kernels check themselves (dtypes, shapes, devices, offsets values) stays with the kernels.
"""
import functools
import inspect
import numbers
from typing import Optional

import torch


def _type_name(value) -> str:
    """``list``, ``numpy.ndarray``, ...: the type as a user would write it."""
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def expect_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {_type_name(value)}")
    return value


def expect_tensor(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {_type_name(value)}; use torch.as_tensor({name})")
    return value


def expect_offsets(name: str, value, data: Optional[str]) -> None:
    """``offsets`` (or its alias ``cu_seqlens``, as given in ``name``) is a tensor."""
    if not isinstance(value, torch.Tensor):
        device = f", device={data}.device" if data else ""
        raise TypeError(
            f"{name}: expected a torch.Tensor (int32 or int64, on the data's device), got "
            f"{_type_name(value)}; use torch.tensor({name}{device})"
        )


def gate(a, b: torch.Tensor) -> torch.Tensor:
    """The gates ``a`` of an affine recurrence as a tensor: a Python number or a 0-d tensor
    becomes a 0-d tensor of ``b``'s dtype and device (broadcast, never materialized)."""
    if isinstance(a, torch.Tensor):
        if a.dim() == 0:
            return torch.as_tensor(a, dtype=b.dtype, device=b.device)
        return a
    if isinstance(a, numbers.Number):
        if not isinstance(a, numbers.Real) and not b.is_complex():
            raise TypeError(f"a: a complex gate needs a complex b, got b of dtype {b.dtype}")
        return torch.as_tensor(a, dtype=b.dtype, device=b.device)
    raise TypeError(
        f"a: expected a torch.Tensor broadcastable to b, or a Python number, got {_type_name(a)}; "
        "use torch.as_tensor(a, device=b.device)"
    )


_MISSING = object()


def takes_offsets(data: Optional[str]):
    """Decorator of the public functions that take packed-sequence ``offsets``.

    ``cu_seqlens=`` (flash-attn's name) is accepted as a keyword alias of ``offsets``; passing
    both is a TypeError. ``data`` (the packed tensor's argument, e.g. ``"x"``) and the offsets
    are checked to be tensors. The decorated function declares ``cu_seqlens`` as a keyword-only
    parameter (so that it shows in its signature) and never reads it: the alias arrives as
    ``offsets``.
    """

    def decorate(fn):
        params = inspect.signature(fn).parameters
        names = list(params)
        at_offsets = names.index("offsets")
        at_data = names.index(data) if data else None
        required = params["offsets"].default is inspect.Parameter.empty

        def get(args, kwargs, at, name):
            return args[at] if len(args) > at else kwargs.get(name, _MISSING)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            cu_seqlens = kwargs.pop("cu_seqlens", None)
            if cu_seqlens is not None:
                given = get(args, kwargs, at_offsets, "offsets")
                if given is not None and given is not _MISSING:
                    raise TypeError("offsets, cu_seqlens: pass one of them (cu_seqlens is an alias of offsets)")
                if len(args) > at_offsets:
                    args = args[:at_offsets] + (cu_seqlens,) + args[at_offsets + 1:]
                else:
                    kwargs["offsets"] = cu_seqlens
            if at_data is not None:
                value = get(args, kwargs, at_data, data)
                if value is not _MISSING:  # a missing argument: Python's own TypeError below
                    expect_tensor(data, value)
            offsets = get(args, kwargs, at_offsets, "offsets")
            if offsets is not _MISSING and (offsets is not None or required):
                expect_offsets("offsets" if cu_seqlens is None else "cu_seqlens", offsets, data)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
