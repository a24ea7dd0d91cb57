"""Checking a spec against the PyTorch program it came from, with `kiln eval`.

`kiln eval --precision f64` evaluates a spec on Kiln's seeded inputs and prints per output its
mean, max |x| and checksum Σ (1 + e mod 7)·x_e. `compare_with_module` rebuilds those inputs
(inputs.py), binds them to a float64 copy of the module (the call's arguments and the
parameters, by the spec's input sources), runs it, and compares the same three statistics. Both
sides compute in float64, so they agree to rounding (relative 1e-9 of the statistic's scale);
a mapping that changed the function differs by far more.
"""
from __future__ import annotations

import copy
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Union

import torch
import torch.nn as nn

from .cli import EvalStats, eval_stats
from .inputs import random_inputs
from .spec import Spec

__all__ = ["compare_with_module", "Comparison"]


@dataclass
class Comparison:
    """The statistics of one output by kiln (`kiln`) and by PyTorch (`torch`), and the worst
    difference relative to each statistic's scale."""
    output: int
    kiln: EvalStats
    torch: EvalStats
    error: float


def _stats(name: str, t: torch.Tensor) -> EvalStats:
    x = t.detach().double().flatten()
    w = torch.tensor([1 + e % 7 for e in range(x.numel())], dtype=torch.float64)
    return EvalStats(name, list(t.shape), "f64", x.mean().item(), x.abs().max().item(),
                     (w * x).sum().item())


def _error(k: EvalStats, t: EvalStats, x: torch.Tensor) -> float:
    x = x.detach().double().flatten()
    w = torch.tensor([1 + e % 7 for e in range(x.numel())], dtype=torch.float64)
    scales = [x.abs().mean().item(), t.maxabs, (w * x.abs()).sum().item()]
    diffs = [abs(k.mean - t.mean), abs(k.maxabs - t.maxabs), abs(k.checksum - t.checksum)]
    return max(d / max(s, 1e-300) for d, s in zip(diffs, scales))


def module_on_kiln_inputs(spec: Spec, fn: Union[nn.Module, Callable[..., Any]],
                          example_inputs: Sequence[Any], seed: int = 1,
                          input_std: float = 0.0) -> List[torch.Tensor]:
    """The outputs of `fn` in float64 on the inputs `kiln eval --seed SEED` generates for
    `spec`: arguments and parameters that are spec inputs get Kiln's values; other arguments
    keep their example values (in float64)."""
    gen = random_inputs(spec.data, seed, input_std)
    names = [i["name"] for i in spec.data["inputs"]]
    args = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in example_inputs]
    f = fn
    if isinstance(fn, nn.Module):
        f = copy.deepcopy(fn).double()
        tensors = dict(f.named_parameters())
        tensors.update(dict(f.named_buffers()))
    for name, src in zip(names, spec.sources):
        value = gen[name].double()
        if src.kind == "arg":
            args[src.index] = value
        elif src.kind == "param":
            with torch.no_grad():
                tensors[src.qualname].data = value
        else:
            raise ValueError(f"input {name} is a tensor constant of the trace; cannot bind it")
    with torch.no_grad():
        out = f(*args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def compare_with_module(spec: Spec, fn: Union[nn.Module, Callable[..., Any]],
                        example_inputs: Sequence[Any], *, seed: int = 1, input_std: float = 0.0,
                        kiln: Optional[str] = None) -> List[Comparison]:
    """`kiln eval` of the spec against `fn` on the same inputs, output by output."""
    with tempfile.TemporaryDirectory(prefix="kiln_eval_") as d:
        path = spec.write(os.path.join(d, f"{spec.name}.json"))
        kiln_stats = eval_stats(path, seed=seed, input_std=input_std, kiln=kiln)
    outs = module_on_kiln_inputs(spec, fn, example_inputs, seed, input_std)
    if len(outs) != len(kiln_stats):
        raise AssertionError(f"kiln eval printed {len(kiln_stats)} outputs, the module returned "
                             f"{len(outs)}")
    result = []
    for k, (ks, t) in enumerate(zip(kiln_stats, outs)):
        ts = _stats(ks.name, t)
        if list(t.shape) != ks.shape:
            raise AssertionError(f"output {k}: kiln's shape {ks.shape}, PyTorch's "
                                 f"{list(t.shape)}")
        result.append(Comparison(k, ks, ts, _error(ks, ts, t)))
    return result
