#!/usr/bin/env python3
"""Compare the cost model with GPU measurements of profiled candidates (docs/cost-model.md,
"Calibration").

A suite run (`scripts/bench_suite.sh`, `kiln optimize --profile`) leaves RUN/<case>/report.json
whose profile.candidates hold, per candidate, the fingerprint, the model's prediction then and the
median measured on the GPU. This script re-costs the same μGraphs with the model as built now
(`kiln_cost_tool`) and prints, per case, model vs measured per candidate, the Spearman rank
correlation, whether the model's pick is the measured best (or within 10% of it), and overall the
RMS of log(model / measured).

The μGraphs are not in the run directory. `--regen` regenerates them with `kiln optimize --top 6
--no-profile` (deterministic: the same fingerprints, as long as the binary that generates them has
the model that ranked the run, so keep one: `cp build/kiln /tmp/kiln_before`) into GRAPHS/<case>/
<fingerprint>.mugraph.json; the spec's own candidate is examples/<case>.json.

  scripts/fit_cost_model.py RUN --graphs DIR [--regen --kiln /tmp/kiln_before] [--tool T]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va > 0 and vb > 0 else float("nan")


def regen(case, examples, graphs, kiln):
    out = tempfile.mkdtemp(prefix="kiln-fit-")
    try:
        subprocess.run([kiln, "optimize", os.path.join(examples, case + ".json"), "-o", out,
                        "--threads", "2", "--no-cache", "--top", "6", "--no-profile"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rep = json.load(open(os.path.join(out, "report.json")))
        dst = os.path.join(graphs, case)
        os.makedirs(dst, exist_ok=True)
        for r in rep["ranked"]:
            if r.get("is_spec"):
                continue
            src = os.path.join(out, "candidates", "%d_%s.mugraph.json" % (r["rank"], case))
            shutil.copy(src, os.path.join(dst, r["fingerprint"] + ".mugraph.json"))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", help="suite run directory (RUN/<case>/report.json)")
    ap.add_argument("--graphs", required=True, help="candidate μGraphs: DIR/<case>/<fp>.mugraph.json")
    ap.add_argument("--examples", default="examples")
    ap.add_argument("--tool", default="build/tests/kiln_cost_tool")
    ap.add_argument("--regen", action="store_true", help="regenerate the μGraphs first")
    ap.add_argument("--kiln", default="build/kiln", help="kiln binary for --regen")
    ap.add_argument("--quiet", action="store_true", help="summary table only")
    ap.add_argument("--json", help="write the per-candidate rows here")
    a = ap.parse_args()

    cases = sorted(c for c in os.listdir(a.run)
                   if os.path.isfile(os.path.join(a.run, c, "report.json")))
    rows = {}  # case -> list of dicts
    files = []
    for case in cases:
        rep = json.load(open(os.path.join(a.run, case, "report.json")))
        cands = [c for c in rep["profile"]["candidates"] if c.get("measured_us")]
        if a.regen:
            regen(case, a.examples, a.graphs, a.kiln)
        rows[case] = []
        for c in cands:
            f = (os.path.join(a.examples, case + ".json") if c["is_spec"] else
                 os.path.join(a.graphs, case, c["fingerprint"] + ".mugraph.json"))
            if not os.path.isfile(f):
                print("missing %s (run with --regen)" % f, file=sys.stderr)
                continue
            rows[case].append({"case": case, "fp": c["fingerprint"], "spec": c["is_spec"],
                               "old_rank": c["model_rank"], "old_us": c["model_us"],
                               "measured_us": c["measured_us"], "file": f})
            files.append(f)
    out = subprocess.run([a.tool] + files, check=True, capture_output=True, text=True).stdout
    cost = {}
    for line in out.splitlines():
        j = json.loads(line)
        cost[j["file"]] = j
    all_logs, old_logs, rhos, old_rhos = [], [], [], []
    top1 = top1_10 = in6 = old_top1_10 = 0
    summary = []
    for case in cases:
        rs = rows[case]
        for r in rs:
            j = cost[r["file"]]
            r["model_us"] = j["cost"]["time_us"] if "cost" in j else float("inf")
            r["kernels"] = [(k["name"], k["bound"], round(k["time_us"], 1))
                            for k in j.get("cost", {}).get("kernels", [])]
        meas = [r["measured_us"] for r in rs]
        mod = [r["model_us"] for r in rs]
        old = [r["old_us"] for r in rs]
        rho, orho = spearman(mod, meas), spearman(old, meas)
        rhos.append(rho)
        old_rhos.append(orho)
        for r in rs:
            all_logs.append(math.log(r["model_us"] / r["measured_us"]))
            old_logs.append(math.log(r["old_us"] / r["measured_us"]))
        best = min(meas)
        pick = min(rs, key=lambda r: r["model_us"])
        opick = min(rs, key=lambda r: r["old_us"])
        by_model = sorted(rs, key=lambda r: r["model_us"])
        best_rank = 1 + [r["measured_us"] for r in by_model].index(best)
        top1 += pick["measured_us"] == best
        top1_10 += pick["measured_us"] <= 1.10 * best
        old_top1_10 += opick["measured_us"] <= 1.10 * best
        in6 += best_rank <= 6
        summary.append((case, best, pick["measured_us"], pick["model_us"], pick["spec"],
                        opick["measured_us"], best_rank, rho, orho))
        if not a.quiet:
            print("== %s  (Spearman %.2f, before %.2f)" % (case, rho, orho))
            for r in sorted(rs, key=lambda r: r["measured_us"]):
                print("  %-17s meas %8.2f  model %8.2f (%.2fx)  before %8.2f (#%d)  %s" %
                      (("spec" if r["spec"] else r["fp"]), r["measured_us"], r["model_us"],
                       r["model_us"] / r["measured_us"], r["old_us"], r["old_rank"],
                       " | ".join("%s %s %.1f" % k for k in r["kernels"])))
    rms = lambda xs: math.sqrt(sum(x * x for x in xs) / len(xs))
    print()
    print("%-32s %9s %9s %9s %5s %9s %5s %6s %6s" % ("case", "best", "pick", "pick_mod",
                                                     "spec", "old_pick", "rank", "rho", "rho0"))
    for s in summary:
        print("%-32s %9.2f %9.2f %9.2f %5s %9.2f %5d %6.2f %6.2f" %
              (s[0], s[1], s[2], s[3], "yes" if s[4] else "", s[5], s[6], s[7], s[8]))
    n = len(cases)
    print()
    print("candidates %d, cases %d" % (len(all_logs), n))
    print("RMS log(model/measured): %.3f (before %.3f)" % (rms(all_logs), rms(old_logs)))
    print("mean Spearman per case: %.3f (before %.3f)" % (sum(rhos) / n, sum(old_rhos) / n))
    print("model pick = measured best: %d/%d; within 10%%: %d/%d (before %d/%d); "
          "best in model top 6: %d/%d" % (top1, n, top1_10, n, old_top1_10, n, in6, n))
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
