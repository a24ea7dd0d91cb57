// Shared helpers of the PyTorch glue files (lora_op.cpp, rmsnorm_linear_op.cpp): argument checks
// with clear errors, the launch of an emitted kiln_NAME entry point on PyTorch's current stream
// with a workspace from PyTorch's allocator, and a timer of the bare entry point.
//
// An emitted .cu exports (its header comment, "ABI", gives the exact list and shapes):
//   extern "C" size_t kiln_NAME_workspace_bytes(void);
//   extern "C" cudaError_t kiln_NAME(const void* in0, ..., void* out0, ..., void* workspace,
//                                    cudaStream_t stream);
// Pointers are device pointers, 16-byte aligned, dense row-major; the call only enqueues work on
// `stream` (no host synchronization) and returns the first launch error.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kiln_torch {

// One input of an emitted function: its name in the spec, shape and dtype.
struct ArgSpec {
  const char* name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};

inline std::string dims_str(at::IntArrayRef dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Checks one input against its spec; `device` is the device of the first input. The errors name
// the op and the argument: TypeError for the dtype, ValueError for the shape, RuntimeError for
// the device, the layout and the alignment. Each message is built as one std::string first.
inline void check_arg(const char* op, const at::Tensor& t, const ArgSpec& spec,
                      const at::Device& device) {
  const std::string arg = std::string(op) + ": " + spec.name;
  TORCH_CHECK(t.defined(), arg + " is undefined");
  TORCH_CHECK(t.is_cuda(), arg + " must be a CUDA tensor, got a tensor on " + t.device().str());
  TORCH_CHECK(t.device() == device, std::string(op) + ": all inputs must be on one device; " +
                                        spec.name + " is on " + t.device().str() +
                                        ", the first input on " + device.str());
  TORCH_CHECK_TYPE(t.scalar_type() == spec.dtype, arg + " must be " + c10::toString(spec.dtype) +
                                                      ", got " + c10::toString(t.scalar_type()));
  const at::IntArrayRef sizes = t.sizes();
  bool same = sizes.size() == spec.shape.size();
  for (size_t i = 0; same && i < sizes.size(); ++i) same = sizes[i] == spec.shape[i];
  TORCH_CHECK_VALUE(same, arg + " must have shape " + dims_str(spec.shape) + ", got " +
                              dims_str(sizes) + " (the kernel was emitted for these fixed shapes)");
  TORCH_CHECK(t.is_contiguous(), arg + " must be contiguous (dense row-major), got strides " +
                                     dims_str(t.strides()) + "; call .contiguous() first");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0,
              arg + " must be 16-byte aligned (a view at an offset?); call .clone() first");
}

inline void check_args(const char* op, std::initializer_list<at::Tensor> inputs,
                       const std::vector<ArgSpec>& specs) {
  TORCH_CHECK(inputs.size() == specs.size(), std::string(op) + ": expected " +
                                                 std::to_string(specs.size()) + " inputs, got " +
                                                 std::to_string(inputs.size()));
  const at::Device device = inputs.begin()->device();
  size_t i = 0;
  for (const at::Tensor& t : inputs) check_arg(op, t, specs[i++], device);
}

// The emitted launch function raises a kernel's shared-memory limit on its first call
// (cudaFuncSetAttribute), which must not happen inside a CUDA-graph capture. `warmed` records a
// first call made outside capture; a first call inside one is refused with a clear error instead
// of a failed capture.
inline void check_capture(const char* op, cudaStream_t stream, const std::atomic<bool>& warmed) {
  if (warmed.load(std::memory_order_acquire)) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  TORCH_CHECK(err == cudaSuccess, op, ": cudaStreamIsCapturing failed: ", cudaGetErrorString(err));
  TORCH_CHECK(status == cudaStreamCaptureStatusNone, op,
              ": the first call must run outside CUDA-graph capture (it sets the kernel's "
              "shared-memory limit once); call the op once eagerly before capturing");
}

// A workspace of `bytes` from PyTorch's caching allocator on the inputs' device (stream-ordered,
// so the memory is safe to reuse once the launch is enqueued; inside a CUDA-graph capture it
// comes from the graph's private pool). An undefined tensor and a null pointer when 0 bytes.
inline at::Tensor workspace(size_t bytes, const at::Tensor& like) {
  if (bytes == 0) return at::Tensor();
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

inline void* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

inline void check_launch(const char* op, cudaError_t err) {
  TORCH_CHECK(err == cudaSuccess, op, ": the emitted launch failed: ", cudaGetErrorString(err));
}

// Times `launch(stream)` (one call of the bare emitted entry point) on a stream of its own and
// returns the microseconds per call: `graph` false enqueues `iters` calls from a C++ loop; true
// captures `iters` calls into one CUDA graph and replays it. The best of `reps` repetitions.
template <class Launch>
double time_bare(const char* op, Launch launch, int64_t iters, int64_t reps, bool graph) {
  TORCH_CHECK(iters > 0 && reps > 0, op, ": iters and reps must be positive");
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  auto check = [&](cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    if (exec) cudaGraphExecDestroy(exec);
    if (g) cudaGraphDestroy(g);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    TORCH_CHECK(false, op, ": ", what, " failed: ", cudaGetErrorString(err));
  };
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < 10; ++i) check(launch(s), "warm-up launch");
  if (graph) {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int64_t i = 0; i < iters; ++i) {
      const cudaError_t err = launch(s);
      if (err != cudaSuccess) {
        cudaStreamEndCapture(s, &g);
        check(err, "launch during capture");
      }
    }
    check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");  // warm-up replay
  }
  check(cudaStreamSynchronize(s), "warm-up");
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    if (graph) {
      check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    } else {
      for (int64_t i = 0; i < iters; ++i) check(launch(s), "launch");
    }
    check(cudaEventRecord(e1, s), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0.f;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    best = std::min(best, 1000.0 * ms / static_cast<double>(iters));
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (g) cudaGraphDestroy(g);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  return best;
}

}  // namespace kiln_torch
