// Kiln runtime, mma: tensor-core matmul of shared-memory tiles with ldmatrix + mma.sync
// (m16n8k16, f16 or bf16 operands, f32 accumulators; sm_80 and newer, HMMA.16816.F32 in SASS).
//
// Fragments are per-warp register tiles. Lane mapping (g = lane / 4, t = lane % 4), as in the
// PTX ISA; the 16-bit element at the lower index sits in the low half of each 32-bit register:
//   FragA (16 x 16, row-major A):  x[0] = A[g][2t..2t+1]    x[1] = A[g+8][2t..2t+1]
//                                  x[2] = A[g][2t+8..2t+9]  x[3] = A[g+8][2t+8..2t+9]
//   FragB (16 x 8, K x N):         x[0] = B[2t..2t+1][g]    x[1] = B[2t+8..2t+9][g]
//   FragC (16 x 8, f32):           x[i] = C[g + 8 (i / 2)][2t + i % 2]   (fragc_row / fragc_col)
//
// Tiles: A is M x K row-major in shared memory; B is K x N row-major (load_b_kn, ldmatrix.trans)
// or stored transposed as N x K (load_b_nk, plain ldmatrix). Any SmemTile layout works; the
// Swizzled and Padded layouts make every ldmatrix phase (8 rows x 16 bytes) conflict-free, a
// RowMajor tile whose rows are a multiple of 128 bytes is 8-way conflicted. Fragment origins
// (rows, k, n) are multiples of 8, k multiples of 16.
//
// The Hopper warpgroup path (wgmma, sm_90a) is in wgmma.cuh.
#ifndef KILN_RT_MMA_CUH
#define KILN_RT_MMA_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif
#ifndef KILN_RT_ELEMENTWISE_CUH
#include "elementwise.cuh"
#endif
#ifndef KILN_RT_TILE_CUH
#include "tile.cuh"
#endif

namespace kiln {
namespace rt {

struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
struct FragC {
  float x[4];
  KILN_DEV void zero() { x[0] = x[1] = x[2] = x[3] = 0.0f; }
  // As one 16-byte value (a partial sum moved through shared memory), and adding one back.
  KILN_DEV float4 as_float4() const { return make_float4(x[0], x[1], x[2], x[3]); }
  KILN_DEV void add(const float4& v) { x[0] += v.x, x[1] += v.y, x[2] += v.z, x[3] += v.w; }
};

// Row and column within the 16 x 8 tile of accumulator element i (0..3) held by `lane`.
KILN_HD int fragc_row(int lane, int i) {
  return (lane >> 2) + ((i >> 1) << 3);
}
KILN_HD int fragc_col(int lane, int i) {
  return ((lane & 3) << 1) + (i & 1);
}

// ---- ldmatrix ----------------------------------------------------------------------------------
// Lane l supplies the shared address of row (l % 8) of matrix (l / 8); each address is 16-byte
// aligned. Register i receives matrix i: lane l gets row l / 4, elements 2 (l % 4) and +1 (with
// .trans: column l / 4, rows 2 (l % 4) and +1).

KILN_DEV void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
KILN_DEV void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
KILN_DEV void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
KILN_DEV void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// ---- mma.sync ----------------------------------------------------------------------------------

// d += a * b, T = __half or __nv_bfloat16. All 32 lanes must execute it together.
template <typename T>
KILN_DEV void mma_16816(FragC& d, const FragA& a, const FragB& b);

template <>
KILN_DEV void mma_16816<__half>(FragC& d, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}
template <>
KILN_DEV void mma_16816<__nv_bfloat16>(FragC& d, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}

// ---- Fragment loads from shared tiles ----------------------------------------------------------

// a <- A[r0 .. r0+16, k0 .. k0+16] of an M x K tile.
template <class TileA>
KILN_DEV void load_a(FragA& a, const TileA& A, int r0, int k0, int lane) {
  ldmatrix_x4(a.x, A.addr(r0 + (lane & 15), k0 + ((lane >> 4) << 3)));
}
// b0, b1 <- B[k0 .. k0+16, n0 .. n0+8] and [.., n0+8 .. n0+16] of a K x N tile.
template <class TileB>
KILN_DEV void load_b_kn(FragB& b0, FragB& b1, const TileB& B, int k0, int n0, int lane) {
  uint32_t r[4];
  ldmatrix_x4_trans(r, B.addr(k0 + (lane & 15), n0 + ((lane >> 4) << 3)));
  b0.x[0] = r[0], b0.x[1] = r[1], b1.x[0] = r[2], b1.x[1] = r[3];
}
// The same from B stored transposed: Bt is an N x K tile, Bt[n][k] = B[k][n].
template <class TileBt>
KILN_DEV void load_b_nk(FragB& b0, FragB& b1, const TileBt& Bt, int n0, int k0, int lane) {
  uint32_t r[4];
  ldmatrix_x4(r, Bt.addr(n0 + (lane & 7) + ((lane >> 4) << 3), k0 + (((lane >> 3) & 1) << 3)));
  b0.x[0] = r[0], b0.x[1] = r[1], b1.x[0] = r[2], b1.x[1] = r[3];
}

// acc[mi][ni] += A[a_r0 + 16 mi .., 0 .. K] * B[0 .. K, b_c0 + 8 ni ..] over the whole K of the
// tiles (TileA::kCols == TileB::kRows, a multiple of 16). B is K x N (B_NK = false) or its
// transpose N x K (B_NK = true). NI must be even. One warp; the caller owns the barriers.
template <int MI, int NI, bool B_NK = false, class TileA, class TileB>
KILN_DEV void warp_mma(FragC (&acc)[MI][NI], const TileA& A, int a_r0, const TileB& B, int b_c0,
                       int lane) {
  using T = typename TileA::Elem;
  constexpr int K = TileA::kCols;
  static_assert(B_NK ? TileB::kCols == K : TileB::kRows == K, "A and B disagree on K");
  static_assert(K % 16 == 0 && NI % 2 == 0, "K multiple of 16, NI even");
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
    FragA a[MI];
    FragB b[NI];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) load_a(a[mi], A, a_r0 + 16 * mi, k0, lane);
#pragma unroll
    for (int ni = 0; ni < NI; ni += 2) {
      if constexpr (B_NK) {
        load_b_nk(b[ni], b[ni + 1], B, b_c0 + 8 * ni, k0, lane);
      } else {
        load_b_kn(b[ni], b[ni + 1], B, k0, b_c0 + 8 * ni, lane);
      }
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma_16816<T>(acc[mi][ni], a[mi], b[ni]);
  }
}

// ---- Accumulator epilogues ---------------------------------------------------------------------

// out[r0 + 16 mi + row, c0 + 8 ni + col] <- epi(acc, row, col) for the elements inside out's
// valid extent (global coordinates relative to out.ptr are passed to epi). Adjacent column pairs
// go out as one 4-byte (f16/bf16) or 8-byte (f32) store when aligned. Epi: float(float v, int r,
// int c) const.
template <int MI, int NI, typename TO, class Epi>
KILN_DEV void store_acc(const GmemView<TO>& out, const FragC (&acc)[MI][NI], int r0, int c0,
                        int lane, Epi epi) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 16 * mi + fragc_row(lane, 2 * h);
        const int c = c0 + 8 * ni + fragc_col(lane, 0);
        if (r >= out.rows || c >= out.cols) continue;
        const float v0 = epi(acc[mi][ni].x[2 * h], r, c);
        TO* p = out.at(r, c);
        const bool pair =
            c + 1 < out.cols && (reinterpret_cast<uintptr_t>(p) % (2 * sizeof(TO))) == 0;
        if (pair) {
          const float v1 = epi(acc[mi][ni].x[2 * h + 1], r, c + 1);
          if constexpr (sizeof(TO) == 4) {
            *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
          } else {
            *reinterpret_cast<uint32_t*>(p) = pack2<TO>(v0, v1);
          }
        } else {
          p[0] = from_f32<TO>(v0);
          if (c + 1 < out.cols) p[1] = from_f32<TO>(epi(acc[mi][ni].x[2 * h + 1], r, c + 1));
        }
      }
}

// Writes the accumulators into a shared tile (f32 or 16-bit), at warp origin (r0, c0), for block
// ops that continue after the matmul. No bounds: the tile covers the warp's fragments.
template <int MI, int NI, class Tile>
KILN_DEV void store_acc_smem(const Tile& S, const FragC (&acc)[MI][NI], int r0, int c0, int lane) {
  using TO = typename Tile::Elem;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        S(r0 + 16 * mi + fragc_row(lane, i), c0 + 8 * ni + fragc_col(lane, i)) =
            from_f32<TO>(acc[mi][ni].x[i]);
}

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_MMA_CUH
