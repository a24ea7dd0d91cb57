"""kiln.to_spec on small programs: each spec is evaluated by `kiln eval` (float64, Kiln's seeded
inputs) and compared with the program's own float64 output on the same inputs, and checked by
`kiln verify` against a make_fx trace of the program where that trace maps. Every entry of the
op tables (python/kiln/ops.py) must be exercised by some case (test_every_mapped_op_is_tested).

Run: KILN=build/kiln python3 tests/python/test_to_spec.py   (CTest: python_to_spec)
"""
from __future__ import annotations

import math
import operator
import os
import sys
import unittest
from typing import Any, Callable, List, Sequence, Tuple

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
from kiln import ops  # noqa: E402
from kiln.cli import find_kiln  # noqa: E402
from kiln.evalcheck import compare_with_module  # noqa: E402

KILN = find_kiln()
# kiln eval prints 7 significant digits of the mean and max |x| (11 of the checksum): two float64
# computations of one function agree to that; a different function (gelu's other form, a wrong
# transpose, a missing bias) differs by orders of magnitude more.
TOLERANCE = 2e-6
aten = torch.ops.aten


def pos(x: torch.Tensor) -> torch.Tensor:
    """A positive tensor from any tensor (for log, sqrt, rsqrt, reciprocal)."""
    return x * x + 0.5


class Linear2(nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 8, bias=bias)

    def forward(self, x):
        return self.lin(x)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.act = nn.GELU(approximate="tanh")
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class Attention(nn.Module):
    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
        return torch.softmax(s, dim=-1) @ v


class HandRMSNorm(nn.Module):
    """The Llama way: upcast, mean of squares, rsqrt, downcast, weight."""

    def __init__(self, n: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n) + 0.1 * torch.randn(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


class GatedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(16, 24, bias=False)
        self.up = nn.Linear(16, 24, bias=False)
        self.down = nn.Linear(24, 16, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Act(nn.Module):
    """One activation module between two linears."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x):
        return self.act(x * 2)


class Buffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.rand(8) + 0.5)

    def forward(self, x):
        return x * self.scale


S = (4, 8)  # the default input shape
Case = Tuple[str, Any, List[Tuple[int, ...]], float]


def _cases() -> List[Case]:
    c: List[Case] = []

    def add(label: str, fn: Any, shapes: Sequence[Tuple[int, ...]] = (S,),
            tolerance: float = TOLERANCE) -> None:
        c.append((label, fn, list(shapes), tolerance))

    # elementwise, torch functions, F functions and methods
    for op in ["exp", "tanh", "sigmoid", "relu", "sin", "cos", "silu", "square"]:
        f = getattr(torch, op, None) or getattr(F, op)
        add(f"torch.{op}", lambda x, f=f: f(x))
        if hasattr(torch.Tensor, op):
            add(f"Tensor.{op}", lambda x, op=op: getattr(x, op)())
            add(f"Tensor.{op}_", lambda x, op=op: getattr(x * 1.5, op + "_")())
        add(f"aten.{op}", lambda x, op=op: getattr(aten, op).default(x))
        if hasattr(aten, op + "_"):
            add(f"aten.{op}_", lambda x, op=op: getattr(aten, op + "_").default(x * 1.5))
        if hasattr(F, op) and op not in ("tanh", "sigmoid"):
            add(f"F.{op}", lambda x, op=op: getattr(F, op)(x))
    for op in ["log", "sqrt", "rsqrt", "reciprocal"]:
        add(f"torch.{op}", lambda x, op=op: getattr(torch, op)(pos(x)))
        add(f"Tensor.{op}", lambda x, op=op: getattr(pos(x), op)())
        add(f"Tensor.{op}_", lambda x, op=op: getattr(pos(x), op + "_")())
        add(f"aten.{op}", lambda x, op=op: getattr(aten, op).default(pos(x)))
    add("F.relu inplace", lambda x: F.relu(x * 2, inplace=True))
    add("F.silu inplace", lambda x: F.silu(x - 1, inplace=True))
    for approx in ("none", "tanh"):
        add(f"F.gelu {approx}", lambda x, a=approx: F.gelu(x, approximate=a), [(4, 8)])
        add(f"aten.gelu {approx}", lambda x, a=approx: aten.gelu.default(x, approximate=a))
    add("F.gelu default", lambda x: F.gelu(x))
    add("F.leaky_relu", lambda x: F.leaky_relu(x, 0.2))
    add("aten.leaky_relu", lambda x: aten.leaky_relu.default(x, 0.3))
    add("clamp", lambda x: torch.clamp(x, -0.2, 0.3) + x.clamp(min=0.1) + torch.clip(x, max=0.2)
        + x.clip(-0.1, 0.1) + aten.clamp.default(x, -0.3) + aten.clip.default(x, None, 0.25))
    add("hardtanh", lambda x: F.hardtanh(x, -0.25, 0.25) + aten.hardtanh.default(x) +
        F.relu6(x * 8))
    add("softplus", lambda x: F.softplus(x) + F.softplus(x, beta=2.0) +
        aten.softplus.default(x))
    add("neg", lambda x: -x + torch.neg(x) * 2 + torch.negative(x) * 3 + x.neg() * 4 +
        x.negative() * 5 + aten.neg.default(x) * 6)
    add("pow", lambda x: x.pow(2) + x ** 3 + torch.pow(pos(x), 0.5) + pos(x) ** -0.5 +
        pos(x).pow(-1) + pos(x).__pow__(-2) + x ** 1 + aten.pow.Tensor_Scalar(x, 2))
    add("add", lambda x, y: torch.add(x, y, alpha=2) + x.add(y) + (x + 2.0) + (2.0 + y) +
        aten.add.Tensor(x, y, alpha=0.5), [S, S])
    add("sub", lambda x, y: torch.sub(x, y) + x.sub(y, alpha=3) + (x - 1.5) + (1.5 - y) +
        torch.subtract(x, y) + torch.rsub(x, y) + y.__rsub__(2.0) + aten.sub.Tensor(x, y) +
        aten.rsub.Scalar(x, 3.0), [S, S])
    add("mul", lambda x, y: torch.mul(x, y) + x.mul(y) + x * 3 + 3 * y + torch.multiply(x, y)
        + aten.mul.Tensor(x, y), [S, S])
    add("div", lambda x, y: torch.div(x, pos(y)) + x.div(pos(y)) + x / 4 + 1 / pos(y) +
        torch.true_divide(x, pos(y)) + torch.divide(x, 2.0) + x.true_divide(pos(y)) +
        aten.div.Tensor(x, pos(y)) + aten.true_divide.Tensor(x, pos(y)), [S, S])
    add("broadcast", lambda x, v: x * v + v, [(2, 4, 8), (8,)])
    add("maximum/minimum", lambda x, y: torch.maximum(x, y) + torch.minimum(x, y) +
        x.maximum(y) + x.minimum(y) + aten.maximum.default(x, y) + aten.minimum.default(x, y) +
        torch.max(x, y) + torch.min(x, y) + x.min(y) + x.max(y), [S, S])
    # matmul and layout
    add("matmul", lambda a, b: torch.matmul(a, b) + a @ b + a.matmul(b) +
        aten.matmul.default(a, b), [(4, 8), (8, 6)])
    add("matmul batched", lambda a, b: a @ b, [(2, 3, 4, 8), (8, 5)])
    add("mm", lambda a, b: torch.mm(a, b) + a.mm(b) + aten.mm.default(a, b), [(4, 8), (8, 6)])
    add("bmm", lambda a, b: torch.bmm(a, b) + a.bmm(b) + aten.bmm.default(a, b),
        [(2, 4, 8), (2, 8, 6)])
    add("F.linear", lambda x, w, b: F.linear(x, w, b) + F.linear(x, w) +
        aten.linear.default(x, w, b), [(4, 8), (6, 8), (6,)])
    add("addmm", lambda b, x, w: torch.addmm(b, x, w) + torch.addmm(b, x, w, beta=0.5, alpha=2)
        + b.addmm(x, w) + aten.addmm.default(b, x, w), [(6,), (4, 8), (8, 6)])
    add("transpose", lambda x: torch.transpose(x, 0, 1) @ x + x.transpose(-1, -2) @ x +
        x.t() @ x + torch.t(x) @ x + x.T @ x + torch.swapaxes(x, 0, 1) @ x +
        x.swapaxes(0, 1) @ x + aten.t.default(x) @ x + aten.transpose.int(x, 0, 1) @ x)
    add("permute", lambda x: x.permute(0, 2, 1) @ x + x.permute((0, 2, 1)) @ x +
        torch.permute(x, (0, 2, 1)) @ x + x.mT @ x + aten.permute.default(x, [0, 2, 1]) @ x,
        [(2, 4, 8)])
    add("identity layout ops", lambda x: x.contiguous() + x.clone() + torch.clone(x) +
        x.detach() + torch.detach(x) + x.reshape(4, 8) + x.view(-1, 8) + torch.reshape(x, S) +
        aten.view.default(x, [4, 8]) + aten.reshape.default(x, [4, 8]) +
        aten._unsafe_view.default(x, [4, 8]) + aten.clone.default(x) +
        aten.detach.default(x) + aten.alias.default(x) + aten.lift_fresh_copy.default(x) +
        aten.contiguous.default(x))
    add("casts", lambda x: (x.float() * 2 + x.double().float() + x.type(torch.float32) +
                            x.type_as(x) + aten._to_copy.default(x, dtype=torch.float32) +
                            x.to(x.dtype) + x.to(dtype=torch.float32) +
                            x.to("cpu", torch.float32) + aten.to.dtype(x, torch.float32)))
    # PyTorch rounds at a 16-bit cast; the spec does not (it rounds outputs only): the results
    # agree to the 16-bit rounding.
    add("casts to 16 bits", lambda x: (x.half().float() + x.to(torch.float16).float() +
                                       x.bfloat16().float()), tolerance=1e-2)
    add("dropout eval", lambda x: F.dropout(x, 0.5, training=False) + x)
    # reductions, softmax, norms
    add("sum", lambda x: torch.sum(x, -1, keepdim=True) + x.sum(0) + x.sum() +
        aten.sum.dim_IntList(x, [1], True) + x.sum((0, 1)), [(4, 8)])
    add("mean", lambda x: torch.mean(x, -1, keepdim=True) + x.mean(0) + x.mean() +
        aten.mean.dim(x, [1], True) + x.mean(dim=(0, 1), keepdim=True), [(4, 8)])
    add("amax", lambda x: torch.amax(x, -1, keepdim=True) + x.amax(0) + x.amax() +
        aten.amax.default(x, [1], True) + torch.max(x) + x.max(), [(4, 8)])
    add("max values", lambda x: torch.max(x, dim=-1, keepdim=True).values + x.max(1, True)[0])
    add("softmax", lambda x: F.softmax(x, dim=-1) + torch.softmax(x, 0) + x.softmax(-1) +
        aten._softmax.default(x, 1, False) + aten.softmax.int(x, 0))
    add("log_softmax", lambda x: F.log_softmax(x, dim=-1) + torch.log_softmax(x, 0) +
        x.log_softmax(-1) + aten._log_softmax.default(x, 1, False))
    add("F.layer_norm", lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5) +
        F.layer_norm(x, [8]) + F.layer_norm(x, (8,), w) + F.layer_norm(x, (8,), None, b) +
        aten.layer_norm.default(x, [8], w, b, 1e-3) +
        aten.native_layer_norm.default(x, [8], w, b, 1e-5)[0], [S, (8,), (8,)])
    if hasattr(aten, "rms_norm"):
        add("aten.rms_norm", lambda x, w: aten.rms_norm.default(x, [8], w, 1e-6), [S, (8,)])
    if hasattr(F, "rms_norm"):
        add("F.rms_norm", lambda x, w: F.rms_norm(x, (8,), w, 1e-5) + F.rms_norm(x, [8]),
            [S, (8,)])
    # Python-level plumbing: shapes, sizes, dims, math
    add("shape arithmetic", lambda x: x * (1.0 / math.sqrt(x.shape[-1])) + x.size(0) +
        x.size()[1] * x.dim() + x.ndim + operator.mul(x.shape[0], 2) - x.size(-1) // 2)
    # modules: the dozen small modules
    add("nn.Linear bias", Linear2(True), [(4, 16)])
    add("nn.Linear no bias", Linear2(False), [(4, 16)])
    add("nn.Linear 3d", Linear2(True), [(2, 3, 16)])
    add("two-layer MLP", MLP(), [(4, 16)])
    add("gated MLP", GatedMLP(), [(4, 16)])
    add("attention", Attention(), [(2, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8)])
    add("hand-written RMSNorm", HandRMSNorm(8), [S])
    add("nn.LayerNorm", Act(nn.LayerNorm(8)), [S])
    add("nn.LayerNorm no affine", Act(nn.LayerNorm(8, elementwise_affine=False)), [S])
    if hasattr(nn, "RMSNorm"):
        add("nn.RMSNorm", Act(nn.RMSNorm(8, eps=1e-5)), [S])
    add("buffers", Buffers(), [S])
    for act in [nn.SiLU(), nn.ReLU(), nn.Sigmoid(), nn.Tanh(), nn.GELU(), nn.LeakyReLU(0.1),
                nn.Softplus(), nn.Softmax(dim=-1), nn.LogSoftmax(dim=1), nn.ReLU6(),
                nn.Hardtanh(-0.3, 0.3), nn.Identity(), nn.Dropout(0.5).eval(),
                nn.ReLU(inplace=True)]:
        add(f"nn.{type(act).__name__}", Act(act), [S])
    add("multiple outputs", lambda x, y: (x @ y, torch.softmax(x, -1)), [(4, 8), (8, 8)])
    return c


def _as_function(fn: Callable[..., Any], n: int) -> Callable[..., Any]:
    """fx traces a function by its signature: give the lambda named parameters."""
    names = ", ".join(f"in{i}" for i in range(n))
    scope = {"fn": fn}
    exec(f"def program({names}):\n    return fn({names})\n", scope)
    return scope["program"]


@unittest.skipIf(KILN is None, "no kiln CLI (set KILN=build/kiln)")
class ToSpecCases(unittest.TestCase):
    """Each case: to_spec (checked against make_fx by kiln verify), then kiln eval against the
    program in float64, on uniform and std-1 normal inputs."""

    _failures: List[str] = []
    _ran = False

    def _run(self) -> List[str]:
        """Runs every case once per process (two tests read the outcome)."""
        if ToSpecCases._ran:
            return ToSpecCases._failures
        ToSpecCases._ran = True
        torch.manual_seed(0)
        failures = ToSpecCases._failures
        for label, fn, shapes, tolerance in _cases():
            with self.subTest(case=label):
                program = fn if isinstance(fn, nn.Module) else _as_function(fn, len(shapes))
                if isinstance(program, nn.Module):
                    program.eval()
                inputs = [torch.randn(s) for s in shapes]
                spec = kiln.to_spec(program, inputs, name="case", kiln=KILN)
                self.assertFalse(spec.check.startswith("skipped: kiln verify"), spec.check)
                for std in (0.0, 1.0):
                    for cmp in compare_with_module(spec, program, inputs, input_std=std,
                                                   kiln=KILN):
                        if cmp.error > tolerance:
                            failures.append(f"{label} (std {std}) output {cmp.output}: "
                                            f"kiln {cmp.kiln} vs torch {cmp.torch}")
        return failures

    def test_cases(self) -> None:
        self.assertEqual(self._run(), [])

    def test_every_mapped_op_is_tested(self) -> None:
        """Each entry of the op tables was used by a case above (run in this process)."""
        self._run()
        missing = []
        for key, entry in ops.FUNCTIONS.items():
            if ("functions", key) not in ops.USED:
                missing.append(f"function {entry.name} ({key})")
        for key in ops.METHODS:
            if ("methods", key) not in ops.USED:
                missing.append(f"method Tensor.{key}")
        for key in ops.ATEN:
            if ("aten", key) not in ops.USED and hasattr(aten, key):
                missing.append(f"aten.{key}")
        for cls, (name, _) in ops.MODULES.items():
            if ("modules", cls) not in ops.USED:
                missing.append(name)
        self.assertEqual(missing, [], "mapped ops without a test")

    def test_the_check_catches_a_different_function(self) -> None:
        """The comparison is not vacuous: a spec of erf GELU against a tanh-GELU program fails."""
        prog = _as_function(lambda x: F.gelu(x, approximate="tanh"), 1)
        x = torch.randn(S)
        spec = kiln.to_spec(prog, [x], kiln=KILN, check=False)
        other = _as_function(lambda x: F.gelu(x), 1)
        errors = [c.error for c in compare_with_module(spec, other, [x], kiln=KILN)]
        self.assertGreater(max(errors), 10 * TOLERANCE)


class ToSpecOutput(unittest.TestCase):
    """The spec itself: parameters as named inputs with their real shapes and dtypes."""

    def test_parameters_are_named_inputs(self) -> None:
        m = GatedMLP().half()
        spec = kiln.to_spec(m, [torch.randn(4, 16).half()], name="mlp", check=False)
        inputs = {i["name"]: (i["shape"], i["dtype"]) for i in spec.data["inputs"]}
        self.assertEqual(inputs, {"x": ([4, 16], "f16"), "gate_weight": ([24, 16], "f16"),
                                  "up_weight": ([24, 16], "f16"),
                                  "down_weight": ([16, 24], "f16")})
        self.assertEqual([s.qualname for s in spec.sources if s.kind == "param"],
                         ["gate.weight", "up.weight", "down.weight"])
        self.assertEqual(spec.data["outputs"], ["out"])

    def test_linear_is_transpose_matmul_add(self) -> None:
        spec = kiln.to_spec(Linear2(True), [torch.randn(4, 16)], check=False)
        self.assertEqual([n["op"] for n in spec.data["nodes"]], ["transpose", "matmul", "add"])

    def test_hash_ignores_names(self) -> None:
        a = kiln.to_spec(_as_function(lambda x, y: x @ y, 2), [torch.randn(4, 8),
                                                               torch.randn(8, 2)], check=False)
        b = kiln.to_spec(lambda p, q: torch.matmul(p, q), [torch.randn(4, 8),
                                                           torch.randn(8, 2)], check=False)
        c = kiln.to_spec(lambda p, q: torch.matmul(p, q), [torch.randn(4, 8),
                                                           torch.randn(8, 3)], check=False)
        self.assertEqual(a.canonical_hash(), b.canonical_hash())
        self.assertNotEqual(a.canonical_hash(), c.canonical_hash())

    def test_write(self) -> None:
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.json")
            kiln.to_spec(HandRMSNorm(8), [torch.randn(S)], path=path, check=False)
            with open(path) as f:
                self.assertEqual(json.load(f)["format"], "spec/1")


if __name__ == "__main__":
    unittest.main(verbosity=1)
