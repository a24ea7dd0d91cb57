"""The map from traced PyTorch ops to spec/1 ops: one table, one small function per op class.

An fx graph names an op in one of four ways: a torch function or `operator` function
(`call_function`, torch level, as `torch.fx.symbolic_trace` and Dynamo write it), an aten
overload (`call_function`, as `make_fx`, `torch.export` and AOTAutograd write it), a Tensor method
(`call_method`) or a module (`call_module`). `lookup` finds the entry of any of them: the op's
display name, the function that maps it and the names of its parameters, so every mapping reads
its arguments by name whatever the call looked like. A mapping returns the value of the node: a
`TensorValue` of the spec, a Python value (ints of a shape, a dtype), or a tuple of them. It
raises `Unsupported` (turned into `KilnUnsupported` with the node and the user's line by
`frontend.Lowering`) for anything spec/1 cannot express exactly; nothing maps to an approximation.

Casts between floating dtypes (`.float()`, `.to(torch.float16)`) map to nothing: a spec computes
every intermediate exactly and rounds only its outputs (docs/spec-format.md, "Semantics"), so a
cast changes only where PyTorch rounds. The output dtypes are checked against PyTorch's at the
end (`frontend.Lowering`).
"""
from __future__ import annotations

import builtins
import math
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .spec import TensorValue

if TYPE_CHECKING:  # pragma: no cover
    from .frontend import Lowering

__all__ = ["Unsupported", "OpEntry", "lookup", "display_name", "MAPPED_OPS"]


class Unsupported(Exception):
    """Raised by a mapping: the node cannot be expressed in spec/1 (the message says why)."""


Args = Dict[str, Any]
Handler = Callable[["Lowering", Args], Any]


@dataclass
class OpEntry:
    """How to map one traced op: `name` for messages, `fn(lowering, args)`, and the parameter
    names the call's positional arguments bind to (`defaults` for those left out). `varargs`
    names a parameter that takes every remaining positional argument (`x.permute(1, 0)`)."""
    name: str
    fn: Handler
    params: Sequence[str]
    defaults: Dict[str, Any] = field(default_factory=dict)
    varargs: Optional[str] = None
    rename: Dict[str, str] = field(default_factory=dict)

    def bind(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> Args:
        """The call's arguments by parameter name (defaults filled in); an unknown keyword or too
        many positional arguments is an Unsupported naming them."""
        out: Args = dict(self.defaults)
        params = list(self.params)
        if self.varargs is not None:
            k = params.index(self.varargs)
            if len(args) > k and not (len(args) == k + 1 and
                                      isinstance(args[k], (list, tuple, torch.Size))):
                args = list(args[:k]) + [tuple(args[k:])]
        if len(args) > len(params):
            raise Unsupported(f"{self.name} called with {len(args)} positional arguments; the "
                              f"mapping knows {len(params)} ({', '.join(params)})")
        for p, a in zip(params, args):
            out[p] = a
        for key, value in kwargs.items():
            key = self.rename.get(key, key)
            if key not in params:
                raise Unsupported(f"{self.name}: unknown argument {key}={value!r}")
            out[key] = value
        for p in params:
            if p not in out:
                raise Unsupported(f"{self.name}: argument {p!r} is missing")
        return out


# ---------------------------------------------------------------- helpers on values

def _is_tensor(v: Any) -> bool:
    from .frontend import Pending
    return isinstance(v, (TensorValue, Pending))


def _scalar(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unsupported(f"{what} must be a Python number here, got {type(v).__name__}")
    return float(v)


def _dims(v: Any, rank: int) -> List[int]:
    """A dim argument (int, list, tuple, None = every dim) as a list of dims in [0, rank)."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return list(range(rank))
    if isinstance(v, int):
        v = [v]
    out = []
    for d in v:
        if not isinstance(d, int) or not -max(rank, 1) <= d < max(rank, 1):
            raise Unsupported(f"dim {d!r} is out of range for rank {rank}")
        out.append(d % rank if rank else 0)
    return out


def _last_dim_only(lw: "Lowering", x: TensorValue, normalized_shape: Any, op: str) -> None:
    shape = tuple(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else \
        (normalized_shape,)
    if x.rank == 0 or shape != (x.shape[-1],):
        raise Unsupported(f"{op} over normalized_shape {list(shape)} of a {list(x.shape)} tensor: "
                          f"spec/1 normalizes over the last dim only "
                          f"(normalized_shape=[{x.shape[-1] if x.rank else '?'}])")


def _no_inplace(lw: "Lowering", a: Args, op: str) -> None:
    if a.get("inplace"):
        lw.check_inplace(op)


# ---------------------------------------------------------------- elementwise

_PY_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
              "div": operator.truediv}


def _binary(op: str) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        x, y = a["input"], a["other"]
        alpha = a.get("alpha", 1)
        if not _is_tensor(x) and not _is_tensor(y):  # shape arithmetic: Python values
            if alpha != 1:
                y = y * alpha
            return _PY_BINARY[op](x, y)
        if a.get("rounding_mode") is not None:
            raise Unsupported(f"division with rounding_mode={a['rounding_mode']!r}: spec/1 has "
                              f"no floor or trunc")
        if alpha != 1:
            y = lw.b.binary(lw.hint + "_alpha", "mul", lw.tensor(y),
                            lw.b.constant(_scalar(alpha, "alpha")))
        return _commuted(lw, op, lw.tensor(x), lw.tensor(y))
    return fn


def _commuted(lw: "Lowering", op: str, x: TensorValue, y: TensorValue) -> TensorValue:
    """op(x, y), with the operands of a commutative op swapped where that gives the result
    PyTorch's promoted dtype (spec/1 takes the first operand's; f16 + f32 is f32 in PyTorch)."""
    if op in ("add", "mul", "maximum", "minimum") and not x.is_constant and not y.is_constant:
        want = torch.promote_types(lw.torch_dtype(x), lw.torch_dtype(y))
        if lw.torch_dtype(x) != want and lw.torch_dtype(y) == want:
            x, y = y, x
    return lw.b.binary(lw.hint, op, x, y)


def _rsub(lw: "Lowering", a: Args) -> Any:  # other - alpha * input
    return _binary("sub")(lw, {"input": a["other"], "other": a["input"], "alpha": a["alpha"]})


def _minmax(op: str) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        return _commuted(lw, op, lw.tensor(a["input"]), lw.tensor(a["other"]))
    return fn


def _unary(op: str, **attrs: Any) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        _no_inplace(lw, a, op)
        return lw.b.unary(lw.hint, op, lw.tensor(a["input"]), **attrs)
    return fn


def _neg(lw: "Lowering", a: Args) -> Any:
    x = a["input"]
    if not _is_tensor(x):
        return -x
    return lw.b.unary(lw.hint, "neg", lw.tensor(x))


def _gelu(lw: "Lowering", a: Args) -> Any:
    approx = a.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise Unsupported(f"gelu approximate={approx!r} (spec/1: 'none' or 'tanh')")
    return lw.b.unary(lw.hint, "gelu", lw.tensor(a["input"]), approximate=approx)


def _leaky_relu(lw: "Lowering", a: Args) -> Any:
    _no_inplace(lw, a, "leaky_relu")
    return lw.b.unary(lw.hint, "leaky_relu", lw.tensor(a["input"]),
                      negative_slope=_scalar(a["negative_slope"], "negative_slope"))


def _clamp_to(lw: "Lowering", x: Any, lo: Any, hi: Any) -> Any:
    attrs = {}
    for key, v in (("min", lo), ("max", hi)):
        if v is not None:
            if _is_tensor(v):
                raise Unsupported(f"clamp with a tensor {key}: spec/1 clamps to numbers "
                                  f"(use torch.maximum / torch.minimum)")
            attrs[key] = _scalar(v, key)
    if "min" in attrs and "max" in attrs and attrs["min"] > attrs["max"]:
        raise Unsupported(f"clamp with min {attrs['min']} > max {attrs['max']}")
    return lw.b.unary(lw.hint, "clamp", lw.tensor(x), **attrs)


def _clamp(lw: "Lowering", a: Args) -> Any:
    return _clamp_to(lw, a["input"], a.get("min"), a.get("max"))


def _hardtanh(lw: "Lowering", a: Args) -> Any:
    _no_inplace(lw, a, "hardtanh")
    return _clamp_to(lw, a["input"], a["min_val"], a["max_val"])


def _relu6(lw: "Lowering", a: Args) -> Any:
    _no_inplace(lw, a, "relu6")
    return _clamp_to(lw, a["input"], 0.0, 6.0)


def _softplus(lw: "Lowering", a: Args) -> Any:
    # PyTorch returns x where beta*x > threshold (20 by default): a difference below e^-20,
    # under any spec tolerance; the spec's softplus is ln(1 + e^x) everywhere.
    beta = _scalar(a["beta"], "beta")
    x = lw.tensor(a["input"])
    if beta == 1.0:
        return lw.b.unary(lw.hint, "softplus", x)
    bx = lw.b.binary(lw.hint + "_beta", "mul", x, lw.b.constant(beta))
    sp = lw.b.unary(lw.hint + "_sp", "softplus", bx)
    return lw.b.binary(lw.hint, "div", sp, lw.b.constant(beta))


def _pow(lw: "Lowering", a: Args) -> Any:
    x, e = a["input"], a["exponent"]
    if not _is_tensor(x):
        if not _is_tensor(e):
            return x ** e
        raise Unsupported("a number raised to a tensor power: spec/1 has no pow "
                          "(write torch.exp(t * math.log(base)))")
    if _is_tensor(e):
        raise Unsupported("a tensor raised to a tensor power: spec/1 has no pow")
    e = _scalar(e, "exponent")
    t = lw.tensor(x)
    if e == 1.0:
        return t
    simple = {2.0: "square", 0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}
    if e in simple:
        return lw.b.unary(lw.hint, simple[e], t)
    if e == 3.0:
        sq = lw.b.unary(lw.hint + "_sq", "square", t)
        return lw.b.binary(lw.hint, "mul", sq, t)
    if e == -2.0:
        sq = lw.b.unary(lw.hint + "_sq", "square", t)
        return lw.b.unary(lw.hint, "reciprocal", sq)
    raise Unsupported(f"pow with exponent {e:g}: spec/1 maps only the exponents "
                      f"1, 2, 3, 0.5, -0.5, -1 and -2 (square, sqrt, rsqrt, reciprocal)")


# ---------------------------------------------------------------- matmul and layout

def _matmul(lw: "Lowering", a: Args) -> Any:
    return lw.b.matmul(lw.hint, lw.tensor(a["input"]), lw.tensor(a["other"]))


def _mm_rank(rank: int, op: str) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        x, y = lw.tensor(a["input"]), lw.tensor(a["other"])
        if x.rank != rank or y.rank != rank:
            raise Unsupported(f"{op} needs rank-{rank} operands, got {list(x.shape)} and "
                              f"{list(y.shape)}")
        return lw.b.matmul(lw.hint, x, y)
    return fn


def _linear_of(lw: "Lowering", x: TensorValue, w: TensorValue,
               b: Optional[TensorValue]) -> TensorValue:
    """x · wᵀ (+ b): nn.Linear's weight is [out, in]."""
    if w.rank != 2:
        raise Unsupported(f"linear with a rank-{w.rank} weight {list(w.shape)}")
    wt = lw.b.transpose(lw.hint + "_wT", w, [1, 0])
    y = lw.b.matmul(lw.hint if b is None else lw.hint + "_mm", x, wt)
    if b is None:
        return y
    return lw.b.binary(lw.hint, "add", y, b)


def _linear(lw: "Lowering", a: Args) -> Any:
    x, w = lw.tensor(a["input"]), lw.tensor(a["weight"])
    b = a.get("bias")
    return _linear_of(lw, x, w, None if b is None else lw.tensor(b))


def _addmm(lw: "Lowering", a: Args) -> Any:  # beta * input + alpha * (mat1 @ mat2)
    bias, m1, m2 = a["input"], lw.tensor(a["mat1"]), lw.tensor(a["mat2"])
    beta, alpha = _scalar(a["beta"], "beta"), _scalar(a["alpha"], "alpha")
    y = lw.b.matmul(lw.hint + "_mm", m1, m2)
    if alpha != 1.0:
        y = lw.b.binary(lw.hint + "_alpha", "mul", y, lw.b.constant(alpha))
    if beta == 0.0:
        return y
    bt = lw.tensor(bias)
    if beta != 1.0:
        bt = lw.b.binary(lw.hint + "_beta", "mul", bt, lw.b.constant(beta))
    return lw.b.binary(lw.hint, "add", y, bt)


def _transpose(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    if x.rank == 0:
        return x
    d0, d1 = _dims(a["dim0"], x.rank)[0], _dims(a["dim1"], x.rank)[0]
    perm = list(range(x.rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return lw.b.transpose(lw.hint, x, perm)


def _t(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    if x.rank > 2:
        raise Unsupported(f".t() of a rank-{x.rank} tensor")
    return lw.b.transpose(lw.hint, x, [1, 0]) if x.rank == 2 else x


def _permute(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    return lw.b.transpose(lw.hint, x, _dims(list(a["dims"]), x.rank))


def _reshape(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    size = a["shape"]
    if isinstance(size, torch.dtype):
        raise Unsupported("view(dtype) reinterprets bits: spec/1 has no such op")
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = size[0]
    size = list(size)
    if size.count(-1) == 1:
        known = math.prod(s for s in size if s != -1)
        size[size.index(-1)] = math.prod(x.shape) // max(known, 1)
    if tuple(size) == x.shape:
        return x
    raise Unsupported(f"reshape of {list(x.shape)} to {size}: spec/1 has no reshape or view "
                      f"(write the program on tensors of the final shape)")


def _identity(lw: "Lowering", a: Args) -> Any:
    return lw.tensor(a["input"])


def _cast(lw: "Lowering", a: Args) -> Any:
    """.to / .float / .half / .type / _to_copy: a float dtype changes only where PyTorch rounds
    (nothing in the spec); the new dtype is remembered for the output check."""
    x = lw.tensor(a["input"])
    dtype = a.get("dtype")
    for v in list(a.get("rest", ())) + [a.get("other")]:
        if isinstance(v, torch.dtype):
            dtype = v
        elif isinstance(v, str) and v.startswith("torch."):
            dtype = getattr(torch, v[len("torch."):], None)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise Unsupported(f"a cast to {dtype}: spec/1 has only floating-point tensors")
    lw.cast_to = dtype
    return x


def _fixed_cast(dtype: torch.dtype) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        lw.cast_to = dtype
        return lw.tensor(a["input"])
    return fn


def _dropout(lw: "Lowering", a: Args) -> Any:
    if a.get("training") and float(a.get("p", 0.5)) > 0:
        raise Unsupported("dropout in training mode is random; call model.eval() first")
    return lw.tensor(a["input"])


# ---------------------------------------------------------------- reductions, softmax, norms

def _reduce(op: str, spec_op: str) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        x = lw.tensor(a["input"])
        dims = sorted(set(_dims(a.get("dim"), x.rank)), reverse=True)
        keep = bool(a.get("keepdim", False))
        if x.rank == 0:
            return x
        for i, d in enumerate(dims):
            last = i == len(dims) - 1
            x = lw.b.reduce(lw.hint if last else f"{lw.hint}_{op}{d}", spec_op, x, d, keep)
        return x
    return fn


def _max(lw: "Lowering", a: Args) -> Any:
    """torch.max: the reduction over everything, (values, indices) over a dim, or maximum."""
    other, dim = a.get("other"), a.get("dim")
    if _is_tensor(other):
        return lw.b.binary(lw.hint, "maximum", lw.tensor(a["input"]), lw.tensor(other))
    if isinstance(other, int) and dim is None:
        dim = other
    if dim is None:
        return _reduce("max", "max")(lw, {"input": a["input"], "dim": None, "keepdim": False})
    values = _reduce("max", "max")(lw, {"input": a["input"], "dim": dim,
                                         "keepdim": a.get("keepdim", False)})
    return MaxResult(values)


def _min(lw: "Lowering", a: Args) -> Any:
    if _is_tensor(a.get("other")):
        return lw.b.binary(lw.hint, "minimum", lw.tensor(a["input"]), lw.tensor(a["other"]))
    raise Unsupported("min as a reduction: spec/1 has max only (write -torch.amax(-x, dim))")


@dataclass(frozen=True)
class MaxResult:
    """torch.max(x, dim)'s (values, indices): only the values map."""
    values: TensorValue

    def __getitem__(self, i: int) -> Any:
        if i == 0:
            return self.values
        raise Unsupported("the indices of torch.max: spec/1 has no argmax")


def _softmax(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    dim = a.get("dim")
    if dim is None:
        raise Unsupported("softmax without dim (PyTorch's implicit dim is deprecated); pass dim")
    return lw.b.softmax(lw.hint, x, _dims(dim, x.rank)[0])


def _log_softmax(lw: "Lowering", a: Args) -> Any:
    """x − m − log Σ exp(x − m), m the max over dim: the same function, written in spec ops."""
    x = lw.tensor(a["input"])
    if a.get("dim") is None:
        raise Unsupported("log_softmax without dim; pass dim")
    d = _dims(a["dim"], x.rank)[0]
    h = lw.hint
    m = lw.b.reduce(h + "_max", "max", x, d, True)
    s = lw.b.binary(h + "_shift", "sub", x, m)
    e = lw.b.unary(h + "_exp", "exp", s)
    z = lw.b.reduce(h + "_sum", "sum", e, d, True)
    lz = lw.b.unary(h + "_logsum", "log", z)
    return lw.b.binary(h, "sub", s, lz)


def _layer_norm_of(lw: "Lowering", x: TensorValue, w: Any, b: Any, eps: float) -> TensorValue:
    params = []
    if w is not None:
        params.append(lw.tensor(w))
        if b is not None:
            params.append(lw.tensor(b))
    y = lw.b.norm(lw.hint if (b is None or w is not None) else lw.hint + "_ln", "layer_norm", x,
                  params, eps)
    if b is not None and w is None:  # spec/1's bias needs a weight: add it after
        bt = lw.tensor(b)
        if bt.shape != (x.shape[-1],):
            raise Unsupported(f"layer_norm bias of shape {list(bt.shape)}")
        y = lw.b.binary(lw.hint, "add", y, bt)
    return y


def _layer_norm(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    _last_dim_only(lw, x, a["normalized_shape"], "layer_norm")
    return _layer_norm_of(lw, x, a.get("weight"), a.get("bias"), _scalar(a["eps"], "eps"))


def _native_layer_norm(lw: "Lowering", a: Args) -> Any:
    y = _layer_norm(lw, a)
    why = "the mean and rstd outputs of native_layer_norm"
    return (y, Opaque(why), Opaque(why))


def _rms_norm_of(lw: "Lowering", x: TensorValue, w: Any, eps: Optional[float],
                 tdtype: torch.dtype) -> TensorValue:
    if eps is None:  # PyTorch's default: the input dtype's machine epsilon
        eps = torch.finfo(tdtype).eps
    params = [] if w is None else [lw.tensor(w)]
    return lw.b.norm(lw.hint, "rms_norm", x, params, _scalar(eps, "eps"))


def _rms_norm(lw: "Lowering", a: Args) -> Any:
    x = lw.tensor(a["input"])
    _last_dim_only(lw, x, a["normalized_shape"], "rms_norm")
    return _rms_norm_of(lw, x, a.get("weight"), a.get("eps"), lw.torch_dtype(a["input"]))


@dataclass(frozen=True)
class Opaque:
    """A value that exists in the trace but has no spec counterpart; using it is Unsupported."""
    why: str


# ---------------------------------------------------------------- Python-level plumbing

def _getattr(lw: "Lowering", a: Args) -> Any:
    obj, name = a["input"], a["name"]
    if isinstance(obj, MaxResult):
        if name == "values":
            return obj.values
        if name == "indices":
            return obj[1]
    if _is_tensor(obj):
        shape = lw.shape_of(obj)
        if name == "shape":
            return torch.Size(shape)
        if name == "ndim":
            return len(shape)
        if name == "dtype":
            return lw.torch_dtype(obj)
        if name == "device":
            return lw.device
        if name == "T":
            x = lw.tensor(obj)
            return lw.b.transpose(lw.hint, x, list(reversed(range(x.rank))))
        if name == "mT":
            x = lw.tensor(obj)
            return _transpose(lw, {"input": x, "dim0": -2, "dim1": -1})
        raise Unsupported(f"the tensor attribute .{name}")
    return getattr(obj, name)


def _getitem(lw: "Lowering", a: Args) -> Any:
    obj, idx = a["input"], a["other"]
    if _is_tensor(obj):
        raise Unsupported("indexing or slicing a tensor: spec/1 has no slice or gather")
    if isinstance(obj, Opaque):
        raise Unsupported(obj.why)
    if isinstance(obj, MaxResult):
        return obj[idx]
    return obj[idx]


def _size(lw: "Lowering", a: Args) -> Any:
    shape = torch.Size(lw.shape_of(a["input"]))
    d = a.get("dim")
    return shape if d is None else shape[d]


def _dim(lw: "Lowering", a: Args) -> Any:
    return len(lw.shape_of(a["input"]))


# ---------------------------------------------------------------- modules

def _module_linear(lw: "Lowering", m: nn.Module, x: Any) -> Any:
    w = lw.param(f"{lw.node_target}.weight", m.weight)
    b = None if m.bias is None else lw.param(f"{lw.node_target}.bias", m.bias)
    return _linear_of(lw, lw.tensor(x), lw.tensor(w), None if b is None else lw.tensor(b))


def _module_layer_norm(lw: "Lowering", m: nn.Module, x: Any) -> Any:
    t = lw.tensor(x)
    _last_dim_only(lw, t, m.normalized_shape, "nn.LayerNorm")
    w = None if getattr(m, "weight", None) is None else lw.param(f"{lw.node_target}.weight",
                                                                  m.weight)
    b = None if getattr(m, "bias", None) is None else lw.param(f"{lw.node_target}.bias", m.bias)
    return _layer_norm_of(lw, t, w, b, m.eps)


def _module_rms_norm(lw: "Lowering", m: nn.Module, x: Any) -> Any:
    t = lw.tensor(x)
    _last_dim_only(lw, t, m.normalized_shape, "nn.RMSNorm")
    w = None if getattr(m, "weight", None) is None else lw.param(f"{lw.node_target}.weight",
                                                                  m.weight)
    return _rms_norm_of(lw, t, w, m.eps, lw.torch_dtype(x))


def _module_fn(fn: Handler, **attrs: Callable[[nn.Module], Any]) -> Callable:
    """A module whose forward is `fn` with arguments read from the module's attributes."""
    def call(lw: "Lowering", m: nn.Module, x: Any) -> Any:
        a = {"input": x}
        a.update({k: get(m) for k, get in attrs.items()})
        return fn(lw, a)
    return call


# ---------------------------------------------------------------- the tables

def _e(name: str, fn: Handler, params: str, **defaults: Any) -> OpEntry:
    ps = [p.strip() for p in params.split(",") if p.strip()]
    var = next((p[1:] for p in ps if p.startswith("*")), None)
    return OpEntry(name, fn, [p.lstrip("*") for p in ps], defaults, var)


aten = torch.ops.aten
_UNARY = ["exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "tanh", "sigmoid", "relu", "sin",
          "cos", "silu"]

FUNCTIONS: Dict[Any, OpEntry] = {}
METHODS: Dict[str, OpEntry] = {}
ATEN: Dict[str, OpEntry] = {}
MODULES: Dict[type, Tuple[str, Callable]] = {}


def _fn(targets: Sequence[Any], entry: OpEntry) -> None:
    for t in targets:
        if t is not None:
            FUNCTIONS[t] = entry


def _build_tables() -> None:
    for op in _UNARY:
        entry = _e(f"torch.{op}", _unary(op), "input, inplace", inplace=False)
        # F.tanh and F.sigmoid are deprecated wrappers that trace as Tensor methods.
        _fn([getattr(torch, op, None),
             None if op in ("tanh", "sigmoid") else getattr(F, op, None)], entry)
        if hasattr(torch.Tensor, op):
            METHODS[op] = _e(f"Tensor.{op}", _unary(op), "input")
            METHODS[op + "_"] = _e(f"Tensor.{op}_", _inplace_method(op), "input")
        ATEN[op] = _e(f"aten.{op}", _unary(op), "input")
        if hasattr(aten, op + "_"):
            ATEN[op + "_"] = _e(f"aten.{op}_", _inplace_method(op), "input")
    for op in ("add", "sub", "mul", "div"):
        ps = "input, other, alpha" if op in ("add", "sub") else "input, other, rounding_mode"
        dflt = {"alpha": 1} if op in ("add", "sub") else {"rounding_mode": None}
        entry = _e(f"torch.{op}", _binary(op), ps, **dflt)
        _fn([getattr(torch, op)], entry)
        METHODS[op] = entry
        ATEN[op] = entry
    _fn([torch.subtract], FUNCTIONS[torch.sub])
    _fn([torch.multiply], FUNCTIONS[torch.mul])
    _fn([torch.true_divide, torch.divide], FUNCTIONS[torch.div])
    METHODS["true_divide"] = METHODS["div"]
    ATEN["true_divide"] = ATEN["div"]
    for o, op in ((operator.add, "add"), (operator.sub, "sub"), (operator.mul, "mul"),
                  (operator.truediv, "div")):
        FUNCTIONS[o] = _e(f"operator.{o.__name__}", _binary(op), "input, other")
    ATEN["rsub"] = _e("aten.rsub", _rsub, "input, other, alpha", alpha=1)
    FUNCTIONS[torch.rsub] = ATEN["rsub"]
    neg = _e("torch.neg", _neg, "input")
    _fn([torch.neg, torch.negative, operator.neg], neg)
    METHODS["neg"] = METHODS["negative"] = ATEN["neg"] = neg
    for op, name in (("maximum", "maximum"), ("minimum", "minimum")):
        e = _e(f"torch.{name}", _minmax(op), "input, other")
        _fn([getattr(torch, name)], e)
        METHODS[name] = ATEN[name] = e
    gelu = _e("gelu", _gelu, "input, approximate", approximate="none")
    _fn([F.gelu], gelu)
    ATEN["gelu"] = gelu
    lrelu = _e("leaky_relu", _leaky_relu, "input, negative_slope, inplace", negative_slope=0.01,
               inplace=False)
    _fn([F.leaky_relu], lrelu)
    ATEN["leaky_relu"] = lrelu
    clamp = _e("clamp", _clamp, "input, min, max", min=None, max=None)
    _fn([torch.clamp, torch.clip], clamp)
    METHODS["clamp"] = METHODS["clip"] = ATEN["clamp"] = ATEN["clip"] = clamp
    ht = _e("hardtanh", _hardtanh, "input, min_val, max_val, inplace", min_val=-1.0, max_val=1.0,
            inplace=False)
    _fn([F.hardtanh], ht)
    ATEN["hardtanh"] = ht
    _fn([F.relu6], _e("relu6", _relu6, "input, inplace", inplace=False))
    sp = _e("softplus", _softplus, "input, beta, threshold", beta=1, threshold=20)
    _fn([F.softplus], sp)
    ATEN["softplus"] = sp
    pw = _e("pow", _pow, "input, exponent")
    _fn([torch.pow, operator.pow], pw)
    METHODS["pow"] = ATEN["pow"] = pw
    # matmul and layout
    mm = _e("matmul", _matmul, "input, other")
    _fn([torch.matmul, operator.matmul], mm)
    METHODS["matmul"] = ATEN["matmul"] = mm
    for name, rank in (("mm", 2), ("bmm", 3)):
        e = _e(f"torch.{name}", _mm_rank(rank, name), "input, other")
        _fn([getattr(torch, name)], e)
        METHODS[name] = e
        ATEN[name] = OpEntry(f"aten.{name}", e.fn, ["input", "other"], rename={"mat2": "other"})
    lin = _e("linear", _linear, "input, weight, bias", bias=None)
    _fn([F.linear], lin)
    ATEN["linear"] = lin
    addmm = _e("addmm", _addmm, "input, mat1, mat2, beta, alpha", beta=1, alpha=1)
    _fn([torch.addmm], addmm)
    METHODS["addmm"] = ATEN["addmm"] = addmm
    tr = _e("transpose", _transpose, "input, dim0, dim1")
    _fn([torch.transpose, torch.swapaxes], tr)
    METHODS["transpose"] = METHODS["swapaxes"] = ATEN["transpose"] = tr
    t = _e("t", _t, "input")
    _fn([torch.t], t)
    METHODS["t"] = ATEN["t"] = t
    perm = _e("permute", _permute, "input, *dims")
    _fn([torch.permute], perm)
    METHODS["permute"] = perm
    ATEN["permute"] = _e("aten.permute", _permute, "input, dims")
    reshape = _e("reshape", _reshape, "input, *shape")
    _fn([torch.reshape], reshape)
    METHODS["reshape"] = METHODS["view"] = reshape
    ATEN["view"] = ATEN["reshape"] = ATEN["_unsafe_view"] = OpEntry(
        "aten.view", _reshape, ["input", "shape"], rename={"size": "shape"})
    for name in ("contiguous", "clone", "detach"):
        e = _e(name, _identity, "input, memory_format", memory_format=None)
        METHODS[name] = e
        ATEN[name] = e
    for name in ("alias", "lift_fresh_copy"):
        ATEN[name] = _e(name, _identity, "input")
    _fn([torch.clone], METHODS["clone"])
    _fn([torch.detach], METHODS["detach"])
    cast = _e("to", _cast, "input, *rest, dtype, device, non_blocking, copy, memory_format",
              rest=(), dtype=None, device=None, non_blocking=False, copy=False,
              memory_format=None)
    METHODS["to"] = METHODS["type"] = cast
    ATEN["to"] = _e("aten.to", _cast, "input, dtype", dtype=None)  # rebound by each schema
    METHODS["type_as"] = _e("type_as", lambda lw, a: _cast_like(lw, a), "input, other")
    for name, dt in (("float", torch.float32), ("half", torch.float16),
                     ("bfloat16", torch.bfloat16), ("double", torch.float64)):
        METHODS[name] = _e(name, _fixed_cast(dt), "input, memory_format", memory_format=None)
    ATEN["_to_copy"] = OpEntry("aten._to_copy", _cast, ["input", "dtype", "layout", "device",
                                                        "pin_memory", "non_blocking",
                                                        "memory_format"])
    drop = _e("dropout", _dropout, "input, p, training, inplace", p=0.5, training=True,
              inplace=False)
    _fn([F.dropout], drop)
    # reductions, softmax, norms
    for name, op in (("sum", "sum"), ("mean", "mean"), ("amax", "max")):
        e = _e(f"torch.{name}", _reduce(name, op), "input, dim, keepdim, dtype", dim=None,
               keepdim=False, dtype=None)
        _fn([getattr(torch, name)], e)
        METHODS[name] = ATEN[name] = e
    mx = _e("torch.max", _max, "input, other, keepdim", other=None, keepdim=False, dim=None)
    mx.params = ["input", "other", "keepdim", "dim"]
    _fn([torch.max], mx)
    METHODS["max"] = ATEN["max"] = mx
    mn = _e("torch.min", _min, "input, other, keepdim, dim", other=None, keepdim=False, dim=None)
    _fn([torch.min], mn)
    METHODS["min"] = mn
    sm = _e("softmax", _softmax, "input, dim, _stacklevel, dtype", dim=None, _stacklevel=3,
            dtype=None)
    _fn([F.softmax], sm)
    _fn([torch.softmax], _e("torch.softmax", _softmax, "input, dim, dtype", dtype=None))
    METHODS["softmax"] = _e("Tensor.softmax", _softmax, "input, dim, dtype", dtype=None)
    ATEN["_softmax"] = _e("aten._softmax", _softmax, "input, dim, half_to_float")
    ATEN["softmax"] = _e("aten.softmax", _softmax, "input, dim, dtype", dtype=None)
    lsm = _e("log_softmax", _log_softmax, "input, dim, _stacklevel, dtype", dim=None,
             _stacklevel=3, dtype=None)
    _fn([F.log_softmax], lsm)
    _fn([torch.log_softmax], _e("torch.log_softmax", _log_softmax, "input, dim, dtype",
                                dtype=None))
    METHODS["log_softmax"] = _e("Tensor.log_softmax", _log_softmax, "input, dim, dtype",
                                dtype=None)
    ATEN["_log_softmax"] = _e("aten._log_softmax", _log_softmax, "input, dim, half_to_float")
    ln = _e("layer_norm", _layer_norm, "input, normalized_shape, weight, bias, eps", weight=None,
            bias=None, eps=1e-5)
    _fn([F.layer_norm], ln)
    ATEN["layer_norm"] = _e("aten.layer_norm", _layer_norm,
                            "input, normalized_shape, weight, bias, eps, cudnn_enable",
                            weight=None, bias=None, eps=1e-5, cudnn_enable=True)
    ATEN["native_layer_norm"] = _e("aten.native_layer_norm", _native_layer_norm,
                                   "input, normalized_shape, weight, bias, eps")
    rms = _e("rms_norm", _rms_norm, "input, normalized_shape, weight, eps", weight=None,
             eps=None)
    _fn([getattr(F, "rms_norm", None)], rms)
    ATEN["rms_norm"] = rms
    # Python plumbing
    FUNCTIONS[builtins.getattr] = _e("getattr", _getattr, "input, name")
    FUNCTIONS[operator.getitem] = _e("getitem", _getitem, "input, other")
    METHODS["size"] = _e("Tensor.size", _size, "input, dim", dim=None)
    METHODS["dim"] = _e("Tensor.dim", _dim, "input")
    # modules
    MODULES.update({
        nn.Linear: ("nn.Linear", _module_linear),
        nn.LayerNorm: ("nn.LayerNorm", _module_layer_norm),
        nn.Identity: ("nn.Identity", lambda lw, m, x: lw.tensor(x)),
        nn.SiLU: ("nn.SiLU", _module_fn(_unary("silu"))),
        nn.ReLU: ("nn.ReLU", _module_fn(_unary("relu"), inplace=lambda m: m.inplace)),
        nn.Sigmoid: ("nn.Sigmoid", _module_fn(_unary("sigmoid"))),
        nn.Tanh: ("nn.Tanh", _module_fn(_unary("tanh"))),
        nn.GELU: ("nn.GELU", _module_fn(_gelu, approximate=lambda m: m.approximate)),
        nn.LeakyReLU: ("nn.LeakyReLU", _module_fn(_leaky_relu,
                                                  negative_slope=lambda m: m.negative_slope,
                                                  inplace=lambda m: m.inplace)),
        nn.Softplus: ("nn.Softplus", _module_fn(_softplus, beta=lambda m: m.beta)),
        nn.Softmax: ("nn.Softmax", _module_fn(_softmax, dim=lambda m: m.dim)),
        nn.LogSoftmax: ("nn.LogSoftmax", _module_fn(_log_softmax, dim=lambda m: m.dim)),
        nn.ReLU6: ("nn.ReLU6", _module_fn(_relu6, inplace=lambda m: m.inplace)),
        nn.Hardtanh: ("nn.Hardtanh", _module_fn(_hardtanh, min_val=lambda m: m.min_val,
                                                max_val=lambda m: m.max_val,
                                                inplace=lambda m: m.inplace)),
        nn.Dropout: ("nn.Dropout", _module_fn(_dropout, p=lambda m: m.p,
                                              training=lambda m: m.training)),
    })
    if hasattr(nn, "RMSNorm"):
        MODULES[nn.RMSNorm] = ("nn.RMSNorm", _module_rms_norm)


def _inplace_method(op: str) -> Handler:
    def fn(lw: "Lowering", a: Args) -> Any:
        lw.check_inplace(f"Tensor.{op}_")
        return lw.b.unary(lw.hint, op, lw.tensor(a["input"]))
    return fn


def _cast_like(lw: "Lowering", a: Args) -> Any:
    lw.cast_to = lw.torch_dtype(a["other"])
    return lw.tensor(a["input"])


_build_tables()

# Hints for common ops spec/1 has no counterpart for (the message names the op either way).
HINTS = {
    "view": "spec/1 has no reshape or view", "reshape": "spec/1 has no reshape or view",
    "unsqueeze": "spec/1 has no reshape; write the program on tensors of the final shape",
    "squeeze": "spec/1 has no reshape; write the program on tensors of the final shape",
    "flatten": "spec/1 has no reshape", "cat": "spec/1 has no concatenation",
    "stack": "spec/1 has no concatenation", "where": "spec/1 has no select/where",
    "masked_fill": "spec/1 has no select/where", "abs": "spec/1 has no abs",
    "erf": "spec/1 has no erf (use F.gelu for x·Φ(x))", "cumsum": "spec/1 has no scan",
    "embedding": "spec/1 has no gather", "conv2d": "spec/1 has no convolution",
    "conv1d": "spec/1 has no convolution", "expand": "spec/1 broadcasts in elementwise ops "
    "only; drop the expand", "scaled_dot_product_attention": "write attention as "
    "softmax(q @ k.transpose(-2, -1) * scale) @ v",
}

# Every mapped op by table, for the tests (each has one) and the docs.
MAPPED_OPS = {
    "functions": sorted({e.name for e in FUNCTIONS.values()}),
    "methods": sorted(METHODS),
    "aten": sorted(ATEN),
    "modules": sorted(name for name, _ in MODULES.values()),
}


def display_name(node_op: str, target: Any, module: Optional[nn.Module] = None) -> str:
    """A readable name of an fx node's op: "torch.cumsum", "Tensor.unsqueeze", "aten.addmm",
    "nn.Conv2d" (or the module's class path), "operator.getitem"."""
    if node_op == "call_method":
        return f"Tensor.{target}"
    if node_op == "call_module":
        cls = type(module) if module is not None else None
        if cls is None:
            return str(target)
        mod = cls.__module__
        return f"nn.{cls.__name__}" if mod.startswith("torch.nn") else f"{mod}.{cls.__qualname__}"
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target.__name__}" if "." in target.__name__ else str(target)
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    if mod in ("_operator", "operator"):
        return f"operator.{name}"
    if mod.startswith("torch._C._nn") or mod == "torch.nn.functional":
        return f"torch.nn.functional.{name}"
    if mod.startswith("torch._C") or mod.startswith("torch._VF") or mod == "" or mod == "torch":
        return f"torch.{name}"
    return f"{mod}.{name}" if mod else name


def _hint_key(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return target.overloadpacket.__name__
    return str(getattr(target, "__name__", target)).rstrip("_")


def lookup(node_op: str, target: Any, module: Optional[nn.Module] = None) -> Any:
    """The entry that maps this node (an OpEntry, or (name, fn) for a module), or raises
    Unsupported with the hint for the op where there is one."""
    if node_op == "call_function":
        if isinstance(target, torch._ops.OpOverload):
            entry = ATEN.get(target.overloadpacket.__name__)
            if entry is not None:
                USED.add(("aten", target.overloadpacket.__name__))
                return _aten_entry(entry, target)
        else:
            entry = FUNCTIONS.get(target)
            if entry is not None:
                USED.add(("functions", target))
                return entry
    elif node_op == "call_method":
        entry = METHODS.get(target)
        if entry is not None:
            USED.add(("methods", target))
            return entry
    elif node_op == "call_module":
        for cls in type(module).__mro__:
            if cls in MODULES:
                USED.add(("modules", cls))
                return MODULES[cls]
    key = _hint_key(target) if node_op != "call_module" else type(module).__name__.lower()
    hint = HINTS.get(key, "spec/1 has no op for it")
    raise Unsupported(f"{hint} (docs/torch-frontend.md lists the ops that map)")


_ATEN_CACHE: Dict[Any, OpEntry] = {}

# (table, key) of every entry `lookup` returned in this process: the tests check that each entry
# of the tables was exercised.
USED: set = set()


def _aten_entry(entry: OpEntry, overload: Any) -> OpEntry:
    """The entry bound to an aten overload's own schema: its argument names (self → input), so
    positional and keyword arguments bind by the schema whatever the overload."""
    if overload in _ATEN_CACHE:
        return _ATEN_CACHE[overload]
    rename = {"self": "input", **entry.rename}
    names, defaults = [], {}
    for arg in overload._schema.arguments:
        name = rename.get(arg.name, arg.name)
        names.append(name)
        if arg.default_value is not None or arg.type.kind() == "OptionalType":
            defaults[name] = arg.default_value
    rebound = OpEntry(f"aten.{overload.__name__}", entry.fn, names,
                      {**entry.defaults, **defaults}, None, rename)
    _ATEN_CACHE[overload] = rebound
    return rebound
