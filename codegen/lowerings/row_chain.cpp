// Graph-defined row chains in registers (kiln/codegen/lowerings/row_chain.h).
#include "kiln/codegen/lowerings/row_chain.h"

#include <algorithm>

#include "../cost_util.h"
#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"

namespace kiln {

using namespace cgen;
using Kind = RowChainKernel::Kind;

namespace {

constexpr int kChunk = 8;             // elements per chunk: 16 bytes of a 16-bit type
constexpr int kMaxChunks = 8;         // chunks per thread: 64 floats of each live row value
constexpr double kReduceS = 0.15e-6;  // one block reduction: shuffles and two barriers

// The kind an elementwise op's result has, from its operands' kinds.
Kind combine(const std::vector<Kind>& in) {
  bool row = false, weight = false, scalar = false;
  for (Kind k : in) {
    row |= k == Kind::Row;
    weight |= k == Kind::Weight;
    scalar |= k == Kind::Scalar;
  }
  if (row || (weight && scalar)) return Kind::Row;
  if (weight) return Kind::Weight;
  if (scalar) return Kind::Scalar;
  return Kind::Const;
}

// Whether `tile` has the shape a value of kind k has: R x N, N, R or 1 elements, rows along the
// leading dims and the row along the last.
bool shape_fits(Kind k, const Shape& tile, int64_t R, int64_t N) {
  switch (k) {
    case Kind::Row:
      return !tile.empty() && tile.back() == N && numel(tile) == R * N;
    case Kind::Weight:
      return !tile.empty() && (tile.back() == N || tile == Shape{N, 1}) && numel(tile) == N;
    case Kind::Scalar:
      return numel(tile) == R &&
             (tile.empty() || tile.back() == 1 || R == 1 || (tile.size() == 1 && tile[0] == R));
    case Kind::Const:
      return numel(tile) == 1;
    case Kind::Out:
      return false;
  }
  return false;
}

// An input tile of R rows of a [M, N] tensor at rows g*R (grid dim gd to tensor dim 0), or a
// whole [N] / [1, N] weight.
std::optional<Kind> input_kind(const BlockGraph& bg, const BlockOp& o, int gd, int64_t R,
                               int64_t N) {
  const TensorDesc& td = bg.inputs[o.io];
  const bool mapped = gd >= 0 && o.imap[gd] != -1;
  // A [N, 1] column (a matrix-vector product's vector): the same N contiguous values as a [N]
  // weight, read whole by every block.
  if (td.shape == Shape{N, 1} && o.shape == td.shape && !mapped && N > 1) return Kind::Weight;
  if (td.shape.empty() || td.shape.back() != N || td.shape.size() > 2) return std::nullopt;
  for (size_t d = 0; d < o.imap.size(); ++d)  // a grid dim of extent 1 maps nothing
    if (static_cast<int>(d) != gd && o.imap[d] != -1 && bg.grid[d] > 1) return std::nullopt;
  if (numel(td.shape) == N && numel(o.shape) == N && !mapped)
    return R == 1 && bg.num_blocks() == 1 ? Kind::Row : Kind::Weight;
  if (td.shape.size() != 2 || numel(o.shape) != R * N || o.shape.back() != N) return std::nullopt;
  if (bg.num_blocks() > 1 && (!mapped || o.imap[gd] != 0)) return std::nullopt;
  if (td.shape[0] != R * bg.num_blocks()) return std::nullopt;
  return Kind::Row;
}

// The reduced dim of a row op is the tile's last.
bool over_last(const BlockOp& o, const Shape& in) {
  const int64_t r = static_cast<int64_t>(in.size());
  const int64_t d = o.attrs.dim < 0 ? o.attrs.dim + r : o.attrs.dim;
  return d == r - 1;
}

// The kind of op i given the kinds of earlier ops, or nullopt when the op is not a row op.
std::optional<Kind> op_kind(const BlockGraph& bg, int i, const std::vector<Kind>& kinds, int gd,
                            int64_t R, int64_t N) {
  const BlockOp& o = bg.ops[i];
  std::vector<Kind> in;
  for (int j : o.inputs) in.push_back(kinds[j]);
  const OpClass cls = op_info(o.kind).cls;
  switch (cls) {
    case OpClass::Input:
      return input_kind(bg, o, gd, R, N);
    case OpClass::Constant:
      return Kind::Const;
    case OpClass::Unary:
    case OpClass::Binary:
    case OpClass::Fused:
      return combine(in);
    case OpClass::Reduce: {
      const Shape& xs = bg.ops[o.inputs[0]].shape;
      // A per-row value reduced over a dim of extent 1 (a sum that drops a kept dim): itself.
      if (in[0] == Kind::Scalar) {
        const int64_t r = static_cast<int64_t>(xs.size());
        const int64_t d = o.attrs.dim < 0 ? o.attrs.dim + r : o.attrs.dim;
        if (d < 0 || d >= r || xs[d] != 1) return std::nullopt;
        return Kind::Scalar;
      }
      if (in[0] != Kind::Row || !over_last(o, xs)) return std::nullopt;
      return Kind::Scalar;
    }
    case OpClass::Matmul: {
      // A row times a column: the row's dot product with a weight vector, one value per row.
      const Shape& bs = bg.ops[o.inputs[1]].shape;
      if (in[0] != Kind::Row || in[1] != Kind::Weight || bs != Shape{N, 1}) return std::nullopt;
      return Kind::Scalar;
    }
    case OpClass::Output: {
      const TensorDesc& td = bg.outputs[o.io];
      if (in[0] == Kind::Scalar) {  // one value per row: an [M] or [M, 1] output
        if (td.shape.empty() || td.shape.size() > 2 || numel(td.shape) != R * bg.num_blocks() ||
            (td.shape.size() == 2 && td.shape[1] != 1))
          return std::nullopt;
        if (bg.num_blocks() > 1 && o.imap[gd] != 0) return std::nullopt;
        return Kind::Out;
      }
      if (in[0] != Kind::Row || td.shape.size() > 2 || td.shape.back() != N) return std::nullopt;
      if (numel(td.shape) != R * N * bg.num_blocks()) return std::nullopt;
      if (bg.num_blocks() > 1 && o.imap[gd] != static_cast<int>(td.shape.size()) - 2)
        return std::nullopt;
      return Kind::Out;
    }
    case OpClass::Transpose: {
      // A weight vector turned between [1, N] and [N, 1]: the same N values.
      const Shape& xs = bg.ops[o.inputs[0]].shape;
      if (in[0] != Kind::Weight || numel(xs) != N || xs.size() != 2 || o.shape.size() != 2)
        return std::nullopt;
      return Kind::Weight;
    }
    case OpClass::Accum:
    case OpClass::GraphDefined:
    case OpClass::RmsNorm:  // not block ops: block graphs spell them with sums and elementwise ops
    case OpClass::Softmax:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::optional<RowChainKernel> RowChainKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::GraphDefined || !ctx.opt.lowerings) return std::nullopt;
  const BlockGraph& bg = *op.block;
  for (int64_t l : bg.loop)
    if (l != 1) return std::nullopt;
  int gd = -1;  // the grid dim that walks the rows
  for (size_t d = 0; d < bg.grid.size(); ++d)
    if (bg.grid[d] > 1) {
      if (gd >= 0) return std::nullopt;
      gd = static_cast<int>(d);
    }
  // N and R from the first saver: R rows of N per block.
  const BlockOp* saver = nullptr;
  for (const BlockOp& o : bg.ops)
    if (o.kind == OpKind::Output) {
      saver = &o;
      break;
    }
  if (!saver || saver->shape.empty()) return std::nullopt;
  RowChainKernel p;
  // N: the row's length, the widest last dim of any tile (a saver may store per-row values).
  for (const BlockOp& o : bg.ops)
    if (!o.shape.empty()) p.n = std::max(p.n, o.shape.back());
  p.rows = saver->shape.back() == p.n ? numel(saver->shape) / p.n : numel(saver->shape);
  // A 1-D saver of N values is a row (R = 1) or N per-row values; with R = N tiles around, which
  // one is not decided here.
  if (saver->shape.size() == 1 && saver->shape[0] == p.n && p.n > 1)
    for (const BlockOp& o : bg.ops)
      if (numel(o.shape) == p.n * p.n) return std::nullopt;
  p.blocks = bg.num_blocks();
  if (p.n % kChunk != 0) return std::nullopt;
  for (size_t i = 0; i < bg.ops.size(); ++i) {
    const BlockOp& o = bg.ops[i];
    for (int64_t f : o.fmap)
      if (f != -1) return std::nullopt;
    std::optional<Kind> kd = op_kind(bg, static_cast<int>(i), p.kind, gd, p.rows, p.n);
    if (!kd) return std::nullopt;
    if (*kd != Kind::Out && !shape_fits(*kd, o.shape, p.rows, p.n)) return std::nullopt;
    // Block reductions: over a row (a reduce or a row-by-column product); a per-row value
    // reduced over its extent-1 dim is itself.
    const OpClass cls = op_info(o.kind).cls;
    if ((cls == OpClass::Reduce && p.kind[o.inputs[0]] == Kind::Row) || cls == OpClass::Matmul)
      p.reductions += 1;
    p.kind.push_back(*kd);
  }
  // Threads: a whole number of warps, at most 1024, each with one chunk of the row where the
  // grid leaves SMs idle (latency-bound: the most loads in flight per block), two where it fills
  // them. H100 (session 9, µs, one chunk vs two): double_norm n 1 3.49 vs 3.69, n 128 (128
  // blocks) 4.76 vs 5.12, the activations' layer norm 16 x 1024 2.88 vs 5.16; layer norm 4096 x
  // 4096 (2048 blocks) 30.8 vs 27.3.
  const int64_t ch = p.n / kChunk;
  const int64_t per_thread = p.blocks >= ctx.t.sm_count ? 2 : 1;
  p.threads =
      static_cast<int>(std::clamp<int64_t>((cdiv(ch, per_thread) + 31) / 32 * 32, 32, 1024));
  p.chunks = static_cast<int>(cdiv(ch, p.threads));
  if (p.chunks > kMaxChunks) return std::nullopt;
  kp.grid = p.blocks;
  kp.threads = p.threads;
  kp.smem = 0;
  return p;
}

std::string RowChainKernel::describe() const {
  return fmt::format(
      "row chain in registers ({} row(s) of {} per block, {} threads x {} chunk(s) of 8, {} "
      "block reduction(s) per row)",
      rows, n, threads, chunks, reductions);
}

// Streams its inputs and outputs once; each row of a block costs a DRAM round trip (the rows of
// a block run one after another; the first is in t_fixed) and its block reductions.
KernelCost RowChainKernel::cost(const CostContext& x) const {
  const CostConstants& k = cost_constants(x.t.arch);
  const BlockGraph& bg = *x.op.block;
  KernelCost c;
  c.name = x.op.name;
  c.graph_defined = true;
  c.lowered = true;
  c.blocks = blocks;
  for (const TensorDesc& td : bg.inputs)
    c.dram_read += double(numel(td.shape)) * dtype_bytes(td.dtype);
  for (const TensorDesc& td : bg.outputs)
    c.dram_write += double(numel(td.shape)) * dtype_bytes(td.dtype);
  // Flops of the ops that compute: loads, stores and a weight's transpose (the same registers)
  // do none; a row-by-column product is a multiply-add per element of the row.
  for (const BlockOp& o : bg.ops) {
    const OpClass cls = op_info(o.kind).cls;
    if (cls == OpClass::Input || cls == OpClass::Output || cls == OpClass::Transpose) continue;
    if (o.thread)
      for (const ThreadOp& to : o.thread->ops)
        c.cuda_flops += double(numel(o.shape) * blocks) * op_weight(to.kind);
    else if (cls == OpClass::Matmul)
      c.cuda_flops += double(rows * n * blocks);
    else
      c.cuda_flops += double(numel(o.shape) * blocks) * std::max(1.0, op_weight(o.kind));
  }
  c.round_trips = rows;
  // Blocks resident per SM: threads bound it (no shared memory beyond the 32-float scratch), so
  // a grid of one-row blocks is one wave where each SM holds them all. H200, 1024 rows of 4096
  // bf16 dotted with a vector (session 12): 1024 blocks of 256 threads 3.84 us, 256 blocks of 4
  // rows 4.06, 128 blocks of 8 rows 4.35 (the generic block kernel 5.00).
  const int64_t resident = std::clamp<int64_t>(2048 / std::max(threads, 32), 1, 32);
  c.waves = cdiv(blocks, x.t.sm_count * resident);
  double dram_u = 0, comp_u = 0;
  // It streams like the runtime's vector kernels (16-byte loads, a whole row in flight per
  // block), not like the generic kernels that row_efficiency was fitted on: the runtime GEMV's
  // efficiency (the H200 row dot above ran at 93% of its copy rate, counting the launch).
  cost::grid_utilization(double(blocks), x.t, k.gemv_efficiency, k.dram_saturation, dram_u, comp_u);
  c.t_lat = double(c.waves) *
            (double(rows - 1) * k.dram_latency_s + double(rows) * double(reductions) * kReduceS);
  cost::finish_times(c, x.t, k, dram_u, comp_u);
  return c;
}

namespace {

// Writes the kernel's body for one row: each op's value in registers, in graph order.
class RowChainWriter {
 public:
  RowChainWriter(const RowChainKernel& p, const BlockGraph& bg, Code& c)
      : p_(p), bg_(bg), c_(c), ch_(p.n / kChunk) {}

  void fused_lambdas() {
    for (const BlockOp& o : bg_.ops)
      if (o.kind == OpKind::Fused) fused_lambda(c_, o);
  }

  void op(int i) {
    const BlockOp& o = bg_.ops[i];
    const Kind kd = p_.kind[i];
    switch (op_info(o.kind).cls) {
      case OpClass::Input:
        return load(i);
      case OpClass::Constant:
        c_.f("const float v{} = {};", i, flit(o.attrs.value));
        return;
      case OpClass::Unary:
      case OpClass::Binary:
      case OpClass::Fused:
        return elementwise(i, kd);
      case OpClass::Reduce:
        return reduce(i);
      case OpClass::Matmul:  // a row times a column: a dot product over the row
        block_reduce(fmt::format("v{}", i),
                     fmt::format("{} * {}", at(o.inputs[0]), at(o.inputs[1])), false);
        return;
      case OpClass::Output:
        return store(i);
      case OpClass::Transpose:  // a weight vector's other orientation: the same registers
        c_.f("float (&v{})[{}][{}] = v{};", i, p_.chunks, kChunk, o.inputs[0]);
        return;
      case OpClass::Accum:
      case OpClass::GraphDefined:
      case OpClass::RmsNorm:
      case OpClass::Softmax:
        KILN_ASSERT(false, "row chain: op {} is not a row op", o.name);
    }
  }

 private:
  bool is_vec(int i) const { return p_.kind[i] == Kind::Row || p_.kind[i] == Kind::Weight; }
  std::string at(int i) const {
    return is_vec(i) ? fmt::format("v{}[k][q]", i) : fmt::format("v{}", i);
  }
  // Opens `for k, q` over this thread's chunks (chunk tid + k T) and their elements; `guard`
  // skips the chunks past the row (where the row does not fill every thread's last chunk).
  void open_chunks(bool guard) {
    c_.line("#pragma unroll");
    c_.open(fmt::format("for (int k = 0; k < {}; ++k) {{", p_.chunks));
    if (guard && ch_ % p_.threads != 0)
      c_.f("if (tid + k * {} >= {}) continue;  // past the row", p_.threads, ch_);
    c_.line("#pragma unroll");
    c_.open(fmt::format("for (int q = 0; q < {}; ++q) {{", kChunk));
  }
  void close_chunks() {
    c_.close();
    c_.close();
  }
  std::string row_base(int i, const char* ptr, int io) const {
    return p_.kind[i] == Kind::Weight ? fmt::format("{}{}", ptr, io)
                                      : fmt::format("{}{} + row * {}", ptr, io, p_.n);
  }

  void load(int i) {
    const BlockOp& o = bg_.ops[i];
    const char* T = ctype(bg_.inputs[o.io].dtype);
    c_.f("float v{}[{}][{}];", i, p_.chunks, kChunk);
    c_.line("#pragma unroll");
    c_.open(fmt::format("for (int k = 0; k < {}; ++k) {{", p_.chunks));
    c_.f("const int c = tid + k * {};", p_.threads);
    if (ch_ % p_.threads != 0)
      c_.f("if (c >= {}) {{ for (int q = 0; q < {}; ++q) v{}[k][q] = 0.0f; continue; }}", ch_,
           kChunk, i);
    c_.f("const {}* src = {} + (int64_t)c * {};", T, row_base(i, "in", o.io), kChunk);
    c_.f(
        "for (int h = 0; h < {}; h += kiln::rt::Vec16<{}>::kElems) "
        "kiln::rt::load16_f32(src + h, v{}[k] + h);",
        kChunk, T, i);
    c_.close();
  }

  void elementwise(int i, Kind kd) {
    const BlockOp& o = bg_.ops[i];
    std::vector<std::string> xs;
    for (int j : o.inputs) xs.push_back(at(j));
    const std::string e = o.kind == OpKind::Fused
                              ? fmt::format("fz_{}({})", o.name, fmt::join(xs, ", "))
                              : ew_expr(o.kind, o.attrs, xs);
    if (kd == Kind::Scalar || kd == Kind::Const) {
      c_.f("const float v{} = {};", i, e);
      return;
    }
    c_.f("float v{}[{}][{}];", i, p_.chunks, kChunk);
    open_chunks(false);
    c_.f("v{}[k][q] = {};", i, e);
    close_chunks();
  }

  // float s = the block's sum (or max) over the row of `term` (an expression of k, q).
  void block_reduce(const std::string& var, const std::string& term, bool mx) {
    c_.f("float {} = {};", var, mx ? "-__int_as_float(0x7f800000)" : "0.0f");
    open_chunks(true);
    c_.f("{0} = {1};", var, mx ? fmt::format("fmaxf({}, {})", var, term) : var + " + " + term);
    close_chunks();
    c_.f("{0} = kiln::rt::block_reduce({0}, kiln::rt::{1}(), kiln_red);", var,
         mx ? "MaxOp" : "SumOp");
  }

  int64_t count(const BlockOp& o) const { return o.attrs.count ? o.attrs.count : p_.n; }

  void reduce(int i) {
    const BlockOp& o = bg_.ops[i];
    if (p_.kind[o.inputs[0]] == Kind::Scalar) {  // over an extent-1 dim: the value itself
      const double n = o.kind == OpKind::Mean && o.attrs.count ? double(o.attrs.count) : 1.0;
      c_.f("const float v{} = v{} / {};", i, o.inputs[0], flit(n));
      return;
    }
    const bool mx = o.kind == OpKind::Max;
    block_reduce(fmt::format("v{}", i), at(o.inputs[0]), mx);
    if (o.kind == OpKind::Mean) c_.f("v{0} = v{0} / {1};", i, flit(double(count(o))));
  }

  void store(int i) {
    const BlockOp& o = bg_.ops[i];
    const char* T = ctype(bg_.outputs[o.io].dtype);
    if (p_.kind[o.inputs[0]] == Kind::Scalar) {  // one value per row, from the reduction's owner
      c_.f("if (tid == 0) out{}[row] = kiln::rt::from_f32<{}>(v{});", o.io, T, o.inputs[0]);
      return;
    }
    c_.line("#pragma unroll");
    c_.open(fmt::format("for (int k = 0; k < {}; ++k) {{", p_.chunks));
    c_.f("const int c = tid + k * {};", p_.threads);
    if (ch_ % p_.threads != 0) c_.f("if (c >= {}) continue;", ch_);
    c_.f("{}* dst = out{} + row * {} + (int64_t)c * {};", T, o.io, p_.n, kChunk);
    c_.f(
        "for (int h = 0; h < {}; h += kiln::rt::Vec16<{}>::kElems) "
        "kiln::rt::store16_f32(dst + h, v{}[k] + h);",
        kChunk, T, o.inputs[0]);
    c_.close();
  }

  const RowChainKernel& p_;
  const BlockGraph& bg_;
  Code& c_;
  const int64_t ch_;  // chunks per row
};

}  // namespace

void RowChainKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const BlockGraph& bg = *op.block;
  std::vector<std::string> params, args;
  for (size_t i = 0; i < bg.inputs.size(); ++i) {
    params.push_back(fmt::format("const {}* __restrict__ in{}", ctype(bg.inputs[i].dtype), i));
    args.push_back(x.ptr(op.inputs[i]));
  }
  for (size_t i = 0; i < bg.outputs.size(); ++i) {
    params.push_back(fmt::format("{}* __restrict__ out{}", ctype(bg.outputs[i].dtype), i));
    args.push_back(x.ptr(op.outputs[i]));
  }
  Code& c = x.kernels;
  c.f("// {}: {}", kp.kernel, kp.strategy());
  c.open(fmt::format("__global__ void __launch_bounds__({}) {}({}) {{", threads, kp.kernel,
                     fmt::join(params, ", ")));
  c.line("__shared__ float kiln_red[32];  // block reductions");
  c.line("const int tid = threadIdx.x;");
  RowChainWriter w(*this, bg, c);
  w.fused_lambdas();
  c.open(fmt::format("for (int r = 0; r < {}; ++r) {{", rows));
  c.f("const int64_t row = (int64_t)blockIdx.x * {} + r;", rows);
  c.line("(void)row;");
  for (size_t i = 0; i < bg.ops.size(); ++i) w.op(static_cast<int>(i));
  c.close();
  c.close();
  c.line("");
  x.launch.f("{}<<<{}, {}, 0, stream>>>({});", kp.kernel, blocks, threads, fmt::join(args, ", "));
  launch_check(x.launch);
}

}  // namespace kiln
