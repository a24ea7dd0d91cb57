"""kiln.compile's CPU half: the ABI read from files `kiln emit` writes, the generated glue, and
the optimize/emit step with its cache (`kiln.compile(..., build=False)`). The build/load half
needs nvcc and a GPU (examples/torch/llama_mlp.py, label gpu).

Run: KILN=build/kiln python3 tests/python/test_glue.py   (CTest: python_glue)
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(REPO, "python"))

try:
    import torch
    import torch.nn as nn
except ImportError:  # pragma: no cover
    print("SKIP: PyTorch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(0)

import kiln  # noqa: E402
from kiln.cli import find_kiln  # noqa: E402
from kiln.compiler import prepare  # noqa: E402
from kiln.glue import glue_source, read_abi, schema  # noqa: E402

KILN = find_kiln()

TWO = """{"format":"spec/1","name":"two","inputs":[{"name":"X","shape":[4,8],"dtype":"f16"},
 {"name":"s","shape":[],"dtype":"f32"}],"nodes":[{"name":"A","op":"softmax","inputs":["X"]},
 {"name":"B","op":"mul","inputs":["s","X"]}],"outputs":["A","B"]}"""


@unittest.skipIf(KILN is None, "no kiln CLI (set KILN=build/kiln)")
class Glue(unittest.TestCase):
    def emit(self, d: str, spec_text: str, name: str) -> str:
        spec = os.path.join(d, "s.json")
        with open(spec, "w") as f:
            f.write(spec_text)
        cu = os.path.join(d, "k.cu")
        subprocess.run([KILN, "emit", spec, "-o", cu, "--name", name], check=True,
                       capture_output=True)
        with open(cu) as f:
            return f.read()

    def test_abi_of_an_emitted_file(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            abi = read_abi(self.emit(d, TWO, "two_x"))
        self.assertEqual(abi.symbol, "kiln_two_x")
        self.assertEqual([(a.name, a.dtype, a.shape) for a in abi.inputs],
                         [("X", "f16", (4, 8)), ("s", "f32", ())])
        self.assertEqual([(a.name, a.dtype, a.shape) for a in abi.outputs],
                         [("A", "f16", (4, 8)), ("B", "f32", (4, 8))])
        self.assertEqual(schema("two", abi)[0], "two(Tensor X, Tensor s) -> (Tensor, Tensor)")
        src = glue_source("two", abi, "k.cu")
        self.assertIn('extern "C" cudaError_t kiln_two_x(const void* X, const void* s, void* A, '
                      'void* B, void* workspace, cudaStream_t stream);', src)
        self.assertIn("at::Tensor o1 = at::empty(std::vector<int64_t>{4, 8}, a0.options().dtype(at::kFloat));", src)
        self.assertIn("at::Tensor o0 = at::empty(std::vector<int64_t>{4, 8}, a0.options().dtype(at::kHalf));", src)
        self.assertIn('{"s", {}, at::kFloat},', src)
        self.assertIn("std::make_tuple(o0, o1)", src)

    def test_no_abi(self) -> None:
        with self.assertRaises(kiln.KilnError):
            read_abi("// not an emitted file\n")

    def test_prepare_with_a_given_cu_and_the_cache(self) -> None:
        """The emit step takes a .cu, checks its ABI against the spec, stores it by the spec's
        hash; a second prepare (optimize=False, as on a machine without kiln) finds it."""
        model = nn.Sequential(nn.Linear(8, 8, bias=False)).half()
        x = torch.randn(4, 8).half()
        spec = kiln.to_spec(model, [x], name="lin", check=False)
        with tempfile.TemporaryDirectory() as d:
            sp = spec.write(os.path.join(d, "lin.json"))
            cu = os.path.join(d, "lin.cu")
            subprocess.run([KILN, "emit", sp, "-o", cu], check=True, capture_output=True)
            cache = os.path.join(d, "cache")
            p1 = prepare(model, [x], name="lin", cu=cu, cache=cache, check=False)
            p2 = prepare(model, [x], name="other_name", cache=cache, check=False, optimize=False)
            self.assertEqual(p1.folder, p2.folder)
            self.assertTrue(os.path.isfile(p2.cu))
            with self.assertRaises(kiln.KilnError) as cm:  # another shape: no kernel yet
                prepare(model, [torch.randn(2, 8).half()], cache=cache, check=False,
                        optimize=False)
            self.assertIn("kiln optimize", str(cm.exception))
            bad = os.path.join(d, "bad.cu")  # a kernel of other shapes is refused
            with open(bad, "w") as f:
                f.write(self.emit(d, TWO, "two"))
            with self.assertRaises(kiln.KilnError):
                prepare(model, [x], cu=bad, cache=os.path.join(d, "c2"), check=False)


class CacheKey(unittest.TestCase):
    """The compile cache's key: one program, one key, whichever way a tracer ordered the operands
    of a commutative op; a different program (or a swap that changes a result dtype) another."""

    @staticmethod
    def key(a: str, b: str, op: str = "mul", da: str = "f16", db: str = "f16") -> str:
        from kiln.spec import Spec
        data = {"format": "spec/1", "name": "k",
                "inputs": [{"name": "x", "shape": [4, 8], "dtype": da},
                           {"name": "y", "shape": [4, 8], "dtype": db}],
                "nodes": [{"name": "e", "op": "exp", "inputs": ["x"]},
                          {"name": "r", "op": op, "inputs": [a, b]}],
                "outputs": ["r"]}
        return Spec(data, []).canonical_hash()

    def test_commutative_operands(self) -> None:
        for op in ("add", "mul", "maximum", "minimum"):
            self.assertEqual(self.key("e", "y", op), self.key("y", "e", op), op)
        self.assertNotEqual(self.key("e", "y", "sub"), self.key("y", "e", "sub"))
        self.assertNotEqual(self.key("e", "y", "div"), self.key("y", "e", "div"))
        # f16 * f32 is f16, f32 * f16 is f32: two programs.
        self.assertNotEqual(self.key("e", "y", db="f32"), self.key("y", "e", db="f32"))
        self.assertNotEqual(self.key("e", "y"), self.key("e", "x"))

    def test_node_order(self) -> None:
        from kiln.spec import Spec

        def spec(nodes: list) -> str:
            return Spec({"format": "spec/1", "name": "k",
                         "inputs": [{"name": "x", "shape": [4, 8], "dtype": "f16"}],
                         "nodes": nodes, "outputs": ["r"]}, []).canonical_hash()
        a = {"name": "a", "op": "exp", "inputs": ["x"]}
        b = {"name": "b", "op": "sigmoid", "inputs": ["x"]}
        r = {"name": "r", "op": "sub", "inputs": ["a", "b"]}
        self.assertEqual(spec([a, b, r]), spec([b, a, r]))
        r2 = {"name": "r", "op": "sub", "inputs": ["b", "a"]}
        self.assertNotEqual(spec([a, b, r]), spec([a, b, r2]))


if __name__ == "__main__":
    unittest.main(verbosity=1)
