#!/usr/bin/env python3
"""Checks emitted Kiln kernels used as PyTorch custom ops (kiln::lora, kiln::rmsnorm_linear)
against the float64 reference of their spec, within the spec tolerance (f16: rel. L2 error
<= 5e-3), on std-1 normal and on uniform [-0.5, 0.5) inputs:

  eager      the op called directly, several input sets
  errors     wrong dtype / shape / device / layout / alignment raise clear errors
  compile    torch.compile(fullgraph=True) of the op between PyTorch ops (and of
             lora_model.TinyModel, an nn.Module), plus a bad shape caught while tracing
  cudagraph  the op captured into a torch.cuda.CUDAGraph, replayed on new inputs

then times one call: the bare emitted entry point (C++ launch loop, and a CUDA graph of N calls,
no PyTorch in the loop) against the op called from PyTorch (eager loop, and a CUDA graph of N
calls) and PyTorch's own f16 version. Timings are reported, not checked.

Exits 0 with a line starting "SKIP:" where PyTorch, a CUDA device or the CUDA toolkit is missing,
1 when a check fails. Usage:
  python3 examples/torch/test_kiln_op.py [--kiln build/kiln | --cu-dir DIR] [--build-dir DIR]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def skip(why: str) -> None:
    print(f"SKIP: {why}")
    sys.exit(0)


class Results:
    def __init__(self):
        self.rows = []

    def add(self, ok: bool, op: str, mode: str, what: str, detail: str = "") -> None:
        self.rows.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {op:15s} {mode:9s} {what}{'  ' + detail if detail else ''}",
              flush=True)

    def record(self, line: str) -> None:
        """A PASS/FAIL line printed by a child process (already shown)."""
        if line.startswith("PASS ") or line.startswith("FAIL "):
            self.rows.append(line.startswith("PASS "))

    def crash(self, op: str, mode: str, what: str) -> None:
        self.add(False, op, mode, what, "raised:\n" + traceback.format_exc())

    @property
    def failed(self) -> int:
        return self.rows.count(False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=str(HERE.parent.parent / "build" / "kiln"),
                    help="kiln binary that emits the .cu files (default: build/kiln)")
    ap.add_argument("--cu-dir", help="directory of already emitted kiln_NAME.cu files (no kiln needed)")
    ap.add_argument("--build-dir", help="where the extensions are built (default: torch's cache)")
    ap.add_argument("--ops", default="lora,rmsnorm_linear", help="comma-separated ops to test")
    ap.add_argument("--iters", type=int, default=200, help="calls per timing (default 200)")
    ap.add_argument("--reps", type=int, default=20, help="timings, the best is reported (default 20)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile checks")
    ap.add_argument("--errors-child", metavar="NAME", help=argparse.SUPPRESS)  # internal
    ap.add_argument("--cu", help=argparse.SUPPRESS)  # internal: the .cu of --errors-child
    args = ap.parse_args()
    if args.errors_child:
        return errors_child(args)

    try:
        import torch
    except ImportError:
        skip("PyTorch is not installed")
    if torch.version.cuda is None:
        skip(f"this PyTorch ({torch.__version__}) has no CUDA")
    if not torch.cuda.is_available():
        skip("no CUDA device is visible to PyTorch")
    from torch.utils import cpp_extension
    if cpp_extension.CUDA_HOME is None:
        skip("no CUDA toolkit (nvcc) for torch.utils.cpp_extension")
    if not cpp_extension.is_ninja_available():
        skip("ninja is missing (torch.utils.cpp_extension.load needs it)")

    import kiln_torch

    dev = torch.cuda.get_device_name()
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), {dev}, sm_"
          f"{''.join(map(str, torch.cuda.get_device_capability()))}, nvcc flags "
          f"{' '.join(kiln_torch.gencode_flags())}", flush=True)
    names = [n for n in args.ops.split(",") if n]
    res = Results()

    # The emitted files: given, or emitted now with kiln.
    cu = {}
    for name in names:
        if args.cu_dir:
            cu[name] = pathlib.Path(args.cu_dir) / f"kiln_{name}.cu"
            if not cu[name].is_file():
                print(f"FAIL {name}: {cu[name]} does not exist")
                return 1
        else:
            if not os.access(args.kiln, os.X_OK):
                print(f"FAIL: no kiln binary at {args.kiln} and no --cu-dir; build kiln or pass "
                      f"--cu-dir with emitted kiln_NAME.cu files")
                return 1
            out_dir = pathlib.Path(args.build_dir or tempfile.mkdtemp(prefix="kiln_torch_")) / "cu"
            cu[name] = kiln_torch.emit(name, args.kiln, out_dir)

    for name in names:
        t0 = time.time()
        try:
            op = kiln_torch.load_op(name, cu[name], build_dir=args.build_dir)
        except Exception:
            res.crash(name, "build", f"load_op({cu[name]})")
            continue
        res.add(True, name, "build", f"torch.utils.cpp_extension.load of {cu[name].name} + "
                f"{name}_op.cpp", f"{time.time() - t0:.1f} s")
        check_eager(res, torch, kiln_torch, name, op)
        check_errors_isolated(res, name, cu[name], args.build_dir)
        if not args.no_compile:
            check_compile(res, torch, kiln_torch, name, op)
        check_cudagraph(res, torch, kiln_torch, name, op)
        try:
            time_op(torch, kiln_torch, name, op, args.iters, args.reps, dev)
        except Exception:
            res.crash(name, "timing", "timing")

    total = len(res.rows)
    print(f"{total - res.failed} passed, {res.failed} failed")
    return 1 if res.failed else 0


# Input sets: std-1 normal and uniform [-0.5, 0.5), several seeds.
INPUT_SETS = [("normal", 1), ("normal", 2), ("uniform", 3), ("uniform", 4)]


def within(kiln_torch, err: float) -> bool:
    return err <= kiln_torch.F16_TOLERANCE


def check_eager(res, torch, kiln_torch, name, op):
    spec = kiln_torch.OPS[name]
    for kind, seed in INPUT_SETS:
        what = f"{kind} seed {seed}"
        try:
            x = kiln_torch.make_inputs(name, kind, seed)
            y = op(*x)
            torch.cuda.synchronize()
            ok_meta = (tuple(y.shape) == spec["output"] and y.dtype == spec["dtype"]
                       and y.is_cuda and y.is_contiguous())
            err = kiln_torch.rel_l2(y, kiln_torch.reference(name, *x))
            res.add(ok_meta and within(kiln_torch, err), name, "eager", what,
                    f"rel. L2 error {err:.2e} (tol {kiln_torch.F16_TOLERANCE:.0e})"
                    + ("" if ok_meta else f"; output {tuple(y.shape)} {y.dtype} {y.device}"))
        except Exception:
            res.crash(name, "eager", what)


def check_errors(res, torch, kiln_torch, name, op):
    """Each bad call must raise the given exception type with the given words in its message."""
    spec = kiln_torch.OPS[name]
    good = kiln_torch.make_inputs(name, "normal", 5)
    arg0, shape0 = spec["inputs"][0]
    arg1, shape1 = spec["inputs"][1]

    def replace(i, t):
        x = list(good)
        x[i] = t
        return x

    misaligned_base = torch.empty(good[0].numel() + 8, device="cuda", dtype=good[0].dtype)
    cases = [
        ("float32 input", replace(0, good[0].float()), TypeError, f"{arg0} must be"),
        ("wrong shape", replace(1, good[1][: shape1[0] // 2].contiguous()), ValueError,
         f"{arg1} must have shape"),
        ("CPU input", replace(0, good[0].cpu()), RuntimeError, "must be a CUDA tensor"),
        ("all inputs on CPU", [t.cpu() for t in good], RuntimeError, "must be a CUDA tensor"),
        ("non-contiguous input", replace(1, good[1].t().contiguous().t()), RuntimeError,
         "must be contiguous"),
        ("misaligned input", replace(0, misaligned_base[1:1 + good[0].numel()].view(shape0)),
         RuntimeError, "16-byte aligned"),
    ]
    for what, inputs, exc, words in cases:
        print(f"case: {what}", flush=True)  # the last one shown, should the call crash
        try:
            op(*inputs)
            res.add(False, name, "errors", what, "no error raised")
        except exc as e:
            msg = str(e).splitlines()[0] if str(e) else ""
            res.add(words in str(e), name, "errors", what, f"{type(e).__name__}: {msg}")
        except Exception as e:  # the wrong type
            res.add(False, name, "errors", what, f"expected {exc.__name__}, got {type(e).__name__}: {e}")
    torch.cuda.synchronize()


def check_errors_isolated(res, name, cu_path, build_dir):
    """check_errors in a child process (the extension is already built), so that a crash on a bad
    call is reported as a failure with the case it died on, and the other checks still run."""
    import subprocess

    cmd = [sys.executable, "-X", "faulthandler", str(pathlib.Path(__file__).resolve()),
           "--errors-child", name, "--cu", str(cu_path)]
    if build_dir:
        cmd += ["--build-dir", str(build_dir)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = proc.stdout.splitlines()
    results = [line for line in lines if line.startswith(("PASS ", "FAIL "))]
    for line in results:
        print(line)
        res.record(line)
    if proc.returncode < 0 or (proc.returncode != 0 and not any(line.startswith("FAIL ")
                                                                for line in results)):
        for line in lines:  # the case it died on, faulthandler's traceback, the build log
            if line not in results:
                print(f"  [errors child] {line}")
        why = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        res.add(False, name, "errors", "child process", why)
    sys.stdout.flush()


def errors_child(args) -> int:
    import torch
    import kiln_torch

    op = kiln_torch.load_op(args.errors_child, args.cu, build_dir=args.build_dir)
    res = Results()
    check_errors(res, torch, kiln_torch, args.errors_child, op)
    return 1 if res.failed else 0


def check_compile(res, torch, kiln_torch, name, op):
    import torch.nn.functional as F

    torch._dynamo.reset()

    def fn(*x):
        # PyTorch ops around the custom op, so Inductor has something to fuse with it.
        return F.silu(op(*x)) * 0.5

    def ref(*x):
        return F.silu(kiln_torch.reference(name, *x)) * 0.5

    try:
        compiled = torch.compile(fn, fullgraph=True)
        for kind, seed in INPUT_SETS[::2]:
            x = kiln_torch.make_inputs(name, kind, seed)
            t0 = time.time()
            y = compiled(*x)
            torch.cuda.synchronize()
            err = kiln_torch.rel_l2(y, ref(*x))
            res.add(within(kiln_torch, err), name, "compile", f"fullgraph silu(op)*0.5, {kind} seed {seed}",
                    f"rel. L2 error {err:.2e}, {time.time() - t0:.1f} s with compilation")
    except Exception:
        res.crash(name, "compile", "fullgraph silu(op)*0.5")

    # A bad shape is reported by the fake implementation while tracing.
    try:
        x = kiln_torch.make_inputs(name, "normal", 6)
        x[1] = x[1][: x[1].shape[0] // 2].contiguous()
        torch.compile(fn, fullgraph=True)(*x)
        res.add(False, name, "compile", "bad shape while tracing", "no error raised")
    except Exception as e:
        res.add("must have shape" in str(e), name, "compile", "bad shape while tracing",
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    if name == "lora":  # the nn.Module of lora_model.py
        try:
            import lora_model

            torch.manual_seed(0)
            model = lora_model.TinyModel().eval()
            cmodel = torch.compile(model, fullgraph=True)
            for kind, seed in INPUT_SETS[::2]:
                x = kiln_torch.make_inputs(name, kind, seed)[0]
                with torch.no_grad():
                    y, ye = cmodel(x), model(x)
                torch.cuda.synchronize()
                err = kiln_torch.rel_l2(y, model.reference(x))
                erre = kiln_torch.rel_l2(ye, model.reference(x))
                res.add(within(kiln_torch, err) and within(kiln_torch, erre), name, "compile",
                        f"lora_model.TinyModel (nn.Module), {kind} seed {seed}",
                        f"rel. L2 error compiled {err:.2e}, eager {erre:.2e}")
        except Exception:
            res.crash(name, "compile", "lora_model.TinyModel")
    torch._dynamo.reset()


def check_cudagraph(res, torch, kiln_torch, name, op):
    try:
        static = [t.clone() for t in kiln_torch.make_inputs(name, "normal", 7)]
        op(*static)  # warm-up outside the capture (the first call sets the smem limit)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = op(*static)
        for kind, seed in INPUT_SETS:
            x = kiln_torch.make_inputs(name, kind, seed)
            for s, t in zip(static, x):
                s.copy_(t)
            graph.replay()
            torch.cuda.synchronize()
            err = kiln_torch.rel_l2(static_out, kiln_torch.reference(name, *x))
            res.add(within(kiln_torch, err), name, "cudagraph", f"replay on {kind} seed {seed}",
                    f"rel. L2 error {err:.2e}")
        del graph
    except Exception:
        res.crash(name, "cudagraph", "capture and replay")


def graph_time_us(torch, body, iters: int, reps: int) -> float:
    """Microseconds per call of body(), captured `iters` times into one CUDA graph (best replay)."""
    body()  # warm-up (cuBLAS handles, the op's first call)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            body()
    graph.replay()
    torch.cuda.synchronize()
    best = float("inf")
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        best = min(best, 1000.0 * e0.elapsed_time(e1) / iters)
    del graph
    return best


def loop_time_us(torch, body, iters: int, reps: int) -> float:
    """Microseconds per call of body() from a Python loop on the current stream (best of reps)."""
    for _ in range(10):
        body()
    torch.cuda.synchronize()
    best = float("inf")
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        e0.record()
        for _ in range(iters):
            body()
        e1.record()
        e1.synchronize()
        best = min(best, 1000.0 * e0.elapsed_time(e1) / iters)
    return best


def time_op(torch, kiln_torch, name, op, iters, reps, dev):
    x = kiln_torch.make_inputs(name, "normal", 8)
    bench = getattr(torch.ops.kiln, f"{name}_bench")
    rows = [
        (f"bare kiln_{name}, C++ launch loop", bench(*x, iters, reps, False)),
        (f"bare kiln_{name}, CUDA graph of {iters} calls", bench(*x, iters, reps, True)),
        (f"kiln::{name} from PyTorch, Python loop", loop_time_us(torch, lambda: op(*x), iters, reps)),
        (f"kiln::{name} from PyTorch, CUDA graph of {iters} calls",
         graph_time_us(torch, lambda: op(*x), iters, reps)),
        (f"PyTorch f16 ops (cuBLAS), CUDA graph of {iters} calls",
         graph_time_us(torch, lambda: kiln_torch.torch_f16(name, *x), iters, reps)),
    ]
    bare = rows[1][1]
    print(f"TIME {name}: microseconds per call, best of {reps} x {iters} calls, {dev}")
    for label, us in rows:
        print(f"TIME   {label:52s} {us:8.2f} us  ({us / bare:.2f}x bare graph)")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
