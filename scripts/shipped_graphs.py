#!/usr/bin/env python3
"""The μGraph each spec shipped in a profiled suite run, for scripts/sanitize_winners.sh.

RUN/<case>/report.json (scripts/bench_suite.sh) names the measured winner by fingerprint, and
REGEN/<case> must hold the ranked candidates (report.json and candidates/): since bench_suite.sh
keeps them in its tarball, REGEN is RUN itself; for an older run, `kiln optimize --no-profile
--top K` of the same binary regenerates them (deterministic: same ranking, same fingerprints). Writes DEST/<case>.mugraph.json:
the regenerated candidate, or the spec itself where the spec's own kernels won (its fingerprint is
not among the ranked candidates).

  scripts/shipped_graphs.py RUN REGEN EXAMPLES DEST
"""
import json, os, shutil, sys
run, regen, examples, dest = sys.argv[1:5]
os.makedirs(dest, exist_ok=True)
for case in sorted(os.listdir(run)):
    rp = os.path.join(run, case, "report.json")
    if not os.path.isfile(rp):
        continue
    r = json.load(open(rp))
    fp = r["profile"]["winner_by_measurement"]
    won = [c for c in r["ranked"] if c["fingerprint"] == fp]
    if not won or won[0]["is_spec"]:
        shutil.copy(os.path.join(examples, case + ".json"), os.path.join(dest, case + ".mugraph.json"))
        print(case, "spec")
        continue
    g = json.load(open(os.path.join(regen, case, "report.json")))
    idx = [i for i, c in enumerate(g["ranked"]) if c["fingerprint"] == fp]
    if not idx:
        print(case, "NOT REGENERATED", fp)
        continue
    cdir = os.path.join(regen, case, "candidates")
    f = [x for x in os.listdir(cdir) if x.startswith(f"{idx[0] + 1}_")]
    shutil.copy(os.path.join(cdir, f[0]), os.path.join(dest, case + ".mugraph.json"))
    print(case, "candidate", idx[0] + 1, fp)
