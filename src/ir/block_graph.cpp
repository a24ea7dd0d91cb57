// Block graphs: the checking builder, derived tile shapes and stages, and the resource rule.
#include "kiln/ir/block_graph.h"

#include <algorithm>

#include "json_util.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln {

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::Invariant:
      return "invariant";
    case Stage::Loop:
      return "loop";
    case Stage::Post:
      return "post";
  }
  return "?";
}

int64_t BlockGraph::num_blocks() const {
  int64_t n = 1;
  for (int64_t g : grid) n *= g;
  return n;
}

int64_t BlockGraph::num_iterations() const {
  int64_t n = 1;
  for (int64_t l : loop) n *= l;
  return n;
}

void check_thread_graph(const ThreadGraph& tg) {
  if (tg.num_inputs < 1 || tg.num_inputs > 16)
    user_error(ErrorCode::Structure, "a thread graph takes 1 to 16 inputs, not {}", tg.num_inputs);
  if (tg.ops.empty() || tg.ops.size() > static_cast<size_t>(kMaxThreadOps))
    user_error(ErrorCode::Structure, "a thread graph has 1 to {} ops, not {}", kMaxThreadOps,
               tg.ops.size());
  for (size_t j = 0; j < tg.ops.size(); ++j) {
    const ThreadOp& op = tg.ops[j];
    const OpInfo& info = op_info(op.kind);
    if (!(info.levels & kThread))
      user_error(ErrorCode::Op, "thread op {}: {} is not an elementwise op", j, info.name);
    int n = static_cast<int>(op.inputs.size());
    if (n < info.min_inputs || n > info.max_inputs)
      user_error(ErrorCode::Op, "thread op {}: {} takes {} inputs, got {}", j, info.name,
                 info.min_inputs, n);
    for (int r : op.inputs)
      if (r < 0 || r >= tg.num_inputs + static_cast<int>(j))
        user_error(ErrorCode::Structure,
                   "thread op {}: operand {} is neither an input nor an earlier op", j, r);
    if (op.kind == OpKind::Clamp && op.attrs.min && op.attrs.max && *op.attrs.min > *op.attrs.max)
      user_error(ErrorCode::Op, "thread op {}: clamp min is greater than max", j);
  }
}

BlockGraphBuilder::BlockGraphBuilder(std::vector<int64_t> grid, int block_threads,
                                     std::vector<int64_t> loop, std::vector<TensorDesc> inputs) {
  if (grid.empty() || grid.size() > 3)
    user_error(ErrorCode::Structure, "a grid has 1 to 3 dims, not {}", grid.size());
  for (size_t i = 0; i < grid.size(); ++i) {
    int64_t limit = i == 0 ? (int64_t(1) << 31) - 1 : 65535;
    if (grid[i] < 1 || grid[i] > limit)
      user_error(ErrorCode::Structure, "grid dim {} is {}; it must be in [1, {}]", i, grid[i],
                 limit);
  }
  if (block_threads < 32 || block_threads > 1024 || block_threads % 32 != 0)
    throw UserError(ErrorCode::Structure, fmt::format("block_threads is {}", block_threads),
                    "a block has a multiple of 32 threads, from 32 to 1024");
  if (loop.size() > 3)
    user_error(ErrorCode::Structure, "a for-loop has 0 to 3 dims, not {}", loop.size());
  for (size_t i = 0; i < loop.size(); ++i)
    if (loop[i] < 1 || loop[i] > (int64_t(1) << 31))
      user_error(ErrorCode::Structure, "loop dim {} has range {}; it must be positive", i, loop[i]);
  // Sanity bounds (docs/mugraph-format.md): every evaluation walks every block and iteration, so
  // a loop of 2^31 iterations over a tiny tile is a valid-looking graph that takes days.
  double iters = 1, blocks = 1;  // products of up to three 2^31 ranges: double, not int64
  for (int64_t l : loop) iters *= static_cast<double>(l);
  for (int64_t b : grid) blocks *= static_cast<double>(b);
  if (iters > double(kMaxLoopIterations))
    throw UserError(ErrorCode::Structure,
                    fmt::format("the for-loop runs {:.0f} iterations per block", iters),
                    fmt::format("at most {} (2^24) iterations per block", kMaxLoopIterations));
  if (blocks * iters > double(kMaxBlockIterations))
    throw UserError(
        ErrorCode::Structure, fmt::format("{:.0f} blocks x {:.0f} iterations", blocks, iters),
        fmt::format("at most {} (2^36) block iterations in one kernel", kMaxBlockIterations));
  for (const TensorDesc& t : inputs)
    if (t.shape.size() > static_cast<size_t>(kMaxRank) || numel(t.shape) <= 0)
      user_error(ErrorCode::Shape, "block graph input {} has invalid shape {}", t.name,
                 shape_str(t.shape));
  g_.grid = std::move(grid);
  g_.block_threads = block_threads;
  g_.loop = std::move(loop);
  g_.inputs = std::move(inputs);
}

namespace {

// Names come from files. Each builder call checks its names before anything else, since its other
// messages quote them (an invalid name may hold control bytes or run to megabytes); `what` is
// "block op" or "output tensor". An empty block op name is made up later, in push.
void check_name(const std::string& name, const char* what) {
  if (!is_valid_name(name))
    throw UserError(ErrorCode::Name, fmt::format("invalid {} name \"{}\"", what, printable(name)),
                    "names match [A-Za-z_][A-Za-z0-9_]*");
}
void check_op_name(const std::string& name) {
  if (!name.empty()) check_name(name, "block op");
}

}  // namespace

int BlockGraphBuilder::push(BlockOp op) {
  if (op.name.empty()) op.name = fmt::format("t{}", g_.ops.size());
  check_name(op.name, "block op");
  if (!op_names_.insert(op.name).second)
    user_error(ErrorCode::Name, "duplicate block op name \"{}\"", op.name);
  g_.ops.push_back(std::move(op));
  return static_cast<int>(g_.ops.size()) - 1;
}

namespace {

// Checks a map (imap/omap over grid dims, or fmap over loop dims) against a tensor rank.
void check_map(const std::vector<int>& map, size_t want, size_t rank, const char* what,
               const std::string& op) {
  if (map.size() != want)
    user_error(ErrorCode::Map, "{}: {} has {} entries but there are {} {} dims", op, what,
               map.size(), want, std::string(what) == "fmap" ? "loop" : "grid");
  std::vector<bool> used(rank, false);
  for (int d : map) {
    if (d == -1) continue;
    if (d < 0 || d >= static_cast<int>(rank))
      user_error(ErrorCode::Map, "{}: {} entry {} is not a dim of a rank-{} tensor (or -1)", op,
                 what, d, rank);
    if (used[d]) user_error(ErrorCode::Map, "{}: {} maps two dims to tensor dim {}", op, what, d);
    used[d] = true;
  }
}

// Product of grid extents (resp. loop ranges) mapped to tensor dim d.
int64_t mapped_extent(const std::vector<int>& map, const std::vector<int64_t>& extents, int d) {
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i] == d) return extents[i];
  return 1;
}

}  // namespace

int BlockGraphBuilder::input(int io, std::vector<int> imap, std::vector<int> fmap,
                             std::string name) {
  check_op_name(name);
  std::string who = fmt::format("input {}", name.empty() ? fmt::format("#{}", io) : name);
  if (io < 0 || io >= static_cast<int>(g_.inputs.size()))
    user_error(ErrorCode::Structure, "{}: input index {} is out of range (the kernel has {})", who,
               io, g_.inputs.size());
  const TensorDesc& t = g_.inputs[io];
  size_t rank = t.shape.size();
  check_map(imap, g_.grid.size(), rank, "imap", who);
  check_map(fmap, g_.loop.size(), rank, "fmap", who);
  BlockOp op{OpKind::Input,   std::move(name), {}, {}, io,
             std::move(imap), std::move(fmap), {}, {}, Stage::Invariant};
  op.shape = t.shape;
  for (size_t d = 0; d < rank; ++d) {
    int64_t div = mapped_extent(op.imap, g_.grid, d) * mapped_extent(op.fmap, g_.loop, d);
    if (t.shape[d] % div != 0)
      throw UserError(ErrorCode::Map,
                      fmt::format("{}: dim {} of {} ({}) is not divisible by {} (grid x loop)", who,
                                  d, t.name, t.shape[d], div),
                      "tiles must divide the tensor exactly");
    op.shape[d] = t.shape[d] / div;
  }
  bool loops = std::any_of(op.fmap.begin(), op.fmap.end(), [](int d) { return d >= 0; });
  op.stage = loops ? Stage::Loop : Stage::Invariant;
  return push(std::move(op));
}

static Stage combine_stages(const std::vector<Stage>& in, const std::string& who) {
  bool loop = false, post = false;
  for (Stage s : in) loop |= s == Stage::Loop, post |= s == Stage::Post;
  if (loop && post)
    throw UserError(ErrorCode::Structure,
                    fmt::format("{} mixes a loop-body tile with a post-loop tile", who),
                    "accumulate the loop-body tile first");
  return loop ? Stage::Loop : post ? Stage::Post : Stage::Invariant;
}

int BlockGraphBuilder::op(OpKind kind, std::vector<int> inputs, Attrs attrs, std::string name) {
  check_op_name(name);
  const OpInfo& info = op_info(kind);
  std::string who = fmt::format("{} {}", info.name, name.empty() ? "(unnamed)" : name);
  if (!(info.levels & kBlock) || info.cls == OpClass::Input || info.cls == OpClass::Output ||
      info.cls == OpClass::Fused)
    user_error(ErrorCode::Op, "{}: {} is not a block compute op", who, info.name);
  std::vector<Shape> shapes;
  std::vector<Stage> stages;
  for (int i : inputs) {
    if (i < 0 || i >= static_cast<int>(g_.ops.size()) || g_.ops[i].kind == OpKind::Output)
      user_error(ErrorCode::Structure, "{}: operand {} is not an earlier tile", who, i);
    shapes.push_back(g_.ops[i].shape);
    stages.push_back(g_.ops[i].stage);
  }
  BlockOp op{kind, std::move(name), inputs, attrs, -1, {}, {}, {}, {}, Stage::Invariant};
  if (info.cls == OpClass::Accum) {
    int n = static_cast<int>(inputs.size());
    if (n < info.min_inputs || n > info.max_inputs)
      user_error(ErrorCode::Op, "{} takes {} inputs, got {}", who, info.min_inputs, n);
    for (Stage s : stages)
      if (s == Stage::Post)
        user_error(ErrorCode::Structure, "{}: accumulates a post-loop tile", who);
    if (kind == OpKind::AccumRescale) {
      auto b = broadcast_shapes(shapes[0], shapes[1]);
      if (!b || *b != shapes[0])
        user_error(ErrorCode::Shape, "{}: max tile {} does not broadcast to value tile {}", who,
                   shape_str(shapes[1]), shape_str(shapes[0]));
    }
    op.shape = shapes[0];
    op.stage = Stage::Post;
  } else {
    op.shape = infer_op_shape(kind, shapes, op.attrs);
    op.stage = combine_stages(stages, who);
  }
  return push(std::move(op));
}

int BlockGraphBuilder::fused(ThreadGraph tg, std::vector<int> inputs, std::string name) {
  check_op_name(name);
  std::string who = fmt::format("fused {}", name.empty() ? "(unnamed)" : name);
  check_thread_graph(tg);
  if (static_cast<int>(inputs.size()) != tg.num_inputs)
    user_error(ErrorCode::Structure, "{}: the thread graph takes {} inputs, given {}", who,
               tg.num_inputs, inputs.size());
  Shape shape;
  std::vector<Stage> stages;
  for (int i : inputs) {
    if (i < 0 || i >= static_cast<int>(g_.ops.size()) || g_.ops[i].kind == OpKind::Output)
      user_error(ErrorCode::Structure, "{}: operand {} is not an earlier tile", who, i);
    auto b = broadcast_shapes(shape, g_.ops[i].shape);
    if (!b)
      user_error(ErrorCode::Shape, "{}: input tiles do not broadcast: {} and {}", who,
                 shape_str(shape), shape_str(g_.ops[i].shape));
    shape = *b;
    stages.push_back(g_.ops[i].stage);
  }
  BlockOp op{OpKind::Fused,
             std::move(name),
             std::move(inputs),
             {},
             -1,
             {},
             {},
             std::make_shared<const ThreadGraph>(std::move(tg)),
             shape,
             Stage::Invariant};
  op.stage = combine_stages(stages, who);
  return push(std::move(op));
}

int BlockGraphBuilder::output(int value, std::vector<int> omap, std::vector<int> fmap, DType dtype,
                              std::string tensor_name, int rank, std::string name) {
  check_op_name(name);
  check_name(tensor_name, "output tensor");
  std::string who = fmt::format("output {}", tensor_name);
  if (value < 0 || value >= static_cast<int>(g_.ops.size()) || g_.ops[value].kind == OpKind::Output)
    user_error(ErrorCode::Structure, "{}: operand {} is not an earlier tile", who, value);
  const BlockOp& v = g_.ops[value];
  int trank = static_cast<int>(v.shape.size());
  if (rank < 0) rank = trank;
  if (rank < trank || rank > kMaxRank)
    user_error(ErrorCode::Shape, "{}: rank {} must be between the tile's rank {} and {}", who, rank,
               trank, kMaxRank);
  check_map(omap, g_.grid.size(), rank, "omap", who);
  check_map(fmap, g_.loop.size(), rank, "fmap", who);
  for (size_t i = 0; i < g_.grid.size(); ++i)
    if (g_.grid[i] > 1 && omap[i] < 0)
      throw UserError(
          ErrorCode::Map,
          fmt::format("{}: grid dim {} (extent {}) is not mapped by the omap", who, i, g_.grid[i]),
          "every block must write its own part of the output");
  if (v.stage == Stage::Loop) {
    for (size_t i = 0; i < g_.loop.size(); ++i)
      if (g_.loop[i] > 1 && fmap[i] < 0)
        throw UserError(ErrorCode::Map,
                        fmt::format("{}: saves a loop-body tile but loop dim {} is not mapped by "
                                    "its fmap",
                                    who, i),
                        "map the loop dim to an output dim, or accumulate the tile first");
  } else {
    for (int d : fmap)
      if (d >= 0)
        user_error(ErrorCode::Map, "{}: a post-loop tile is saved once; its fmap must be all -1",
                   who);
  }
  TensorDesc out{std::move(tensor_name), Shape(rank), dtype};
  if (output_names_.count(out.name))
    user_error(ErrorCode::Name, "duplicate output name \"{}\"", out.name);
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    int64_t t = d < rank - trank ? 1 : v.shape[d - (rank - trank)];
    out.shape[d] = t * mapped_extent(omap, g_.grid, d) * mapped_extent(fmap, g_.loop, d);
    total *= out.shape[d];
    if (total > kMaxElements) user_error(ErrorCode::Shape, "{}: output too large", who);
  }
  BlockOp op{
      OpKind::Output,  std::move(name), {value}, {},      static_cast<int>(g_.outputs.size()),
      std::move(omap), std::move(fmap), {},      v.shape, v.stage};
  int index = push(std::move(op));  // first: if it throws, no output is left without its op
  output_names_.insert(out.name);
  g_.outputs.push_back(std::move(out));
  return index;
}

BlockResources block_resources(const BlockGraph& bg) {
  BlockResources r;
  r.regs_per_thread = 32;
  auto regs = [&](const Shape& s) {
    return static_cast<int>((numel(s) + bg.block_threads - 1) / bg.block_threads);
  };
  const int n = static_cast<int>(bg.ops.size());
  std::vector<std::vector<int>> consumers(n);
  for (int c = 0; c < n; ++c)
    for (int in : bg.ops[c].inputs)
      if (consumers[in].empty() || consumers[in].back() != c) consumers[in].push_back(c);
  auto cls = [&](int i) { return op_info(bg.ops[i].kind).cls; };
  auto elementwise = [&](int i) {
    OpClass c = cls(i);
    return c == OpClass::Unary || c == OpClass::Binary || c == OpClass::Fused;
  };
  auto same_padded = [](Shape a, Shape b) {
    while (a.size() < b.size()) a.insert(a.begin(), 1);
    while (b.size() < a.size()) b.insert(b.begin(), 1);
    return a == b;
  };
  // Consumer c reads each element of i once, in i's stage (so i can be recomputed inside c).
  auto read_once = [&](int i, int c) {
    switch (cls(c)) {
      case OpClass::Unary:
      case OpClass::Binary:
      case OpClass::Fused:
        return bg.ops[c].stage == bg.ops[i].stage && same_padded(bg.ops[i].shape, bg.ops[c].shape);
      case OpClass::Reduce:
        return bg.ops[c].stage == bg.ops[i].stage;
      case OpClass::Output:
        return true;
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Constant:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Accum:
        return false;
    }
  };
  for (int i = 0; i < n; ++i) {
    const BlockOp& op = bg.ops[i];
    const OpClass c = cls(i);
    if (c == OpClass::Output) continue;
    if (c == OpClass::Input) {
      r.smem_bytes += numel(op.shape) * dtype_bytes(bg.inputs[op.io].dtype);
      continue;
    }
    if (c == OpClass::Accum) {
      r.regs_per_thread += regs(op.shape);
      continue;
    }
    const std::vector<int>& cs = consumers[i];
    bool only_accums = !cs.empty();
    for (int k : cs) only_accums &= cls(k) == OpClass::Accum;
    if (only_accums) {
      r.regs_per_thread += regs(op.shape);
      continue;
    }
    // Elementwise tiles recomputed inside their readers take no storage: one reader that reads
    // each element once in the same stage, or up to four such readers of an op whose operands
    // are input tiles and constants (recomputing it costs less than staging it).
    if (elementwise(i) && !cs.empty()) {
      bool all_once = true;
      for (int k : cs) all_once &= read_once(i, k);
      bool over_inputs = cls(i) != OpClass::Fused;
      for (int in : op.inputs)
        over_inputs &= cls(in) == OpClass::Input || cls(in) == OpClass::Constant;
      if (all_once && (cs.size() == 1 || (cs.size() <= 4 && over_inputs))) continue;
    }
    r.smem_bytes += numel(op.shape) * 4;
  }
  return r;
}

BlockGraph BlockGraphBuilder::finish(const Target& target) && {
  if (g_.outputs.empty()) user_error(ErrorCode::Structure, "a block graph needs an output");
  if (g_.block_threads > target.max_threads_per_block)
    user_error(ErrorCode::Resource, "block_threads {} exceeds {} on {}", g_.block_threads,
               target.max_threads_per_block, target.name);
  BlockResources r = block_resources(g_);
  if (r.smem_bytes > target.smem_per_block)
    throw UserError(ErrorCode::Resource,
                    fmt::format("the block graph needs {} bytes of shared memory; {} allows {}",
                                r.smem_bytes, target.name, target.smem_per_block),
                    "use smaller tiles: more grid blocks or more loop iterations");
  if (r.regs_per_thread > target.regs_per_thread_max ||
      int64_t(r.regs_per_thread) * g_.block_threads > target.regs_per_sm)
    throw UserError(ErrorCode::Resource,
                    fmt::format("the block graph needs {} registers per thread x {} threads; {} "
                                "allows {} per thread and {} per block",
                                r.regs_per_thread, g_.block_threads, target.name,
                                target.regs_per_thread_max, target.regs_per_sm),
                    "use smaller accumulator tiles or more threads");
  return std::move(g_);
}

}  // namespace kiln
