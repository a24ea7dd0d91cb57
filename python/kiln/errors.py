"""The errors of Kiln's PyTorch front end.

`KilnUnsupported` is the user error of `to_spec`: a node of the traced program that spec/1 cannot
express. It names the op, the fx target and, where the trace recorded one, the line of the user's
code, so the fix can start there. `KilnError` is any other failure of the front end (the kiln CLI
failed, an emitted file has no ABI, a cached kernel is missing), with what to do next.
"""
from __future__ import annotations

import os
import re
from typing import Any, Optional

__all__ = ["KilnError", "KilnUnsupported", "user_frame"]


class KilnError(RuntimeError):
    """A failure of the front end that is not an unsupported op (see the message)."""


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]*)\n'
                    r'(?P<code>[ \t]+(?!File ")[^\n]*\n)?', re.MULTILINE)

# Frames in these directories are the tracer's, not the user's.
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def _internal(path: str) -> bool:
    p = os.path.abspath(path)
    if p.startswith(_PKG_DIR + os.sep):
        return True
    parts = p.split(os.sep)
    # torch itself, the standard library's contextlib/functools, and frozen/importlib frames.
    return ("torch" in parts and ("site-packages" in parts or "dist-packages" in parts)) \
        or p.startswith("<") or os.path.basename(p) in ("contextlib.py", "functools.py")


def user_frame(stack_trace: Optional[str]) -> Optional[str]:
    """The innermost frame of `stack_trace` (an fx node's recorded traceback text) that is in the
    user's code, as "FILE:LINE: CODE", or None where the trace recorded no such frame."""
    if not stack_trace:
        return None
    frames = list(_FRAME.finditer(stack_trace))
    # torch 1.13's symbolic_trace writes the stack innermost first (walk_stack; its own `trace`
    # frame follows the user's); torch 2.x writes it outermost first, the user's frames only.
    innermost_first = any(m.group("file").endswith("_symbolic_trace.py") for m in frames)
    for m in (frames if innermost_first else reversed(frames)):
        if not _internal(m.group("file")):
            code = (m.group("code") or "").strip()
            where = f"{m.group('file')}:{m.group('line')}"
            return f"{where}: {code}" if code else where
    return None


class KilnUnsupported(KilnError):
    """A node that spec/1 cannot express (or not the way the trace wrote it).

    Attributes: `op` (a readable op name, e.g. "torch.cumsum" or "nn.Conv2d"), `target` (the fx
    node's target as text), `node` (the fx node's name), `where` ("FILE:LINE: CODE" of the user's
    code, or None), `reason` (why, with a hint where there is one).
    """

    def __init__(self, op: str, reason: str, *, target: Any = None, node: Optional[str] = None,
                 where: Optional[str] = None) -> None:
        self.op = op
        self.target = None if target is None else str(target)
        self.node = node
        self.where = where
        self.reason = reason
        at = f" at {where}" if where else " (no source line recorded for this node)"
        of = f" (fx node {node!r}, target {self.target})" if node else ""
        super().__init__(f"kiln: cannot map {op}{of}{at}: {reason}")
