// The e-graph (egraph.h): hash-consing, union-find, deferred rebuild, explanations.
#include "kiln/algebra/egraph.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>

#include <fmt/format.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::algebra {

namespace {

void mix(size_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
}
uint64_t bits(double d) {
  uint64_t u;
  static_assert(sizeof u == sizeof d);
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// Only the attrs an op accepts take part in its identity (the others keep their defaults).
Attrs accepted_attrs(OpKind kind, const Attrs& a) {
  const uint16_t acc = op_info(kind).attrs;
  Attrs r;
  if (acc & kAttrDim) r.dim = a.dim;
  if (acc & kAttrKeepdim) r.keepdim = a.keepdim;
  if (acc & kAttrPerm) r.perm = a.perm;
  if (acc & kAttrValue) r.value = a.value;
  if (acc & kAttrEps) r.eps = a.eps;
  if (acc & kAttrApproximate) r.approximate = a.approximate;
  if (acc & kAttrNegativeSlope) r.negative_slope = a.negative_slope;
  if (acc & kAttrMin) r.min = a.min;
  if (acc & kAttrMax) r.max = a.max;
  r.count = a.count;
  return r;
}

}  // namespace

size_t ENodeHash::operator()(const ENode& n) const {
  size_t h = static_cast<size_t>(n.kind) * 131 + static_cast<size_t>(n.dtype);
  mix(h, static_cast<uint64_t>(n.leaf));
  for (ClassId k : n.kids) mix(h, k);
  const Attrs& a = n.attrs;
  mix(h, static_cast<uint64_t>(a.dim));
  mix(h, a.keepdim);
  for (int p : a.perm) mix(h, static_cast<uint64_t>(p));
  mix(h, bits(a.value));
  mix(h, bits(a.eps));
  mix(h, static_cast<uint64_t>(a.approximate));
  mix(h, bits(a.negative_slope));
  mix(h, a.min ? bits(*a.min) : 1);
  mix(h, a.max ? bits(*a.max) : 2);
  mix(h, static_cast<uint64_t>(a.count));
  return h;
}

ClassId EGraph::find(ClassId id) const {
  while (parent_[id] != id) id = parent_[id] = parent_[parent_[id]];
  return id;
}

ENode EGraph::canonical(ENode n) const {
  for (ClassId& k : n.kids) k = find(k);
  return n;
}

ClassId EGraph::new_class(ENode n, Shape shape, const std::string& why, std::string name) {
  const ClassId id = static_cast<ClassId>(parent_.size());
  parent_.push_back(id);
  created_.push_back(n);
  created_why_.push_back(why);
  created_name_.push_back(std::move(name));
  proof_.emplace_back();
  EClass& c = classes_[id];
  c.shape = std::move(shape);
  c.dtype = n.dtype;
  for (ClassId k : n.kids) classes_.at(k).parents.emplace_back(n, id);
  c.nodes.push_back(n);
  c.origin.push_back(id);
  memo_.emplace(std::move(n), id);
  return id;
}

ClassId EGraph::add_input(int64_t index, Shape shape, DType dtype, std::string name) {
  ENode n;
  n.kind = OpKind::Input;
  n.dtype = dtype;
  n.leaf = index;
  if (auto c = lookup(n)) return *c;
  return new_class(std::move(n), std::move(shape), "spec", std::move(name));
}

ClassId EGraph::add(ENode n, const std::string& why, std::string name) {
  KILN_ASSERT(n.kind != OpKind::Input, "inputs are added by add_input");
  n = canonical(std::move(n));
  n.attrs = accepted_attrs(n.kind, n.attrs);
  std::vector<Shape> shapes;
  for (ClassId k : n.kids) {
    KILN_ASSERT(k < parent_.size(), "e-node child {} out of range", k);
    shapes.push_back(classes_.at(k).shape);
  }
  Shape shape = infer_op_shape(n.kind, shapes, n.attrs);  // throws on a bad right side
  if (auto it = memo_.find(n); it != memo_.end()) return find(it->second);
  return new_class(std::move(n), std::move(shape), why, std::move(name));
}

std::optional<ClassId> EGraph::lookup(ENode n) const {
  n = canonical(std::move(n));
  if (n.kind != OpKind::Input) n.attrs = accepted_attrs(n.kind, n.attrs);
  auto it = memo_.find(n);
  if (it == memo_.end()) return std::nullopt;
  return find(it->second);
}

bool EGraph::merge(ClassId a, ClassId b, const std::string& why) {
  ClassId ra = find(a), rb = find(b);
  if (ra == rb) return false;
  EClass& ca = classes_.at(ra);
  EClass& cb = classes_.at(rb);
  if (ca.dtype != cb.dtype) return false;
  KILN_ASSERT(ca.shape == cb.shape, "merging classes of shapes {} and {} ({})", shape_str(ca.shape),
              shape_str(cb.shape), why);
  proof_[a].push_back({b, why});
  proof_[b].push_back({a, why});
  // The smaller id stays the root, so the written graph's classes keep their ids.
  if (rb < ra) std::swap(ra, rb);
  EClass& keep = classes_.at(ra);
  EClass gone = std::move(classes_.at(rb));
  classes_.erase(rb);
  parent_[rb] = ra;
  keep.nodes.insert(keep.nodes.end(), gone.nodes.begin(), gone.nodes.end());
  keep.origin.insert(keep.origin.end(), gone.origin.begin(), gone.origin.end());
  keep.parents.insert(keep.parents.end(), gone.parents.begin(), gone.parents.end());
  pending_.push_back(ra);
  return true;
}

size_t EGraph::rebuild() {
  size_t congruent = 0;
  while (!pending_.empty()) {
    std::set<ClassId> todo;
    for (ClassId c : pending_) todo.insert(find(c));
    pending_.clear();
    for (ClassId c : todo) {
      c = find(c);
      // Re-key the parents under their canonical forms; two parents that became equal are
      // congruent, and their classes merge (queued for the next round).
      std::vector<std::pair<ENode, ClassId>> parents = std::move(classes_.at(c).parents);
      std::unordered_map<ENode, ClassId, ENodeHash> seen;
      for (auto& [node, pc] : parents) {
        memo_.erase(node);
        ENode canon = canonical(node);
        auto [it, fresh] = seen.emplace(canon, find(pc));
        if (!fresh) {
          if (merge(it->second, pc, "congruence")) ++congruent;
          it->second = find(it->second);
        }
        memo_[canon] = find(pc);
      }
      std::vector<std::pair<ENode, ClassId>> kept;
      for (auto& [node, pc] : seen) kept.emplace_back(node, find(pc));
      std::sort(kept.begin(), kept.end(),
                [](const auto& x, const auto& y) { return x.second < y.second; });
      // The class may have been merged into another above: its parents go to the root.
      classes_.at(find(c)).parents.insert(classes_.at(find(c)).parents.end(), kept.begin(),
                                          kept.end());
    }
  }
  // Every class's nodes canonical and unique (the first origin of equal nodes kept).
  for (auto& [id, c] : classes_) {
    std::vector<ENode> nodes;
    std::vector<ClassId> origin;
    std::unordered_map<ENode, size_t, ENodeHash> at;
    for (size_t i = 0; i < c.nodes.size(); ++i) {
      ENode n = canonical(c.nodes[i]);
      auto [it, fresh] = at.emplace(n, nodes.size());
      if (fresh) {
        nodes.push_back(std::move(n));
        origin.push_back(c.origin[i]);
      } else {
        origin[it->second] = std::min(origin[it->second], c.origin[i]);
      }
    }
    c.nodes = std::move(nodes);
    c.origin = std::move(origin);
  }
  return congruent;
}

std::vector<ClassId> EGraph::class_ids() const {
  std::vector<ClassId> ids;
  ids.reserve(classes_.size());
  for (const auto& [id, c] : classes_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

size_t EGraph::num_nodes() const {
  size_t n = 0;
  for (const auto& [id, c] : classes_) n += c.nodes.size();
  return n;
}

size_t EGraph::num_classes() const {
  return classes_.size();
}

std::string EGraph::describe(ClassId id) const {
  const ENode& n = created_.at(id);
  if (n.kind == OpKind::Input)
    return created_name_[id].empty() ? fmt::format("input{}", n.leaf) : created_name_[id];
  if (n.kind == OpKind::Constant) return fmt::format("{:g}", n.attrs.value);
  std::string s = fmt::format("{}(", op_name(n.kind));
  for (size_t i = 0; i < n.kids.size(); ++i) s += fmt::format("{}#{}", i ? ", " : "", n.kids[i]);
  const OpInfo& info = op_info(n.kind);
  if (info.attrs & kAttrDim) s += fmt::format(", dim {}", n.attrs.dim);
  if (info.attrs & kAttrPerm) s += fmt::format(", perm {}", fmt::join(n.attrs.perm, ","));
  return s + ")";
}

std::vector<std::string> EGraph::explain(ClassId a, ClassId b) const {
  if (a == b || find(a) != find(b)) return {};
  // Breadth-first over the proof forest (a tree per class: every edge joined two classes).
  std::vector<int64_t> from(proof_.size(), -1);
  std::vector<const Edge*> via(proof_.size(), nullptr);
  std::deque<ClassId> q{a};
  from[a] = a;
  while (!q.empty() && from[b] < 0) {
    ClassId x = q.front();
    q.pop_front();
    for (const Edge& e : proof_[x])
      if (from[e.to] < 0) {
        from[e.to] = x;
        via[e.to] = &e;
        q.push_back(e.to);
      }
  }
  KILN_ASSERT(from[b] >= 0, "classes {} and {} are one but the proof forest has no path", a, b);
  std::vector<std::string> steps;
  for (ClassId x = b; x != a; x = static_cast<ClassId>(from[x]))
    steps.push_back(fmt::format("#{} {} = #{} {}  [{}]", from[x],
                                describe(static_cast<ClassId>(from[x])), x, describe(x),
                                via[x]->why));
  std::reverse(steps.begin(), steps.end());
  return steps;
}

}  // namespace kiln::algebra
