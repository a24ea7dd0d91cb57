// Device-only code that instantiates each runtime piece, compiled by NVRTC after the amalgamated
// runtime text (scripts/runtime_compile_check.sh). Kernel templates are instantiated through the
// name expressions the script passes; the rest is used by nvrtc_check_misc below.
struct NvrtcGemmEpi {
  __device__ float operator()(float v, int, int) const { return v; }
};

__global__ void nvrtc_check_misc(float* p, const __half* h, uint64_t* bar) {
  using namespace kiln::rt;
  __shared__ __align__(128) char buf[4096];
  const SmemTile<__half, 16, 64, Layout::Swizzled> t(buf);
  copy_g2s<128>(t, GmemView<const __half>{h, 16, 64, 64}, threadIdx.x);
  cp_async_g2s<128>(t, GmemView<const __half>{h, 16, 64, 64}, threadIdx.x);
  cp_async_commit();
  cp_async_wait<0>();
  const SmemTile<__half, 16, 64, Layout::Padded> tp(buf);
  bulk_g2s_rows(tp, GmemView<const __half>{h, 16, 64, 64}, bar, threadIdx.x & 31);
  FragC acc[1][2];
  acc[0][0].zero(), acc[0][1].zero();
  warp_mma<1, 2>(acc, t, 0, SmemTile<__half, 64, 16, Layout::Swizzled>(buf), 0, threadIdx.x & 31);
  p[0] =
      block_sum(p[threadIdx.x], p) + Silu()(p[1]) + Gelu()(p[2]) + Clamp{}(p[3]) + acc[0][1].x[2];
  AccumRescale<2> a;
  a.update(p, 1.0f);
  p[5] = a.acc[0];
}

__global__ void nvrtc_check_tma(const __grid_constant__ kiln::rt::TmaDesc desc, float* p) {
  using namespace kiln::rt;
  __shared__ __align__(1024) char buf[8192];
  __shared__ __align__(8) uint64_t bar;
  if (threadIdx.x == 0) {
    tma_prefetch_desc(&desc);
    mbar_init(&bar, 1);
    fence_mbar_init();
    mbar_arrive_expect_tx(&bar, 8192);
    tma_load_2d(buf, &desc, 0, 0, &bar);
  }
  mbar_wait(&bar, 0);
  p[threadIdx.x] = to_f32(reinterpret_cast<const __half*>(buf)[threadIdx.x]);
}
