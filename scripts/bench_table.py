#!/usr/bin/env python3
"""Builds the benchmark tables of docs/benchmarks.md from one GPU session's outputs:
results.tsv (scripts/gpu_check.sh: Kiln's harnesses) and torch_baselines.json (the shared
baseline script, run in the same session). Usage: bench_table.py RESULTS.tsv TORCH.json

Per case and size: the Kiln kernel (search winner `opt_*` when present, else the hand-written
μGraph, else the spec's own emission), best torch, floor, Kiln / best torch and Kiln's fraction
of the floor. Every number is a median from the same run on the same GPU."""
import json, re, sys

def suite_key(name):
    """harness name -> (torch case, size): 'opt_gated_mlp_m8' -> ('gated_mlp', 8)."""
    base = re.sub(r'^(opt_|spec_)', '', name)
    m = re.match(r'skinny_gemm(?:_n(\d+)_k(\d+)_m(\d+))?$', base)
    if m:
        n, k, mm = m.groups() or (None, None, None)
        n, k, mm = (n or 2304), (k or 16384), (mm or 1)
        return f'skinny_gemm_n{n}_k{k}', int(mm)
    m = re.match(r'(rmsnorm_linear|gated_mlp|gqa|add_rmsnorm|lora)(?:_(?:bs|m|n)(\d+))?$', base)
    if not m:
        return None
    case, size = m.group(1), m.group(2)
    default = {'rmsnorm_linear': 1, 'gated_mlp': 1, 'gqa': 1, 'add_rmsnorm': 1, 'lora': 16}
    return case, int(size) if size else default[case]

def main():
    rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])][1:]
    torch = json.load(open(sys.argv[2]))
    best = {}
    for r in torch['rows']:
        key = (r['case'].replace('.sdpa', ''), r['size'])
        if key not in best or r['best_torch_us'] < best[key]['best_torch_us']:
            best[key] = r
    kiln = {}
    for r in rows:
        name, ok, err, us = r[0], r[2], r[3], r[4]
        key = suite_key(name)
        if key is None or ok != '1':
            continue
        kind = 'search' if name.startswith('opt_') else 'spec' if name.startswith('spec_') else 'hand'
        kiln.setdefault(key, {})[kind] = (float(us), float(err))
    print('| case | size | Kiln µs (which) | hand µs | spec-emission µs | best torch µs | floor µs | Kiln / torch | floor / Kiln |')
    print('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
    for key in sorted(kiln):
        k = kiln[key]
        pick = 'search' if 'search' in k else 'hand' if 'hand' in k else 'spec'
        us = k[pick][0]
        t = best.get(key)
        f = lambda kind: f"{k[kind][0]:.2f}" if kind in k else '-'
        if t:
            print(f"| {key[0]} | {key[1]} | {us:.2f} ({pick}) | {f('hand')} | {f('spec')} | "
                  f"{t['best_torch_us']:.2f} | {t['floor_us']:.2f} | {us / t['best_torch_us']:.2f} | "
                  f"{t['floor_us'] / us:.0%} |")
        else:
            print(f"| {key[0]} | {key[1]} | {us:.2f} ({pick}) | {f('hand')} | {f('spec')} | - | - | - | - |")

main()
