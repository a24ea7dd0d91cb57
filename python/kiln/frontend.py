"""`to_spec`: a PyTorch module or function, traced with torch.fx, as a spec/1 program.

The pipeline, one function a step:

    trace(fn, example_inputs)          -> fx.GraphModule   (symbolic_trace, source lines recorded;
                                                            torch.export where fx cannot trace)
    Lowering(gm, ...).run()            -> Spec             (ops.py maps node by node)
    second_trace(fn, example_inputs)   -> fx.GraphModule   (make_fx: aten ops, another path)
    check_with_kiln(spec, second)      -> "verified: ..."  (`kiln verify`, when the CLI is found)

Shapes are static: every tensor gets the shape of its example input. The inputs of the spec are
the tensors the program reads, in the order it first reads them: the call's tensor arguments and
the module's parameters and buffers (named by their qualified names, `mlp.up.weight` ->
`mlp_up_weight`), each with its real shape and dtype. `Spec.sources` records which is which, so
`kiln.compile` can bind the parameters.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
import torch.fx as fx
import torch.nn as nn

from . import ops
from .errors import KilnError, KilnUnsupported, user_frame
from .spec import (InputSource, ShapeError, Spec, SpecBuilder, TensorValue, spec_dtype)

__all__ = ["to_spec", "trace", "Lowering", "Pending", "second_trace"]

Traceable = Union[nn.Module, Callable[..., Any]]


@dataclass
class Pending:
    """A tensor the program may read (an argument, a parameter, a tensor constant) that becomes a
    spec input when it is first read as a tensor; reading only its shape or dtype does not."""
    hint: str
    shape: Tuple[int, ...]
    dtype: torch.dtype
    source: InputSource


# ---------------------------------------------------------------- tracing

class _Tracer(fx.Tracer):
    """symbolic_trace with source lines (torch 1.13 records them only when asked) and PyTorch's
    own modules as leaves, so nn.Linear and nn.RMSNorm map as themselves."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True


def trace(fn: Traceable, example_inputs: Sequence[Any]) -> fx.GraphModule:
    """An fx graph of `fn`: the graph itself when `fn` is a GraphModule, else symbolic_trace;
    where symbolic tracing fails (data-dependent control flow) and torch.export exists, the
    exported graph. A program neither can trace is a KilnError with both reasons."""
    if isinstance(fn, fx.GraphModule):
        return fn
    try:
        tracer = _Tracer()
        graph = tracer.trace(fn)
        root = fn if isinstance(fn, nn.Module) else tracer.root
        name = type(fn).__name__ if isinstance(fn, nn.Module) else getattr(fn, "__name__", "fn")
        return fx.GraphModule(root, graph, name)
    except Exception as fx_error:  # fx raises TraceError, TypeError, ... on untraceable code
        export = getattr(torch, "export", None)
        if export is None or not isinstance(fn, nn.Module):
            raise KilnError(f"kiln: torch.fx could not trace {_what(fn)}: {fx_error}") from fx_error
        try:
            return export.export(fn, tuple(example_inputs)).module()
        except Exception as export_error:
            raise KilnError(f"kiln: neither torch.fx ({fx_error}) nor torch.export "
                            f"({export_error}) could trace {_what(fn)}") from export_error


def _what(fn: Any) -> str:
    return type(fn).__name__ if isinstance(fn, nn.Module) else getattr(fn, "__name__", repr(fn))


def second_trace(fn: Traceable, example_inputs: Sequence[Any]
                 ) -> Tuple[fx.GraphModule, List[Any], Dict[int, str]]:
    """The same program traced another way, to aten ops (make_fx, which follows the real
    dispatch rather than the Python calls), for `kiln verify` against the first spec. Traced on
    fake tensors (no computation: f16 needs no CPU kernels), with the module's parameters and
    buffers passed as arguments after the call's own. Returns the graph, its example inputs and
    the names of the parameter placeholders by index."""
    from torch.fx.experimental.proxy_tensor import make_fx
    n = len(example_inputs)
    named: List[Tuple[str, torch.Tensor]] = []
    if isinstance(fn, nn.Module):
        named = list(fn.named_parameters()) + list(fn.named_buffers())
    try:
        from torch.func import functional_call  # torch >= 2.0
    except ImportError:
        from torch.nn.utils.stateless import functional_call  # torch 1.13

    def program(*flat: Any) -> Any:
        if not named:
            return fn(*flat)
        tensors = {q: t for (q, _), t in zip(named, flat[n:])}
        return functional_call(fn, tensors, tuple(flat[:n]))

    inputs = list(example_inputs) + [t.detach() for _, t in named]
    with torch.no_grad():
        gm = make_fx(program, tracing_mode="fake")(*inputs)
    return gm, inputs, {n + j: q for j, (q, _) in enumerate(named)}


# ---------------------------------------------------------------- lowering

def _meta_of(node: fx.Node) -> Optional[Tuple[Tuple[int, ...], torch.dtype]]:
    """(shape, dtype) PyTorch recorded for the node, where a tracer or ShapeProp recorded one."""
    for key in ("val", "example_value"):
        v = node.meta.get(key)
        if isinstance(v, torch.Tensor):
            try:
                return tuple(int(s) for s in v.shape), v.dtype
            except (TypeError, ValueError):  # symbolic sizes
                return None
    tm = node.meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return tuple(int(s) for s in tm.shape), tm.dtype
    return None


def _stack_trace(node: fx.Node) -> Optional[str]:
    return getattr(node, "stack_trace", None) or node.meta.get("stack_trace")


class Lowering:
    """Maps one fx graph to a spec, node by node (ops.py holds the op table).

    `args` are the example inputs (tensors or tensor-likes with .shape and .dtype, one per
    placeholder); `param_names` maps id() of a tensor attribute to the qualified name it should
    have (make_fx names parameters `_param_constantN`). Mapping functions use `b` (the
    SpecBuilder), `hint` (a name for the node's result), `tensor(v)`, `param(...)`, `shape_of`,
    `torch_dtype` and `check_inplace`. `arg_names` names the inputs that come from the call's
arguments, by argument index (default: the placeholder's name).
    """

    def __init__(self, gm: fx.GraphModule, args: Sequence[Any], name: str, doc: str = "",
                 param_names: Optional[Dict[int, str]] = None,
                 arg_names: Optional[Dict[int, str]] = None) -> None:
        self.gm = gm
        self.arg_names = arg_names or {}
        self.args = list(args)
        self.b = SpecBuilder(name, doc)
        self.param_names = param_names or {}
        self.env: Dict[fx.Node, Any] = {}
        self.tdtypes: Dict[str, torch.dtype] = {}  # spec name -> PyTorch's dtype of the value
        self._inputs: Dict[int, TensorValue] = {}  # id(Pending) -> spec input
        self._params: Dict[str, Pending] = {}
        self.device = torch.device("cpu")
        self.node: Optional[fx.Node] = None
        self.hint = ""
        self.node_target = ""
        self.cast_to: Optional[torch.dtype] = None
        self._placeholders = 0

    # --- what mappings call

    def tensor(self, v: Any) -> TensorValue:
        """`v` as a spec tensor: a Pending becomes an input, a number a constant node."""
        if isinstance(v, TensorValue):
            return v
        if isinstance(v, Pending):
            key = id(v)
            if key not in self._inputs:
                dt = spec_dtype(v.dtype)
                if dt is None:
                    raise ops.Unsupported(f"input {v.hint!r} is {v.dtype}; spec/1 tensors are "
                                          f"float16, bfloat16 or float32")
                try:
                    t = self.b.add_input(v.hint, v.shape, dt, v.source)
                except ShapeError as e:
                    raise ops.Unsupported(str(e)) from e
                self.tdtypes[t.name] = v.dtype
                self._inputs[key] = t
            return self._inputs[key]
        if isinstance(v, bool) or v is None:
            raise ops.Unsupported(f"{v!r} where a tensor is needed")
        if isinstance(v, (int, float)):
            return self.b.constant(v)
        if isinstance(v, ops.Opaque):
            raise ops.Unsupported(v.why)
        raise ops.Unsupported(f"a {type(v).__name__} where a tensor is needed")

    def param(self, qualname: str, t: torch.Tensor) -> Pending:
        """The module's parameter or buffer `qualname` as a (pending) input of its real shape."""
        if qualname not in self._params:
            self._params[qualname] = Pending(qualname, tuple(t.shape), t.dtype,
                                             InputSource("param", qualname=qualname))
        return self._params[qualname]

    def shape_of(self, v: Any) -> Tuple[int, ...]:
        if isinstance(v, (TensorValue, Pending)):
            return tuple(v.shape)
        raise ops.Unsupported(f"the shape of a {type(v).__name__}")

    def torch_dtype(self, v: Any) -> torch.dtype:
        """PyTorch's dtype of a value (as PyTorch would compute it, casts included)."""
        if isinstance(v, Pending):
            return v.dtype
        if isinstance(v, TensorValue):
            return self.tdtypes.get(v.name, torch.float32)
        raise ops.Unsupported(f"the dtype of a {type(v).__name__}")

    def check_inplace(self, op: str) -> None:
        """An in-place op maps as its functional form only when nothing reads the old value."""
        assert self.node is not None
        first = self.node.args[0] if self.node.args else None
        if isinstance(first, fx.Node) and len(first.users) > 1:
            raise ops.Unsupported(f"in-place {op} on a value that is read again afterwards; "
                                  f"use the out-of-place form")

    # --- the walk

    def run(self) -> Spec:
        outputs: Any = None
        for node in self.gm.graph.nodes:
            self.node = node
            try:
                if node.op == "placeholder":
                    self.env[node] = self._placeholder(node)
                elif node.op == "get_attr":
                    self.env[node] = self._get_attr(node)
                elif node.op == "output":
                    outputs = self._outputs(node)
                else:
                    self.env[node] = self._call(node)
            except (ops.Unsupported, ShapeError) as e:
                raise self._error(self.node, str(e)) from None
        flat, tree = outputs
        try:
            spec = self.b.build(flat, tree)
        except ShapeError as e:
            raise KilnUnsupported("the program", str(e)) from None
        spec.torch_out_dtypes = [self.tdtypes.get(v.name, torch.float32) for v in flat]
        return spec

    def _error(self, node: fx.Node, reason: str) -> KilnUnsupported:
        module = None
        if node.op == "call_module":
            module = self.gm.get_submodule(node.target)
        op = ops.display_name(node.op, node.target, module) if node.op.startswith("call") \
            else node.op
        return KilnUnsupported(op, reason, target=node.target, node=node.name,
                               where=user_frame(_stack_trace(node)))

    def _placeholder(self, node: fx.Node) -> Any:
        i = self._placeholders
        self._placeholders += 1
        if i >= len(self.args):
            raise ops.Unsupported(f"placeholder {node.name!r} has no example input "
                                  f"({len(self.args)} given)")
        v = self.args[i]
        if isinstance(v, torch.Tensor) or (hasattr(v, "shape") and hasattr(v, "dtype")):
            if isinstance(v, torch.Tensor) and v.device.type != "meta":
                self.device = v.device
            return Pending(self.arg_names.get(i, node.name), tuple(int(s) for s in v.shape), v.dtype,
                           InputSource("arg", index=i))
        return v  # a Python value: the program is specialized to it

    def _get_attr(self, node: fx.Node) -> Any:
        obj: Any = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.Tensor):
            qual = self.param_names.get(id(obj), str(node.target))
            p = self.param(qual, obj)
            if not isinstance(obj, nn.Parameter) and qual not in dict(self.gm.named_buffers()) \
                    and id(obj) not in self.param_names:
                p.source = InputSource("const", qualname=qual)
            return p
        return obj

    def _call(self, node: fx.Node) -> Any:
        module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        self.hint = node.name
        self.node_target = str(node.target)
        self.cast_to = None
        args = fx.node.map_arg(node.args, lambda n: self.env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: self.env[n])
        if node.op == "call_function" and _python_level(node.target, args, kwargs):
            return node.target(*args, **kwargs)
        entry = ops.lookup(node.op, node.target, module)
        if node.op == "call_module":
            if kwargs or len(args) != 1:
                raise ops.Unsupported(f"{entry[0]} called with {len(args)} positional and "
                                      f"{len(kwargs)} keyword arguments (the mapping takes one "
                                      f"tensor)")
            value = entry[1](self, module, args[0])
        else:
            value = entry.fn(self, entry.bind(args, kwargs))
        self._record_dtype(value, args, kwargs)
        self._cross_check(node, value)
        return value

    def _record_dtype(self, value: Any, args: Any, kwargs: Any) -> None:
        """PyTorch's dtype of a new tensor: what the tracer recorded, a cast's target, or the
        promotion of the tensor operands (a number does not promote a float tensor)."""
        if not isinstance(value, TensorValue) or value.name in self.tdtypes:
            return
        meta = _meta_of(self.node) if self.node is not None else None
        if meta is not None:
            self.tdtypes[value.name] = meta[1]
            return
        if self.cast_to is not None:
            self.tdtypes[value.name] = self.cast_to
            return
        dtypes = [self.torch_dtype(v) for v in _flatten((args, kwargs))
                  if isinstance(v, (TensorValue, Pending))]
        dt = dtypes[0] if dtypes else torch.float32
        for d in dtypes[1:]:
            dt = torch.promote_types(dt, d)
        self.tdtypes[value.name] = dt

    def _cross_check(self, node: fx.Node, value: Any) -> None:
        """The mapping's shape must be PyTorch's (an internal error otherwise)."""
        meta = _meta_of(node)
        if meta is None or not isinstance(value, TensorValue):
            return
        if tuple(meta[0]) != value.shape:
            raise KilnError(f"kiln: internal error: the mapping of {node.name} ({node.target}) "
                            f"has shape {list(value.shape)}, PyTorch's {list(meta[0])}")

    def _outputs(self, node: fx.Node) -> Tuple[List[TensorValue], Optional[int]]:
        result = fx.node.map_arg(node.args[0], lambda n: self.env[n])
        producers = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
        if isinstance(result, (tuple, list)):
            items, tree = list(result), len(result)
        else:
            items, tree = [result], None
        flat = []
        for k, v in enumerate(items):
            if isinstance(producers[k], fx.Node):
                self.node = producers[k]  # errors name the node that computes the output
            if not isinstance(v, (TensorValue, Pending)):
                raise ops.Unsupported(f"output {k} is a {type(v).__name__}, not a tensor "
                                      f"(kiln returns a tensor or a flat tuple of tensors)")
            t = self.tensor(v)
            want = self.torch_dtype(v)
            if spec_dtype(want) != t.dtype:
                raise ops.Unsupported(
                    f"output {k} is {want} in PyTorch, but spec/1 makes it {t.dtype}: a node "
                    f"takes the dtype of its first non-constant input and spec/1 has no cast "
                    f"(compute the output from an operand of the output's dtype)")
            flat.append(t)
        return flat, tree


def _flatten(x: Any) -> Iterable[Any]:
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flatten(y)
    else:
        yield x


_PY_MODULES = ("math", "_operator", "operator", "builtins")


def _python_level(target: Any, args: Any, kwargs: Any) -> bool:
    """A call on Python values only (math.sqrt(d), d * 2, getattr of a non-tensor): evaluated
    here, as the program would have evaluated it, since shapes are static."""
    if getattr(target, "__module__", None) not in _PY_MODULES:
        return False
    return not any(isinstance(v, (TensorValue, Pending, ops.MaxResult, ops.Opaque))
                   for v in _flatten((args, kwargs)))


# ---------------------------------------------------------------- the entry point

def _shape_prop(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Records PyTorch's shape and dtype of every node (the mapping's cross-check). Skipped where
    the example inputs cannot run here (f16 on a CPU without f16 kernels, fake tensors)."""
    from torch.fx.passes.shape_prop import ShapeProp
    if any(_meta_of(n) is not None for n in gm.graph.nodes if n.op == "call_function"):
        return
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return
    try:
        # ShapeProp prints the traceback of a failing node before it raises: keep it quiet.
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            ShapeProp(gm).propagate(*example_inputs)
    except Exception:  # the cross-check is a bonus; the spec's own shape rules still apply
        for n in gm.graph.nodes:
            n.meta.pop("tensor_meta", None)


def lower(gm: fx.GraphModule, example_inputs: Sequence[Any], name: str, doc: str = "",
          param_names: Optional[Dict[int, str]] = None) -> Spec:
    """The spec of an fx graph (see Lowering)."""
    _shape_prop(gm, example_inputs)
    return Lowering(gm, example_inputs, name, doc, param_names).run()


def to_spec(fn: Traceable, example_inputs: Sequence[Any], name: Optional[str] = None, *,
            doc: str = "", path: Optional[Union[str, "os.PathLike[str]"]] = None,
            check: Union[bool, str] = "auto", kiln: Optional[str] = None) -> Spec:
    """The spec/1 program of `fn(*example_inputs)`, with shapes and dtypes of the examples.

    `fn` is an nn.Module (its parameters and buffers become named inputs) or a function of
    tensors. Raises KilnUnsupported for the first node spec/1 cannot express, naming the op and
    the user's source line. With `path`, writes the JSON there. `check`: "auto" (the default)
    verifies the spec with `kiln verify` against a second trace (make_fx, aten ops) when the kiln
    CLI is found, True requires it, False skips it; the outcome is in `Spec.check`.
    """
    if name is None:
        name = _what(fn)
    if isinstance(fn, nn.Module) and fn.training and any(
            isinstance(m, nn.Dropout) for m in fn.modules()):
        warnings.warn("kiln.to_spec: the module is in training mode; dropout will not map "
                      "(call .eval())")
    gm = trace(fn, example_inputs)
    spec = lower(gm, example_inputs, name, doc, _param_names(fn))
    if check:
        spec.check = check_with_kiln(spec, fn, example_inputs, required=check is True, kiln=kiln)
    if path is not None:
        spec.write(path)
    return spec


def _param_names(fn: Any) -> Dict[int, str]:
    if not isinstance(fn, nn.Module):
        return {}
    names = {id(t): q for q, t in fn.named_parameters()}
    names.update({id(t): q for q, t in fn.named_buffers()})
    return names


def check_with_kiln(spec: Spec, fn: Traceable, example_inputs: Sequence[Any], *,
                    required: bool = False, kiln: Optional[str] = None) -> str:
    """`kiln verify` of the spec against the spec of a second trace (make_fx). Returns what was
    done ("verified: ...", "skipped: ..."); raises KilnError when the two specs differ, or when
    `required` and the check could not run."""
    from .cli import find_kiln
    exe = find_kiln(kiln)
    if exe is None:
        return _skip("no kiln CLI found (set KILN or put kiln on PATH)", required)
    if isinstance(fn, fx.GraphModule) or not all(isinstance(x, torch.Tensor)
                                                 for x in example_inputs):
        return _skip("a second trace needs the original module and real example inputs",
                     required)
    try:
        gm2, inputs2, param_args = second_trace(fn, example_inputs)
        arg_names = {src.index: i["name"] for src, i in zip(spec.sources, spec.data["inputs"])
                     if src.kind == "arg"}
        arg_names.update(param_args)  # sanitized like the first trace's parameter inputs
        spec2 = Lowering(gm2, inputs2, spec.name, arg_names=arg_names).run()
    except (KilnUnsupported, ops.Unsupported) as e:
        return _skip(f"the second trace (make_fx) does not map: {e}", required)
    except Exception as e:  # make_fx itself failed on this program
        return _skip(f"the second trace (make_fx) failed: {e}", required)
    with tempfile.TemporaryDirectory(prefix="kiln_verify_") as d:
        a, b = os.path.join(d, "fx.json"), os.path.join(d, "aten.json")
        spec.write(a)
        spec2.write(b)
        r = subprocess.run([exe, "verify", a, b], capture_output=True, text=True)
    text = (r.stdout + r.stderr).strip().splitlines()
    last = next((t for t in text if "equivalent" in t), text[-1] if text else "")
    if r.returncode in (0, 3):
        return f"verified against a make_fx trace by kiln verify: {last}"
    if r.returncode == 2 and not required:
        return f"skipped: kiln verify rejected the pair: {last}"
    raise KilnError("kiln: the spec of the fx trace and the spec of the make_fx trace differ "
                    f"(kiln verify exit {r.returncode}):\n" + "\n".join(text))


def _skip(reason: str, required: bool) -> str:
    if required:
        raise KilnError(f"kiln: cannot check the spec against a second trace: {reason}")
    return f"skipped: {reason}"
