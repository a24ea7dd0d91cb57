"""PyTorch side of tests/gpu/gemm_ws_bench.cu: the same shapes timed the same way (medians of
CUDA-graph replays of 10 calls, inputs rotating over two sets), so that the two tables compare.

    python3 tests/gpu/gemm_ws_torch.py
gated MLP: silu(X @ W1) * (X @ W2) (two cuBLAS GEMMs and elementwise kernels); plain: X @ W1.
"""
import torch
import torch.nn.functional as F


def time_us(fn, sets, iters=10, replays=7):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(*sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(iters):
            fn(*sets[i % len(sets)])
    g.replay()
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / iters)
    return sorted(ts)[len(ts) // 2]


def main():
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for dt in (torch.float16, torch.bfloat16):
        for m, n, k in ((4096, 4096, 4096), (4000, 4040, 4000)):
            sets = [(torch.rand(m, k, device="cuda", dtype=dt) * 2 - 1,
                     (torch.rand(k, n, device="cuda", dtype=dt) * 2 - 1) / 16,
                     (torch.rand(k, n, device="cuda", dtype=dt) * 2 - 1) / 16) for _ in range(2)]
            mlp = time_us(lambda x, w1, w2: F.silu(x @ w1) * (x @ w2), sets)
            mm = time_us(lambda x, w1, w2: x @ w1, sets)
            name = str(dt).split(".")[1]
            print(f"torch mlp2 {m}x{n}x{k} {name}: {mlp:8.1f} us {4.0 * m * n * k / mlp / 1e6:6.0f} TFLOP/s")
            print(f"torch mm1  {m}x{n}x{k} {name}: {mm:8.1f} us {2.0 * m * n * k / mm / 1e6:6.0f} TFLOP/s")


if __name__ == "__main__":
    main()
