#!/usr/bin/env python3
"""Writes the nn.Linear-layout twin of every matmul spec given: each weight W (a graph input of
rank 2 that is only ever the right operand of matmuls) is stored transposed, as PyTorch's
nn.Linear keeps it ((N, K) instead of (K, N)), and read through a `transpose` node. The two specs
compute the same function; Kiln should run both equally fast (issue 15: layouts are access
patterns, not kernels).

    scripts/nn_linear_variants.py OUT_DIR SPEC.json...

Specs without such a weight are skipped (and named on stderr). Output names: the input's file
name, the spec's name with the suffix `_nk`.
"""
import json
import os
import sys


def variant(spec):
    inputs = {i["name"]: i for i in spec["inputs"]}
    uses = {}
    for node in spec["nodes"]:
        for pos, name in enumerate(node["inputs"]):
            uses.setdefault(name, []).append((node["op"], pos))
    weights = [
        name for name, i in inputs.items()
        if len(i["shape"]) == 2 and name in uses and name not in spec["outputs"]
        and all(op == "matmul" and pos == 1 for op, pos in uses[name])
    ]
    if not weights:
        return None
    out = json.loads(json.dumps(spec))
    out["name"] = spec["name"] + "_nk"
    out["doc"] = (spec.get("doc", "") + " Weights " + ", ".join(weights) +
                  " in nn.Linear layout (N, K), read through a transpose.").strip()
    for i in out["inputs"]:
        if i["name"] in weights:
            i["shape"] = [i["shape"][1], i["shape"][0]]
    taken = {n["name"] for n in out["nodes"]} | set(inputs)
    nodes = []
    for w in weights:
        t = w + "t"
        while t in taken:
            t += "_"
        taken.add(t)
        nodes.append({"name": t, "op": "transpose", "inputs": [w]})
        for node in out["nodes"]:
            if node["op"] == "matmul" and node["inputs"][1] == w:
                node["inputs"][1] = t
    out["nodes"] = nodes + out["nodes"]
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    os.makedirs(sys.argv[1], exist_ok=True)
    for path in sys.argv[2:]:
        with open(path) as f:
            spec = json.load(f)
        v = variant(spec)
        if v is None:
            print(f"nn_linear_variants: {path}: no weight of a matmul, skipped", file=sys.stderr)
            continue
        with open(os.path.join(sys.argv[1], os.path.basename(path)), "w") as f:
            json.dump(v, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
