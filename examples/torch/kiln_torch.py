"""Build a Kiln-emitted .cu into a PyTorch extension and use it as a torch.library custom op.

    import kiln_torch
    lora = kiln_torch.load_op("lora", "kiln_lora.cu")   # the op torch.ops.kiln.lora
    O = lora(X, W, A, B)        # f16 CUDA tensors of the spec's shapes; eager, torch.compile, CUDA graphs

`load_op` compiles the emitted file with its glue (NAME_op.cpp: argument checks, launch on the
current stream, workspace from PyTorch's allocator) through torch.utils.cpp_extension.load, loads
it (the glue registers kiln::NAME with TORCH_LIBRARY_FRAGMENT) and registers the fake (meta)
implementation that torch.compile traces with. README.md beside this file has the whole recipe.
"""
from __future__ import annotations

import os
import pathlib
import subprocess

import torch

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent

# What each glue file expects, from the ABI in the emitted file's header comment: the inputs in
# order (name, shape), the output's shape, the dtype, and the graphs that `kiln emit` is given.
OPS = {
    "lora": {
        "mugraph": "examples/lora.mugraph.json",
        "spec": "examples/lora.json",
        "inputs": [("X", (16, 256)), ("W", (256, 4096)), ("A", (256, 16)), ("B", (16, 4096))],
        "output": (16, 4096),
        "dtype": torch.float16,
    },
    "rmsnorm_linear": {
        "mugraph": "examples/rmsnorm_linear.mugraph.json",
        "spec": "examples/rmsnorm_linear.json",
        "inputs": [("X", (2, 4096)), ("W", (4096, 6144))],
        "output": (2, 6144),
        "dtype": torch.float16,
    },
}

# The spec tolerance for an f16 output (docs/interpreter.md, spec_tolerance): relative L2 error
# against the float64 reference.
F16_TOLERANCE = 5e-3


def emit(name: str, kiln: str | os.PathLike, out_dir: str | os.PathLike) -> pathlib.Path:
    """Writes out_dir/kiln_NAME.cu with `kiln emit` (verified against the spec first)."""
    op = OPS[name]
    out = pathlib.Path(out_dir) / f"kiln_{name}.cu"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(kiln), "emit", str(REPO / op["mugraph"]), "--spec", str(REPO / op["spec"]),
                    "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def gencode_flags(device=None) -> list[str]:
    """nvcc flags for the GPU at hand: sm_90a on Hopper (the emitted file's Hopper paths need the
    arch-specific target), else the device's own compute capability. Any flag naming an arch
    keeps torch.utils.cpp_extension from adding its own TORCH_CUDA_ARCH_LIST flags."""
    major, minor = torch.cuda.get_device_capability(device)
    arch = "90a" if (major, minor) == (9, 0) else f"{major}{minor}"
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


# torch.utils.cpp_extension compiles .cu files with -D__CUDA_NO_HALF_OPERATORS__ and friends; the
# emitted file is written for plain nvcc (its "Build:" line), so they are undefined again.
_CUDA_FLAGS = ["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]

_loaded: dict[str, object] = {}


def load_op(name: str, cu_path: str | os.PathLike, build_dir: str | os.PathLike | None = None,
            verbose: bool = False):
    """Compiles cu_path (an emitted kiln_NAME.cu) with NAME_op.cpp into one extension, loads it
    and returns torch.ops.kiln.NAME. One extension per emitted file: files emitted before
    `kiln emit --header` share runtime symbols and do not link into one library."""
    if name in _loaded:
        return _loaded[name]
    from torch.utils.cpp_extension import load

    if build_dir is not None:
        build_dir = pathlib.Path(build_dir) / name
        build_dir.mkdir(parents=True, exist_ok=True)
    load(name=f"kiln_{name}_op",
         sources=[str(HERE / f"{name}_op.cpp"), str(cu_path)],
         extra_cflags=["-O2"],
         extra_cuda_cflags=_CUDA_FLAGS + gencode_flags(),
         extra_include_paths=[str(HERE)],
         build_directory=None if build_dir is None else str(build_dir),
         is_python_module=False,  # a plain library: its TORCH_LIBRARY blocks register the ops
         verbose=verbose)
    _register_fake(name)
    _loaded[name] = getattr(torch.ops.kiln, name)
    return _loaded[name]


def check_inputs(name: str, inputs) -> None:
    """The glue's checks in Python, for the fake implementation (so torch.compile reports a bad
    call while tracing) and for callers: the same exception types and much the same messages."""
    op = OPS[name]
    qual = f"kiln::{name}"
    if len(inputs) != len(op["inputs"]):
        raise RuntimeError(f"{qual}: expected {len(op['inputs'])} inputs, got {len(inputs)}")
    device = inputs[0].device
    for (arg, shape), t in zip(op["inputs"], inputs):
        if t.device.type not in ("cuda", "meta"):
            raise RuntimeError(f"{qual}: {arg} must be a CUDA tensor, got a tensor on {t.device}")
        if t.device != device:
            raise RuntimeError(f"{qual}: all inputs must be on one device; {arg} is on "
                               f"{t.device}, the first input on {device}")
        if t.dtype != op["dtype"]:
            raise TypeError(f"{qual}: {arg} must be {op['dtype']}, got {t.dtype}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{qual}: {arg} must have shape {list(shape)}, got {list(t.shape)} "
                             f"(the kernel was emitted for these fixed shapes)")
        if not t.is_contiguous():
            raise RuntimeError(f"{qual}: {arg} must be contiguous (dense row-major), got strides "
                               f"{list(t.stride())}; call .contiguous() first")


def _fake(name: str, *inputs):
    check_inputs(name, inputs)
    return inputs[0].new_empty(OPS[name]["output"])


# One function per op with the schema's argument names (the fake implementation is called with
# the op's arguments).
def _fake_lora(X, W, A, B):
    return _fake("lora", X, W, A, B)


def _fake_rmsnorm_linear(X, W):
    return _fake("rmsnorm_linear", X, W)


_FAKES = {"lora": _fake_lora, "rmsnorm_linear": _fake_rmsnorm_linear}


def _register_fake(name: str) -> None:
    # torch >= 2.4: register_fake; 2.2 and 2.3: impl_abstract (the same thing, older name).
    register = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract
    register(f"kiln::{name}")(_FAKES[name])


# ----- references and inputs (for tests and examples) -----

def reference(name: str, *inputs) -> torch.Tensor:
    """The spec in float64 (on the inputs' device)."""
    t = [x.double() for x in inputs]
    if name == "lora":
        X, W, A, B = t
        return X @ W + (X @ A) @ B
    if name == "rmsnorm_linear":
        X, W = t
        return X / torch.sqrt((X * X).mean(dim=-1, keepdim=True) + 1e-6) @ W
    raise KeyError(name)


def torch_f16(name: str, *inputs) -> torch.Tensor:
    """The spec in plain PyTorch f16 ops (cuBLAS), the baseline the emitted kernel replaces."""
    if name == "lora":
        X, W, A, B = inputs
        return X @ W + (X @ A) @ B
    if name == "rmsnorm_linear":
        X, W = inputs
        if hasattr(torch.nn.functional, "rms_norm"):
            N = torch.nn.functional.rms_norm(X, (X.shape[-1],), eps=1e-6)
        else:
            Xf = X.float()
            N = (Xf * torch.rsqrt((Xf * Xf).mean(dim=-1, keepdim=True) + 1e-6)).half()
        return N @ W
    raise KeyError(name)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖₂ / ‖ref‖₂ in float64 (inf when out has a NaN or an inf)."""
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm()).item()


def make_inputs(name: str, kind: str, seed: int, device="cuda") -> list[torch.Tensor]:
    """Inputs of the op: kind "normal" (std 1) or "uniform" (on [-0.5, 0.5), the float check's
    uniform range), rounded to the op's dtype."""
    op = OPS[name]
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    out = []
    for _, shape in op["inputs"]:
        if kind == "normal":
            x = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
        elif kind == "uniform":
            x = torch.rand(shape, generator=g, device=device, dtype=torch.float32) - 0.5
        else:
            raise ValueError(kind)
        out.append(x.to(op["dtype"]))
    return out
