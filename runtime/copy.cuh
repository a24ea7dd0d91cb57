// Kiln runtime, copy: moving tiles between device memory and shared memory.
//
// Three paths, fastest last:
//   copy_g2s / copy_s2g    synchronous 16-byte vector copies of a 2-D window (LDG.E.128 +
//                          STS.128), every thread's loads issued before its stores so several
//                          are in flight. Any window: rows and columns past the view's valid
//                          extent read as zero and are never written.
//   cp_async_g2s           cp.async.cg 16-byte copies (LDGSTS) that bypass registers, with
//                          commit / wait groups for multi-stage pipelines. Out-of-bounds chunks
//                          are zero-filled by the hardware (src-size < 16), so column tails need
//                          no scalar path.
//   bulk_g2s_rows (sm_90)  one cp.async.bulk per tile row through the copy engine (UBLKCP),
//                          completing on an mbarrier with a transaction count. Whole rows only,
//                          no zero fill, no swizzle. bulk_s2g is the store direction.
//
// Thread mapping of the tile copies: the tile's 16-byte chunks are numbered row-major
// (R * C / chunk elements of them) and thread `tid` of NTHREADS takes chunks tid, tid+NTHREADS,
// ...; consecutive threads read consecutive 16 bytes of a row, so a warp's loads coalesce.
//
// Preconditions (the emitter checks them; nothing here checks at run time):
//   - view.ptr is 16-byte aligned and view.ld * sizeof(T) is a multiple of 16, so every chunk of
//     every row starts 16-byte aligned. (A partial last chunk is fine.)
//   - tid in [0, NTHREADS); all NTHREADS threads call the function (no barrier inside).
//   - Synchronization is the caller's: a barrier after copy_g2s / cp_async_wait before other
//     threads read the tile, and fence_proxy_async_smem() before the copy engine or wgmma reads
//     shared memory that ordinary stores wrote.
#ifndef KILN_RT_COPY_CUH
#define KILN_RT_COPY_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif
#ifndef KILN_RT_TILE_CUH
#include "tile.cuh"
#endif

namespace kiln {
namespace rt {

// ---- Synchronous vector copies -----------------------------------------------------------------

namespace detail {
// Reads the first n (< E) elements of a chunk at p, zero-filling the rest, without touching
// memory past element n-1.
template <typename T, int E>
KILN_DEV uint4 load_partial_chunk(const T* p, int n) {
  uint32_t w[4] = {0u, 0u, 0u, 0u};
  T* e = reinterpret_cast<T*>(w);
#pragma unroll
  for (int i = 0; i < E; ++i)
    if (i < n) e[i] = p[i];
  return make_uint4(w[0], w[1], w[2], w[3]);
}
template <typename T, int E>
KILN_DEV void store_partial_chunk(T* p, uint4 v, int n) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  const T* e = reinterpret_cast<const T*>(w);
#pragma unroll
  for (int i = 0; i < E; ++i)
    if (i < n) p[i] = e[i];
}
}  // namespace detail

// dst <- the R x C window at src; elements outside src's valid extent become zero.
template <int NTHREADS, typename T, int R, int C, Layout L, int P, typename GT>
KILN_DEV void copy_g2s(const SmemTile<T, R, C, L, P>& dst, const GmemView<GT>& src, int tid) {
  using Tile = SmemTile<T, R, C, L, P>;
  constexpr int E = Tile::kChunkElems, CPR = Tile::kChunksPerRow, CHUNKS = R * CPR;
  constexpr int ITERS = ceil_div(CHUNKS, NTHREADS);
  static_assert((Tile::kPitch * int(sizeof(T))) % 16 == 0, "16-byte copies need 16-byte rows");
  uint4 buf[ITERS];
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int idx = tid + it * NTHREADS;
    const int r = idx / CPR, c = (idx % CPR) * E;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if ((CHUNKS % NTHREADS == 0 || idx < CHUNKS) && r < src.rows) {
      const GT* p = src.at(r, c);
      if (c + E <= src.cols) {
        v = *reinterpret_cast<const uint4*>(p);
      } else if (c < src.cols) {
        v = detail::load_partial_chunk<T, E>(p, src.cols - c);
      }
    }
    buf[it] = v;
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int idx = tid + it * NTHREADS;
    if (CHUNKS % NTHREADS == 0 || idx < CHUNKS)
      *reinterpret_cast<uint4*>(dst.at(idx / CPR, (idx % CPR) * E)) = buf[it];
  }
}

// The R x C window at dst <- src; only elements inside dst's valid extent are written.
template <int NTHREADS, typename T, int R, int C, Layout L, int P>
KILN_DEV void copy_s2g(const GmemView<T>& dst, const SmemTile<T, R, C, L, P>& src, int tid) {
  using Tile = SmemTile<T, R, C, L, P>;
  constexpr int E = Tile::kChunkElems, CPR = Tile::kChunksPerRow, CHUNKS = R * CPR;
  constexpr int ITERS = ceil_div(CHUNKS, NTHREADS);
  static_assert((Tile::kPitch * int(sizeof(T))) % 16 == 0, "16-byte copies need 16-byte rows");
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int idx = tid + it * NTHREADS;
    const int r = idx / CPR, c = (idx % CPR) * E;
    if ((CHUNKS % NTHREADS == 0 || idx < CHUNKS) && r < dst.rows && c < dst.cols) {
      const uint4 v = *reinterpret_cast<const uint4*>(src.at(r, c));
      if (c + E <= dst.cols) {
        *reinterpret_cast<uint4*>(dst.at(r, c)) = v;
      } else {
        detail::store_partial_chunk<T, E>(dst.at(r, c), v, dst.cols - c);
      }
    }
  }
}

// ---- cp.async (sm_80+) -------------------------------------------------------------------------

// Copies src_bytes (0..16) from global gptr to the 16-byte aligned shared address saddr and
// zero-fills the rest of the 16 bytes. With src_bytes == 0 nothing is read.
KILN_DEV void cp_async_16(uint32_t saddr, const void* gptr, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gptr),
               "r"(src_bytes)
               : "memory");
}
// Closes the current group of cp.async copies issued by this thread.
KILN_DEV void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight. A multi-stage
// pipeline that keeps S stages in flight waits with N = S - 2 before computing on the oldest.
template <int N>
KILN_DEV void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
KILN_DEV void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// cp_async_wait<n> for a run-time n (wait_group takes an immediate): a chain of comparisons down
// from N, folded where n is a constant. n > N waits for all but N (more than asked: still correct).
template <int N = 7>
KILN_DEV void cp_async_wait_n(int n) {
  if constexpr (N > 0) {
    if (n < N) return cp_async_wait_n<N - 1>(n);
  }
  cp_async_wait<N>();
}

// Issues (does not commit) the cp.async copies of the R x C window at src into dst, zero-filling
// what lies outside src's valid extent. Call cp_async_commit() after the copies of one stage.
template <int NTHREADS, typename T, int R, int C, Layout L, int P, typename GT>
KILN_DEV void cp_async_g2s(const SmemTile<T, R, C, L, P>& dst, const GmemView<GT>& src, int tid) {
  using Tile = SmemTile<T, R, C, L, P>;
  constexpr int E = Tile::kChunkElems, CPR = Tile::kChunksPerRow, CHUNKS = R * CPR;
  constexpr int ITERS = ceil_div(CHUNKS, NTHREADS);
  static_assert((Tile::kPitch * int(sizeof(T))) % 16 == 0, "16-byte copies need 16-byte rows");
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int idx = tid + it * NTHREADS;
    if (CHUNKS % NTHREADS == 0 || idx < CHUNKS) {
      const int r = idx / CPR, c = (idx % CPR) * E;
      int bytes = 0;
      if (r < src.rows && c < src.cols) bytes = min_i(src.cols - c, E) * int(sizeof(T));
      // With bytes == 0 the address is not dereferenced; use the view's origin so that no
      // out-of-range pointer arithmetic is formed.
      const GT* p = bytes > 0 ? src.at(r, c) : src.ptr;
      cp_async_16(dst.addr(r, c), p, bytes);
    }
  }
}

// ---- Bulk copies and mbarriers (sm_90) ---------------------------------------------------------
//
// The copy engine is driven by one thread per copy and reports completion as transaction bytes
// on an mbarrier in shared memory. Protocol for one stage:
//   once:          thread 0: mbar_init(bar, 1); fence_mbar_init(); then __syncthreads().
//   producer:      one thread: mbar_arrive_expect_tx(bar, bytes) before issuing copies of
//                  `bytes` in total (bulk_g2s_rows does both for a tile).
//   consumers:     mbar_wait(bar, phase); phase ^= 1 after each completed use of the barrier.
//   reuse a stage: all consumers must be done reading it (a barrier, or an "empty" mbarrier the
//                  consumers arrive on) before the producer issues the next copy into it.
// These compile to traps when built for sm_80; the host must check the device is sm_90+.

KILN_DEV void mbar_init(uint64_t* bar, uint32_t count) {
#if KILN_RT_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
#else
  __trap();
#endif
}
// Makes mbarrier initializations visible to the async proxy (the copy engine) and the cluster.
KILN_DEV void fence_mbar_init() {
#if KILN_RT_SM90
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}
KILN_DEV void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if KILN_RT_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}
KILN_DEV void mbar_arrive(uint64_t* bar) {
#if KILN_RT_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#else
  __trap();
#endif
}
// True once the phase with the given parity (0 or 1) has completed. kCluster: acquire at cluster
// scope, for phases completed by other CTAs' writes into this CTA's shared memory
// (dsmem_store_async, which releases at cluster scope); else the default, CTA scope.
template <bool kCluster = false>
KILN_DEV bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
#if KILN_RT_SM90
  uint32_t done;
  if constexpr (kCluster)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], "
        "%2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  else
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  return done != 0;
#else
  __trap();
  return false;
#endif
}
template <bool kCluster = false>
KILN_DEV void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait<kCluster>(bar, parity)) {
  }
}

// Arrives on the mbarrier at bar's offset in CTA `rank` of this cluster (this CTA included). The
// release is at CTA scope (the default): enough to hand a stage back whose readers were wgmma or
// the copy engine (complete once wgmma_wait / the barrier says so), without the cluster-wide
// fence of a .release.cluster arrive. Cluster launches only.
KILN_DEV void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
#if KILN_RT_SM90
  asm volatile(
      "{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(smem_u32(bar)),
      "r"(rank)
      : "memory");
#else
  __trap();
#endif
}
// This CTA's rank in its cluster (0 without a cluster launch).
KILN_DEV uint32_t cluster_ctarank() {
#if KILN_RT_SM90
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  __trap();
  return 0;
#endif
}
// Every thread of every CTA of the cluster arrives (release) and waits (acquire); unlike the
// .aligned forms, threads of a warp may reach it apart (after divergent roles).
KILN_DEV void cluster_sync_all() {
#if KILN_RT_SM90
  asm volatile("barrier.cluster.arrive.release;\n barrier.cluster.wait.acquire;\n" ::: "memory");
#else
  __trap();
#endif
}
// barrier.cluster / mapa / st.shared::cluster wrappers; traps when built for sm_80.
// Arrive without ordering: only marks that this thread has started (step 1).
KILN_DEV void cluster_arrive_relaxed() {
#if KILN_RT_SM90
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// Arrive with release semantics: this thread's earlier memory operations (DSMEM stores
// included) are ordered before the arrival, at cluster scope.
KILN_DEV void cluster_arrive() {
#if KILN_RT_SM90
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// Waits for every non-exited thread of the cluster to arrive; acquire semantics.
KILN_DEV void cluster_wait() {
#if KILN_RT_SM90
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
// The shared::cluster address of the variable at shared::cta address `saddr` in CTA `rank` of
// this cluster (every CTA of a kernel has the same shared-memory layout).
KILN_DEV uint32_t dsmem_map(uint32_t saddr, int rank) {
#if KILN_RT_SM90
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(saddr), "r"(rank));
  return r;
#else
  __trap();
  return 0;
#endif
}
KILN_DEV void dsmem_store(uint32_t caddr, float4 v) {
#if KILN_RT_SM90
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(caddr), "f"(v.x),
               "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
#else
  __trap();
#endif
}
KILN_DEV void dsmem_store(uint32_t caddr, float v) {
#if KILN_RT_SM90
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(caddr), "f"(v) : "memory");
#else
  __trap();
#endif
}
// Stores v at shared::cluster address caddr (another CTA's shared memory, or this one's) and
// completes 16 transaction bytes on the mbarrier at shared::cluster address cbar, which must be in
// the same CTA as caddr (st.async): the receiver waits on its own mbarrier (mbar_wait<true>)
// for the bytes it expects, instead of the whole cluster meeting at a barrier.
KILN_DEV void dsmem_store_async(uint32_t caddr, float4 v, uint32_t cbar) {
#if KILN_RT_SM90
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(caddr),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(cbar)
      : "memory");
#else
  (void)caddr, (void)v, (void)cbar;
  __trap();
#endif
}
// Loads from (possibly another CTA's) shared memory at a shared::cluster address (dsmem_map).
KILN_DEV float4 dsmem_load4(uint32_t caddr) {
  float4 v;
#if KILN_RT_SM90
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(caddr)
               : "memory");
#else
  __trap();
  v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
  return v;
}
KILN_DEV float dsmem_load(uint32_t caddr) {
  float v;
#if KILN_RT_SM90
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(caddr) : "memory");
#else
  __trap();
  v = 0.0f;
#endif
  return v;
}

// Orders this thread's earlier ordinary shared-memory writes before later async-proxy accesses
// (bulk copies reading shared memory, wgmma operands). Each writing thread issues it, then a
// barrier, then the copy.
KILN_DEV void fence_proxy_async_smem() {
#if KILN_RT_SM90
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// Global -> shared bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned),
// completing as transaction bytes on bar.
KILN_DEV void bulk_g2s(void* smem_dst, const void* gsrc, uint32_t bytes, uint64_t* bar) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_u32(smem_dst)),
      "l"(gsrc), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}
// Shared -> global bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned), in
// the thread's current bulk group. Precede it with fence_proxy_async_smem() + a barrier when
// other threads wrote the source with ordinary stores.
KILN_DEV void bulk_s2g(void* gdst, const void* smem_src, uint32_t bytes) {
#if KILN_RT_SM90
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gdst),
               "r"(smem_u32(smem_src)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}
KILN_DEV void bulk_commit() {
#if KILN_RT_SM90
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}
// Waits until at most N bulk groups of this thread are pending (writes to global complete).
template <int N>
KILN_DEV void bulk_wait() {
#if KILN_RT_SM90
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
// Waits until at most N bulk groups still read their shared-memory source (it may be reused).
template <int N>
KILN_DEV void bulk_wait_read() {
#if KILN_RT_SM90
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

// Loads the R x C window at src into dst, one bulk copy per row, and registers the bytes on
// bar. Called by all 32 lanes of ONE warp (lane 0 posts the expected bytes and arrives once, so
// bar must be initialized with count 1 for a single such call per phase). Rows at or past
// src.rows are not copied and keep their old contents. Requires: src.cols >= C (whole rows),
// the tile not swizzled, row pitch a multiple of 16 bytes, and the general 16-byte alignment
// preconditions above.
template <typename T, int R, int C, Layout L, int P, typename GT>
KILN_DEV void bulk_g2s_rows(const SmemTile<T, R, C, L, P>& dst, const GmemView<GT>& src,
                            uint64_t* bar, int lane) {
  using Tile = SmemTile<T, R, C, L, P>;
  static_assert(L != Layout::Swizzled, "bulk copies are linear: use RowMajor or Padded");
  static_assert((Tile::kPitch * int(sizeof(T))) % 16 == 0, "row pitch: multiple of 16 bytes");
  constexpr uint32_t kRowBytes = C * sizeof(T);
  const int rows = max_i(0, min_i(R, src.rows));
  if (lane == 0) mbar_arrive_expect_tx(bar, rows * kRowBytes);
  __syncwarp();
  for (int r = lane; r < rows; r += 32) bulk_g2s(dst.at(r, 0), src.at(r, 0), kRowBytes, bar);
}

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_COPY_CUH
