// Abstract expressions: the interning pool, printing, and the translation of the IR.
#include "kiln/search/absexpr.h"

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "kiln/ir/diag.h"
#include "kiln/ir/elementwise.h"
#include "kiln/ir/hash.h"

namespace kiln::search {

const char* abs_kind_name(AbsKind k) {
  switch (k) {
    case AbsKind::Input:
      return "input";
    case AbsKind::Const:
      return "const";
    case AbsKind::Add:
      return "add";
    case AbsKind::Mul:
      return "mul";
    case AbsKind::Div:
      return "div";
    case AbsKind::Exp:
      return "exp";
    case AbsKind::Sum:
      return "sum";
    case AbsKind::Opaque:
      return "opaque";
  }
  return "?";
}

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 finalizer over a running combination: cheap and well spread.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

uint64_t hash_string(const std::string& s) {
  return hash64(s);  // the same in every run and on every platform
}

struct KeyHash {
  size_t operator()(const AbsNode* n) const { return n->hash; }
};
struct KeyEq {
  bool operator()(const AbsNode* a, const AbsNode* b) const {
    return a->kind == b->kind && a->count == b->count &&
           std::bit_cast<uint64_t>(a->value) == std::bit_cast<uint64_t>(b->value) &&
           a->name == b->name && a->args == b->args;
  }
};

// Interned nodes, sharded by hash so that threads building expressions rarely contend. Nodes
// are never freed: a search builds a bounded number of distinct expressions.
class Pool {
 public:
  const AbsNode* intern(AbsNode proto) {
    Shard& s = shards_[proto.hash % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.set.find(&proto);
    if (it != s.set.end()) return *it;
    s.nodes.push_back(std::move(proto));
    AbsNode* n = &s.nodes.back();
    n->id = next_id_.fetch_add(1, std::memory_order_relaxed);
    s.set.insert(n);
    return n;
  }
  size_t size() const { return next_id_.load(); }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    std::deque<AbsNode> nodes;  // stable addresses
    std::unordered_set<const AbsNode*, KeyHash, KeyEq> set;
  };
  std::array<Shard, kShards> shards_;
  std::atomic<uint32_t> next_id_{0};
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: expressions may outlive static destructors
  return *p;
}

AbsExpr make(AbsKind kind, int64_t count, double value, std::string name,
             std::vector<const AbsNode*> args) {
  uint64_t h = mix(static_cast<uint64_t>(kind) + 1, static_cast<uint64_t>(count));
  h = mix(h, std::bit_cast<uint64_t>(value));
  h = mix(h, hash_string(name));
  uint32_t depth = 1;
  for (const AbsNode* a : args) {
    h = mix(h, a->hash);
    depth = std::max(depth, a->depth + 1);
  }
  AbsNode proto{kind, 0, h, count, value, std::move(name), std::move(args), depth};
  return AbsExpr(pool().intern(std::move(proto)));
}

std::vector<const AbsNode*> nodes_of(const std::vector<AbsExpr>& es) {
  std::vector<const AbsNode*> v;
  v.reserve(es.size());
  for (AbsExpr e : es) {
    KILN_ASSERT(!e.null(), "null abstract expression operand");
    v.push_back(e.node());
  }
  return v;
}

}  // namespace

size_t abs_pool_size() {
  return pool().size();
}

AbsExpr AbsExpr::input(const std::string& name) {
  return make(AbsKind::Input, 0, 0.0, name, {});
}
AbsExpr AbsExpr::constant(double value) {
  if (value == 0.0) value = 0.0;  // -0 and +0 are one constant
  return make(AbsKind::Const, 0, value, {}, {});
}
AbsExpr AbsExpr::any_constant() {
  return make(AbsKind::Const, 0, std::numeric_limits<double>::quiet_NaN(), {}, {});
}
AbsExpr AbsExpr::add(AbsExpr a, AbsExpr b) {
  return make(AbsKind::Add, 0, 0.0, {}, nodes_of({a, b}));
}
AbsExpr AbsExpr::mul(AbsExpr a, AbsExpr b) {
  return make(AbsKind::Mul, 0, 0.0, {}, nodes_of({a, b}));
}
AbsExpr AbsExpr::div(AbsExpr a, AbsExpr b) {
  return make(AbsKind::Div, 0, 0.0, {}, nodes_of({a, b}));
}
AbsExpr AbsExpr::exp(AbsExpr a) {
  return make(AbsKind::Exp, 0, 0.0, {}, nodes_of({a}));
}
AbsExpr AbsExpr::sum(int64_t n, AbsExpr x) {
  KILN_ASSERT(n >= 1, "sum over {} elements", n);
  return make(AbsKind::Sum, n, 0.0, {}, nodes_of({x}));
}
AbsExpr AbsExpr::opaque(const std::string& fn, std::vector<AbsExpr> args, int64_t count) {
  KILN_ASSERT(!fn.empty() && (args.size() == 1 || args.size() == 2), "opaque {} of {} args", fn,
              args.size());
  KILN_ASSERT(count >= 0, "opaque {} over {} elements", fn, count);
  return make(AbsKind::Opaque, count, 0.0, fn, nodes_of(args));
}
AbsExpr AbsExpr::add_n(std::vector<AbsExpr> args) {
  KILN_ASSERT(args.size() >= 2, "add of {} args", args.size());
  return make(AbsKind::Add, 0, 0.0, {}, nodes_of(args));
}
AbsExpr AbsExpr::mul_n(std::vector<AbsExpr> args) {
  KILN_ASSERT(args.size() >= 2, "mul of {} args", args.size());
  return make(AbsKind::Mul, 0, 0.0, {}, nodes_of(args));
}

std::vector<AbsExpr> AbsExpr::args() const {
  std::vector<AbsExpr> v;
  v.reserve(n_->args.size());
  for (const AbsNode* a : n_->args) v.emplace_back(a);
  return v;
}

size_t AbsExpr::dag_size() const {
  std::unordered_set<const AbsNode*> seen;
  std::vector<const AbsNode*> stack{n_};
  while (!stack.empty()) {
    const AbsNode* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const AbsNode* a : n->args) stack.push_back(a);
  }
  return seen.size();
}

static void print(const AbsNode* n, std::string& out) {
  switch (n->kind) {
    case AbsKind::Input:
      out += n->name;
      return;
    case AbsKind::Const:
      out += std::isnan(n->value) ? std::string("κ") : fmt::format("{}", n->value);
      return;
    default:
      break;
  }
  out += n->kind == AbsKind::Opaque ? n->name : abs_kind_name(n->kind);
  out += '(';
  bool first = true;
  if (n->count > 0) {
    out += fmt::format("{}", n->count);
    first = false;
  }
  for (const AbsNode* a : n->args) {
    if (!first) out += ", ";
    first = false;
    print(a, out);
  }
  out += ')';
}

std::string AbsExpr::str() const {
  if (!n_) return "null";
  std::string s;
  print(n_, s);
  return s;
}

static int compare(const AbsNode* a, const AbsNode* b) {
  if (a == b) return 0;
  if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
  // Equal hashes of distinct nodes: a collision; decide structurally.
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  if (a->count != b->count) return a->count < b->count ? -1 : 1;
  uint64_t va = std::bit_cast<uint64_t>(a->value), vb = std::bit_cast<uint64_t>(b->value);
  if (va != vb) return va < vb ? -1 : 1;
  if (int c = a->name.compare(b->name)) return c < 0 ? -1 : 1;
  if (a->args.size() != b->args.size()) return a->args.size() < b->args.size() ? -1 : 1;
  for (size_t i = 0; i < a->args.size(); ++i)
    if (int c = compare(a->args[i], b->args[i])) return c;
  return 0;
}

bool structural_less(AbsExpr a, AbsExpr b) {
  return compare(a.node(), b.node()) < 0;
}

// ---------------------------------------------------------------------------------------------
// Translation.

AbsExpr abstract_op(OpKind kind, const Attrs& attrs, const std::vector<AbsExpr>& x,
                    const std::vector<Shape>& shapes) {
  using E = AbsExpr;
  const OpInfo& info = op_info(kind);
  KILN_ASSERT(static_cast<int>(x.size()) >= info.min_inputs &&
                  static_cast<int>(x.size()) <= info.max_inputs,
              "{} applied to {} operands", info.name, x.size());
  auto extent = [&](size_t operand, int64_t dim) {
    KILN_ASSERT(
        operand < shapes.size() && dim >= 0 && dim < static_cast<int64_t>(shapes[operand].size()),
        "{}: no extent for dim {} of operand {}", info.name, dim, operand);
    return shapes[operand][dim];
  };
  switch (info.cls) {
    case OpClass::Unary:  // elementwise: the table's abstract expressions (kiln/ir/elementwise.h)
      return with_unary(
          kind, [&](auto t) { return Elementwise<decltype(t)::value>::abstract(attrs, x[0]); });
    case OpClass::Binary:
      return with_binary(kind, [&](auto t) {
        return Elementwise<decltype(t)::value>::abstract(attrs, x[0], x[1]);
      });
    case OpClass::Matmul:
      return E::sum(shapes.at(0).back(), E::mul(x[0], x[1]));
    case OpClass::Transpose:
      return x[0];  // a layout change: the same values
    case OpClass::Constant:
      return E::constant(attrs.value);
    case OpClass::Reduce: {
      const int64_t n = extent(0, attrs.dim);
      if (kind == OpKind::Sum) return E::sum(n, x[0]);
      if (kind == OpKind::Mean) return E::div(E::sum(n, x[0]), E::constant(static_cast<double>(n)));
      KILN_ASSERT(kind == OpKind::Max, "abstract_op: reduction {}", info.name);
      return E::max_reduce(n, x[0]);
    }
    case OpClass::Softmax: {
      int64_t n = extent(0, attrs.dim);
      AbsExpr e = E::exp(E::sub(x[0], E::max_reduce(n, x[0])));
      return E::div(e, E::sum(n, e));
    }
    case OpClass::RmsNorm: {
      KILN_ASSERT(!shapes.empty() && !shapes[0].empty(), "rms_norm of a scalar");
      int64_t n = shapes[0].back();
      AbsExpr mean = E::div(E::sum(n, E::square(x[0])), E::constant(static_cast<double>(n)));
      AbsExpr r = E::div(x[0], E::opaque("sqrt", {E::add(mean, E::constant(attrs.eps))}));
      return x.size() == 2 ? E::mul(r, x[1]) : r;
    }
    case OpClass::GraphDefined:
    case OpClass::Input:
    case OpClass::Output:
    case OpClass::Accum:
    case OpClass::Fused:
      break;
  }
  KILN_ASSERT(false, "abstract_op: {} needs its graph", info.name);
  return {};
}

std::vector<AbsExpr> abstract_tensors(const KernelGraph& g) {
  std::vector<AbsExpr> t(g.tensors.size());
  for (int id : g.inputs) t[id] = AbsExpr::input(g.tensor(id).name);
  for (const KernelOp& op : g.ops) {
    std::vector<AbsExpr> in;
    std::vector<Shape> shapes;
    for (int i : op.inputs) {
      KILN_ASSERT(!t[i].null(), "tensor {} used before it is defined", g.tensor(i).name);
      in.push_back(t[i]);
      shapes.push_back(g.tensor(i).shape);
    }
    if (op.kind == OpKind::GraphDefined) {
      KILN_ASSERT(op.block != nullptr, "kernel {} has no block graph", op.name);
      std::vector<AbsExpr> outs = abstract_block_outputs(*op.block, in);
      KILN_ASSERT(outs.size() == op.outputs.size(), "kernel {}: {} outputs, block graph saves {}",
                  op.name, op.outputs.size(), outs.size());
      for (size_t j = 0; j < outs.size(); ++j) t[op.outputs[j]] = outs[j];
    } else {
      KILN_ASSERT(op.outputs.size() == 1, "predefined op {} with {} outputs", op.name,
                  op.outputs.size());
      t[op.outputs[0]] = abstract_op(op.kind, op.attrs, in, shapes);
    }
  }
  return t;
}

AbsExpr abstract_of(const KernelGraph& g, int tensor_id) {
  KILN_ASSERT(tensor_id >= 0 && tensor_id < static_cast<int>(g.tensors.size()), "tensor id {}",
              tensor_id);
  return abstract_tensors(g)[tensor_id];
}

AbsExpr abstract_of_block_op(const BlockGraph& bg, int op, const std::vector<AbsExpr>& block_inputs,
                             std::vector<AbsExpr>* memo) {
  KILN_ASSERT(op >= 0 && op < static_cast<int>(bg.ops.size()), "block op {} of {}", op,
              bg.ops.size());
  KILN_ASSERT(block_inputs.size() == bg.inputs.size(), "{} input expressions for {} inputs",
              block_inputs.size(), bg.inputs.size());
  std::vector<AbsExpr> local;
  std::vector<AbsExpr>& e = memo ? *memo : local;
  const int64_t iters = bg.num_iterations();
  for (int i = static_cast<int>(e.size()); i <= op; ++i) {
    const BlockOp& o = bg.ops[i];
    std::vector<AbsExpr> in;
    std::vector<Shape> shapes;
    for (int j : o.inputs) {
      KILN_ASSERT(j >= 0 && j < i, "block op {} reads op {}", o.name, j);
      in.push_back(e[j]);
      shapes.push_back(bg.ops[j].shape);
    }
    AbsExpr r;
    switch (op_info(o.kind).cls) {
      case OpClass::Input:
        KILN_ASSERT(o.io >= 0 && o.io < static_cast<int>(block_inputs.size()), "input {} io {}",
                    o.name, o.io);
        r = block_inputs[o.io];
        break;
      case OpClass::Output:
        r = in.at(0);
        break;
      case OpClass::Accum:
        switch (accum_kind(o.kind)) {
          case AccumKind::Sum:
            r = AbsExpr::sum(iters, in.at(0));
            break;
          case AccumKind::Max:
            r = AbsExpr::max_reduce(iters, in.at(0));
            break;
          case AccumKind::Rescale: {
            // sum_i v_i * exp(m_i - M), M = max_i m_i
            AbsExpr m = in.at(1);
            AbsExpr scale = AbsExpr::exp(AbsExpr::sub(m, AbsExpr::max_reduce(iters, m)));
            r = AbsExpr::sum(iters, AbsExpr::mul(in.at(0), scale));
            break;
          }
        }
        break;
      case OpClass::Fused: {
        KILN_ASSERT(o.thread != nullptr, "fused op {} without a thread graph", o.name);
        const ThreadGraph& tg = *o.thread;
        std::vector<AbsExpr> v = in;
        for (const ThreadOp& t : tg.ops) {
          std::vector<AbsExpr> a;
          for (int ref : t.inputs) a.push_back(v.at(ref));
          v.push_back(abstract_op(t.kind, t.attrs, a, {}));  // elementwise: no shapes needed
        }
        r = v.back();
        break;
      }
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Constant:
      case OpClass::Reduce:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
        r = abstract_op(o.kind, o.attrs, in, shapes);
        break;
    }
    e.push_back(r);
  }
  return e[op];
}

std::vector<AbsExpr> abstract_block(const BlockGraph& bg,
                                    const std::vector<AbsExpr>& block_inputs) {
  std::vector<AbsExpr> e;
  if (!bg.ops.empty())
    abstract_of_block_op(bg, static_cast<int>(bg.ops.size()) - 1, block_inputs, &e);
  return e;
}

std::vector<AbsExpr> abstract_block_outputs(const BlockGraph& bg,
                                            const std::vector<AbsExpr>& block_inputs) {
  std::vector<AbsExpr> e = abstract_block(bg, block_inputs);
  std::vector<AbsExpr> out(bg.outputs.size());
  for (size_t i = 0; i < bg.ops.size(); ++i)
    if (bg.ops[i].kind == OpKind::Output) {
      KILN_ASSERT(bg.ops[i].io >= 0 && bg.ops[i].io < static_cast<int>(out.size()),
                  "saver {} io {}", bg.ops[i].name, bg.ops[i].io);
      out[bg.ops[i].io] = e[i];
    }
  for (size_t j = 0; j < out.size(); ++j)
    KILN_ASSERT(!out[j].null(), "block output {} has no saver", bg.outputs[j].name);
  return out;
}

}  // namespace kiln::search
