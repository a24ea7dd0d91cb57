"""Kiln's seeded input generator (docs/interpreter.md, "The input generator") in Python.

`kiln eval SPEC --seed S [--input-std SD]` evaluates a spec on these inputs; `random_inputs`
rebuilds the same tensors bit for bit, so a PyTorch module can be run on exactly what `kiln eval`
ran the spec on and the two results compared (tests/python). Input i of the spec, element e
(row-major) under seed s: splitmix64's finalizer over s, i and e, as the doc writes it.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import torch

from .spec import torch_dtype

__all__ = ["random_tensor", "random_inputs"]

_G = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def random_tensor(shape: List[int], dtype: str, seed: int, index: int,
                  normal_std: float = 0.0) -> torch.Tensor:
    """Input `index` of a spec under `seed`: uniform on [-0.5, 0.5) (normal_std 0) or the
    Irwin-Hall normal of standard deviation normal_std, rounded to `dtype` (nearest-even)."""
    n = int(np.prod(shape)) if shape else 1
    with np.errstate(over="ignore"):
        stream = _mix(np.array([seed], dtype=np.uint64) + _G * np.uint64(index + 1))[0]
        e = np.arange(n, dtype=np.uint64)
        if normal_std <= 0:
            h = _mix(stream + _G * (e + np.uint64(1)))
            k = (h >> np.uint64(40)).astype(np.int64) - (1 << 23)
            k[k == 0] = 1
            x = k.astype(np.float32) * np.float32(2.0 ** -24)
        else:
            ns = _mix(np.array([stream ^ np.uint64(0x6E6F726D616C)], dtype=np.uint64))[0]
            total = np.zeros(n, dtype=np.int64)
            for j in range(12):
                u = _mix(ns + _G * (np.uint64(12) * e + np.uint64(j + 1))) >> np.uint64(44)
                total += u.astype(np.int64)
            s = total - 6 * (1 << 20)
            s[s == 0] = 1
            x = s.astype(np.float32) * np.float32(2.0 ** -20)
            x = (x * np.float32(normal_std)).astype(np.float32)
    t = torch.from_numpy(x.reshape(shape) if shape else x.reshape(()))
    return t.to(torch_dtype(dtype))


def random_inputs(spec_data: Dict[str, Any], seed: int = 1,
                  normal_std: float = 0.0) -> Dict[str, torch.Tensor]:
    """Every input of a spec (its JSON object), by name, as `kiln eval` generates them."""
    return {i["name"]: random_tensor(i["shape"], i["dtype"], seed, k, normal_std)
            for k, i in enumerate(spec_data["inputs"])}
