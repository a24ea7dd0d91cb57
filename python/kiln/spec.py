"""Building a spec/1 program (docs/spec-format.md) node by node, with its shapes and dtypes.

`SpecBuilder` is what the op mappings write into: inputs, constants and nodes, each returning a
`TensorValue` that carries the spec name, the inferred shape and the spec dtype by the format's
own rules (NumPy broadcasting, the matmul and reduction shapes, "the dtype of the first input that
is not a constant"). It checks what the parser would check, so a mapping bug is an internal error
here, not a surprise in `kiln`. `Spec` is the finished program: the JSON object, where each input
comes from (an argument of the traced call, a parameter, a constant tensor), the output structure,
and the canonical hash that names it in the compile cache.
"""
from __future__ import annotations

import hashlib
import os
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

__all__ = ["TensorValue", "InputSource", "Spec", "SpecBuilder", "spec_dtype", "torch_dtype",
           "broadcast_shapes"]

Shape = Tuple[int, ...]

_TO_SPEC = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_TO_TORCH = {v: k for k, v in _TO_SPEC.items()}


def spec_dtype(dtype: torch.dtype) -> Optional[str]:
    """The spec/1 dtype of a torch dtype, or None where spec/1 has none (f64, integers, bool)."""
    return _TO_SPEC.get(dtype)


def torch_dtype(dtype: str) -> torch.dtype:
    return _TO_TORCH[dtype]


@dataclass(frozen=True)
class TensorValue:
    """A tensor of the spec being built: its spec name, shape, spec dtype, and whether it is a
    `constant` node (constants do not decide a result's dtype)."""
    name: str
    shape: Shape
    dtype: str
    is_constant: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class InputSource:
    """Where a spec input comes from at call time: kind "arg" (positional argument `index` of the
    traced call), "param" (the module's parameter or buffer `qualname`), or "const" (a tensor
    constant of the trace, `qualname` its attribute)."""
    kind: str
    index: int = -1
    qualname: str = ""


class ShapeError(ValueError):
    """Shapes that spec/1 rejects (the message says why); the op mapping turns it into a
    KilnUnsupported that names the user's line."""


def broadcast_shapes(a: Shape, b: Shape) -> Shape:
    """NumPy broadcasting of two shapes, as spec/1 defines it."""
    out: List[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"shapes do not broadcast: {list(a)} and {list(b)}")
        out.append(max(x, y))
    return tuple(reversed(out))


_NAME = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str) -> str:
    """A spec name ([A-Za-z_][A-Za-z0-9_]*) made from any text."""
    s = _NAME.sub("_", name).strip("_") or "t"
    return s if not s[0].isdigit() else "t_" + s


# Ops with exactly one tensor input and the input's shape (attrs aside).
UNARY_OPS = {"neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "tanh", "sigmoid",
             "silu", "relu", "gelu", "leaky_relu", "clamp", "softplus", "sin", "cos"}
BINARY_OPS = {"add", "sub", "mul", "div", "maximum", "minimum"}
REDUCE_OPS = {"sum", "mean", "max"}
MAX_RANK = 4


@dataclass
class Spec:
    """A finished spec/1 program and how to call it.

    `data` is the JSON object (format, name, doc, inputs, nodes, outputs); `sources[i]` says where
    spec input i comes from; `out_tree` is None for a single tensor result, else the number of
    elements of the tuple the traced call returned; `check` says how the spec was checked against
    a second trace ("verified: ...", "skipped: ...", or "not checked")."""
    data: Dict[str, Any]
    sources: List[InputSource]
    out_tree: Optional[int] = None
    check: str = "not checked"
    torch_out_dtypes: List[torch.dtype] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.data["name"]

    def json(self) -> str:
        """The spec as JSON text (one node a line, as the repo's examples are written)."""
        d = self.data
        lines = ["{", '  "format": "spec/1",', f'  "name": {json.dumps(d["name"])},']
        if d.get("doc"):
            lines.append(f'  "doc": {json.dumps(d["doc"])},')
        lines.append('  "inputs": [')
        lines.append(",\n".join("    " + json.dumps(i) for i in d["inputs"]))
        lines.append("  ],")
        lines.append('  "nodes": [')
        lines.append(",\n".join("    " + json.dumps(n) for n in d["nodes"]))
        lines.append("  ],")
        lines.append(f'  "outputs": {json.dumps(d["outputs"])}')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def write(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Writes the JSON to `path` and returns the path as a string."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.json())
        return str(path)

    def canonical_hash(self) -> str:
        """A hash of what the program computes and its calling convention: input shapes and dtypes
        in order, and each output's expression over them (ops with their attrs, operands by
        position). Names (the program's, inputs', nodes'), `doc`, the order of the nodes and the
        order of a commutative op's operands (where it keeps the result dtype) do not count, so
        the same computation traced by another tracer or another PyTorch version (Dynamo orders
        nodes unlike torch.fx) gets the same hash: the compile cache key."""
        d = self.data
        expr: Dict[str, str] = {}  # a value's expression, as a hash
        dtype: Dict[str, Optional[str]] = {}  # None: a constant (no say in the result dtype)
        sig: List[Any] = []
        for k, i in enumerate(d["inputs"]):
            expr[i["name"]] = f"i{k}"
            dtype[i["name"]] = i["dtype"]
            sig.append([i["shape"], i["dtype"]])
        for n in d["nodes"]:  # spec/1 nodes come after their operands
            ins = n.get("inputs", [])
            known = [dtype[x] for x in ins if dtype[x] is not None]
            dtype[n["name"]] = known[0] if known else None
            operands = [expr[x] for x in ins]
            # x*y and y*x are one program where the swap keeps the result dtype (the first
            # non-constant input's).
            if n["op"] in COMMUTATIVE and len(set(known)) <= 1:
                operands.sort()
            text = json.dumps([n["op"], operands, sorted(n.get("attrs", {}).items())],
                              sort_keys=True, separators=(",", ":"))
            expr[n["name"]] = hashlib.sha256(text.encode()).hexdigest()
        text = json.dumps([sig, [expr[o] for o in d["outputs"]]], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# Binary ops whose operands commute (spec/1).
COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum"})


class SpecBuilder:
    """Accumulates a spec/1 program. Every method checks what the format requires and returns the
    new value; a violation raises ShapeError (a user error: the traced program cannot be a spec)."""

    def __init__(self, name: str, doc: str = "") -> None:
        self.name = sanitize(name)
        self.doc = doc
        self.inputs: List[Dict[str, Any]] = []
        self.sources: List[InputSource] = []
        self.nodes: List[Dict[str, Any]] = []
        self._names: set = set()
        self._constants: Dict[float, TensorValue] = {}

    def fresh(self, hint: str) -> str:
        """A name not used yet, made from `hint`."""
        base = sanitize(hint)
        name, k = base, 1
        while name in self._names:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    def add_input(self, hint: str, shape: Sequence[int], dtype: str,
                  source: InputSource) -> TensorValue:
        shape = tuple(int(s) for s in shape)
        if len(shape) > MAX_RANK:
            raise ShapeError(f"rank {len(shape)} input {hint!r}: spec/1 tensors have rank 0 to 4")
        if any(s < 1 for s in shape):
            raise ShapeError(f"input {hint!r} has an empty extent: {list(shape)}")
        name = self.fresh(hint)
        self.inputs.append({"name": name, "shape": list(shape), "dtype": dtype})
        self.sources.append(source)
        return TensorValue(name, shape, dtype)

    def constant(self, value: float) -> TensorValue:
        """A scalar `constant` node (one per distinct value)."""
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise ShapeError(f"the constant {value} is not finite (spec/1 numbers are finite)")
        if value not in self._constants:
            name = self.fresh(f"c_{_number_hint(value)}")
            self.nodes.append({"name": name, "op": "constant", "attrs": {"value": value}})
            self._constants[value] = TensorValue(name, (), "f32", is_constant=True)
        return self._constants[value]

    def node(self, hint: str, op: str, inputs: Sequence[TensorValue], shape: Shape,
             attrs: Optional[Dict[str, Any]] = None) -> TensorValue:
        if len(shape) > MAX_RANK:
            raise ShapeError(f"{op} would produce a rank-{len(shape)} tensor {list(shape)}; "
                             f"spec/1 tensors have rank 0 to 4")
        name = self.fresh(hint)
        entry: Dict[str, Any] = {"name": name, "op": op, "inputs": [v.name for v in inputs]}
        if attrs:
            entry["attrs"] = attrs
        self.nodes.append(entry)
        dtype = next((v.dtype for v in inputs if not v.is_constant), "f32")
        return TensorValue(name, tuple(shape), dtype)

    # ----- ops, with the spec's shape rules -----

    def unary(self, hint: str, op: str, x: TensorValue, **attrs: Any) -> TensorValue:
        assert op in UNARY_OPS, op
        return self.node(hint, op, [x], x.shape, attrs or None)

    def binary(self, hint: str, op: str, a: TensorValue, b: TensorValue) -> TensorValue:
        assert op in BINARY_OPS, op
        return self.node(hint, op, [a, b], broadcast_shapes(a.shape, b.shape))

    def matmul(self, hint: str, a: TensorValue, b: TensorValue) -> TensorValue:
        if a.rank < 2 or b.rank < 2:
            raise ShapeError(f"matmul needs operands of rank >= 2, got {list(a.shape)} and "
                             f"{list(b.shape)} (spec/1 has no reshape to add the missing dim)")
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: inner dims differ: {list(a.shape)} and {list(b.shape)}")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        return self.node(hint, "matmul", [a, b], batch + (a.shape[-2], b.shape[-1]))

    def transpose(self, hint: str, x: TensorValue, perm: Sequence[int]) -> TensorValue:
        perm = [p % x.rank for p in perm] if x.rank else []
        if sorted(perm) != list(range(x.rank)):
            raise ShapeError(f"transpose: {list(perm)} is not a permutation of rank {x.rank}")
        if perm == list(range(x.rank)):
            return x
        return self.node(hint, "transpose", [x], tuple(x.shape[p] for p in perm), {"perm": perm})

    def reduce(self, hint: str, op: str, x: TensorValue, dim: int, keepdim: bool) -> TensorValue:
        assert op in REDUCE_OPS, op
        if x.rank == 0:
            raise ShapeError(f"{op} of a scalar")
        d = _norm_dim(dim, x.rank)
        shape = list(x.shape)
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
        return self.node(hint, op, [x], tuple(shape), {"dim": d, "keepdim": bool(keepdim)})

    def softmax(self, hint: str, x: TensorValue, dim: int) -> TensorValue:
        if x.rank == 0:
            raise ShapeError("softmax of a scalar")
        return self.node(hint, "softmax", [x], x.shape, {"dim": _norm_dim(dim, x.rank)})

    def norm(self, hint: str, op: str, x: TensorValue, params: Sequence[TensorValue],
             eps: float) -> TensorValue:
        if x.rank == 0:
            raise ShapeError(f"{op} of a scalar")
        for p in params:
            if p.shape != (x.shape[-1],):
                raise ShapeError(f"{op}: the weight/bias must have shape [{x.shape[-1]}], got "
                                 f"{list(p.shape)}")
        return self.node(hint, op, [x, *params], x.shape, {"eps": float(eps)})

    def build(self, outputs: Sequence[TensorValue], out_tree: Optional[int]) -> Spec:
        """The finished spec. Output nodes are renamed `out` (`out0`, `out1`, ... for several),
        so two traces of one program have the same output names (`kiln verify` compares them);
        an output that is an input or a constant keeps its name."""
        input_names = {i["name"] for i in self.inputs}
        renames: Dict[str, str] = {}
        for k, v in enumerate(outputs):
            if v.name in input_names or v.is_constant or v.name in renames:
                continue
            want = "out" if len(outputs) == 1 else f"out{k}"
            renames[v.name] = want if want not in self._names else self.fresh(want)
        for n in self.nodes:
            if n["name"] in renames:
                n["name"] = renames[n["name"]]
            if "inputs" in n:
                n["inputs"] = [renames.get(x, x) for x in n["inputs"]]
        outputs = [TensorValue(renames.get(v.name, v.name), v.shape, v.dtype, v.is_constant)
                   for v in outputs]
        if not self.nodes:
            raise ShapeError("the program computes nothing (it returns its inputs); a spec "
                             "needs at least one node")
        data = {"format": "spec/1", "name": self.name}
        if self.doc:
            data["doc"] = self.doc
        data.update({"inputs": self.inputs, "nodes": self.nodes,
                     "outputs": [v.name for v in outputs]})
        return Spec(data=data, sources=list(self.sources), out_tree=out_tree)


def _norm_dim(dim: int, rank: int) -> int:
    if not -rank <= dim < rank:
        raise ShapeError(f"dim {dim} is out of range for rank {rank}")
    return dim % rank


def _number_hint(v: float) -> str:
    s = repr(v).replace("-", "m").replace(".", "p").replace("+", "")
    return s if len(s) <= 12 else "v"
