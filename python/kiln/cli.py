"""Running the kiln command line from Python: finding it, `optimize` with its progress shown,
`verify`, and `eval` with its printed statistics parsed.

The binary is, in order: the `kiln` argument, $KILN, `build/kiln` of the repository this package
lives in, `kiln` on PATH. Only the optimize/emit step needs it (it runs on the CPU host); building
and loading an emitted file needs only nvcc and PyTorch (compiler.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional

from .errors import KilnError

__all__ = ["find_kiln", "optimize", "eval_stats", "EvalStats", "REPO"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_kiln(kiln: Optional[str] = None) -> Optional[str]:
    """The kiln binary to run, or None where none is found (see the module doc for the order)."""
    for c in (kiln, os.environ.get("KILN"), os.path.join(REPO, "build", "kiln")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("kiln")


def require_kiln(kiln: Optional[str] = None) -> str:
    exe = find_kiln(kiln)
    if exe is None:
        raise KilnError("kiln: no kiln CLI found (build it with `make build`, or set KILN=PATH); "
                        "it is needed to optimize a spec (the build/load step needs only nvcc)")
    return exe


def optimize(spec_path: str, out_dir: str, *, kiln: Optional[str] = None,
             time_limit: Optional[float] = None, extra: Optional[List[str]] = None,
             quiet: bool = False) -> str:
    """Runs `kiln optimize SPEC -o OUT_DIR` with its progress on stderr (unless `quiet`) and
    returns the emitted .cu. Raises KilnError with kiln's last lines when nothing shipped."""
    exe = require_kiln(kiln)
    cmd = [exe, "optimize", spec_path, "-o", out_dir]
    if time_limit is not None:
        cmd += ["--time-limit", str(time_limit)]
    cmd += extra or []
    print(f"kiln.compile: {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        sys.stderr.fileno()
        stream = not quiet
    except (AttributeError, OSError, ValueError):  # a notebook's stderr: print kiln's at the end
        stream = False
    r = subprocess.run(cmd, stdout=sys.stderr if stream else subprocess.PIPE,
                       stderr=None if stream else subprocess.STDOUT, text=True)
    if not stream and not quiet and r.stdout:
        print(r.stdout, file=sys.stderr, end="")
    cus = sorted(f for f in os.listdir(out_dir) if f.endswith(".cu")) \
        if os.path.isdir(out_dir) else []
    if r.returncode != 0 or not cus:
        tail = (r.stdout or "").strip().splitlines()[-8:]
        raise KilnError(f"kiln: `{' '.join(cmd)}` exited {r.returncode} and shipped no .cu"
                        + ("".join("\n  " + t for t in tail) if tail else
                           " (its output is above)"))
    return os.path.join(out_dir, cus[0])


@dataclass
class EvalStats:
    """One output line of `kiln eval`: shape, dtype, mean, max |x| and the checksum
    Σ (1 + e mod 7)·x_e over the row-major elements."""
    name: str
    shape: List[int]
    dtype: str
    mean: float
    maxabs: float
    checksum: float


_EVAL_LINE = re.compile(r"^\s+(?P<name>\S+)\s+\[(?P<shape>[^\]]*)\]\s+(?P<dtype>\S+)\s+mean\s+"
                        r"(?P<mean>\S+)\s+max\|x\|\s+(?P<maxabs>\S+)\s+checksum\s+(?P<cs>\S+)")


def eval_stats(spec_path: str, *, seed: int = 1, input_std: float = 0.0,
               kiln: Optional[str] = None) -> List[EvalStats]:
    """`kiln eval SPEC --precision f64` parsed: one EvalStats per output, in order."""
    exe = require_kiln(kiln)
    r = subprocess.run([exe, "eval", spec_path, "--seed", str(seed), "--input-std",
                        repr(float(input_std)), "--precision", "f64", "--threads", "1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise KilnError(f"kiln eval {spec_path} exited {r.returncode}: {r.stderr.strip()}")
    out = []
    for line in r.stdout.splitlines():
        m = _EVAL_LINE.match(line)
        if m:
            shape = [int(s) for s in m.group("shape").split(",") if s.strip()]
            out.append(EvalStats(m.group("name"), shape, m.group("dtype"), float(m.group("mean")),
                                 float(m.group("maxabs")), float(m.group("cs"))))
    return out
