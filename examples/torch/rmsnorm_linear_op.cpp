// PyTorch glue of the emitted kiln_rmsnorm_linear.cu (examples/rmsnorm_linear.json:
// O = rms_norm(X)·W, rms_norm(x) = x / sqrt(mean(x²) + 1e-6) over the last dim, no weight):
// registers the custom op kiln::rmsnorm_linear (CUDA) and kiln::rmsnorm_linear_bench (times the
// bare entry point). Built together with the .cu by torch.utils.cpp_extension.load
// (kiln_torch.py), which also registers the fake (meta) implementation for torch.compile.
#include <torch/library.h>

#include "kiln_op_common.h"

// By hand from the ABI in the emitted file's header comment (`kiln emit --header` writes the
// same prototypes into a C header that can replace these lines):
//   inputs:  X f16[2, 4096], W f16[4096, 6144]
//   outputs: O f16[2, 6144]
extern "C" size_t kiln_rmsnorm_linear_workspace_bytes(void);
extern "C" cudaError_t kiln_rmsnorm_linear(const void* X, const void* W, void* O, void* workspace,
                                           cudaStream_t stream);

namespace {

const char* const kOp = "kiln::rmsnorm_linear";
std::atomic<bool> g_warmed{false};

const std::vector<kiln_torch::ArgSpec>& arg_specs() {
  static const std::vector<kiln_torch::ArgSpec> specs = {
      {"X", {2, 4096}, at::kHalf},
      {"W", {4096, 6144}, at::kHalf},
  };
  return specs;
}

at::Tensor rmsnorm_linear_cuda(const at::Tensor& X, const at::Tensor& W) {
  kiln_torch::check_args(kOp, {X, W}, arg_specs());
  const c10::cuda::CUDAGuard guard(X.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(X.device().index()).stream();
  kiln_torch::check_capture(kOp, stream, g_warmed);
  at::Tensor O = at::empty({2, 6144}, X.options());
  const at::Tensor ws = kiln_torch::workspace(kiln_rmsnorm_linear_workspace_bytes(), X);
  kiln_torch::check_launch(kOp, kiln_rmsnorm_linear(X.data_ptr(), W.data_ptr(), O.data_ptr(),
                                                    kiln_torch::data_or_null(ws), stream));
  g_warmed.store(true, std::memory_order_release);
  return O;
}

// Microseconds per call of the bare kiln_rmsnorm_linear (no PyTorch in the loop): `graph` false
// launches from a C++ loop, true replays a CUDA graph of `iters` calls.
double rmsnorm_linear_bench(const at::Tensor& X, const at::Tensor& W, int64_t iters, int64_t reps,
                            bool graph) {
  kiln_torch::check_args("kiln::rmsnorm_linear_bench", {X, W}, arg_specs());
  const c10::cuda::CUDAGuard guard(X.device());
  at::Tensor O = at::empty({2, 6144}, X.options());
  const at::Tensor ws = kiln_torch::workspace(kiln_rmsnorm_linear_workspace_bytes(), X);
  void* const wsp = kiln_torch::data_or_null(ws);
  // The caller's stream must be done with the inputs before the timer's own stream reads them.
  at::cuda::getCurrentCUDAStream(X.device().index()).synchronize();
  const double us = kiln_torch::time_bare(
      "kiln::rmsnorm_linear_bench",
      [&](cudaStream_t s) {
        return kiln_rmsnorm_linear(X.data_ptr(), W.data_ptr(), O.data_ptr(), wsp, s);
      },
      iters, reps, graph);
  g_warmed.store(true, std::memory_order_release);
  return us;
}

}  // namespace

// FRAGMENT: every glue file adds its ops to the one namespace `kiln`.
TORCH_LIBRARY_FRAGMENT(kiln, m) {
  m.def("rmsnorm_linear(Tensor X, Tensor W) -> Tensor");
  m.def("rmsnorm_linear_bench(Tensor X, Tensor W, int iters, int reps, bool graph) -> float");
}

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("rmsnorm_linear", &rmsnorm_linear_cuda);
  m.impl("rmsnorm_linear_bench", &rmsnorm_linear_bench);
}

// CPU tensors reach the same checks, which say that the op needs CUDA tensors (instead of the
// dispatcher's "could not run ... with arguments from the 'CPU' backend").
TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("rmsnorm_linear", &rmsnorm_linear_cuda);
  m.impl("rmsnorm_linear_bench", &rmsnorm_linear_bench);
}
