// Timing shared by the GPU tests and measurement tools in tests/gpu (CUDA toolkit only). The
// including file includes <functional>, <algorithm>, <vector> and <cstdio>, and may define
// CK(x), its CUDA error check, first; the default prints the failing call and exits 1.
#ifndef KILN_TESTS_GPU_TIMING_H
#define KILN_TESTS_GPU_TIMING_H

#ifndef CK
#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
#endif

// Median time of one call over `replays` replays of a CUDA graph of `iters` calls (call(i)
// rotates its inputs), after three warm-up calls and one warm-up replay.
static double time_us(const std::function<void(int, cudaStream_t)>& call, int iters,
                      int replays = 5) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) call(i, st);  // warm-up (module load, first-touch)
  CK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iters; ++i) call(i, st);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(exec, st));
  std::vector<double> ts;
  for (int r = 0; r < replays; ++r) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(exec, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1000.0 / iters);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(st);
  return ts[ts.size() / 2];
}

#endif  // KILN_TESTS_GPU_TIMING_H
