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

constexpr int kChunk = 8;      // elements per chunk: 16 bytes of a 16-bit type
constexpr int kMaxChunks = 8;  // chunks per thread: 64 floats of each live row value
// One reduction over the row: shuffles and a barrier; over a cluster, the DSMEM stores and a
// cluster barrier, and a cluster launch's fixed cost (scheduling C CTAs together, the first
// round). What a CTA takes in with its whole share of a row in flight (L2 and DRAM alike).
// Fitted on the H100 sweep in match() (tests/gpu/row_norm_sweep.cu, inputs cold): double_norm's
// two reductions ran 0.24 us slower in clusters of 4 than in one CTA, add_rmsnorm n 1's 160 KB
// row 0.61 us faster in clusters of 8.
constexpr double kReduceS = 0.15e-6;
constexpr double kClusterReduceS = 0.3e-6;
constexpr double kClusterFixedS = 0.6e-6;
constexpr double kSmBytesPerS = 150e9;

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
  // Configurations: each row over a cluster of C CTAs (sm_90a, C in 1, 2, 4, 8), and per CTA a
  // whole number of warps with one chunk of the row each where the grid leaves SMs idle
  // (latency-bound: the most loads in flight per block), two where it fills them, at most 512
  // threads while 8 chunks a thread cover the row. The cost model picks C (cost() below).
  // H100, session 13 (tests/gpu/row_norm_sweep.cu, µs, inputs cold in DRAM / rotating over 4
  // sets in L2): double_norm n 1 (rows of 8192) 512 threads x 2 chunks 3.06 / 2.54, 1024 x 1
  // 3.09 / 2.67, clusters of 4 x 256 3.30 / 2.91; add_rmsnorm n 1 (16384) clusters of 8 x 256
  // 2.66 / 2.26, of 4 x 512 2.75 / 2.38, one CTA of 1024 x 2 3.34 / 2.97. Session 9: 1024 x 1 vs
  // 512 x 2 at n 128 4.76 vs 5.12, the activations' layer norm 16 x 1024 2.88 vs 5.16; layer
  // norm 4096 x 4096 (2048 blocks) 30.8 vs 27.3.
  const int64_t ch = p.n / kChunk;
  const int64_t per_thread = p.blocks >= ctx.t.sm_count ? 2 : 1;
  const CostContext cx{ctx.g, op, ctx.t, kp};
  std::optional<RowChainKernel> best;
  double best_time = 0;
  for (int cl : {1, 2, 4, 8}) {
    if (cl > 1 && (ctx.t.arch != Arch::Sm90a || p.reductions == 0 || ch % cl != 0 ||
                   p.blocks * cl > (cl == 8 ? ctx.t.sm_count / 2 : ctx.t.sm_count)))
      continue;
    RowChainKernel q = p;
    q.cluster = cl;
    const int64_t per_cta = ch / cl;
    auto fit = [&](int64_t cap) {
      q.threads = static_cast<int>(
          std::clamp<int64_t>((cdiv(per_cta, per_thread) + 31) / 32 * 32, 32, cap));
      q.chunks = static_cast<int>(cdiv(per_cta, q.threads));
    };
    fit(512);
    if (q.chunks > kMaxChunks) fit(1024);
    if (q.chunks > kMaxChunks) continue;
    const double t = q.cost(cx).time;
    if (!best || t < best_time) best = q, best_time = t;
  }
  if (!best) return std::nullopt;
  kp.grid = best->blocks * best->cluster;
  kp.threads = best->threads;
  kp.smem = 0;
  return best;
}

std::string RowChainKernel::describe() const {
  return fmt::format(
      "row chain in registers ({} row(s) of {} per block, {}{} threads x {} chunk(s) of 8, {} "
      "{} reduction(s) per row)",
      rows, n, cluster > 1 ? fmt::format("clusters of {} CTAs x ", cluster) : "", threads, chunks,
      reductions, cluster > 1 ? "cluster" : "block");
}

// Streams its inputs and outputs once, every CTA with its whole share of a row in flight: DRAM's
// rate, or for a small grid the rate one SM takes in (kSmBytesPerS per CTA). Each row of a block
// costs a DRAM round trip (the rows of a block run one after another; the first is in t_fixed),
// and its block reductions come on top, one after another (one cluster barrier each when the row
// is split over a cluster).
KernelCost RowChainKernel::cost(const CostContext& x) const {
  const CostConstants& k = cost_constants(x.t.arch);
  const BlockGraph& bg = *x.op.block;
  KernelCost c;
  c.name = x.op.name;
  c.graph_defined = true;
  c.lowered = true;
  const int64_t ctas = blocks * cluster;
  c.blocks = ctas;
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
  // Blocks resident per SM: threads bound it (no shared memory beyond the reduction slots), so a
  // grid of one-row blocks is one wave where each SM holds them all. H200, 1024 rows of 4096
  // bf16 dotted with a vector (session 12): 1024 blocks of 256 threads 3.84 us, 256 blocks of 4
  // rows 4.06, 128 blocks of 8 rows 4.35 (the generic block kernel 5.00).
  const int64_t resident = std::clamp<int64_t>(2048 / std::max(threads, 32), 1, 32);
  c.waves = cdiv(ctas, x.t.sm_count * resident);
  // Compute: the SMs the grid covers. DRAM is costed below, not by grid_utilization's share.
  double grid_dram_u = 0, comp_u = 0;
  cost::grid_utilization(double(ctas), x.t, k.gemv_efficiency, k.dram_saturation, grid_dram_u,
                         comp_u);
  // It streams like the runtime's vector kernels (16-byte loads, a whole row in flight per
  // block), not like the generic kernels that row_efficiency was fitted on: at the runtime GEMV's
  // efficiency (the H200 row dot above ran at 93% of its copy rate, counting the launch), or at
  // what the busy SMs take in where they are few. Bytes one CTA takes in and writes: its share of
  // its rows and of every weight (each block reads the whole weight, each CTA of a cluster its
  // share).
  double weight_bytes = 0;
  for (size_t i = 0; i < bg.ops.size(); ++i)
    if (bg.ops[i].kind == OpKind::Input && kind[i] == Kind::Weight)
      weight_bytes += double(numel(bg.ops[i].shape)) * dtype_bytes(bg.inputs[bg.ops[i].io].dtype);
  const double total = c.dram_read + c.dram_write;
  const double per_cta = ((total - weight_bytes) / double(blocks) + weight_bytes) / cluster;
  // The SMs' intake, or DRAM's rate where the grid is one wave that issues every load up front:
  // the first round trip (in t_fixed) overlaps the stream.
  const double t_stream =
      std::max(per_cta / kSmBytesPerS, total / (x.t.dram_bytes_per_s * k.gemv_efficiency) -
                                           (c.waves == 1 ? k.dram_latency_s : 0.0));
  const double dram_u = total / (x.t.dram_bytes_per_s * t_stream);
  c.t_lat = double(c.waves) * double(rows - 1) * k.dram_latency_s;
  cost::finish_times(c, x.t, k, dram_u, comp_u);
  const double reduce_s =
      double(c.waves) * double(rows * reductions) * (cluster > 1 ? kClusterReduceS : kReduceS) +
      (cluster > 1 ? kClusterFixedS : 0.0);
  c.t_fixed += reduce_s;
  c.time += reduce_s;
  return c;
}

namespace {

// Writes the kernel's body for one row: each op's value in registers, in graph order.
class RowChainWriter {
 public:
  RowChainWriter(const RowChainKernel& p, const BlockGraph& bg, Code& c)
      : p_(p), bg_(bg), c_(c), ch_(p.n / kChunk), span_(int64_t(p.threads) * p.cluster) {}

  void new_row() { slot_ = 0; }

  // Per-row scalars and constants are the same for every element of a row: a division by one
  // multiplies by its reciprocal (div_by_uniform).
  void fused_lambdas() {
    for (const BlockOp& o : bg_.ops)
      if (o.kind == OpKind::Fused) {
        std::vector<bool> uniform;
        for (int j : o.inputs) uniform.push_back(!is_vec(j));
        fused_lambda(c_, o, &uniform);
      }
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
        row_reduce(fmt::format("v{}", i), fmt::format("{} * {}", at(o.inputs[0]), at(o.inputs[1])),
                   false);
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
    if (guard && ch_ % span_ != 0)
      c_.f("if (g + k * {} >= {}) continue;  // past the row", span_, ch_);
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
    c_.f("const int c = g + k * {};", span_);
    if (ch_ % span_ != 0)
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
                          : o.kind == OpKind::Div && is_vec(o.inputs[0]) && !is_vec(o.inputs[1])
                              ? div_by_uniform(xs[0], xs[1])
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
  void row_reduce(const std::string& var, const std::string& term, bool mx) {
    c_.f("float {} = {};", var, mx ? "-__int_as_float(0x7f800000)" : "0.0f");
    open_chunks(true);
    c_.f("{0} = {1};", var, mx ? fmt::format("fmaxf({}, {})", var, term) : var + " + " + term);
    close_chunks();
    // The row's first reduction in a cluster waits for every CTA of the cluster to run.
    const std::string first = p_.cluster > 1 && slot_ == 0 ? ", r == 0" : "";
    c_.f(
        "{0} = kiln::cg::row_reduce<{1}, {2}>({0}, kiln::rt::{3}(), kiln_red[(r & 1) * {4} + "
        "{5}]{6});",
        var, p_.threads / 32, p_.cluster, mx ? "MaxOp" : "SumOp", p_.reductions, slot_++, first);
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
    row_reduce(fmt::format("v{}", i), at(o.inputs[0]), mx);
    if (o.kind == OpKind::Mean) c_.f("v{0} = v{0} / {1};", i, flit(double(count(o))));
  }

  void store(int i) {
    const BlockOp& o = bg_.ops[i];
    const char* T = ctype(bg_.outputs[o.io].dtype);
    if (p_.kind[o.inputs[0]] == Kind::Scalar) {  // one value per row, from the reduction's owner
      c_.f("if (g == 0) out{}[row] = kiln::rt::from_f32<{}>(v{});", o.io, T, o.inputs[0]);
      return;
    }
    c_.line("#pragma unroll");
    c_.open(fmt::format("for (int k = 0; k < {}; ++k) {{", p_.chunks));
    c_.f("const int c = g + k * {};", span_);
    if (ch_ % span_ != 0) c_.f("if (c >= {}) continue;", ch_);
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
  const int64_t ch_;    // chunks per row
  const int64_t span_;  // threads per row: chunk c of a row at thread c % span_ of its cluster
  int slot_ = 0;        // the next reduction's slot in the row
};

// A row chain that may let the next kernel launch at once: at most one CTA of at most 1024
// threads per SM, no dynamic shared memory, not a cluster launch (add_rmsnorm n 16, 16 clusters
// of 4, ran 3.19 us cold with the early trigger, 2.91 without PDL; H100, session 13).
bool small_row_chain(const RowChainKernel& p, const Target& t) {
  return p.cluster == 1 && p.blocks <= t.sm_count;
}

// Whether every kernel the schedule launches is such a row chain. The kernel after a function's
// last one is the caller's, unknown here; the rule assumes the next call of the same function
// (a decode loop), whose first kernel, launched early, would hold SMs while it waits: linear_mean
// m 16 (a TMA GEMV of 64 CTAs, then a 16-block row sum) ran 12.47-12.50 us with the row sum
// triggering early and 12.16-12.21 without (H200, session 21, same binaries otherwise); a chain
// of small row chains (double_norm, add_rmsnorm n 1 / 16) gains from it (runtime/base.cuh).
bool only_small_row_chains(const Schedule& s, const Target& t) {
  for (const KernelPlan& kp : s.kernels) {
    if (kp.as<FusedIntoKernel>() || kp.as<FoldedConstant>()) continue;  // no launch
    const RowChainKernel* p = kp.as<RowChainKernel>();
    if (p == nullptr || !small_row_chain(*p, t)) return false;
  }
  return true;
}

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
  // The next kernel may launch at once (runtime/base.cuh) where this one and every other kernel
  // of the function are small row chains (small_row_chain, only_small_row_chains).
  const Target& t = target_for(x.g.arch);
  kernel_entry(c, small_row_chain(*this, t) && only_small_row_chains(x.s, t));
  // Two sets of slots, one per reduction of a row, rows alternating (kiln::cg::row_reduce).
  c.f("__shared__ float kiln_red[{}][{}];  // row reductions: per-warp partials",
      2 * std::max(reductions, 1), cluster * threads / 32);
  c.line("const int tid = threadIdx.x;");
  // The thread's place in its row: CTA rank blockIdx.x % C of a cluster (1-D clusters of
  // consecutive blocks) holds threads rank * T ... of the row.
  if (cluster > 1)
    c.f("const int g = (int)(blockIdx.x % {}) * {} + tid;", cluster, threads);
  else
    c.line("const int g = tid;");
  c.line("(void)g;");
  if (cluster > 1)
    c.line("kiln::rt::cluster_arrive_relaxed();  // this CTA runs (row_reduce's first call waits)");
  RowChainWriter w(*this, bg, c);
  w.fused_lambdas();
  c.open(fmt::format("for (int r = 0; r < {}; ++r) {{", rows));
  c.f("const int64_t row = (int64_t)(blockIdx.x / {}) * {} + r;", cluster, rows);
  c.line("(void)row;");
  w.new_row();
  for (size_t i = 0; i < bg.ops.size(); ++i) w.op(static_cast<int>(i));
  c.close();
  c.close();
  c.line("");
  // Clusters of C consecutive CTAs: a launch attribute (the file also builds for sm_80, where
  // __cluster_dims__ does not compile; the planner splits rows over clusters on sm_90a only).
  emit_launch(x.launch, kp.kernel, std::to_string(blocks * cluster), std::to_string(threads), "0",
              cluster, fmt::format("{}", fmt::join(args, ", ")));
  launch_check(x.launch);
}

}  // namespace kiln
