"""`kiln.backend`: a torch.compile backend (PyTorch 2.x) that gives Kiln the largest subgraphs it
can express and leaves the rest to Inductor.

    compiled = torch.compile(model, backend=kiln.backend, dynamic=False)

For each graph Dynamo captures:

1. `supported_nodes`: the graph is mapped once with ops.py in probe mode, where a node that does
   not map becomes an opaque input of what follows instead of an error; the nodes that mapped
   (and produce tensors) are Kiln's.
2. torch.fx's CapabilityBasedPartitioner groups them into maximal connected subgraphs without
   cycles; each becomes a submodule `fused_N`.
3. Each partition with real work (a matmul, a reduction, a norm, or at least `min_ops` ops) goes
   through `kiln.compile` (cache, or `kiln optimize`, then nvcc) and its submodule is replaced by
   one that calls the kernel's custom op. A partition that fails to compile stays as it was,
   with a warning.
4. The whole graph, kernels included (custom ops with fake implementations), goes to Inductor
   (or runs eagerly with `fallback="eager"`).

Shapes are static per compile: each kernel is emitted for the shapes of this graph's example
inputs. A graph with symbolic shapes (dynamic=True, or Dynamo's automatic dynamic shapes after a
recompile) is handed to the fallback whole, with a warning; pass dynamic=False.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.fx as fx
import torch.nn as nn

from . import ops
from .errors import KilnError, KilnUnsupported
from .frontend import Lowering, Pending, _meta_of
from .spec import InputSource, ShapeError, TensorValue

__all__ = ["backend", "partition", "supported_nodes", "make_backend"]

# What the backend did, one line per partition, for reports and tests (cleared per graph).
REPORT: List[str] = []

_WORK_OPS = {"matmul", "sum", "mean", "max", "softmax", "rms_norm", "layer_norm"}


class _Probe(Lowering):
    """A Lowering that records which call nodes map, treating each one that does not as an
    opaque tensor input of the nodes after it."""

    def __init__(self, gm: fx.GraphModule, args: Sequence[Any]) -> None:
        super().__init__(gm, args, "probe")
        self.supported: Set[fx.Node] = set()
        self.work: Dict[fx.Node, bool] = {}

    def run(self) -> Any:  # type: ignore[override]
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
                continue
            if node.op == "output":
                continue
            before = len(self.b.nodes)
            try:
                value = self._get_attr(node) if node.op == "get_attr" else self._call(node)
            except (ops.Unsupported, ShapeError, KilnUnsupported, KilnError):
                value = self._opaque(node)
            else:
                if node.op != "get_attr" and isinstance(value, TensorValue):
                    self.supported.add(node)
                    self.work[node] = any(n["op"] in _WORK_OPS for n in self.b.nodes[before:])
            self.env[node] = value
        return None

    def _opaque(self, node: fx.Node) -> Any:
        meta = _meta_of(node)
        if meta is None:
            v = node.meta.get("example_value", node.meta.get("val"))
            return v if isinstance(v, (int, float, bool)) else ops.Opaque(
                f"the result of {node.name}, which Kiln does not map")
        return Pending(node.name, meta[0], meta[1], InputSource("arg", index=-1))


def supported_nodes(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Dict[fx.Node, bool]:
    """The call nodes Kiln maps, each with whether it does real work (matmul, reduction, norm)."""
    probe = _Probe(gm, example_inputs)
    probe.run()
    return {n: probe.work.get(n, False) for n in probe.supported}


class _KilnPartition(nn.Module):
    """A fused submodule replaced by Kiln's kernel (same arguments, same result structure)."""

    def __init__(self, compiled: Any, tuple_out: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.tuple_out = tuple_out

    def forward(self, *args: Any) -> Any:
        out = self.compiled(*args)
        if self.tuple_out:
            return out if isinstance(out, tuple) else (out,)
        return out


def _static(example_inputs: Sequence[Any]) -> bool:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and any(not isinstance(s, int) for s in x.shape):
            return False
        if isinstance(x, torch.SymInt):
            return False
    return True


def _example_of(node: Any) -> Any:
    """What an argument of a fused module's call looks like: a meta tensor of its shape and
    dtype, or the Python value."""
    if not isinstance(node, fx.Node):
        return node
    meta = _meta_of(node)
    if meta is not None:
        return torch.empty(meta[0], dtype=meta[1], device="meta")
    v = node.meta.get("example_value", node.meta.get("val"))
    if v is None:
        raise KilnError(f"kiln.backend: no shape recorded for {node.name}")
    return v


def _fallback(kind: str, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    if kind == "eager":
        return gm.forward
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, list(example_inputs))


def backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *, cache: Optional[str] = None,
            kiln: Optional[str] = None, time_limit: Optional[float] = None,
            min_ops: int = 2, fallback: str = "inductor", verbose: bool = True) -> Callable:
    """The torch.compile backend (see the module doc). Keyword arguments: `cache` and `kiln` as
    in kiln.compile, `min_ops` (a partition without matmul, reduction or norm needs this many
    ops), `fallback` ("inductor" or "eager") for the rest. Use make_backend(...) to set them."""
    say = (lambda msg: print(f"kiln.backend: {msg}", file=sys.stderr, flush=True)) if verbose \
        else (lambda msg: None)
    if not _static(example_inputs):
        warnings.warn("kiln.backend: the graph has symbolic shapes; Kiln's kernels are "
                      "emitted for static shapes (torch.compile(..., dynamic=False)); the "
                      f"whole graph goes to {fallback}")
        return _fallback(fallback, gm, example_inputs)
    REPORT.clear()
    # Partitioning rebuilds the graph (legalize_graph copies its nodes), which drops the
    # `_dynamo_source` attribute Dynamo sets on each placeholder and Inductor (torch 2.11) reads;
    # it is put back on the rebuilt placeholders by name.
    sources = {n.name: n._dynamo_source for n in gm.graph.nodes
               if n.op == "placeholder" and hasattr(n, "_dynamo_source")}
    fused, parts = partition(gm, example_inputs, min_ops=min_ops, say=say)
    _restore_dynamo_sources(sources, gm)
    if not parts:
        return _fallback(fallback, gm, example_inputs)
    from .compiler import compile as kiln_compile
    for target, sub, inputs in parts:
        name = f"{type(gm).__name__}_{target}"
        try:
            compiled = kiln_compile(sub, inputs, name=name, cache=cache, kiln=kiln,
                                    time_limit=time_limit, check=False)
        except (KilnError, KilnUnsupported) as e:
            warnings.warn(f"kiln.backend: {target} stays with {fallback}: {e}")
            REPORT.append(f"{target}: left to {fallback}: {e}")
            continue
        outs = [n for n in sub.graph.nodes if n.op == "output"][0].args[0]
        setattr(fused, target, _KilnPartition(compiled, isinstance(outs, (tuple, list))))
        REPORT.append(f"{target}: kiln kernel {compiled.folder}")
        say(f"{target}: {len(sub.graph.nodes)} fx nodes -> one Kiln kernel ({compiled.folder})")
    fused.recompile()
    _restore_dynamo_sources(sources, fused)
    return _fallback(fallback, fused, example_inputs)


def _restore_dynamo_sources(sources: Dict[str, Any], gm: fx.GraphModule) -> None:
    for n in gm.graph.nodes:
        if n.op == "placeholder" and n.name in sources and not hasattr(n, "_dynamo_source"):
            n._dynamo_source = sources[n.name]


def partition(gm: fx.GraphModule, example_inputs: Sequence[Any], *, min_ops: int = 2,
              say: Callable[[str], None] = lambda msg: None) -> Tuple[fx.GraphModule, List[
                  Tuple[str, fx.GraphModule, List[Any]]]]:
    """Steps 1 and 2 of the module doc: the graph with Kiln's partitions fused into submodules
    `fused_N`, and for each partition worth a kernel (target, submodule, example inputs: meta
    tensors of the call's argument shapes and dtypes)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    _record_shapes(gm, example_inputs)
    kiln_nodes = supported_nodes(gm, example_inputs)

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
            return node in kiln_nodes

    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions()
                  if any(kiln_nodes[n] for n in p.nodes) or len(p.nodes) >= min_ops]
    say(f"{len(gm.graph.nodes)} fx nodes, {len(kiln_nodes)} map to spec/1, "
        f"{len(partitions)} partition(s) for Kiln")
    if not partitions:
        return gm, []
    fused = partitioner.fuse_partitions(partitions)
    parts = []
    for node in fused.graph.nodes:
        if node.op == "call_module" and str(node.target).startswith("fused_"):
            parts.append((str(node.target), fused.get_submodule(node.target),
                          [_example_of(a) for a in node.args]))
    return fused, parts


def _record_shapes(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Dynamo records every node's example value; where a caller's graph lacks them (a plain
    fx graph), ShapeProp on the real example inputs records them."""
    if all(_meta_of(n) is not None for n in gm.graph.nodes if n.op == "placeholder"):
        return
    from torch.fx.passes.shape_prop import ShapeProp
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)


def make_backend(**options: Any) -> Callable:
    """kiln.backend with options: torch.compile(model, backend=kiln.dynamo.make_backend(
    fallback="eager", cache=DIR)). A named function, not a partial: Dynamo reads __name__."""
    def kiln_backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        return backend(gm, example_inputs, **options)
    return kiln_backend
