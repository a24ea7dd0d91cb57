// Abstract expressions: what a tensor computes, with every index forgotten.
//
// The search prunes a partial μGraph when one of its tensors computes something that cannot be
// part of the spec (docs/pruning.md). To ask that question cheaply, every tensor, at kernel and
// at block level, gets an abstract expression over the spec's input tensors: `matmul(A, B)`
// becomes `sum(k, mul(A, B))`, a tile of A is just `A`, an accumulator over a loop of L
// iterations is `sum(L, ·)`. Expressions are hash-consed: each distinct expression is one
// interned node that lives for the rest of the process, so equality is pointer equality and
// hashing is free. Interning is thread-safe.
//
// The node kinds are input(name), const(value), add, mul, div, exp, sum(n, x) (x summed over n
// elements) and opaque(f, args) for every non-polynomial function (sqrt, sigmoid, tanh, gelu,
// relu, clamp, maximum, max-reduction, ...). Everything else is defined through these:
// sub(x, y) = add(x, mul(-1, y)), rsqrt(x) = div(1, sqrt(x)), silu(x) = mul(x, sigmoid(x)), ...
// (the table is in docs/pruning.md). Add and mul are binary as built here; n-ary add/mul nodes
// appear only in the canonical forms of prune.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/ir/kernel_graph.h"

namespace kiln::search {

enum class AbsKind : uint8_t { Input, Const, Add, Mul, Div, Exp, Sum, Opaque };
const char* abs_kind_name(AbsKind k);

// One interned node. Never built directly: use the AbsExpr factories.
struct AbsNode {
  AbsKind kind;
  uint32_t id;       // dense, in creation order; unique per node
  uint64_t hash;     // structural (independent of ids, so the same in every run)
  int64_t count;     // Sum: the number of summed elements; Opaque: the same for reductions, else 0
  double value;      // Const
  std::string name;  // Input: the tensor's name; Opaque: the function's name
  std::vector<const AbsNode*> args;  // Add/Mul: 2 or more; Div: 2; Exp/Sum: 1; Opaque: 1 or 2
  uint32_t depth = 1;                // 1 + the deepest argument's (recursive passes check it)
};

// A handle to an interned node (or null). Cheap to copy, compare and hash.
class AbsExpr {
 public:
  AbsExpr() = default;
  explicit AbsExpr(const AbsNode* n) : n_(n) {}

  // Factories. Each interns its node: building the same expression twice gives the same node.
  static AbsExpr input(const std::string& name);
  static AbsExpr constant(double value);
  // The one symbol that stands for every constant but 1 in prune.h's canonical forms ("κ").
  static AbsExpr any_constant();
  bool is_any_constant() const { return kind() == AbsKind::Const && value() != value(); }
  static AbsExpr add(AbsExpr a, AbsExpr b);
  static AbsExpr mul(AbsExpr a, AbsExpr b);
  static AbsExpr div(AbsExpr a, AbsExpr b);
  static AbsExpr exp(AbsExpr a);
  // sum(n, x): x summed over n elements, n >= 1.
  static AbsExpr sum(int64_t n, AbsExpr x);
  // An opaque function of one or two arguments; `count` > 0 marks a reduction over `count`
  // elements (the max-reduction is opaque("max", {x}, n)).
  static AbsExpr opaque(const std::string& fn, std::vector<AbsExpr> args, int64_t count = 0);
  // n-ary add/mul (2 or more args, kept in the given order), for canonical forms.
  static AbsExpr add_n(std::vector<AbsExpr> args);
  static AbsExpr mul_n(std::vector<AbsExpr> args);

  // Derived forms, all through the kinds above.
  static AbsExpr neg(AbsExpr a) { return mul(constant(-1), a); }
  static AbsExpr sub(AbsExpr a, AbsExpr b) { return add(a, neg(b)); }
  static AbsExpr square(AbsExpr a) { return mul(a, a); }
  static AbsExpr max_reduce(int64_t n, AbsExpr x) { return opaque("max", {x}, n); }

  bool null() const { return n_ == nullptr; }
  const AbsNode* node() const { return n_; }
  AbsKind kind() const { return n_->kind; }
  uint32_t id() const { return n_->id; }
  uint64_t hash() const { return n_->hash; }
  int64_t count() const { return n_->count; }
  double value() const { return n_->value; }
  const std::string& name() const { return n_->name; }
  size_t arity() const { return n_->args.size(); }
  uint32_t depth() const { return n_->depth; }
  AbsExpr arg(size_t i) const { return AbsExpr(n_->args.at(i)); }
  std::vector<AbsExpr> args() const;

  // Nodes in the DAG (each shared node once).
  size_t dag_size() const;
  // "sum(64, mul(X, W))"; constants print as numbers, the merged constant of prune.h as "κ".
  std::string str() const;

  bool operator==(const AbsExpr& o) const { return n_ == o.n_; }
  bool operator!=(const AbsExpr& o) const { return n_ != o.n_; }

 private:
  const AbsNode* n_ = nullptr;
};

// Test-friendly spellings: A * B, sum(k, A * B).
inline AbsExpr operator+(AbsExpr a, AbsExpr b) {
  return AbsExpr::add(a, b);
}
inline AbsExpr operator*(AbsExpr a, AbsExpr b) {
  return AbsExpr::mul(a, b);
}
inline AbsExpr operator/(AbsExpr a, AbsExpr b) {
  return AbsExpr::div(a, b);
}
inline AbsExpr operator-(AbsExpr a, AbsExpr b) {
  return AbsExpr::sub(a, b);
}

// A total order on expressions that depends only on structure (not on creation order).
bool structural_less(AbsExpr a, AbsExpr b);

// Number of nodes interned so far (all threads).
size_t abs_pool_size();

// ---------------------------------------------------------------------------------------------
// Translation of the IR.

// The abstract expression of one op of the vocabulary applied to operand expressions.
// `shapes` are the operands' shapes (kernel tensors or block tiles); reductions and matmul take
// their counts from them. Valid for every predefined op at kernel, block and thread level
// (not for graph_defined, input, output, accumulators or fused, which need their graph).
AbsExpr abstract_op(OpKind kind, const Attrs& attrs, const std::vector<AbsExpr>& operands,
                    const std::vector<Shape>& shapes);

// Every tensor of g (spec or μGraph), indexed by tensor id. Graph inputs are input(name).
std::vector<AbsExpr> abstract_tensors(const KernelGraph& g);
// One tensor of g.
AbsExpr abstract_of(const KernelGraph& g, int tensor_id);

// The expression of block op `op` of bg, given the expressions of bg's device inputs
// (bg.inputs). Incremental: `memo` (if given) holds the expressions of ops 0..memo->size()-1
// from earlier calls on the same (possibly since grown) graph and is extended up to `op`, so a
// generator that adds ops one at a time pays for each op once. For an Output op, the saved
// tile's expression.
//   input tile            -> the device tensor's expression
//   matmul of tiles        -> sum(t_k, mul(a, b)), t_k the tile's contraction extent
//   sum/mean/max over a tile dim of extent t -> sum(t, x) / div(sum(t, x), t) / max(t, x)
//   accum_sum(v)          -> sum(L, v), L = bg.num_iterations()
//   accum_max(v)          -> max(L, v)
//   accum_rescale(v, m)   -> sum(L, mul(v, exp(sub(m, max(L, m)))))
//   fused(thread graph)   -> its ops applied in order
AbsExpr abstract_of_block_op(const BlockGraph& bg, int op, const std::vector<AbsExpr>& block_inputs,
                             std::vector<AbsExpr>* memo = nullptr);
// Every op of bg (index = op index).
std::vector<AbsExpr> abstract_block(const BlockGraph& bg, const std::vector<AbsExpr>& block_inputs);
// The expressions of bg's device outputs (index = bg.outputs index): their savers' tiles.
std::vector<AbsExpr> abstract_block_outputs(const BlockGraph& bg,
                                            const std::vector<AbsExpr>& block_inputs);

}  // namespace kiln::search

template <>
struct std::hash<kiln::search::AbsExpr> {
  size_t operator()(const kiln::search::AbsExpr& e) const noexcept {
    return e.null() ? 0 : static_cast<size_t>(e.hash());
  }
};
