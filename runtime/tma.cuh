// Kiln runtime, tma: 2-D tensor-map copies (cp.async.bulk.tensor, sm_90) from global memory into
// shared-memory tiles, completing on an mbarrier (copy.cuh's mbar_* functions).
//
// A tensor map describes a row-major matrix (rows x cols, row stride ld) and a box (box_rows x
// box_cols) once, on the host; the copy engine then moves any box of it, zero-filling what lies
// outside the matrix, and can write it 128-byte swizzled. With box_cols * sizeof(T) == 128 and
// the 128-byte swizzle, the destination is exactly SmemTile<T, box_rows, box_cols,
// Layout::Swizzled> at a 1024-byte aligned address, the layout wgmma.cuh reads; without swizzle
// it is the RowMajor tile.
//
// The map travels as a kernel parameter declared `const __grid_constant__ TmaDesc`, and device
// code passes its address (&desc) to tma_load_2d. TmaDesc is an opaque 128-byte, 64-byte aligned
// blob with CUtensorMap's size, so device code (and NVRTC) needs no driver header; the host
// encoder uses <cuda.h> and reaches cuTensorMapEncodeTiled through the runtime's driver entry
// point, so nothing links against libcuda.
#ifndef KILN_RT_TMA_CUH
#define KILN_RT_TMA_CUH

#ifndef KILN_RT_COPY_CUH
#include "copy.cuh"
#endif
#ifndef __CUDACC_RTC__
#include <cuda.h>
#endif

namespace kiln {
namespace rt {

struct alignas(64) TmaDesc {
  uint64_t opaque[16];
};

// Issues the copy of the box whose top-left element is (row, col) into smem_dst (128-byte
// aligned; 1024-byte aligned for the 128-byte swizzle), completing box bytes on bar. One thread
// issues it, after mbar_arrive_expect_tx(bar, box bytes) (the full box is always counted, zero
// fill included). row and col may be negative or past the end: those elements are zeros.
KILN_DEV void tma_load_2d(void* smem_dst, const TmaDesc* desc, int row, int col, uint64_t* bar) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_u32(smem_dst)),
      "l"(desc), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

// tma_load_2d of a 3-D tensor map: the box at (z, row, col), z the outermost coordinate (a batch
// index: rows past the matrix's end are zeros, not the next batch's).
KILN_DEV void tma_load_3d(void* smem_dst, const TmaDesc* desc, int z, int row, int col,
                          uint64_t* bar) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_u32(smem_dst)),
      "l"(desc), "r"(col), "r"(row), "r"(z), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

// An L2 cache policy that marks the lines it is attached to as evict-first, for data read exactly
// once (a streamed weight), so that it does not push out data that is read again.
KILN_DEV uint64_t l2_policy_evict_first() {
#if KILN_RT_SM90
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
#else
  __trap();
  return 0;
#endif
}

// tma_load_2d with an L2 cache policy (l2_policy_evict_first) on the lines it reads.
KILN_DEV void tma_load_2d_hint(void* smem_dst, const TmaDesc* desc, int row, int col, uint64_t* bar,
                               uint64_t policy) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_u32(smem_dst)),
      "l"(desc), "r"(col), "r"(row), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// tma_load_2d multicast to the CTAs of this cluster whose bit is set in cta_mask (this one
// included if its bit is set): the box lands at smem_dst's offset in each of them and completes
// its bytes on the mbarrier at bar's offset in each. Cluster launches only.
KILN_DEV void tma_load_2d_multicast(void* smem_dst, const TmaDesc* desc, int row, int col,
                                    uint64_t* bar, uint16_t cta_mask) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_u32(smem_dst)),
      "l"(desc), "r"(col), "r"(row), "r"(smem_u32(bar)), "h"(cta_mask)
      : "memory");
#else
  __trap();
#endif
}

// Stores the box at smem_src (the layout tma_load_2d writes) to the matrix with its top-left
// element at (row, col), in this thread's current bulk group (bulk_commit, bulk_wait_read,
// bulk_wait of copy.cuh); what lies outside the matrix is not written. Precede it with
// fence_proxy_async_smem() in each thread that wrote the box, then a barrier.
KILN_DEV void tma_store_2d(const TmaDesc* desc, const void* smem_src, int row, int col) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(desc),
      "r"(col), "r"(row), "r"(smem_u32(smem_src))
      : "memory");
#else
  __trap();
#endif
}

// Fetches the descriptor into the copy engine's cache ahead of the first copy (optional).
KILN_DEV void tma_prefetch_desc(const TmaDesc* desc) {
#if KILN_RT_SM90
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(desc) : "memory");
#else
  __trap();
#endif
}

#ifndef __CUDACC_RTC__
static_assert(sizeof(TmaDesc) == sizeof(CUtensorMap), "TmaDesc mirrors CUtensorMap");

template <typename T>
inline CUtensorMapDataType tma_dtype();
template <>
inline CUtensorMapDataType tma_dtype<__half>() {
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}
template <>
inline CUtensorMapDataType tma_dtype<__nv_bfloat16>() {
  return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}
template <>
inline CUtensorMapDataType tma_dtype<float>() {
  return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
}

// The driver's cuTensorMapEncodeTiled, looked up once (tma_encode_2d, tma_encode_3d).
using TmaEncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline cudaError_t tma_encode_fn(TmaEncodeFn* out) {
  static TmaEncodeFn encode = nullptr;
  if (encode == nullptr) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                           cudaEnableDefault, &q);
    if (e != cudaSuccess) return e;
    if (q != cudaDriverEntryPointSuccess || fn == nullptr) return cudaErrorNotSupported;
    encode = reinterpret_cast<TmaEncodeFn>(fn);
  }
  *out = encode;
  return cudaSuccess;
}

// Encodes a 2-D tensor map over base[rows][cols] with row stride ld elements. Requirements
// (checked, cudaErrorInvalidValue otherwise): base 16-byte aligned; ld * sizeof(T) a multiple of
// 16; 1 <= box_rows, box_cols <= 256; box_cols * sizeof(T) a multiple of 16, and exactly 128 with
// swizzle128. Returns cudaErrorNotSupported when the driver has no cuTensorMapEncodeTiled.
template <typename T>
inline cudaError_t tma_encode_2d(TmaDesc* out, const T* base, int64_t rows, int64_t cols,
                                 int64_t ld, int box_rows, int box_cols, bool swizzle128) {
  const int64_t eb = sizeof(T);
  if ((reinterpret_cast<uintptr_t>(base) & 15) != 0 || (ld * eb) % 16 != 0 || box_rows < 1 ||
      box_rows > 256 || box_cols < 1 || box_cols > 256 || (box_cols * eb) % 16 != 0 ||
      (swizzle128 && box_cols * eb != 128) || rows < 1 || cols < 1)
    return cudaErrorInvalidValue;
  TmaEncodeFn encode = nullptr;
  if (const cudaError_t e = tma_encode_fn(&encode); e != cudaSuccess) return e;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};  // innermost first
  const cuuint64_t strides[1] = {cuuint64_t(ld * eb)};              // bytes, dims 1..
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t estride[2] = {1, 1};
  CUtensorMap map;
  const CUresult r = encode(&map, tma_dtype<T>(), 2, const_cast<T*>(base), dims, strides, box,
                            estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  static_assert(sizeof(map) == sizeof(*out), "size");
  __builtin_memcpy(out, &map, sizeof(map));
  return cudaSuccess;
}

// tma_encode_2d for `depth` matrices of rows x cols, each ld_z elements after the previous (boxes
// of one matrix: box depth 1).
template <typename T>
inline cudaError_t tma_encode_3d(TmaDesc* out, const T* base, int64_t depth, int64_t rows,
                                 int64_t cols, int64_t ld, int64_t ld_z, int box_rows, int box_cols,
                                 bool swizzle128) {
  const int64_t eb = sizeof(T);
  if ((reinterpret_cast<uintptr_t>(base) & 15) != 0 || (ld * eb) % 16 != 0 ||
      (ld_z * eb) % 16 != 0 || box_rows < 1 || box_rows > 256 || box_cols < 1 || box_cols > 256 ||
      (box_cols * eb) % 16 != 0 || (swizzle128 && box_cols * eb != 128) || rows < 1 || cols < 1 ||
      depth < 1)
    return cudaErrorInvalidValue;
  TmaEncodeFn encode = nullptr;
  if (const cudaError_t e = tma_encode_fn(&encode); e != cudaSuccess) return e;
  const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(depth)};
  const cuuint64_t strides[2] = {cuuint64_t(ld * eb), cuuint64_t(ld_z * eb)};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1};
  const cuuint32_t estride[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult r = encode(&map, tma_dtype<T>(), 3, const_cast<T*>(base), dims, strides, box,
                            estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  __builtin_memcpy(out, &map, sizeof(map));
  return cudaSuccess;
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_TMA_CUH
