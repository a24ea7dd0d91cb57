"""A Llama-style block's MLP and its RMSNorm, from plain PyTorch code to a Kiln kernel: no JSON.

    python3 examples/torch/llama_mlp.py --emit            # CPU host with the kiln CLI: to_spec,
                                                          # kiln optimize -> examples/torch/kiln_cache
    python3 examples/torch/llama_mlp.py                   # GPU: build, check, time
    python3 examples/torch/llama_mlp.py --small ...       # a small model (fast, for tests)

The module is written as in Hugging Face's Llama (LlamaRMSNorm upcasts to f32, LlamaMLP is
down(silu(gate(x)) * up(x))), with the residual add of the decoder layer:
    out = h + mlp(rms_norm(h))
On the GPU the script checks kiln.compile and torch.compile(backend=kiln.backend) against a
float64 reference of the module within the spec tolerance (f16: relative L2 error 5e-3) on
uniform and std-1 normal inputs, then times, in one run: eager PyTorch, torch.compile (Inductor),
kiln.compile (called from Python, and the bare kernel), and torch.compile with kiln.backend.
Exit 0 when every check passes, 1 when one fails; "SKIP: ..." and 0 where CUDA, nvcc or a
PyTorch with torch.compile is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import kiln  # noqa: E402
from kiln.cli import find_kiln  # noqa: E402
from kiln.compiler import prepare  # noqa: E402

CACHE = os.path.join(HERE, "kiln_cache")
F16_TOLERANCE = 5e-3


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class MLPBlock(nn.Module):
    """The second half of a Llama decoder layer: RMSNorm, MLP, residual add."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.post_attention_layernorm = LlamaRMSNorm(hidden_size)
        self.mlp = LlamaMLP(hidden_size, intermediate_size)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        return residual + self.mlp(hidden_states)


# (tokens, hidden, intermediate): Llama-2-7B's MLP at a decode batch of 8 tokens, and a small one.
SIZES = {"llama7b": (8, 4096, 11008), "small": (8, 256, 512)}


def make_model(size: str, device: str = "cpu") -> MLPBlock:
    torch.manual_seed(0)
    _, hidden, inter = SIZES[size]
    m = MLPBlock(hidden, inter)
    with torch.no_grad():  # a trained-looking norm weight, not all ones
        m.post_attention_layernorm.weight.copy_(1 + 0.1 * torch.randn(hidden))
    return m.half().to(device).eval()


def example_input(size: str, device: str = "cpu", kind: str = "normal", seed: int = 1):
    tokens, hidden, _ = SIZES[size]
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g) if kind == "normal" else \
        torch.rand(tokens, hidden, generator=g) - 0.5
    return x.half().to(device)


# ----------------------------------------------------------------- CPU host: emit

def emit(size: str, time_limit: float) -> int:
    model = make_model(size)
    x = example_input(size)
    spec = kiln.to_spec(model, [x], name=f"llama_mlp_{size}")
    print(f"spec: {len(spec.data['nodes'])} nodes, {spec.check}")
    prep = prepare(model, [x], spec=spec, cache=CACHE, time_limit=time_limit)
    print(f"kernel: {prep.cu} (spec hash {prep.key})")
    return 0


# ----------------------------------------------------------------- GPU: check and time

def rel_l2(out, ref) -> float:
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm()).item()


def time_us(fn, iters: int = 100, reps: int = 20, graph: bool = False) -> float:
    """Microseconds per call, best of `reps` timings of `iters` calls (from a Python loop, or
    replayed from one CUDA graph of `iters` calls)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
            with torch.cuda.graph(g, stream=s):
                for _ in range(iters):
                    fn()
        torch.cuda.current_stream().wait_stream(s)
        run = g.replay
    else:
        def run():
            for _ in range(iters):
                fn()
    run()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        best = min(best, 1000.0 * a.elapsed_time(b) / iters)
    return best


def gpu(size: str, out_json: str | None) -> int:
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    if shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"):
        print("SKIP: no nvcc")
        return 0
    if not hasattr(torch, "compile"):
        print(f"SKIP: torch {torch.__version__} has no torch.compile")
        return 0
    dev = "cuda"
    model = make_model(size, dev)
    x = example_input(size, dev)
    have_kiln = find_kiln() is not None
    failures = []
    t0 = time.time()
    fast = kiln.compile(model, [x], cache=CACHE, optimize=have_kiln)
    t_first = time.time() - t0
    t0 = time.time()
    kiln.compile(model, [x], cache=CACHE, optimize=have_kiln)
    t_second = time.time() - t0
    print(f"kiln.compile: first call {t_first:.1f} s (build), second {t_second * 1e3:.1f} ms "
          f"(cached); spec {fast.spec.name}, {len(fast.spec.data['nodes'])} nodes, "
          f"{fast.folder}")
    ref_model = make_model(size, dev).double()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "cuda": torch.version.cuda, "size": size, "shape": SIZES[size], "errors": {}}

    os.environ.setdefault("KILN_TORCH_CACHE", CACHE)
    from torch import _dynamo as torch_dynamo  # not `import torch._dynamo`: that binds `torch` here
    from kiln.dynamo import make_backend
    torch_dynamo.reset()
    compiled_kiln = torch.compile(model, backend=make_backend(cache=CACHE), dynamic=False)
    compiled_inductor = torch.compile(model, dynamic=False)
    runs = {"kiln.compile": fast, "torch.compile(backend=kiln.backend)": compiled_kiln,
            "eager f16": model, "torch.compile (inductor)": compiled_inductor}
    with torch.no_grad():
        for kind in ("normal", "uniform"):
            xi = example_input(size, dev, kind, seed=7)
            ref = ref_model(xi.double())
            for label, f in runs.items():
                err = rel_l2(f(xi), ref)
                results["errors"][f"{label}, {kind}"] = err
                ok = err <= F16_TOLERANCE or label.startswith("eager") or "inductor" in label
                print(f"  {label:40s} {kind:8s} rel L2 {err:.2e} {'ok' if ok else 'FAIL'}")
                if not ok:
                    failures.append(f"{label} {kind}: {err:.2e}")
        from kiln import dynamo
        results["backend"] = list(dynamo.REPORT)
        print("kiln.backend: " + ("; ".join(dynamo.REPORT) or "no partition"))
        if not any(": kiln kernel " in r for r in dynamo.REPORT):
            failures.append("kiln.backend ran no Kiln kernel (see above; a partition whose "
                            "spec has no kernel in the cache lists the command to make one)")
        timings = {}
        for label, f in runs.items():
            timings[f"{label}, Python loop"] = time_us(lambda: f(x))
            try:
                timings[f"{label}, CUDA graph"] = time_us(lambda: f(x), graph=True)
            except Exception as e:  # noqa: BLE001 - reported, not fatal
                print(f"  {label}: no CUDA-graph timing ({type(e).__name__}: {e})")
        timings["bare kernel, C++ loop"] = fast.bench(x, graph=False)
        timings["bare kernel, CUDA graph"] = fast.bench(x, graph=True)
    results["timings_us"] = timings
    print(f"\nmicroseconds per call ({results['device']}, torch {torch.__version__}):")
    for k, v in timings.items():
        print(f"  {k:55s} {v:9.2f}")
    bare = timings["bare kernel, CUDA graph"]
    mine = timings.get("kiln.compile, CUDA graph", float("inf"))
    # Launch noise: within 10% + 1 us of the bare kernel when both replay from a CUDA graph.
    if mine > 1.10 * bare + 1.0:
        failures.append(f"kiln.compile from a CUDA graph {mine:.2f} us vs the bare kernel "
                        f"{bare:.2f} us")
    results["failures"] = failures
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)
    print("\n" + ("all checks passed" if not failures else "FAILED: " + "; ".join(failures)))
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--emit", action="store_true", help="CPU host: to_spec and kiln optimize")
    ap.add_argument("--small", action="store_true", help="the small model (256 x 512)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="kiln optimize --time-limit (default 45 s for --small, 300 s else: "
                         "ranking and checking a 4096 x 11008 MLP take minutes on 2 cores)")
    ap.add_argument("--json", default=None, help="write the results here (GPU run)")
    args = ap.parse_args()
    size = "small" if args.small else "llama7b"
    if args.emit:
        limit = args.time_limit if args.time_limit is not None else \
            (45.0 if size == "small" else 300.0)
        return emit(size, limit)
    return gpu(size, args.json)


if __name__ == "__main__":
    sys.exit(main())
