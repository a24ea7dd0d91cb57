// The e-graph of a kernel graph (issue 17): equality saturation over the spec's algebra.
//
// After egg (Willsey et al., POPL'21): e-nodes are hash-consed (an op over e-class ids, never
// two equal nodes), e-classes are sets of equal e-nodes joined by a union-find, and merging is
// deferred: merge() only unions and records the class for repair, rebuild() restores the
// congruence invariant (equal children make equal parents) by re-canonicalizing the parents of
// every merged class. Every union is recorded with its reason in a proof forest over the ids
// that add() handed out, so explain() can say why two terms are equal (the rules applied, and
// congruence steps).
//
// The language is the primitive graph's (the search's expansion of a spec: matmul, transpose,
// elementwise ops, constants, sum/max reductions; composite ops are expanded before this): an
// e-node is an op kind with its attrs, its children's classes, and the dtype its value is stored
// in, so the same computation stored in f16 and in f32 (store_exact_intermediates' twins) are
// two nodes. All nodes of a class share a dtype (merge refuses to join two dtypes) and a shape
// (a rule whose right side has another shape is a bug, asserted).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/ir/ops.h"
#include "kiln/ir/types.h"

namespace kiln::algebra {

using ClassId = uint32_t;

struct ENode {
  OpKind kind = OpKind::Input;
  DType dtype = DType::F32;  // the type the value is stored in
  Attrs attrs;               // normalized (infer_op_shape): dims non-negative, perm filled
  int64_t leaf = -1;         // Input: the graph input's index
  std::vector<ClassId> kids;
  bool operator==(const ENode&) const = default;
};
struct ENodeHash {
  size_t operator()(const ENode& n) const;
};

struct EClass {
  std::vector<ENode> nodes;
  std::vector<ClassId> origin;                     // per node: the id add() gave it when it was new
  std::vector<std::pair<ENode, ClassId>> parents;  // nodes that have this class as a child
  Shape shape;
  DType dtype = DType::F32;
};

class EGraph {
 public:
  // A graph input: a leaf of this shape and dtype.
  ClassId add_input(int64_t index, Shape shape, DType dtype, std::string name = {});
  // Adds n (its kids must be ids of this graph; they are canonicalized) and returns its class:
  // the existing one when an equal node exists. The shape is inferred (infer_op_shape, which
  // also normalizes the attrs) and a bad shape throws UserError, so a rule's right side that
  // does not type is refused, not built. `why` says where the node came from ("spec", a rule);
  // `name`, a tensor name the node had in the written graph.
  ClassId add(ENode n, const std::string& why, std::string name = {});
  // The canonical id of a class.
  ClassId find(ClassId id) const;
  // Unions two classes, to be repaired by rebuild(). False when they were already one, or when
  // their dtypes differ (a value stored in two types is two values here).
  bool merge(ClassId a, ClassId b, const std::string& why);
  // Restores the congruence invariant and deduplicates every class's nodes. Returns the number
  // of unions congruence made.
  size_t rebuild();

  const EClass& cls(ClassId id) const { return classes_.at(find(id)); }
  std::vector<ClassId> class_ids() const;  // canonical, ascending
  size_t num_nodes() const;                // e-nodes over all classes
  size_t num_classes() const;
  std::optional<ClassId> lookup(ENode n) const;  // the class holding n, if any

  // Why the node added as `id` exists ("spec" or a rule's name), and the tensor name it was
  // given (empty for a rule's nodes).
  const std::string& why(ClassId id) const { return created_why_.at(id); }
  const std::string& name(ClassId id) const { return created_name_.at(id); }
  // The node as add() created it (kids as ids of that time), in words: "matmul(#3, #7)".
  std::string describe(ClassId id) const;
  // The chain of unions that makes a and b equal, one line per step ("#4 matmul(#1, #3) = #9
  // matmul(#8, #2)  [matmul-assoc]"); empty when they are not equal (or are the same id).
  std::vector<std::string> explain(ClassId a, ClassId b) const;

 private:
  ENode canonical(ENode n) const;
  ClassId new_class(ENode n, Shape shape, const std::string& why, std::string name);

  mutable std::vector<ClassId> parent_;  // union-find (path halving in find)
  std::unordered_map<ClassId, EClass> classes_;
  std::unordered_map<ENode, ClassId, ENodeHash> memo_;
  std::vector<ClassId> pending_;
  // Per id: the node as created, why, its name; and the proof forest's edges.
  std::vector<ENode> created_;
  std::vector<std::string> created_why_, created_name_;
  struct Edge {
    ClassId to;
    std::string why;
  };
  std::vector<std::vector<Edge>> proof_;
};

}  // namespace kiln::algebra
