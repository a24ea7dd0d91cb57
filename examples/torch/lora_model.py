#!/usr/bin/env python3
"""A tiny model whose LoRA layer is the Kiln-emitted kernel (torch.ops.kiln.lora), run eagerly,
under torch.compile(fullgraph=True) and replayed from a CUDA graph.

    python3 examples/torch/lora_model.py                      # emits with build/kiln
    python3 examples/torch/lora_model.py --cu kiln_lora.cu    # an already emitted file
"""
from __future__ import annotations

import argparse
import math
import pathlib
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import kiln_torch  # noqa: E402


class KilnLoRALinear(nn.Module):
    """y = x·W + (x·A)·B with rank-16 adapters, as one emitted kernel. Inference only (the op has
    no backward) and fixed shapes (x: f16[16, 256]; W f16[256, 4096], A f16[256, 16],
    B f16[16, 4096]): the kernel was emitted for examples/lora.json."""

    def __init__(self, in_features=256, out_features=4096, rank=16, device="cuda"):
        super().__init__()
        h = dict(device=device, dtype=torch.float16)
        self.weight = nn.Parameter(torch.randn(in_features, out_features, **h) / math.sqrt(in_features),
                                   requires_grad=False)
        self.lora_A = nn.Parameter(torch.randn(in_features, rank, **h) / math.sqrt(in_features),
                                   requires_grad=False)
        self.lora_B = nn.Parameter(torch.randn(rank, out_features, **h) / math.sqrt(rank),
                                   requires_grad=False)

    def forward(self, x):
        return torch.ops.kiln.lora(x.contiguous(), self.weight, self.lora_A, self.lora_B)


class TinyModel(nn.Module):
    """The LoRA layer between plain PyTorch ops (which torch.compile fuses around the op)."""

    def __init__(self, device="cuda"):
        super().__init__()
        self.proj = KilnLoRALinear(device=device)

    def forward(self, x):
        return F.silu(self.proj(x * 2.0)) * 0.5

    def reference(self, x):
        """The same in float64 with the spec's reference of the layer."""
        p = self.proj
        h = kiln_torch.reference("lora", x.double() * 2.0, p.weight, p.lora_A, p.lora_B)
        return F.silu(h) * 0.5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cu", help="the emitted kiln_lora.cu (default: emit it with --kiln)")
    ap.add_argument("--kiln", default=str(kiln_torch.REPO / "build" / "kiln"), help="the kiln binary")
    ap.add_argument("--build-dir", help="where the extension is built (default: torch's cache)")
    args = ap.parse_args()

    cu = args.cu or kiln_torch.emit("lora", args.kiln, tempfile.mkdtemp(prefix="kiln_torch_"))
    kiln_torch.load_op("lora", cu, build_dir=args.build_dir)
    torch.manual_seed(0)
    model = TinyModel().eval()
    x = torch.randn(16, 256, device="cuda", dtype=torch.float16)
    ref = model.reference(x)

    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)(x)
        static_x = x.clone()
        model(static_x)  # warm-up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = model(static_x)
        static_x.copy_(x)
        graph.replay()
    torch.cuda.synchronize()
    for mode, y in (("eager", eager), ("torch.compile", compiled), ("CUDA graph", static_y)):
        print(f"{mode:14s} {tuple(y.shape)} {y.dtype}  rel. L2 error vs float64: "
              f"{kiln_torch.rel_l2(y, ref):.2e}")


if __name__ == "__main__":
    main()
