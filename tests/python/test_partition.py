"""kiln.backend's partitioning on the CPU (torch 1.13 has no torch.compile, so a symbolic_trace
graph stands in for Dynamo's): an op Kiln cannot map splits the graph into the largest
subgraphs around it, the fused graph computes what the original does, and each partition's spec
agrees with its submodule under `kiln eval`.

Run: KILN=build/kiln python3 tests/python/test_partition.py   (CTest: python_partition)
"""
from __future__ import annotations

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

try:
    import torch
    import torch.fx as fx
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    print("SKIP: PyTorch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(0)

import kiln  # noqa: E402
from kiln.cli import find_kiln  # noqa: E402
from kiln.dynamo import partition  # noqa: E402
from kiln.evalcheck import compare_with_module  # noqa: E402

KILN = find_kiln()


class Split(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        y = F.silu(self.a(x)) * 2
        z = torch.cumsum(y, 0)  # not in spec/1: a partition boundary
        return self.b(z).softmax(-1), y.sum(-1)


class Partition(unittest.TestCase):
    def test_split_around_an_unsupported_op(self) -> None:
        m = Split().eval()
        x = torch.randn(4, 8)
        fused, parts = partition(fx.symbolic_trace(m), [x])
        self.assertEqual([t for t, _, _ in parts], ["fused_0", "fused_1"])
        calls = [n.target for n in fused.graph.nodes if n.op in ("call_module", "call_function")]
        self.assertIn(torch.cumsum, calls)
        for a, b in zip(m(x), fused(x)):
            self.assertTrue(torch.allclose(a, b))
        ops_of = {}
        for target, sub, inputs in parts:
            self.assertTrue(all(i.device.type == "meta" for i in inputs))
            spec = kiln.to_spec(sub, inputs, name=target, check=False)
            ops_of[target] = [n["op"] for n in spec.data["nodes"]]
            if KILN is not None:
                real = [torch.randn(i.shape) for i in inputs]
                for c in compare_with_module(spec, sub, real, kiln=KILN):
                    self.assertLess(c.error, 2e-6, f"{target}: {c}")
        self.assertEqual(ops_of["fused_0"], ["transpose", "matmul", "add", "silu", "constant",
                                             "mul", "sum"])
        self.assertEqual(ops_of["fused_1"], ["transpose", "matmul", "add", "softmax"])

    def test_nothing_to_partition(self) -> None:
        def program(x):
            return torch.cumsum(x, 0)
        x = torch.randn(4, 8)
        fused, parts = partition(fx.symbolic_trace(program), [x])
        self.assertEqual(parts, [])


if __name__ == "__main__":
    unittest.main(verbosity=1)
