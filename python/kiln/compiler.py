"""`kiln.compile`: from a module to a callable that runs Kiln's kernel, in two steps that may run on
two machines.

    prepare(fn, example_inputs)  -> Prepared   the optimize/emit step: to_spec, then the .cu from
                                               the cache, from `cu=`, or from `kiln optimize` (the
                                               CLI, on the CPU host; its progress is shown)
    load(prepared)               -> op         the build/load step: the ABI of the .cu, generated
                                               glue, torch.utils.cpp_extension (nvcc), the custom
                                               op kiln::OP with its fake implementation
    compile(fn, example_inputs)  -> KilnCompiled (both, with the module's parameters bound)

The cache is a directory (KILN_TORCH_CACHE, default ~/.cache/kiln/torch) with one folder per
spec, named by `Spec.canonical_hash()`: `spec.json`, `kernel.cu` (the emitted file) and the
extension's build folder. A second compile of the same program in one process returns the loaded
op at once; in a new process it finds the .cu and the built extension (no kiln, no nvcc run). To
use the GPU of a machine without the kiln CLI, run `prepare` (or `kiln.compile(...,
build=False)`) where kiln is, and carry the cache folder: `load` needs only nvcc and PyTorch.
Shapes are static: the kernel takes exactly the shapes of the example inputs.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn

from . import cli
from .errors import KilnError
from .frontend import to_spec
from .glue import Abi, glue_source, read_abi
from .spec import Spec, torch_dtype

__all__ = ["compile", "prepare", "load", "Prepared", "KilnCompiled", "cache_dir"]

_LOADED: Dict[str, Any] = {}


def cache_dir(path: Optional[str] = None) -> str:
    """The cache root: `path`, $KILN_TORCH_CACHE, or ~/.cache/kiln/torch."""
    return path or os.environ.get("KILN_TORCH_CACHE") or \
        os.path.join(os.path.expanduser("~"), ".cache", "kiln", "torch")


@dataclass
class Prepared:
    """A spec with its emitted kernel: `folder` is the cache folder of the spec's hash, `cu`
    the emitted file in it, `op` the custom op's name (kiln::OP)."""
    spec: Spec
    key: str
    folder: str
    cu: str

    @property
    def op(self) -> str:
        """Named by the hash only: kiln.compile and kiln.backend share one op (and one build)
        for one computation, whatever its spec is called."""
        return f"k_{self.key}"


def prepare(fn: Any, example_inputs: Sequence[Any], *, name: Optional[str] = None,
            spec: Optional[Spec] = None, cu: Optional[str] = None, cache: Optional[str] = None,
            kiln: Optional[str] = None, time_limit: Optional[float] = None,
            optimize_args: Optional[List[str]] = None, check: Union[bool, str] = "auto",
            optimize: bool = True) -> Prepared:
    """The optimize/emit step (see the module doc). `cu` takes a file `kiln emit`/`optimize`
    wrote for this spec instead of running kiln; `optimize=False` fails with the command to run
    where the cache has no kernel for the spec (for machines without the kiln CLI)."""
    if spec is None:
        spec = to_spec(fn, example_inputs, name=name, check=check, kiln=kiln)
    key = spec.canonical_hash()
    folder = os.path.join(cache_dir(cache), key)
    os.makedirs(folder, exist_ok=True)
    spec_path = spec.write(os.path.join(folder, "spec.json"))
    kernel = os.path.join(folder, "kernel.cu")
    if cu is not None:
        if os.path.abspath(cu) != os.path.abspath(kernel):
            shutil.copyfile(cu, kernel)
    elif not os.path.isfile(kernel):
        if not optimize or cli.find_kiln(kiln) is None:
            raise KilnError(
                f"kiln: no kernel for spec {spec.name} (hash {key}) in {folder}, and "
                f"{'optimize=False' if not optimize else 'no kiln CLI here'}; on a machine "
                f"with kiln run:\n  kiln optimize {spec_path} -o OUT && cp OUT/*.cu "
                f"{kernel}\n(or kiln.compile there and carry the cache folder)")
        out = os.path.join(folder, "optimize")
        print(f"kiln.compile: optimizing {spec.name} (spec hash {key}); the search's progress "
              f"follows", file=sys.stderr, flush=True)
        emitted = cli.optimize(spec_path, out, kiln=kiln, time_limit=time_limit,
                               extra=optimize_args)
        shutil.copyfile(emitted, kernel)
    _check_abi(spec, read_abi(_read(kernel), kernel), kernel)
    return Prepared(spec, key, folder, kernel)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _check_abi(spec: Spec, abi: Abi, path: str) -> None:
    """The emitted file must take the spec's inputs and outputs, position by position (names may
    differ: the cache is keyed by what is computed, not by names)."""
    want_in = [(tuple(i["shape"]), _dt(i["dtype"])) for i in spec.data["inputs"]]
    got_in = [(a.shape, a.dtype) for a in abi.inputs]
    if want_in != got_in:
        raise KilnError(f"kiln: {path} takes inputs {got_in}, the spec {want_in}")
    if len(abi.outputs) != len(spec.data["outputs"]):
        raise KilnError(f"kiln: {path} has {len(abi.outputs)} outputs, the spec "
                        f"{len(spec.data['outputs'])}")


def _dt(d: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}.get(d, d)


# torch.utils.cpp_extension compiles .cu files with -D__CUDA_NO_HALF_OPERATORS__ and friends; the
# emitted file is written for plain nvcc (its "Build:" line), so they are undefined again.
_CUDA_FLAGS = ["-O3", "-U__CUDA_NO_HALF_OPERATORS__",
               "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
               "-U__CUDA_NO_BFLOAT16_CONVERSIONS__"]


def gencode_flags(device: Any = None) -> List[str]:
    """sm_90a on Hopper (the emitted Hopper paths need the arch-specific target), else the
    device's own compute capability."""
    major, minor = torch.cuda.get_device_capability(device)
    arch = "90a" if (major, minor) == (9, 0) else f"{major}{minor}"
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def load(prep: Prepared, *, verbose: bool = False) -> Any:
    """The build/load step: glue from the ABI, one extension (cached by cpp_extension in the
    spec's folder), the fake implementation; returns torch.ops.kiln.OP."""
    op = prep.op
    if op in _LOADED:
        return _LOADED[op]
    from torch.utils.cpp_extension import load as load_extension
    abi = read_abi(_read(prep.cu), prep.cu)
    build = os.path.join(prep.folder, "build")
    os.makedirs(build, exist_ok=True)
    glue = os.path.join(prep.folder, "glue.cpp")
    text = glue_source(op, abi, os.path.basename(prep.cu))
    if not os.path.isfile(glue) or _read(glue) != text:
        with open(glue, "w", encoding="utf-8") as f:
            f.write(text)
    load_extension(name=f"kiln_{op}", sources=[glue, prep.cu], extra_cflags=["-O2"],
                   extra_cuda_cflags=_CUDA_FLAGS + gencode_flags(),
                   extra_include_paths=[os.path.join(cli.REPO, "examples", "torch")],
                   build_directory=build, is_python_module=False, verbose=verbose)
    _register_fake(op, abi)
    _LOADED[op] = getattr(torch.ops.kiln, op)
    return _LOADED[op]


def _register_fake(op: str, abi: Abi) -> None:
    """The meta implementation torch.compile traces with: the glue's shape/dtype checks on fake
    tensors, then empty outputs of the ABI's shapes and dtypes."""
    names = [f"a{i}" for i in range(len(abi.inputs))]
    want = [(a.name, a.shape, torch_dtype(a.dtype)) for a in abi.inputs]
    outs = [(a.shape, torch_dtype(a.dtype)) for a in abi.outputs]

    def fake(*args: torch.Tensor) -> Any:
        for (arg, shape, dtype), t in zip(want, args):
            if t.dtype != dtype:
                raise TypeError(f"kiln::{op}: {arg} must be {dtype}, got {t.dtype}")
            if tuple(t.shape) != shape:
                raise ValueError(f"kiln::{op}: {arg} must have shape {list(shape)}, got "
                                 f"{list(t.shape)} (the kernel was emitted for these shapes)")
        res = [args[0].new_empty(s, dtype=d) for s, d in outs]
        return res[0] if len(res) == 1 else tuple(res)

    # A function with the schema's arity (the fake implementation gets the op's arguments).
    scope = {"fake": fake}
    exec(f"def fake_{op}({', '.join(names)}):\n    return fake({', '.join(names)})\n", scope)
    register = getattr(torch.library, "register_fake", None) or \
        getattr(torch.library, "impl_abstract")
    register(f"kiln::{op}")(scope[f"fake_{op}"])


class KilnCompiled:
    """The compiled program: call it with the traced call's arguments (the module's parameters
    are bound); `bench(...)` times the bare kernel on the same arguments. Holds the `spec`, the
    cache `folder` and the loaded `op`."""

    def __init__(self, prep: Prepared, op: Any, fn: Any) -> None:
        self.spec = prep.spec
        self.folder = prep.folder
        self.op = op
        self._bench = getattr(torch.ops.kiln, f"{prep.op}_bench")
        bound: Dict[str, torch.Tensor] = {}
        if isinstance(fn, nn.Module):
            bound.update({q: t.detach() for q, t in fn.named_parameters()})
            bound.update({q: t.detach() for q, t in fn.named_buffers()})
        self._plan: List[Callable[[Sequence[Any]], torch.Tensor]] = []
        for src in self.spec.sources:
            if src.kind == "arg":
                self._plan.append(lambda args, i=src.index: args[i])
            elif src.qualname in bound:
                self._plan.append(lambda args, t=bound[src.qualname]: t)
            else:
                raise KilnError(f"kiln.compile: input {src.qualname} of the spec is not a "
                                f"parameter or buffer of the module")

    def inputs(self, *args: Any) -> List[torch.Tensor]:
        """The kernel's inputs for a call with `args`."""
        return [get(args) for get in self._plan]

    def __call__(self, *args: Any) -> Any:
        out = self.op(*self.inputs(*args))
        if self.spec.out_tree is None:
            return out
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def bench(self, *args: Any, iters: int = 200, reps: int = 20, graph: bool = True) -> float:
        """Microseconds per call of the bare kernel (no PyTorch in the loop; `graph` replays a
        CUDA graph of `iters` calls), the best of `reps`."""
        return float(self._bench(*self.inputs(*args), iters, reps, graph))


def compile(fn: Any, example_inputs: Sequence[Any], *, name: Optional[str] = None,
            cu: Optional[str] = None, cache: Optional[str] = None, kiln: Optional[str] = None,
            time_limit: Optional[float] = None, optimize_args: Optional[List[str]] = None,
            check: Union[bool, str] = "auto", optimize: bool = True, build: bool = True,
            verbose: bool = False) -> Any:
    """`fn` (an nn.Module or a function of tensors) as a Kiln kernel for the shapes and dtypes of
    `example_inputs`: to_spec, then `kiln optimize` (or the cache, or `cu`), then nvcc. Returns a
    KilnCompiled, or the Prepared step when `build=False` (the optimize/emit step only, for a
    host without a GPU). Raises KilnUnsupported when the program does not map, KilnError when a
    step fails."""
    prep = prepare(fn, example_inputs, name=name, cu=cu, cache=cache, kiln=kiln,
                   time_limit=time_limit, optimize_args=optimize_args, check=check,
                   optimize=optimize)
    if not build:
        return prep
    return KilnCompiled(prep, load(prep, verbose=verbose), fn)


def spec_json(prep: Prepared) -> Dict[str, Any]:
    """The spec of a prepared kernel as JSON (as stored in its cache folder)."""
    return json.loads(_read(os.path.join(prep.folder, "spec.json")))
