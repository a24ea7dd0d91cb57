// Kernel graphs: shape and dtype inference for predefined ops, and the checking builder.
#include "kiln/ir/kernel_graph.h"

#include <algorithm>
#include <set>

#include "json_util.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/magnitude.h"

namespace kiln {

bool is_valid_name(std::string_view n) {
  if (n.empty() || n.size() > 256) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(n[0])) return false;
  for (char c : n)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

namespace {

std::string operand(const std::vector<std::string>* names, size_t i, const char* fallback) {
  return names && i < names->size() ? (*names)[i] : std::string(fallback);
}

int64_t normalize_dim(int64_t dim, size_t rank, const char* op) {
  int64_t r = static_cast<int64_t>(rank);
  if (r == 0) user_error(ErrorCode::Shape, "{}: cannot reduce a scalar", op);
  if (dim < -r || dim >= r)
    throw UserError(ErrorCode::Shape,
                    fmt::format("{}: dim {} is out of range for rank {}", op, dim, r),
                    fmt::format("dim must be in [{}, {}]", -r, r - 1));
  return dim < 0 ? dim + r : dim;
}

}  // namespace

Shape infer_op_shape(OpKind kind, const std::vector<Shape>& in, Attrs& attrs,
                     const std::vector<std::string>* names) {
  const OpInfo& info = op_info(kind);
  int n = static_cast<int>(in.size());
  if (n < info.min_inputs || n > info.max_inputs) {
    std::string want = info.min_inputs == info.max_inputs
                           ? fmt::format("{}", info.min_inputs)
                           : fmt::format("{} to {}", info.min_inputs, info.max_inputs);
    user_error(ErrorCode::Op, "{} takes {} input{}, got {}", info.name, want,
               info.max_inputs == 1 ? "" : "s", n);
  }
  switch (info.cls) {
    case OpClass::Matmul: {
      const Shape &a = in[0], &b = in[1];
      if (a.size() < 2 || b.size() < 2)
        throw UserError(
            ErrorCode::Shape,
            fmt::format("matmul needs operands of rank >= 2: {} is {}, {} is {}",
                        operand(names, 0, "A"), shape_str(a), operand(names, 1, "B"), shape_str(b)),
            "add a leading dim of 1 to a vector");
      if (a.back() != b[b.size() - 2])
        user_error(ErrorCode::Shape, "matmul: inner dims differ: {} is {}, {} is {}",
                   operand(names, 0, "A"), shape_str(a), operand(names, 1, "B"), shape_str(b));
      Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
      auto batch = broadcast_shapes(ba, bb);
      if (!batch)
        user_error(ErrorCode::Shape, "matmul: batch dims do not broadcast: {} is {}, {} is {}",
                   operand(names, 0, "A"), shape_str(a), operand(names, 1, "B"), shape_str(b));
      Shape out = *batch;
      out.push_back(a[a.size() - 2]);
      out.push_back(b.back());
      return out;
    }
    case OpClass::Transpose: {
      const Shape& x = in[0];
      int r = static_cast<int>(x.size());
      if (attrs.perm.empty()) {
        if (r < 2)
          throw UserError(ErrorCode::Shape,
                          fmt::format("transpose of rank {} needs an explicit perm", r),
                          "the default perm swaps the last two dims");
        for (int i = 0; i < r; ++i) attrs.perm.push_back(i);
        std::swap(attrs.perm[r - 1], attrs.perm[r - 2]);
      }
      if (static_cast<int>(attrs.perm.size()) != r)
        user_error(ErrorCode::Op, "transpose: perm has {} entries but the input has rank {}",
                   attrs.perm.size(), r);
      std::vector<bool> seen(r, false);
      Shape out(r);
      for (int i = 0; i < r; ++i) {
        int p = attrs.perm[i];
        if (p < -r || p >= r)
          user_error(ErrorCode::Op, "transpose: perm entry {} out of range for rank {}", p, r);
        if (p < 0) p += r;
        if (seen[p])
          user_error(ErrorCode::Op, "transpose: perm [{}] is not a permutation",
                     fmt::join(attrs.perm, ", "));
        seen[p] = true;
        attrs.perm[i] = p;
        out[i] = x[p];
      }
      return out;
    }
    case OpClass::Binary: {
      auto out = broadcast_shapes(in[0], in[1]);
      if (!out)
        user_error(ErrorCode::Shape, "{}: shapes do not broadcast: {} is {}, {} is {}", info.name,
                   operand(names, 0, "A"), shape_str(in[0]), operand(names, 1, "B"),
                   shape_str(in[1]));
      return *out;
    }
    case OpClass::Constant:
      return {};
    case OpClass::Unary:
      if (kind == OpKind::Clamp && attrs.min && attrs.max && *attrs.min > *attrs.max)
        user_error(ErrorCode::Op, "clamp: min {} is greater than max {}", *attrs.min, *attrs.max);
      return in[0];
    case OpClass::Reduce: {
      attrs.dim = normalize_dim(attrs.dim, in[0].size(), info.name);
      Shape out = in[0];
      if (attrs.keepdim)
        out[attrs.dim] = 1;
      else
        out.erase(out.begin() + attrs.dim);
      return out;
    }
    case OpClass::Softmax:
      attrs.dim = normalize_dim(attrs.dim, in[0].size(), info.name);
      return in[0];
    case OpClass::RmsNorm: {
      const Shape& x = in[0];
      if (x.empty()) user_error(ErrorCode::Shape, "rms_norm: input must have rank >= 1");
      if (n == 2 && !(in[1].size() == 1 && in[1][0] == x.back()))
        throw UserError(ErrorCode::Shape,
                        fmt::format("rms_norm: weight {} is {} but must be [{}]",
                                    operand(names, 1, "w"), shape_str(in[1]), x.back()),
                        "the weight has the shape of the last dim of the input");
      if (!(attrs.eps >= 0)) user_error(ErrorCode::Op, "rms_norm: eps must be >= 0");
      return x;
    }
    case OpClass::GraphDefined:
    case OpClass::Input:
    case OpClass::Output:
    case OpClass::Accum:
    case OpClass::Fused:
      user_error(ErrorCode::Op, "{} is not a predefined op", info.name);
  }
}

DType infer_op_dtype(OpKind, const std::vector<DType>& dtypes,
                     const std::vector<bool>& is_constant) {
  for (size_t i = 0; i < dtypes.size(); ++i)
    if (i >= is_constant.size() || !is_constant[i]) return dtypes[i];
  return DType::F32;
}

int KernelGraph::find_tensor(std::string_view name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

int KernelGraph::producer(int tensor_id) const {
  if (producer_index.size() == tensors.size() && tensor_id >= 0 &&
      tensor_id < static_cast<int>(tensors.size())) {
    const int p = producer_index[tensor_id];
    if (p < 0 && std::find(inputs.begin(), inputs.end(), tensor_id) != inputs.end()) return -1;
    if (p >= 0 && p < static_cast<int>(ops.size()) &&
        std::find(ops[p].outputs.begin(), ops[p].outputs.end(), tensor_id) != ops[p].outputs.end())
      return p;
  }
  for (size_t i = 0; i < ops.size(); ++i)
    for (int o : ops[i].outputs)
      if (o == tensor_id) return static_cast<int>(i);
  return -1;
}

int KernelGraph::num_kernels() const {
  return static_cast<int>(std::count_if(
      ops.begin(), ops.end(), [](const KernelOp& o) { return o.kind != OpKind::Constant; }));
}

bool KernelGraph::is_spec() const {
  return std::none_of(ops.begin(), ops.end(),
                      [](const KernelOp& o) { return o.kind == OpKind::GraphDefined; });
}

KernelGraphBuilder::KernelGraphBuilder(std::string name, std::string doc, Arch arch) {
  if (!is_valid_name(name))
    throw UserError(ErrorCode::Name, fmt::format("invalid graph name \"{}\"", printable(name)),
                    "names match [A-Za-z_][A-Za-z0-9_]*");
  g_.name = std::move(name);
  g_.doc = std::move(doc);
  g_.arch = arch;
}

static void check_shape(const Shape& s) {
  if (s.size() > static_cast<size_t>(kMaxRank))
    user_error(ErrorCode::Shape, "shape {} has rank {}; at most {} dims are allowed", shape_str(s),
               s.size(), kMaxRank);
  int64_t n = 1;
  for (int64_t d : s) {
    if (d <= 0) user_error(ErrorCode::Shape, "shape {} has a non-positive extent", shape_str(s));
    if (d > kMaxElements || n > kMaxElements / d)
      user_error(ErrorCode::Shape, "shape {} has more than 2^40 elements", shape_str(s));
    n *= d;
  }
}

int KernelGraphBuilder::add_tensor(TensorDesc t) {
  if (!is_valid_name(t.name))
    throw UserError(ErrorCode::Name, fmt::format("invalid name \"{}\"", printable(t.name)),
                    "names match [A-Za-z_][A-Za-z0-9_]*");
  if (tensor_ids_.count(t.name)) user_error(ErrorCode::Name, "duplicate name \"{}\"", t.name);
  check_shape(t.shape);
  int id = static_cast<int>(g_.tensors.size());
  tensor_ids_.emplace(t.name, id);
  producer_.push_back(static_cast<int>(g_.ops.size()));  // the op about to be added, if any
  g_.tensors.push_back(std::move(t));
  return id;
}

int KernelGraphBuilder::input(std::string name, Shape shape, DType dtype) {
  int id = add_tensor({std::move(name), std::move(shape), dtype});
  producer_[id] = -1;
  g_.inputs.push_back(id);
  return id;
}

int KernelGraphBuilder::op(OpKind kind, std::vector<int> inputs, Attrs attrs, std::string name,
                           std::optional<DType> dtype) {
  const OpInfo& info = op_info(kind);
  if (!(info.levels & kKernel) || info.cls == OpClass::GraphDefined)
    user_error(ErrorCode::Op, "{} is not a predefined kernel op", info.name);
  std::vector<Shape> shapes;
  std::vector<std::string> names;
  std::vector<DType> dtypes;
  std::vector<bool> is_const;
  for (int t : inputs) {
    KILN_ASSERT(t >= 0 && t < static_cast<int>(g_.tensors.size()), "tensor id {}", t);
    shapes.push_back(g_.tensors[t].shape);
    names.push_back(g_.tensors[t].name);
    dtypes.push_back(g_.tensors[t].dtype);
    int p = producer_[t];
    is_const.push_back(p >= 0 && g_.ops[p].kind == OpKind::Constant);
  }
  Shape out = infer_op_shape(kind, shapes, attrs, &names);
  DType dt = info.cls == OpClass::Constant ? DType::F32 : infer_op_dtype(kind, dtypes, is_const);
  if (dtype) dt = *dtype;
  int id = add_tensor({name, out, dt});
  g_.ops.push_back(KernelOp{kind, std::move(name), std::move(inputs), {id}, std::move(attrs), {}});
  return id;
}

std::vector<int> KernelGraphBuilder::graph_defined(std::shared_ptr<const BlockGraph> block,
                                                   std::vector<int> inputs,
                                                   std::string kernel_name) {
  KILN_ASSERT(block != nullptr, "graph_defined without a block graph");
  if (!is_valid_name(kernel_name))
    throw UserError(ErrorCode::Name,
                    fmt::format("invalid kernel name \"{}\"", printable(kernel_name)),
                    "names match [A-Za-z_][A-Za-z0-9_]*");
  if (kernel_names_.count(kernel_name))
    user_error(ErrorCode::Name, "duplicate kernel name \"{}\"", kernel_name);
  if (inputs.size() != block->inputs.size())
    user_error(ErrorCode::Structure, "kernel {} has {} inputs but its block graph reads {}",
               kernel_name, inputs.size(), block->inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_ASSERT(inputs[i] >= 0 && inputs[i] < static_cast<int>(g_.tensors.size()), "tensor id {}",
                inputs[i]);
    const TensorDesc& t = g_.tensors[inputs[i]];
    const TensorDesc& b = block->inputs[i];
    if (t.shape != b.shape || t.dtype != b.dtype)
      user_error(ErrorCode::Shape,
                 "kernel {} input {}: tensor {} is {} {} but the block graph expects {} {}",
                 kernel_name, i, t.name, shape_str(t.shape), dtype_name(t.dtype),
                 shape_str(b.shape), dtype_name(b.dtype));
  }
  std::vector<int> outs;
  for (const TensorDesc& o : block->outputs) outs.push_back(add_tensor(o));
  g_.ops.push_back(KernelOp{
      OpKind::GraphDefined, std::move(kernel_name), std::move(inputs), outs, {}, std::move(block)});
  return outs;
}

void KernelGraphBuilder::output(int tensor_id) {
  KILN_ASSERT(tensor_id >= 0 && tensor_id < static_cast<int>(g_.tensors.size()), "tensor id {}",
              tensor_id);
  g_.outputs.push_back(tensor_id);
}

KernelGraph KernelGraphBuilder::finish() && {
  if (g_.inputs.empty()) user_error(ErrorCode::Structure, "a graph needs at least one input");
  if (g_.outputs.empty()) user_error(ErrorCode::Structure, "a graph needs at least one output");
  g_.producer_index = std::move(producer_);  // kept while building: every op's outputs, -1 inputs
  return std::move(g_);
}

namespace {

// g rebuilt with the computed tensors flagged in `widen` stored in f32: an intermediate is
// retyped; a flagged output keeps its dtype and gets an f32 twin (NAME_f32). An op whose output
// is flagged in `reads_wide` reads the f32 form of its inputs, the others the stored one. Every
// op states its dtype, so the spec rule (first input's dtype) cannot change an output's type.
KernelGraph widen_storage(const KernelGraph& g, const std::vector<bool>& widen,
                          const std::vector<bool>& reads_wide) {
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<bool> is_output(nt, false);
  for (int o : g.outputs) is_output[o] = true;
  std::set<std::string> names;
  for (const TensorDesc& t : g.tensors) names.insert(t.name);
  KernelGraphBuilder kb(g.name, g.doc, g.arch);
  std::vector<int> id(nt, -1), wide_id(nt, -1);  // new ids; wide_id: the f32 value of t
  for (int t : g.inputs)
    id[t] = wide_id[t] = kb.input(g.tensor(t).name, g.tensor(t).shape, g.tensor(t).dtype);
  for (const KernelOp& op : g.ops) {
    const int t = op.outputs[0];
    std::vector<int> ins;
    for (int in : op.inputs) ins.push_back(reads_wide[t] ? wide_id[in] : id[in]);
    if (widen[t] && !is_output[t]) {
      id[t] = wide_id[t] = kb.op(op.kind, ins, op.attrs, op.name, DType::F32);
      continue;
    }
    id[t] = wide_id[t] = kb.op(op.kind, ins, op.attrs, op.name, g.tensor(t).dtype);
    if (widen[t]) {  // a 16-bit output that f32 readers read: an f32 twin for them
      std::string twin = op.name + "_f32";
      while (names.count(twin)) twin += "_";
      names.insert(twin);
      std::vector<int> wide_ins;
      for (int in : op.inputs) wide_ins.push_back(wide_id[in]);
      wide_id[t] = kb.op(op.kind, wide_ins, op.attrs, twin, DType::F32);
    }
  }
  for (int o : g.outputs) kb.output(id[o]);
  return std::move(kb).finish();
}

bool has_graph_defined(const KernelGraph& g) {
  for (const KernelOp& op : g.ops)
    if (op.kind == OpKind::GraphDefined) return true;
  return false;
}

}  // namespace

KernelGraph store_exact_intermediates(const KernelGraph& g) {
  bool any32 = false;
  for (int o : g.outputs) any32 |= g.tensor(o).dtype == DType::F32;
  if (!any32 || has_graph_defined(g)) return g;
  const int nt = static_cast<int>(g.tensors.size());
  // exact[t]: an f32 output depends on t's value.
  std::vector<bool> exact(nt, false), widen(nt, false);
  for (int o : g.outputs) exact[o] = g.tensor(o).dtype == DType::F32;
  for (auto k = g.ops.rbegin(); k != g.ops.rend(); ++k)
    if (exact[k->outputs[0]])
      for (int in : k->inputs) exact[in] = true;
  bool change = false;
  for (const KernelOp& op : g.ops) {  // linear: no producer() scans
    const int t = op.outputs[0];
    widen[t] = exact[t] && g.tensor(t).dtype != DType::F32;
    change |= widen[t];
  }
  return change ? widen_storage(g, widen, exact) : g;
}

KernelGraph store_unbounded_intermediates(const KernelGraph& g) {
  if (has_graph_defined(g)) return g;
  const int nt = static_cast<int>(g.tensors.size());
  std::vector<int> producer(nt, -1);
  for (size_t i = 0; i < g.ops.size(); ++i) producer[g.ops[i].outputs[0]] = static_cast<int>(i);
  auto op_of = [&](int t) -> const KernelOp* {
    return producer[t] >= 0 ? &g.ops[producer[t]] : nullptr;
  };
  // unbounded[t]: t's range is not bounded for std-1 inputs (the spec format's range rule).
  std::vector<bool> unbounded(nt, false), widen(nt, false);
  // mag[t]: how large t gets at std 1 (magnitude.h): a square or product of matmuls outgrows f16.
  std::vector<Magnitude> mag(nt, Magnitude::input());
  // An output no op reads needs no f32 twin: its own dtype is the spec's to choose.
  std::vector<bool> read(nt, false), is_output(nt, false);
  for (const KernelOp& op : g.ops)
    for (int in : op.inputs) read[in] = true;
  for (int o : g.outputs) is_output[o] = true;
  bool change = false;
  for (const KernelOp& op : g.ops) {
    const int t = op.outputs[0];
    bool u = false;
    for (int in : op.inputs) u = u || unbounded[in];
    bool shifted_exp = false;
    if (op.kind == OpKind::Exp) {
      // exp(a - max(a)) is in (0, 1]; any other exponent may be large (Q K^T at std 1: e^40).
      const KernelOp* d = op_of(op.inputs[0]);
      const KernelOp* m = d && d->kind == OpKind::Sub ? op_of(d->inputs[1]) : nullptr;
      shifted_exp = m && m->kind == OpKind::Max && m->inputs[0] == d->inputs[0];
      u = !shifted_exp;
    } else if (op.kind == OpKind::Div) {
      // e / sum(e) with e = exp(...) >= 0 and the sum kept in place: in [0, 1].
      const KernelOp* e = op_of(op.inputs[0]);
      const KernelOp* z = op_of(op.inputs[1]);
      if (e && e->kind == OpKind::Exp && z && z->kind == OpKind::Sum && z->attrs.keepdim &&
          z->inputs[0] == op.inputs[0])
        u = false;
    } else if (op.kind == OpKind::Log || op.kind == OpKind::Softmax || op.kind == OpKind::RmsNorm ||
               op.kind == OpKind::Tanh || op.kind == OpKind::Sigmoid) {
      u = false;  // bounded (or logarithmic) whatever the input
    }
    unbounded[t] = u;
    std::vector<Magnitude> ins;
    for (int in : op.inputs) ins.push_back(mag[in]);
    const int64_t extent =
        op.inputs.empty()
            ? 1
            : magnitude_extent(op.kind, g.tensor(op.inputs[0]).shape, g.tensor(t).shape);
    mag[t] = op_magnitude(op.kind, op.attrs, ins, extent,
                          op.inputs.size() == 2 && op.inputs[0] == op.inputs[1], shifted_exp);
    widen[t] = (u || magnitude_overflows(mag[t], g.tensor(t).dtype)) &&
               g.tensor(t).dtype != DType::F32 && (read[t] || !is_output[t]);
    change |= widen[t];
  }
  return change ? widen_storage(g, widen, std::vector<bool>(nt, true)) : g;
}

}  // namespace kiln
