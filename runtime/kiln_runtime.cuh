// Kiln runtime: the umbrella header of the header-only CUDA library that Kiln's generated
// kernels call (tiles, copies, tensor-core matmul, the decode GEMV, reductions, elementwise
// functors, accumulators). docs/runtime.md describes each piece and its contract.
//
// The includes below are in dependency order. The emitter inlines the runtime into a standalone
// .cu by concatenating these files' text in exactly this order; every sibling include inside them
// is wrapped in the sibling's include guard, so the concatenation needs no runtime/ directory.
#ifndef KILN_RT_KILN_RUNTIME_CUH
#define KILN_RT_KILN_RUNTIME_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif
#ifndef KILN_RT_ELEMENTWISE_CUH
#include "elementwise.cuh"
#endif
#ifndef KILN_RT_REDUCE_CUH
#include "reduce.cuh"
#endif
#ifndef KILN_RT_ACCUM_CUH
#include "accum.cuh"
#endif
#ifndef KILN_RT_TILE_CUH
#include "tile.cuh"
#endif
#ifndef KILN_RT_COPY_CUH
#include "copy.cuh"
#endif
#ifndef KILN_RT_TMA_CUH
#include "tma.cuh"
#endif
#ifndef KILN_RT_MMA_CUH
#include "mma.cuh"
#endif
#ifndef KILN_RT_GEMM_CUH
#include "gemm.cuh"
#endif
#ifndef KILN_RT_WGMMA_CUH
#include "wgmma.cuh"
#include "attention.cuh"
#include "tf32.cuh"
#endif
#ifndef KILN_RT_GEMV_CUH
#include "gemv.cuh"
#endif
#ifndef KILN_RT_GEMV_TMA_CUH
#include "gemv_tma.cuh"
#include "gemv_kmajor.cuh"
#include "lowrank.cuh"
#endif

#endif  // KILN_RT_KILN_RUNTIME_CUH
