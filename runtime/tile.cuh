// Kiln runtime, tile: types that carry a tile's memory space and layout, so the emitter writes
// tile(r, c) and copy/mma calls instead of index arithmetic.
//
//   GmemView<T>              a 2-D window of a device tensor: base pointer, valid extent, row
//                            stride. Copies read past the extent as zeros and never write past it.
//   SmemTile<T, R, C, L, P>  an R x C tile in shared memory with layout L:
//     Layout::RowMajor       row pitch C elements.
//     Layout::Padded         row pitch C + P elements. With the default P (one 16-byte chunk)
//                            ldmatrix is conflict-free when the pitch is an odd number of
//                            16-byte chunks, i.e. for rows of 32, 64, 128, ... bytes (not for
//                            16, 80 or 48-byte rows: check kLdmatrixConflictFree). P = 1 for
//                            f32 suits scalar column walks (but rules out 16-byte copies).
//     Layout::Swizzled       row pitch C; the 16-byte chunk index within a row is XORed with a
//                            function of the row, so the 8 rows an ldmatrix phase reads, and
//                            column walks of 16-byte chunks, hit 8 distinct bank groups. No
//                            padding, so tiles pack densely. Needs C * sizeof(T) to be 16, 32 or
//                            64 bytes, or a multiple of 128.
//   RegTile<T, N>            N values in registers (index it only with compile-time constants,
//                            or it moves to local memory).
// The mma fragment types (FragA, FragB, FragC) live in mma.cuh with their lane mappings.
//
// A SmemTile is a pointer plus compile-time layout; it does not own memory. Carve tiles out of a
// shared buffer with SmemTile(ptr) where ptr is 16-byte aligned (128-byte aligned is best).
#ifndef KILN_RT_TILE_CUH
#define KILN_RT_TILE_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif

namespace kiln {
namespace rt {

enum class Layout : int { RowMajor = 0, Padded = 1, Swizzled = 2 };

template <typename T>
struct GmemView {
  T* ptr;      // element (0, 0) of the window
  int rows;    // valid rows from ptr (may be <= 0: the whole window is out of bounds)
  int cols;    // valid columns from ptr
  int64_t ld;  // row stride in elements

  KILN_HD T* at(int r, int c) const { return ptr + static_cast<int64_t>(r) * ld + c; }
  KILN_HD bool contains(int r, int c) const { return r >= 0 && r < rows && c >= 0 && c < cols; }
  // The window moved by (dr, dc), with its valid extent shrunk accordingly.
  KILN_HD GmemView offset(int dr, int dc) const {
    return GmemView{at(dr, dc), rows - dr, cols - dc, ld};
  }
};

template <typename T, int ROWS, int COLS, Layout L = Layout::RowMajor,
          int PAD = 16 / int(sizeof(T))>
struct SmemTile {
  using Elem = T;
  static constexpr int kRows = ROWS;
  static constexpr int kCols = COLS;
  static constexpr Layout kLayout = L;
  static constexpr int kChunkElems = 16 / int(sizeof(T));  // elements per 16-byte chunk
  static constexpr int kChunksPerRow = COLS / kChunkElems;
  static constexpr int kPitch = L == Layout::Padded ? COLS + PAD : COLS;  // elements
  static constexpr int kElems = ROWS * kPitch;
  static constexpr int kBytes = kElems * int(sizeof(T));

  // Whether the 8 rows x 16 bytes of an ldmatrix phase (same chunk column, 8 consecutive rows
  // from a multiple of 8) fall in 8 distinct bank groups.
  static constexpr bool kLdmatrixConflictFree =
      L == Layout::Swizzled ||
      (kPitch * int(sizeof(T)) % 16 == 0 && (kPitch * int(sizeof(T)) / 16) % 2 == 1);

  static_assert(COLS % kChunkElems == 0, "a tile row is a whole number of 16-byte chunks");
  static_assert(L != Layout::Padded || (PAD * int(sizeof(T))) % 4 == 0, "pad whole words");
  static_assert(L != Layout::Swizzled || kChunksPerRow == 1 || kChunksPerRow == 2 ||
                    kChunksPerRow == 4 || kChunksPerRow % 8 == 0,
                "swizzled rows are 16, 32, 64 bytes or a multiple of 128 bytes");

  T* ptr;

  KILN_DEV explicit SmemTile(T* p) : ptr(p) {}
  KILN_DEV explicit SmemTile(void* p) : ptr(static_cast<T*>(p)) {}

  // XOR mask applied to the chunk index of row r. With K chunks per row and 8 bank groups of
  // 16 bytes, a run of 8 rows spans 8 / K rows per 128-byte line; the mask spreads the lines.
  KILN_HD static constexpr int swizzle(int r) {
    return kChunksPerRow >= 8
               ? (r & 7)
               : (kChunksPerRow == 1 ? 0 : (r / (8 / kChunksPerRow)) % kChunksPerRow);
  }
  // Element offset of logical element (r, c).
  KILN_HD static constexpr int offset(int r, int c) {
    if constexpr (L == Layout::Swizzled) {
      return r * kPitch + (((c / kChunkElems) ^ swizzle(r)) * kChunkElems) + (c % kChunkElems);
    } else {
      return r * kPitch + c;
    }
  }
  KILN_DEV T* at(int r, int c) const { return ptr + offset(r, c); }
  KILN_DEV T& operator()(int r, int c) const { return ptr[offset(r, c)]; }
  // Shared-state-space address of element (r, c), for ldmatrix / cp.async operands.
  KILN_DEV uint32_t addr(int r, int c) const { return smem_u32(ptr + offset(r, c)); }
};

template <typename T, int N>
struct RegTile {
  T v[N];
  KILN_DEV void fill(T x) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = x;
  }
  KILN_DEV T& operator[](int i) {
    return v[i];
  }
  KILN_DEV const T& operator[](int i) const {
    return v[i];
  }
};

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_TILE_CUH
