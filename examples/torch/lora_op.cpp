// PyTorch glue of the emitted kiln_lora.cu (examples/lora.json: O = X·W + (X·A)·B):
// registers the custom op kiln::lora (CUDA) and kiln::lora_bench (times the bare entry point).
// Built together with the .cu by torch.utils.cpp_extension.load (kiln_torch.py); the fake
// (meta) implementation that torch.compile traces with is registered in Python (kiln_torch.py).
#include <torch/library.h>

#include "kiln_op_common.h"

// By hand from the ABI in the emitted file's header comment (`kiln emit --header` writes the
// same prototypes into a C header that can replace these lines):
//   inputs:  X f16[16, 256], W f16[256, 4096], A f16[256, 16], B f16[16, 4096]
//   outputs: O f16[16, 4096]
extern "C" size_t kiln_lora_workspace_bytes(void);
extern "C" cudaError_t kiln_lora(const void* X, const void* W, const void* A, const void* B,
                                 void* O, void* workspace, cudaStream_t stream);

namespace {

const char* const kOp = "kiln::lora";
std::atomic<bool> g_warmed{false};

const std::vector<kiln_torch::ArgSpec>& arg_specs() {
  static const std::vector<kiln_torch::ArgSpec> specs = {
      {"X", {16, 256}, at::kHalf},
      {"W", {256, 4096}, at::kHalf},
      {"A", {256, 16}, at::kHalf},
      {"B", {16, 4096}, at::kHalf},
  };
  return specs;
}

at::Tensor lora_cuda(const at::Tensor& X, const at::Tensor& W, const at::Tensor& A,
                     const at::Tensor& B) {
  kiln_torch::check_args(kOp, {X, W, A, B}, arg_specs());
  const c10::cuda::CUDAGuard guard(X.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(X.device().index()).stream();
  kiln_torch::check_capture(kOp, stream, g_warmed);
  at::Tensor O = at::empty({16, 4096}, X.options());
  const at::Tensor ws = kiln_torch::workspace(kiln_lora_workspace_bytes(), X);
  kiln_torch::check_launch(kOp, kiln_lora(X.data_ptr(), W.data_ptr(), A.data_ptr(), B.data_ptr(),
                                          O.data_ptr(), kiln_torch::data_or_null(ws), stream));
  g_warmed.store(true, std::memory_order_release);
  return O;
}

// Microseconds per call of the bare kiln_lora (no PyTorch in the loop): `graph` false launches
// from a C++ loop, true replays a CUDA graph of `iters` calls.
double lora_bench(const at::Tensor& X, const at::Tensor& W, const at::Tensor& A,
                  const at::Tensor& B, int64_t iters, int64_t reps, bool graph) {
  kiln_torch::check_args("kiln::lora_bench", {X, W, A, B}, arg_specs());
  const c10::cuda::CUDAGuard guard(X.device());
  at::Tensor O = at::empty({16, 4096}, X.options());
  const at::Tensor ws = kiln_torch::workspace(kiln_lora_workspace_bytes(), X);
  void* const wsp = kiln_torch::data_or_null(ws);
  // The caller's stream must be done with the inputs before the timer's own stream reads them.
  at::cuda::getCurrentCUDAStream(X.device().index()).synchronize();
  const double us = kiln_torch::time_bare(
      "kiln::lora_bench",
      [&](cudaStream_t s) {
        return kiln_lora(X.data_ptr(), W.data_ptr(), A.data_ptr(), B.data_ptr(), O.data_ptr(), wsp,
                         s);
      },
      iters, reps, graph);
  g_warmed.store(true, std::memory_order_release);
  return us;
}

}  // namespace

// FRAGMENT: every glue file adds its ops to the one namespace `kiln`.
TORCH_LIBRARY_FRAGMENT(kiln, m) {
  m.def("lora(Tensor X, Tensor W, Tensor A, Tensor B) -> Tensor");
  m.def(
      "lora_bench(Tensor X, Tensor W, Tensor A, Tensor B, int iters, int reps, bool graph) "
      "-> float");
}

TORCH_LIBRARY_IMPL(kiln, CUDA, m) {
  m.impl("lora", &lora_cuda);
  m.impl("lora_bench", &lora_bench);
}

// CPU tensors reach the same checks, which say that the op needs CUDA tensors (instead of the
// dispatcher's "could not run ... with arguments from the 'CPU' backend").
TORCH_LIBRARY_IMPL(kiln, CPU, m) {
  m.impl("lora", &lora_cuda);
  m.impl("lora_bench", &lora_bench);
}
