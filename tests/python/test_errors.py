"""kiln.to_spec's errors: every program spec/1 cannot express fails with KilnUnsupported that
names the op and the line of the user's code (the line marked `# <- unsupported` below), never
with a silently different spec. Needs only PyTorch (no kiln CLI).

Run: python3 tests/python/test_errors.py   (CTest: python_to_spec_errors)
"""
from __future__ import annotations

import inspect
import os
import sys
import unittest
from typing import Any, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    print("SKIP: PyTorch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(0)

import kiln  # noqa: E402
from kiln import KilnUnsupported  # noqa: E402

S = (4, 8)


class Cumsum(nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.cumsum(y, 0)  # <- unsupported


class Unsqueeze(nn.Module):
    def forward(self, x):
        return x.unsqueeze(0) * 2  # <- unsupported


class Slice(nn.Module):
    def forward(self, x):
        return x[0] + 1  # <- unsupported


class Where(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, x * 2)  # <- unsupported


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3)

    def forward(self, x):
        return self.conv(x)  # <- unsupported


class Elu(nn.Module):
    def forward(self, x):
        return F.elu(x)  # <- unsupported


class Pow25(nn.Module):
    def forward(self, x):
        return x.pow(2.5)  # <- unsupported


class Reshape(nn.Module):
    def forward(self, x):
        return x.reshape(8, 4) + 1  # <- unsupported


class Vector(nn.Module):
    def forward(self, x, v):
        return x @ v  # <- unsupported


class TrainDropout(nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.1, training=True)  # <- unsupported


class MixedOut(nn.Module):
    def forward(self, x, y):
        return y - x  # <- unsupported


class LayerNorm2d(nn.Module):
    def forward(self, x):
        return F.layer_norm(x, (4, 8))  # <- unsupported


class SoftmaxNoDim(nn.Module):
    def forward(self, x):
        return F.softmax(x)  # <- unsupported


class InplaceReused(nn.Module):
    def forward(self, x):
        y = x * 2
        z = F.relu(y, inplace=True)  # <- unsupported
        return z + y


class Float64(nn.Module):
    def forward(self, x):
        return x * 2  # <- unsupported


class GeluSigmoid(nn.Module):
    def forward(self, x):
        return F.gelu(x) * torch.erf(x)  # <- unsupported


class AbsOf(nn.Module):
    def forward(self, x):
        return torch.abs(x)  # <- unsupported


class ClampTensor(nn.Module):
    def forward(self, x, lo):
        return torch.clamp(x, min=lo)  # <- unsupported


class MaxIndices(nn.Module):
    def forward(self, x):
        return torch.max(x, dim=1)[1] * 1.0  # <- unsupported


class Rank5(nn.Module):
    def forward(self, x):
        return x * 2  # <- unsupported


def _line(cls: type) -> int:
    lines, start = inspect.getsourcelines(cls)
    for k, text in enumerate(lines):
        if "# <- unsupported" in text:
            return start + k
    raise AssertionError(f"{cls.__name__} has no marked line")


# (program, example input shapes and dtypes, op named in the message, a phrase of the reason)
CASES: List[Tuple[type, Sequence[Any], str, str]] = [
    (Cumsum, [S], "torch.cumsum", "no scan"),
    (Unsqueeze, [S], "Tensor.unsqueeze", "no reshape"),
    (Slice, [S], "operator.getitem", "indexing or slicing"),
    (Where, [S], "operator.gt", "no op for it"),
    (Conv, [(1, 4, 8)], "nn.Conv1d", "no convolution"),
    (Elu, [S], "torch.nn.functional.elu", "no op for it"),
    (Pow25, [S], "Tensor.pow", "exponent 2.5"),
    (Reshape, [S], "Tensor.reshape", "reshape of [4, 8] to [8, 4]"),
    (Vector, [S, (8,)], "operator.matmul", "rank >= 2"),
    (TrainDropout, [S], "torch.nn.functional.dropout", "training mode"),
    (MixedOut, [S, (S, torch.float16)], "operator.sub", "spec/1 makes it"),
    (LayerNorm2d, [S], "torch.nn.functional.layer_norm", "last dim only"),
    (SoftmaxNoDim, [S], "torch.nn.functional.softmax", "without dim"),
    (InplaceReused, [S], "torch.nn.functional.relu", "read again"),
    (Float64, [(S, torch.float64)], "operator.mul", "float16, bfloat16 or float32"),
    (GeluSigmoid, [S], "torch.erf", "no erf"),
    (AbsOf, [S], "torch.abs", "no abs"),
    (ClampTensor, [S, S], "torch.clamp", "tensor min"),
    (MaxIndices, [S], "operator.getitem", "argmax"),
    (Rank5, [(1, 2, 2, 2, 2)], "operator.mul", "rank 0 to 4"),
]


def _inputs(shapes: Sequence[Any]) -> List[torch.Tensor]:
    out = []
    for s in shapes:
        shape, dtype = (s if isinstance(s[-1], torch.dtype) else (s, torch.float32))
        out.append(torch.randn(shape, dtype=dtype))
    return out


class Errors(unittest.TestCase):
    def test_each_unsupported_op(self) -> None:
        for cls, shapes, op, phrase in CASES:
            with self.subTest(program=cls.__name__):
                with self.assertRaises(KilnUnsupported) as cm:
                    kiln.to_spec(cls(), _inputs(shapes), check=False)
                e = cm.exception
                msg = str(e)
                self.assertEqual(e.op, op, msg)
                self.assertIn(phrase, msg)
                self.assertIn(f"{os.path.basename(__file__)}:{_line(cls)}:", msg)
                self.assertIn("# <- unsupported", msg)  # the line's code is quoted
                self.assertTrue(msg.startswith(f"kiln: cannot map {op}"), msg)

    def test_error_names_fx_node_and_target(self) -> None:
        with self.assertRaises(KilnUnsupported) as cm:
            kiln.to_spec(Cumsum(), _inputs([S]), check=False)
        self.assertEqual(cm.exception.node, "cumsum")
        self.assertIn("cumsum", cm.exception.target)

    def test_a_plain_function_too(self) -> None:
        def program(x):
            return torch.sort(x).values  # <- here
        with self.assertRaises(KilnUnsupported) as cm:
            kiln.to_spec(program, _inputs([S]), check=False)
        lines, start = inspect.getsourcelines(program)
        self.assertIn(f":{start + 1}:", str(cm.exception))
        self.assertEqual(cm.exception.op, "torch.sort")

    def test_mixed_dtypes_of_a_commutative_op(self) -> None:
        """f16 + f32 is f32 in PyTorch: the operands are swapped so the spec's dtype agrees."""
        spec = kiln.to_spec(lambda h, f: h + f, _inputs([(S, torch.float16), S]), check=False)
        self.assertEqual(spec.data["nodes"][-1]["inputs"], ["f", "h"])

    def test_untraceable_program(self) -> None:
        class Branchy(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x
                return -x
        with self.assertRaises(kiln.KilnError) as cm:
            kiln.to_spec(Branchy(), _inputs([S]), check=False)
        self.assertIn("could not trace", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=1)
