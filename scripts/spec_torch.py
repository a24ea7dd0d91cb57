#!/usr/bin/env python3
"""Time PyTorch on any spec (`../shared/spec-format.md`), for Kiln-beside-torch comparisons of
specs that `torch_baselines.py` does not know (unseen shapes, dtypes, layouts).

Each spec's nodes become the torch ops a user would write (`x @ w`, `F.rms_norm`,
`torch.softmax`, ...) on inputs of the spec's shapes and dtypes (normal, std 1; `--copies` sets
rotating over distinct copies, like the suite's baselines). Printed per spec, in microseconds
per call, medians of `--repeats` timings: eager (each call launched), eager replayed from a CUDA
graph, and with `--compile` torch.compile replayed from a CUDA graph; `best` is the smallest.
f32 matmuls run at torch's default precision (`allow_tf32` off: full f32, as a user gets).

  python3 scripts/spec_torch.py [--compile] [--copies 4] [--repeats 30] SPEC.json...
One line per spec: `TORCH name eager=.. graph=.. [compile_graph=..] best=..`.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

DT = {"f16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16,
      "bfloat16": torch.bfloat16, "f32": torch.float32, "float32": torch.float32}


def build(spec):
    """A function of the spec's inputs that returns its outputs, op by op."""
    def fn(*xs):
        env = {i["name"]: x for i, x in zip(spec["inputs"], xs)}
        for n in spec["nodes"]:
            op, a = n["op"], n.get("attrs", {})
            ins = [env[i] for i in n.get("inputs", [])]
            keep = a.get("keepdim", True)
            if op == "constant":
                r = float(a["value"])
            elif op == "matmul":
                r = ins[0] @ ins[1]
            elif op == "transpose":
                p = a.get("perm")
                r = ins[0].permute(*p) if p else ins[0].transpose(-1, -2)
            elif op in ("add", "sub", "mul", "div", "maximum", "minimum"):
                x, y = ins
                r = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                     "div": lambda: x / y,
                     "maximum": lambda: torch.maximum(torch.as_tensor(x), torch.as_tensor(y)),
                     "minimum": lambda: torch.minimum(torch.as_tensor(x), torch.as_tensor(y))}[op]()
            elif op in ("neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
                        "relu"):
                r = getattr(torch, op)(ins[0])
            elif op == "square":
                r = ins[0] * ins[0]
            elif op == "silu":
                r = F.silu(ins[0])
            elif op == "gelu":
                r = F.gelu(ins[0], approximate=a.get("approximate", "none"))
            elif op == "leaky_relu":
                r = F.leaky_relu(ins[0], a.get("negative_slope", 0.01))
            elif op == "clamp":
                r = torch.clamp(ins[0], a.get("min"), a.get("max"))
            elif op in ("sum", "mean"):
                r = getattr(torch, op)(ins[0], dim=a["dim"], keepdim=keep)
            elif op == "max":
                r = torch.amax(ins[0], dim=a["dim"], keepdim=keep)
            elif op == "softmax":
                r = torch.softmax(ins[0], dim=a.get("dim", -1))
            elif op == "rms_norm":
                w = ins[1] if len(ins) > 1 else None
                r = F.rms_norm(ins[0], (ins[0].shape[-1],), w, eps=a.get("eps", 1e-6))
            else:
                raise SystemExit(f"spec_torch: op {op} not mapped")
            env[n["name"]] = r
        return tuple(env[o] for o in spec["outputs"])
    return fn


def timed(fn, sets, repeats, graph):
    if graph:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for a in sets:
                fn(*a)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for a in sets:
                fn(*a)
        run = g.replay
    else:
        def run():
            for a in sets:
                fn(*a)
        run()
    ts = []
    for _ in range(repeats):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        run()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / len(sets))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--compile", action="store_true")
    o = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    for path in o.specs:
        spec = json.load(open(path))
        sets = [[torch.randn(i["shape"], device="cuda").to(DT[i["dtype"]])
                 for i in spec["inputs"]] for _ in range(o.copies)]
        fn = build(spec)
        with torch.no_grad():
            r = {"eager": timed(fn, sets, o.repeats, False),
                 "graph": timed(fn, sets, o.repeats, True)}
            if o.compile:
                try:
                    cf = torch.compile(fn)
                    r["compile_graph"] = timed(cf, sets, o.repeats, True)
                except Exception as e:  # report and go on: a torch limit, not ours
                    print(f"spec_torch: {spec['name']}: torch.compile failed: {e}",
                          file=sys.stderr)
        best = min(r.values())
        print(f"TORCH {spec['name']} " + " ".join(f"{k}={v:.2f}" for k, v in r.items()) +
              f" best={best:.2f}", flush=True)


if __name__ == "__main__":
    main()
