#!/usr/bin/env python3
"""Summarizes `kiln optimize --profile` runs: one row per DIR/<case>/report.json under WORK.

  scripts/profile_table.py WORK [torch_baselines.json]

Columns: case, candidates measured / failed, the spec's own emission (measured us), the model's
winner (measured us), the measured winner (us, its model rank, its modeled us), and with the
baselines file the best torch us and Kiln/torch."""
import glob
import json
import os
import re
import sys


def torch_best(path):
    """(case, size) -> best torch us over every variant (gqa and gqa.sdpa), and the floor."""
    if not path or not os.path.exists(path):
        return {}
    best = {}
    for row in json.load(open(path)).get("rows", []):
        key = (row["case"].split(".")[0], int(row["size"]))
        us = row.get("best_torch_us")
        if us is None:
            continue
        old = best.get(key)
        best[key] = (min(us, old[0]) if old else us, row.get("floor_us"))
    return best


def suite_key(name):
    """examples/<name>.json -> the baseline script's (case, size)."""
    m = re.match(r"^(skinny_gemm_n\d+_k\d+)_m(\d+)$", name)
    if m:
        return m.group(1), int(m.group(2))
    if name == "skinny_gemm":
        return "skinny_gemm_n2304_k16384", 1
    m = re.match(r"^(.*)_(?:n|m|bs)(\d+)$", name)
    if m:
        return m.group(1), int(m.group(2))
    return name, 16 if name == "lora" else 1


def main():
    work = sys.argv[1]
    base = torch_best(sys.argv[2] if len(sys.argv) > 2 else None)
    print("case\tmeasured\tfailed\tspec_us\tmodel_winner_us\tkiln_us\tkiln_model_rank\tkiln_model_us\ttorch_us\tkiln/torch")
    for rep in sorted(glob.glob(os.path.join(work, "*", "report.json"))):
        case = os.path.basename(os.path.dirname(rep))
        r = json.load(open(rep))
        p = r.get("profile") or {}
        cands = p.get("candidates") or []
        ok = [c for c in cands if c.get("status") == "ok"]
        failed = [c for c in cands if c.get("status") != "ok"]
        spec = next((c for c in cands if c.get("is_spec")), None)
        by_model = min(cands, key=lambda c: c.get("model_rank", 1e9)) if cands else None
        win = min(ok, key=lambda c: c.get("measured_us", 1e9)) if ok else None
        def us(c):
            return "%.2f" % c["measured_us"] if c and c.get("measured_us") is not None else "-"
        tb = base.get(suite_key(case))
        t = "%.2f" % tb[0] if tb else "-"
        ratio = "%.2f" % (win["measured_us"] / tb[0]) if tb and win else "-"
        print("\t".join([case, str(len(ok)), str(len(failed)), us(spec), us(by_model), us(win),
                         str(win.get("model_rank")) if win else "-",
                         "%.2f" % win["model_us"] if win and win.get("model_us") else "-", t, ratio]))


if __name__ == "__main__":
    main()
