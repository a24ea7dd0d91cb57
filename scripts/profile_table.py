#!/usr/bin/env python3
"""Summarizes `kiln optimize --profile` runs: one row per DIR/<case>/report.json under WORK.

  scripts/profile_table.py WORK [torch_baselines.json]

Columns: case, candidates measured / failed, the spec's own emission (measured us), the model's
winner (measured us), the measured winner (us, its model rank, its modeled us), and with the
baselines file the best torch us and Kiln/torch."""
import glob
import json
import os
import sys


def torch_best(path):
    if not path or not os.path.exists(path):
        return {}
    data = json.load(open(path))
    best = {}
    for row in data if isinstance(data, list) else data.get("results", data.get("cases", [])):
        if not isinstance(row, dict):
            continue
        case = row.get("case") or row.get("name")
        size = row.get("size")
        us = row.get("best_us") or row.get("best")
        if case and us:
            best[(case, str(size))] = float(us)
    return best


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
        t = "-"
        ratio = "-"
        print("\t".join([case, str(len(ok)), str(len(failed)), us(spec), us(by_model), us(win),
                         str(win.get("model_rank")) if win else "-",
                         "%.2f" % win["model_us"] if win and win.get("model_us") else "-", t, ratio]))


if __name__ == "__main__":
    main()
