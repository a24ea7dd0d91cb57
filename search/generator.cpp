// The candidate generator: spec expansion, labels, variants, partitions, schedules, lowering of
// a group to a block graph, and assembly of a μGraph.
#include "kiln/search/generator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "kiln/algebra/algebra.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/hash.h"

namespace kiln::search {

namespace {

bool is_elementwise(OpKind k) {
  OpClass c = op_info(k).cls;
  return c == OpClass::Unary || c == OpClass::Binary || c == OpClass::Constant;
}

bool is_reduce(OpKind k) {
  return op_info(k).cls == OpClass::Reduce;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  std::sort(d.begin(), d.end());
  return d;
}

// Adds a node, inferring shape and dtype with the kernel-level rules.
int add_node(PGraph& g, OpKind kind, std::vector<int> inputs, Attrs attrs, std::string name) {
  PNode n;
  n.kind = kind;
  n.inputs = std::move(inputs);
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<bool> is_const;
  for (int i : n.inputs) {
    shapes.push_back(g.nodes[i].shape);
    dtypes.push_back(g.nodes[i].dtype);
    is_const.push_back(g.nodes[i].kind == OpKind::Constant);
  }
  n.shape = infer_op_shape(kind, shapes, attrs);
  n.attrs = std::move(attrs);
  n.dtype = kind == OpKind::Constant ? DType::F32 : infer_op_dtype(kind, dtypes, is_const);
  n.name = std::move(name);
  g.nodes.push_back(std::move(n));
  return static_cast<int>(g.nodes.size()) - 1;
}

int add_const(PGraph& g, double v, const std::string& name) {
  Attrs a;
  a.value = v;
  return add_node(g, OpKind::Constant, {}, a, name);
}

// x * (1/n) when 1/n is exact in binary, else x / n (the verifier maps constants exactly).
int scale_by_inverse(PGraph& g, int x, int64_t n, const std::string& name) {
  bool pow2 = n > 0 && (n & (n - 1)) == 0;
  if (pow2)
    return add_node(g, OpKind::Mul, {x, add_const(g, 1.0 / double(n), name + "_inv")}, {}, name);
  return add_node(g, OpKind::Div, {x, add_const(g, double(n), name + "_n")}, {}, name);
}

// Removes nodes that no output depends on (inputs stay), renumbering.
void remove_dead(PGraph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (int i : g.inputs) live[i] = true;
  std::vector<int> stack(g.outputs.begin(), g.outputs.end());
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (live[n] && g.nodes[n].kind != OpKind::Input) continue;
    live[n] = true;
    for (int i : g.nodes[n].inputs)
      if (!live[i]) stack.push_back(i);
  }
  std::vector<int> remap(g.nodes.size(), -1);
  std::vector<PNode> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i]) {
      remap[i] = static_cast<int>(kept.size());
      kept.push_back(g.nodes[i]);
    }
  for (PNode& n : kept)
    for (int& i : n.inputs) i = remap[i];
  for (int& i : g.inputs) i = remap[i];
  for (int& i : g.outputs) i = remap[i];
  g.nodes = std::move(kept);
}

struct UnionFind {
  std::vector<int> p;
  int make() {
    p.push_back(static_cast<int>(p.size()));
    return static_cast<int>(p.size()) - 1;
  }
  int find(int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
  }
  void unite(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) p[std::max(a, b)] = std::min(a, b);
  }
};

}  // namespace

int PGraph::reduced_label(int n) const {
  const PNode& x = nodes[n];
  if (is_reduce(x.kind)) return labels[x.inputs[0]][x.attrs.dim];
  if (x.kind == OpKind::MatMul) {
    const Shape& a = nodes[x.inputs[0]].shape;
    return labels[x.inputs[0]][a.size() - 1];
  }
  return -1;
}

namespace {
// exp(a - max(a)), as store_unbounded_intermediates tells it: in (0, 1].
// A split variant's max is a combine over partial maxes of x: look through combines.
bool is_shifted_exp(const PGraph& g, const PNode& x) {
  if (x.kind != OpKind::Exp) return false;
  const PNode& d = g.nodes[x.inputs[0]];
  if (d.kind != OpKind::Sub) return false;
  int m = d.inputs[1];
  while (g.nodes[m].combine && !g.nodes[m].inputs.empty()) m = g.nodes[m].inputs[0];
  return g.nodes[m].kind == OpKind::Max && g.nodes[m].inputs[0] == d.inputs[0];
}
}  // namespace

int overflowing_exp(const PGraph& g, const std::vector<Magnitude>& mags) {
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const PNode& x = g.nodes[n];
    if (x.kind == OpKind::Exp && !is_shifted_exp(g, x) && exp_overflows(mags[x.inputs[0]]))
      return static_cast<int>(n);
  }
  return -1;
}

std::vector<std::string> range_hints(const KernelGraph& spec) {
  const PGraph g = expand_spec(spec);
  const std::vector<Magnitude> mags = node_magnitudes(g);
  std::vector<std::string> hints;
  auto name = [&](int n) {
    return g.nodes[n].name.empty() ? fmt::format("node {}", n) : g.nodes[n].name;
  };
  for (int o : g.outputs) {
    const PNode& x = g.nodes[o];
    // An unshifted exp's magnitude is unknown (magnitude.h); its argument's bound says enough.
    if (x.kind == OpKind::Exp && !is_shifted_exp(g, x) && x.dtype == DType::F16) {
      const Magnitude& arg = mags[x.inputs[0]];
      if (arg.known && arg.bound > std::log(65504.0))
        hints.push_back(fmt::format(
            "output {} is f16 and the exp of values that reach about {:.3g} at std-1 inputs: "
            "e^{:.3g} is past f16's largest value (65504), so no kernel can be right there; "
            "make the inputs f32 or bf16, or subtract a max (softmax) first",
            name(o), arg.bound, arg.bound));
      continue;
    }
    if (!magnitude_overflows(mags[o], x.dtype)) continue;
    hints.push_back(fmt::format(
        "output {} is {}, and at std-1 inputs its values reach about {:.2g} (rms {:.2g}), past "
        "f16's largest value (65504): its float64 reference does not fit the output's dtype, so "
        "no kernel can be right there; make the inputs it is computed from f32 or bf16, or "
        "scale them down",
        name(o), dtype_name(x.dtype), mags[o].bound, mags[o].rms));
  }
  if (const int e = overflowing_exp(g, mags); e >= 0)
    hints.push_back(fmt::format(
        "exp at {} may see arguments up to about {:.3g} at std-1 inputs, past f32's exp range "
        "(88.7), and the spec subtracts no max from them: a softmax (or a max subtracted before "
        "the exp) keeps such a spec finite",
        name(e), mags[g.nodes[e].inputs[0]].bound));
  return hints;
}

std::vector<Magnitude> node_magnitudes(const PGraph& g) {
  std::vector<Magnitude> mag(g.nodes.size(), Magnitude::input());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const PNode& x = g.nodes[n];
    if (x.kind == OpKind::Input) continue;
    std::vector<Magnitude> ins;
    for (int i : x.inputs) ins.push_back(mag[i]);
    int64_t reduced =
        x.inputs.empty() ? 1 : magnitude_extent(x.kind, g.nodes[x.inputs[0]].shape, x.shape);
    // A split partial matmul sums its share of k (a partial reduction's output shape has it).
    if (x.kind == OpKind::MatMul && x.split > 0) reduced = (reduced + x.split - 1) / x.split;
    mag[n] = op_magnitude(x.kind, x.attrs, ins, reduced,
                          x.inputs.size() == 2 && x.inputs[0] == x.inputs[1], is_shifted_exp(g, x));
  }
  return mag;
}

void assign_labels(PGraph& g) {
  UnionFind uf;
  std::vector<std::vector<int>> slot(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (size_t d = 0; d < g.nodes[n].shape.size(); ++d) slot[n].push_back(uf.make());
  int first_split = -1;
  auto unite_aligned = [&](int out, int in, size_t out_off) {
    // Aligns `in`'s dims with out's dims [out_off, ...) from the right, skipping broadcasts.
    const Shape& os = g.nodes[out].shape;
    const Shape& is = g.nodes[in].shape;
    size_t orank = os.size() - out_off;
    for (size_t j = 0; j < is.size() && j < orank; ++j) {
      size_t id = is.size() - 1 - j, od = os.size() - 1 - j;
      if (is[id] == os[od] && is[id] > 1) uf.unite(slot[in][id], slot[out][od]);
    }
  };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const PNode& x = g.nodes[n];
    size_t off = x.split > 0 ? 1 : 0;  // a partial's leading dim is the split dim
    if (x.split > 0) {
      if (first_split < 0)
        first_split = static_cast<int>(n);
      else
        uf.unite(slot[n][0], slot[first_split][0]);
    }
    switch (op_info(x.kind).cls) {
      case OpClass::Unary:
      case OpClass::Binary:
        for (int i : x.inputs) unite_aligned(static_cast<int>(n), i, 0);
        break;
      case OpClass::Transpose:
        for (size_t d = 0; d < x.shape.size(); ++d)
          uf.unite(slot[n][d], slot[x.inputs[0]][x.attrs.perm[d]]);
        break;
      case OpClass::Reduce: {
        int in = x.inputs[0];
        size_t r = g.nodes[in].shape.size();
        for (size_t d = 0, o = off; d < r; ++d) {
          if (static_cast<int64_t>(d) == x.attrs.dim) {
            if (x.attrs.keepdim) ++o;
            continue;
          }
          uf.unite(slot[in][d], slot[n][o++]);
        }
        break;
      }
      case OpClass::Matmul: {
        int a = x.inputs[0], b = x.inputs[1];
        const Shape &as = g.nodes[a].shape, &bs = g.nodes[b].shape;
        size_t r = x.shape.size();
        uf.unite(slot[a][as.size() - 2], slot[n][r - 2]);
        uf.unite(slot[b][bs.size() - 1], slot[n][r - 1]);
        uf.unite(slot[a][as.size() - 1], slot[b][bs.size() - 2]);
        // Batch dims, aligned from the right of the batch part.
        for (int in : {a, b}) {
          const Shape& s = g.nodes[in].shape;
          size_t nb = s.size() - 2, ob = r - 2 - off;
          for (size_t j = 0; j < nb && j < ob; ++j) {
            size_t id = nb - 1 - j, od = off + ob - 1 - j;
            if (s[id] == x.shape[od] && s[id] > 1) uf.unite(slot[in][id], slot[n][od]);
          }
        }
        break;
      }
      case OpClass::Constant:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        break;
    }
  }
  // Number the labels by first appearance; extent-1 dims get -1.
  std::map<int, int> number;
  g.labels.assign(g.nodes.size(), {});
  g.label_extent.clear();
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (size_t d = 0; d < g.nodes[n].shape.size(); ++d) {
      int64_t e = g.nodes[n].shape[d];
      if (e <= 1) {
        g.labels[n].push_back(-1);
        continue;
      }
      int root = uf.find(slot[n][d]);
      auto it = number.find(root);
      if (it == number.end()) {
        it = number.emplace(root, static_cast<int>(g.label_extent.size())).first;
        g.label_extent.push_back(e);
      }
      g.labels[n].push_back(it->second);
    }
  g.label_ambiguous.assign(g.label_extent.size(), false);
  for (const std::vector<int>& ls : g.labels) {
    std::set<int> seen;
    for (int l : ls)
      if (l >= 0 && !seen.insert(l).second) g.label_ambiguous[l] = true;
  }
  g.split_label = -1;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].split > 0) {
      g.split_label = g.reduced_label(static_cast<int>(n));
      g.split_parts = g.nodes[n].split;
      break;
    }
}

PGraph expand_spec(const KernelGraph& spec) {
  PGraph g;
  g.name = spec.name;
  g.doc = spec.doc;
  std::vector<int> node_of(spec.tensors.size(), -1);
  for (int t : spec.inputs) {
    PNode n;
    n.kind = OpKind::Input;
    n.shape = spec.tensor(t).shape;
    n.dtype = spec.tensor(t).dtype;
    n.name = spec.tensor(t).name;
    g.nodes.push_back(n);
    node_of[t] = static_cast<int>(g.nodes.size()) - 1;
    g.inputs.push_back(node_of[t]);
  }
  for (const KernelOp& op : spec.ops) {
    KILN_ASSERT(op.kind != OpKind::GraphDefined, "expand_spec on a μGraph");
    std::vector<int> in;
    for (int t : op.inputs) in.push_back(node_of[t]);
    const std::string& nm = op.name;
    int out = -1;
    // Composite ops become their primitives; every other op is copied.
    if (op.kind == OpKind::Mean) {
      Attrs a = op.attrs;
      int64_t n = g.nodes[in[0]].shape[a.dim];
      int s = add_node(g, OpKind::Sum, in, a, nm + "_sum");
      out = scale_by_inverse(g, s, n, nm);
    } else if (op.kind == OpKind::Softmax) {
      Attrs r = op.attrs;
      r.keepdim = true;
      int mx = add_node(g, OpKind::Max, in, r, nm + "_max");
      int d = add_node(g, OpKind::Sub, {in[0], mx}, {}, nm + "_shift");
      int e = add_node(g, OpKind::Exp, {d}, {}, nm + "_exp");
      int s = add_node(g, OpKind::Sum, {e}, r, nm + "_sum");
      out = add_node(g, OpKind::Div, {e, s}, {}, nm);
    } else if (op.kind == OpKind::RmsNorm) {
      const Shape xs = g.nodes[in[0]].shape;
      Attrs r;
      r.dim = static_cast<int64_t>(xs.size()) - 1;
      r.keepdim = true;
      int sq = add_node(g, OpKind::Square, {in[0]}, {}, nm + "_sq");
      int s = add_node(g, OpKind::Sum, {sq}, r, nm + "_ss");
      int m = scale_by_inverse(g, s, xs.back(), nm + "_ms");
      int a =
          add_node(g, OpKind::Add, {m, add_const(g, op.attrs.eps, nm + "_eps")}, {}, nm + "_var");
      int rt = add_node(g, OpKind::Sqrt, {a}, {}, nm + "_rms");
      if (in.size() == 2) {
        int d = add_node(g, OpKind::Div, {in[0], rt}, {}, nm + "_norm");
        out = add_node(g, OpKind::Mul, {d, in[1]}, {}, nm);
      } else {
        out = add_node(g, OpKind::Div, {in[0], rt}, {}, nm);
      }
    } else {
      out = add_node(g, op.kind, in, op.attrs, nm);
    }
    node_of[op.outputs[0]] = out;
  }
  for (int t : spec.outputs) g.outputs.push_back(node_of[t]);
  // Intermediates an f32 output depends on are stored in f32, those of expanded ops included
  // (store_exact_intermediates, kernel_graph.h: the spec's values are exact, and a 16-bit
  // rounding is outside an f32 output's tolerance). Outputs keep their dtypes.
  {
    std::vector<bool> exact(g.nodes.size(), false), is_out(g.nodes.size(), false);
    for (int o : g.outputs) {
      is_out[o] = true;
      exact[o] = g.nodes[o].dtype == DType::F32;
    }
    for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i)
      if (exact[i])
        for (int in : g.nodes[i].inputs) exact[in] = true;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (exact[i] && !is_out[i] && g.nodes[i].kind != OpKind::Input &&
          g.nodes[i].kind != OpKind::Constant)
        g.nodes[i].dtype = DType::F32;
  }
  // The spec's function is its outputs: a node none of them depends on is not computed (left in,
  // it would fail the abstract-expression check of every variant, which prunes the whole search).
  remove_dead(g);
  assign_labels(g);
  return g;
}

PGraph primitive_graph(const KernelGraph& kg) {
  for (const KernelOp& op : kg.ops) {
    const OpClass cls = op_info(op.kind).cls;
    KILN_ASSERT(cls != OpClass::GraphDefined && cls != OpClass::Softmax &&
                    cls != OpClass::RmsNorm && op.kind != OpKind::Mean,
                "primitive_graph of {} ({}): not a primitive op", op.name, op_name(op.kind));
  }
  // The algebra pass's term graph is node for node a primitive graph without labels; every node
  // keeps the type the graph stores it in (the pass makes its new intermediates f32).
  const algebra::TermGraph t = algebra::term_graph(kg);
  PGraph g;
  g.name = t.name;
  g.doc = t.doc;
  for (const algebra::TermNode& x : t.nodes) {
    PNode n;
    n.kind = x.kind;
    n.inputs = x.inputs;
    n.attrs = x.attrs;
    n.shape = x.shape;
    n.dtype = x.dtype;
    n.name = x.name;
    g.nodes.push_back(std::move(n));
  }
  g.inputs = t.inputs;
  g.outputs = t.outputs;
  remove_dead(g);
  assign_labels(g);
  return g;
}

// ---------------------------------------------------------------------------------------------
// Variants.

namespace {

// A matmul whose left operand is x / r or x * r with r constant along the contracted dim:
// matmul(x op r, B) = matmul(x, B) op r.
bool hoistable(const PGraph& g, int n) {
  const PNode& m = g.nodes[n];
  if (m.kind != OpKind::MatMul || m.split > 0) return false;
  const PNode& d = g.nodes[m.inputs[0]];
  if (d.kind != OpKind::Div && d.kind != OpKind::Mul) return false;
  const PNode& x = g.nodes[d.inputs[0]];
  const PNode& r = g.nodes[d.inputs[1]];
  if (x.shape != d.shape || r.shape.empty() || r.shape.back() != 1) return false;
  Shape raw = m.shape;
  auto b = broadcast_shapes(raw, r.shape);
  return b && *b == m.shape;
}

PGraph hoist(const PGraph& g, int n) {
  PGraph h = g;
  PNode m = h.nodes[n];
  const PNode d = h.nodes[m.inputs[0]];
  // Insert the raw matmul at n and turn node n+1 (the old matmul) into the scale.
  PNode raw = m;
  raw.inputs = {d.inputs[0], m.inputs[1]};
  raw.name = m.name + "_raw";
  raw.dtype = h.nodes[d.inputs[0]].dtype;
  PNode scaled;
  scaled.kind = d.kind;
  scaled.inputs = {n, d.inputs[1]};
  scaled.shape = m.shape;
  scaled.dtype = m.dtype;
  scaled.name = m.name;
  h.nodes[n] = raw;
  h.nodes.insert(h.nodes.begin() + n + 1, scaled);
  for (size_t i = n + 2; i < h.nodes.size(); ++i)
    for (int& in : h.nodes[i].inputs)
      if (in >= n) ++in;  // node n's users now read the scale at n + 1
  for (int& o : h.outputs)
    if (o >= n) ++o;
  for (int& i : h.inputs)
    if (i > n) ++i;
  remove_dead(h);
  h.rewrites.push_back(fmt::format("hoist {} out of matmul {}", op_name(d.kind), m.name));
  assign_labels(h);
  return h;
}

// Splits every reduction over `label` into `parts` partials plus a combine.
PGraph split(const PGraph& g, int label, int64_t parts) {
  PGraph s;
  s.name = g.name;
  s.doc = g.doc;
  s.rewrites = g.rewrites;
  std::vector<int> remap(g.nodes.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    PNode x = g.nodes[n];
    for (int& i : x.inputs) i = remap[i];
    bool reduces = g.reduced_label(static_cast<int>(n)) == label;
    if (!reduces) {
      s.nodes.push_back(x);
      remap[n] = static_cast<int>(s.nodes.size()) - 1;
      continue;
    }
    PNode p = x;
    p.split = static_cast<int>(parts);
    p.shape.insert(p.shape.begin(), parts);
    p.name = x.name + "_part";
    s.nodes.push_back(p);
    int pid = static_cast<int>(s.nodes.size()) - 1;
    PNode c;
    c.kind = x.kind == OpKind::Max ? OpKind::Max : OpKind::Sum;
    c.inputs = {pid};
    c.attrs.dim = 0;
    c.attrs.keepdim = false;
    c.shape = x.shape;
    c.dtype = x.dtype;
    c.name = x.name;
    c.combine = true;
    s.nodes.push_back(c);
    remap[n] = static_cast<int>(s.nodes.size()) - 1;
  }
  for (int i : g.inputs) s.inputs.push_back(remap[i]);
  for (int o : g.outputs) s.outputs.push_back(remap[o]);
  s.rewrites.push_back(
      fmt::format("split label L{} (extent {}) {} ways", label, g.label_extent[label], parts));
  assign_labels(s);
  return s;
}

}  // namespace

namespace {
// Hoisting subsets and splits of one base graph (enumerate_variants).
std::vector<PGraph> enumerate_rewrites(const PGraph& base, const VariantOptions& opt);
}  // namespace

std::vector<PGraph> enumerate_variants(const std::vector<PGraph>& bases,
                                       const VariantOptions& opt) {
  // Round-robin over the bases (the first base's first variant stays first): a time-limited
  // search reaches every algebraic form's unsplit variants early instead of after all the first
  // base's splits (a softmax attention's only one-kernel form is a cancelled shift's).
  std::vector<std::vector<PGraph>> per_base;
  size_t longest = 0;
  for (size_t i = 0; i < bases.size(); ++i) {
    per_base.push_back(enumerate_rewrites(bases[i], opt));
    for (PGraph& v : per_base.back()) v.base = static_cast<int>(i);
    longest = std::max(longest, per_base.back().size());
  }
  std::vector<PGraph> out;
  for (size_t i = 0; i < longest; ++i)
    for (std::vector<PGraph>& v : per_base)
      if (i < v.size()) out.push_back(std::move(v[i]));
  return out;
}

std::vector<PGraph> enumerate_variants(const PGraph& base, const VariantOptions& opt) {
  return enumerate_variants(std::vector<PGraph>{base}, opt);
}

namespace {
std::vector<PGraph> enumerate_rewrites(const PGraph& base, const VariantOptions& opt) {
  // Hoisting subsets, applied one site at a time in node order (sites re-found after each).
  std::vector<PGraph> hoisted{base};
  if (opt.hoist_scales) {
    std::vector<std::string> sites;
    for (size_t n = 0; n < base.nodes.size(); ++n)
      if (hoistable(base, static_cast<int>(n))) sites.push_back(base.nodes[n].name);
    size_t k = std::min<size_t>(sites.size(), 4);
    for (uint32_t mask = 1; mask < (1u << k); ++mask) {
      PGraph h = base;
      for (size_t s = 0; s < k; ++s) {
        if (!(mask & (1u << s))) continue;
        for (size_t n = 0; n < h.nodes.size(); ++n)
          if (h.nodes[n].name == sites[s] && hoistable(h, static_cast<int>(n))) {
            h = hoist(h, static_cast<int>(n));
            break;
          }
      }
      hoisted.push_back(std::move(h));
    }
  }
  // Every subset's unsplit form first, then the splits of each: the search takes variants in list
  // order (one-kernel partitions first, then the rest: search.cpp), so under a time limit the
  // first ones are explored further. A hoist is what lets a one-kernel form exist at all (an
  // attention's P V with the division by the row sum after it), where a split only divides a
  // reduction.
  std::vector<PGraph> out(hoisted.begin(), hoisted.end());
  for (const PGraph& h : hoisted) {
    if (!opt.split) continue;
    std::set<int> reduced;
    for (size_t n = 0; n < h.nodes.size(); ++n) {
      int l = h.reduced_label(static_cast<int>(n));
      if (l >= 0 && !h.ambiguous(l)) reduced.insert(l);
    }
    for (int l : reduced)
      for (int64_t s : divisors(h.label_extent[l]))
        if (s >= 2 && s <= opt.max_split && h.label_extent[l] / s >= opt.min_split_tile)
          out.push_back(split(h, l, s));
  }
  return out;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Partitions.

std::vector<int> canonical_order(const PGraph& g) {
  // Kahn's algorithm; among ready nodes, non-combine nodes first, then by index, where an op that
  // reads only inputs and constants (a weight's transpose) takes the index of its first user: it
  // comes right before the work that needs it, so the contiguous groups below can put it in its
  // user's kernel. In source order a SwiGLU's transpose(W2) sat before the gate and up products
  // and every partition put it in their kernel (materializing W2^T there).
  size_t n = g.nodes.size();
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> users(n);
  for (size_t i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs) {
      ++indeg[i];
      users[in].push_back(static_cast<int>(i));
    }
  auto source = [&](int i) {
    return g.nodes[i].kind == OpKind::Input || g.nodes[i].kind == OpKind::Constant;
  };
  std::vector<int> rank(n);
  for (size_t i = 0; i < n; ++i) {
    rank[i] = static_cast<int>(i);
    if (source(static_cast<int>(i)) || g.nodes[i].inputs.empty() || users[i].empty()) continue;
    bool leaf = true;
    for (int in : g.nodes[i].inputs) leaf &= source(in);
    if (leaf) rank[i] = *std::min_element(users[i].begin(), users[i].end());
  }
  auto key = [&](int i) {
    return std::tuple<int, int, int>(g.nodes[i].combine ? 1 : 0, rank[i], i);
  };
  std::set<std::tuple<int, int, int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.insert(key(static_cast<int>(i)));
  std::vector<int> order;
  while (!ready.empty()) {
    int i = std::get<2>(*ready.begin());
    ready.erase(ready.begin());
    if (!source(i)) order.push_back(i);
    for (int u : users[i])
      if (--indeg[u] == 0) ready.insert(key(u));
  }
  return order;
}

std::vector<std::vector<size_t>> enumerate_partition_cuts(const PGraph& g,
                                                          const std::vector<int>& order,
                                                          int max_groups) {
  std::vector<std::vector<size_t>> out;
  const size_t n = order.size();
  if (n == 0 || max_groups < 1) return out;
  size_t cuts = n - 1;
  if (cuts > 20) cuts = 20;  // bounded: graphs this large are split at the first 20 gaps only
  // A partial and its combine must not share a group: positions of each such pair in `order`.
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> pos(g.nodes.size(), kNone);
  for (size_t i = 0; i < n; ++i) pos[order[i]] = i;
  std::vector<std::pair<size_t, size_t>> pairs;
  for (int x : order)
    if (g.nodes[x].combine && pos[g.nodes[x].inputs[0]] != kNone)
      pairs.push_back({pos[g.nodes[x].inputs[0]], pos[x]});
  for (uint64_t mask = 0; mask < (uint64_t(1) << cuts); ++mask) {
    if (std::popcount(mask) + 1 > max_groups) continue;
    std::vector<size_t> at;  // a cut at i: a new group starts at order[i]
    for (size_t c = 0; c < cuts; ++c)
      if ((mask >> c) & 1) at.push_back(c + 1);
    bool ok = true;
    for (auto [a, b] : pairs) {
      // Same group: no cut in (min, max].
      const size_t lo = std::min(a, b), hi = std::max(a, b);
      ok &=
          std::upper_bound(at.begin(), at.end(), lo) == std::upper_bound(at.begin(), at.end(), hi);
    }
    if (ok) out.push_back(std::move(at));
  }
  // Fewest kernels first: the search meets the fused candidates early.
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  return out;
}

Partition partition_at(const std::vector<int>& order, const std::vector<size_t>& cuts) {
  Partition p;
  p.groups.emplace_back();
  size_t next = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (next < cuts.size() && cuts[next] == i) {
      p.groups.emplace_back();
      ++next;
    }
    p.groups.back().push_back(order[i]);
  }
  return p;
}

std::vector<Partition> enumerate_partitions(const PGraph& g, int max_groups) {
  std::vector<int> order = canonical_order(g);
  std::vector<Partition> out;
  for (const auto& cuts : enumerate_partition_cuts(g, order, max_groups))
    out.push_back(partition_at(order, cuts));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Schedules.

std::string Schedule::str(const PGraph& g) const {
  std::vector<std::string> gs;
  for (const GridDim& d : grid)
    gs.push_back(fmt::format("L{}/{}{}", d.label, d.parts,
                             d.label == g.split_label && g.split_label >= 0 ? "(split)" : ""));
  std::string loop = loop_label >= 0 ? fmt::format("L{}x{}", loop_label, loop_range) : "none";
  return fmt::format("grid [{}] loop {} threads {}", fmt::join(gs, ", "), loop, block_threads);
}

GroupIO group_io(const PGraph& g, const std::vector<int>& group) {
  // One pass over the graph's edges (not one per group member): a 5,000-node chain asks this of
  // thousands of groups, and the per-member scan made it quadratic per call.
  const size_t n = g.nodes.size();
  std::vector<char> in(n, 0), seen(n, 0), read_outside(n, 0);
  for (int x : group) in[x] = 1;
  GroupIO io;
  for (int x : group)
    for (int i : g.nodes[x].inputs)
      if (!in[i] && !g.is_const(i) && !seen[i]) {
        seen[i] = 1;
        io.inputs.push_back(i);
      }
  for (int o : g.outputs) read_outside[o] = 1;
  for (size_t u = 0; u < n; ++u)
    if (!in[u])
      for (int i : g.nodes[u].inputs) read_outside[i] = 1;
  for (int x : group)
    if (read_outside[x]) io.outputs.push_back(x);
  return io;
}

namespace {

bool has_label(const PGraph& g, int n, int l) {
  const auto& ls = g.labels[n];
  return std::find(ls.begin(), ls.end(), l) != ls.end();
}

bool is_partial_group(const PGraph& g, const std::vector<int>& group) {
  return std::any_of(group.begin(), group.end(), [&](int x) { return g.nodes[x].split > 0; });
}

}  // namespace

std::vector<Schedule> enumerate_schedules(const PGraph& g, const std::vector<int>& group,
                                          const ScheduleOptions& opt) {
  GroupIO io = group_io(g, group);
  bool partial = is_partial_group(g, group);
  std::set<int> present, reduced;
  for (int x : group) {
    for (int l : g.labels[x])
      if (l >= 0) present.insert(l);
    for (int i : g.nodes[x].inputs)
      for (int l : g.labels[i])
        if (l >= 0) present.insert(l);
    int r = g.reduced_label(x);
    if (r >= 0) reduced.insert(r);
  }
  // Labels the grid may partition freely.
  std::vector<int> free;
  for (int l : present) {
    if (g.ambiguous(l) || reduced.count(l) || (partial && l == g.split_label)) continue;
    bool everywhere = std::all_of(io.outputs.begin(), io.outputs.end(),
                                  [&](int o) { return has_label(g, o, l); });
    if (everywhere) free.push_back(l);
  }
  std::vector<int> loopable;
  for (int l : present) {
    if (g.ambiguous(l)) continue;
    bool in_input =
        std::any_of(io.inputs.begin(), io.inputs.end(), [&](int i) { return has_label(g, i, l); });
    if (in_input) loopable.push_back(l);
  }
  std::vector<Schedule> out;
  // Where a group has more schedules than max_schedules (many divisors: 4032 keys have 42), the
  // first max_schedules in a niceness order are kept, not the first in enumeration order (which
  // cut a 16-group attention before its 16-way grid was reached). The enumeration runs to a
  // larger cap to have something to choose from.
  const int64_t gen_cap = int64_t(opt.max_schedules) * 8;
  int max_free = opt.max_grid_dims - (partial ? 1 : 0);
  // Choose subsets of `free` (in label order) with parts, recursively.
  std::vector<GridDim> cur;
  std::function<void(size_t, int64_t)> rec = [&](size_t idx, int64_t blocks) {
    if (static_cast<int64_t>(out.size()) >= gen_cap) return;
    if (idx == free.size()) {
      std::vector<GridDim> grid = cur;
      if (partial) grid.push_back({g.split_label, g.split_parts});
      auto parts_of = [&](int l) -> int64_t {
        for (const GridDim& d : grid)
          if (d.label == l) return d.parts;
        return 1;
      };
      std::vector<std::pair<int, int64_t>> loops{{-1, 1}};
      for (int l : loopable) {
        bool gridded = parts_of(l) > 1;
        if (gridded && !(partial && l == g.split_label)) continue;
        for (int64_t r : divisors(g.label_extent[l] / parts_of(l)))
          if (r > 1) loops.push_back({l, r});
      }
      for (auto [l, r] : loops)
        for (int t : opt.block_threads) {
          if (static_cast<int64_t>(out.size()) >= gen_cap) return;
          Schedule s;
          s.grid = grid;
          s.loop_label = l;
          s.loop_range = r;
          s.block_threads = t;
          out.push_back(std::move(s));
        }
      return;
    }
    rec(idx + 1, blocks);  // label idx not gridded
    if (static_cast<int>(cur.size()) >= max_free) return;
    int l = free[idx];
    for (int64_t p : divisors(g.label_extent[l])) {
      if (p < 2 || blocks * p > opt.max_blocks) continue;
      cur.push_back({l, p});
      rec(idx + 1, blocks * p);
      cur.pop_back();
    }
  };
  rec(0, partial ? g.split_parts : 1);
  if (static_cast<int>(out.size()) > opt.max_schedules) {
    // A tile extent is nice when it is 1 (one index per block: a batch dim), a multiple of 16
    // (tensor-core fragments, 16-byte vectors) or the label's whole extent; schedules with fewer
    // awkward tiles first, the enumeration order among equals.
    auto awkward = [&](const Schedule& sc) {
      int n = 0;
      auto tile = [&](int label, int64_t t) {
        n += !(t == 1 || t % 16 == 0 || t == g.label_extent[label]);
      };
      int64_t loop_parts = 1;
      for (const GridDim& d : sc.grid) {
        if (d.label == sc.loop_label) loop_parts = d.parts;
        if (d.label != sc.loop_label) tile(d.label, g.label_extent[d.label] / d.parts);
      }
      if (sc.loop_label >= 0)
        tile(sc.loop_label, g.label_extent[sc.loop_label] / loop_parts / sc.loop_range);
      return n;
    };
    std::vector<int> score(out.size());
    for (size_t i = 0; i < out.size(); ++i) score[i] = awkward(out[i]);
    std::vector<size_t> idx(out.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return score[a] < score[b]; });
    std::vector<Schedule> kept;
    kept.reserve(opt.max_schedules);
    for (int i = 0; i < opt.max_schedules; ++i) kept.push_back(std::move(out[idx[i]]));
    out = std::move(kept);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Lowering.

const char* lower_failure_name(LowerFailure f) {
  switch (f) {
    case LowerFailure::None:
      return "none";
    case LowerFailure::Stage:
      return "stage";
    case LowerFailure::Map:
      return "map";
    case LowerFailure::Resource:
      return "resource";
    case LowerFailure::Ops:
      return "ops";
  }
  return "?";
}

namespace {

// A block op before thread-level fusion.
struct LOp {
  OpKind kind;
  std::vector<int> in;
  Attrs attrs;
  std::string name;
  int io = -1;
  std::vector<int> imap, fmap;
};

struct LowerError {
  LowerFailure f;
  std::string msg;
};

struct Saver {
  int value;
  std::vector<int> omap, fmap;
  DType dtype;
  std::string name;
  int rank;
};

// Thread-level fusion and emission of an unfused op list through BlockGraphBuilder, checked by
// finish(target). Throws LowerError or UserError.
std::shared_ptr<const BlockGraph> emit_fused(const std::vector<int64_t>& grid, int block_threads,
                                             const std::vector<int64_t>& loop,
                                             const std::vector<TensorDesc>& descs,
                                             const std::vector<LOp>& ops,
                                             const std::vector<Saver>& savers, const Target& target,
                                             int max_block_ops);

// Maps a builder's UserError to a lowering failure.
LowerFailure failure_of(const UserError& e) {
  switch (e.code()) {
    case ErrorCode::Resource:
      return LowerFailure::Resource;
    case ErrorCode::Structure:
      return LowerFailure::Stage;
    default:
      return LowerFailure::Map;
  }
}

}  // namespace

Lowered lower_group(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                    const Target& target, int max_block_ops) {
  Lowered res;
  try {
    GroupIO io = group_io(g, group);
    bool partial = is_partial_group(g, group);
    auto grid_dim_of = [&](int l) {
      for (size_t i = 0; i < s.grid.size(); ++i)
        if (s.grid[i].label == l) return static_cast<int>(i);
      return -1;
    };
    auto dim_with = [&](int n, int l, size_t from = 0) {
      const auto& ls = g.labels[n];
      for (size_t d = from; d < ls.size(); ++d)
        if (ls[d] == l) return static_cast<int>(d);
      return -1;
    };
    std::vector<int64_t> grid, loop;
    for (const GridDim& d : s.grid) grid.push_back(d.parts);
    if (grid.empty()) grid.push_back(1);
    if (s.loop_label >= 0) loop.push_back(s.loop_range);
    std::vector<TensorDesc> descs;
    for (int i : io.inputs) descs.push_back({g.nodes[i].name, g.nodes[i].shape, g.device_dtype(i)});

    std::vector<LOp> ops;
    std::map<int, int> tile;  // node -> LOp index
    std::set<std::string> names;
    auto unique = [&](std::string n) {
      std::string base = n;
      for (int k = 2; !names.insert(n).second; ++k) n = fmt::format("{}_{}", base, k);
      return n;
    };
    auto push = [&](LOp op) {
      op.name = unique(op.name);
      ops.push_back(std::move(op));
      return static_cast<int>(ops.size()) - 1;
    };
    for (size_t k = 0; k < io.inputs.size(); ++k) {
      int n = io.inputs[k];
      LOp op{OpKind::Input, {}, {}, "in_" + g.nodes[n].name, static_cast<int>(k), {}, {}};
      for (const GridDim& d : s.grid) op.imap.push_back(dim_with(n, d.label));
      if (s.grid.empty()) op.imap.push_back(-1);
      if (s.loop_label >= 0) op.fmap.push_back(dim_with(n, s.loop_label));
      tile[n] = push(std::move(op));
    }
    // Constants used by the group.
    for (int x : group)
      for (int i : g.nodes[x].inputs)
        if (g.is_const(i) && !tile.count(i))
          tile[i] = push(LOp{OpKind::Constant, {}, g.nodes[i].attrs, g.nodes[i].name, -1, {}, {}});
    std::vector<bool> looped(ops.size(), false);  // whether an LOp's tile is loop-stage
    auto is_looped = [&](int li) { return li < static_cast<int>(looped.size()) && looped[li]; };
    auto mark = [&](int li, bool v) {
      if (static_cast<int>(looped.size()) <= li) looped.resize(li + 1, false);
      looped[li] = v;
    };
    for (size_t k = 0; k < io.inputs.size(); ++k) {
      int li = tile[io.inputs[k]];
      mark(li, std::any_of(ops[li].fmap.begin(), ops[li].fmap.end(), [](int d) { return d >= 0; }));
    }
    for (int x : group) {
      const PNode& n = g.nodes[x];
      std::vector<int> in;
      bool any_loop = false;
      for (int i : n.inputs) {
        in.push_back(tile.at(i));
        any_loop |= is_looped(tile.at(i));
      }
      int red = g.reduced_label(x);
      if (red >= 0 && grid_dim_of(red) >= 0 && !(n.split > 0 && red == g.split_label))
        throw LowerError{
            LowerFailure::Map,
            fmt::format("{} reduces over label L{}, which the grid partitions", n.name, red)};
      bool over_loop = red >= 0 && red == s.loop_label && any_loop;
      if (!over_loop) {
        int li = push(LOp{n.kind, in, n.attrs, n.name, -1, {}, {}});
        mark(li, any_loop);
        tile[x] = li;
        continue;
      }
      // A reduction over the loop label: a per-iteration partial, then an accumulator.
      int part;
      if (n.kind == OpKind::MatMul) {
        part = push(LOp{OpKind::MatMul, in, {}, n.name + "_it", -1, {}, {}});
      } else {
        Attrs a = n.attrs;
        a.keepdim = true;
        part = push(LOp{n.kind, in, a, n.name + "_it", -1, {}, {}});
      }
      mark(part, true);
      OpKind acc_kind = n.kind == OpKind::Max ? OpKind::AccumMax : OpKind::AccumSum;
      int acc = push(LOp{acc_kind, {part}, {}, n.name + "_acc", -1, {}, {}});
      mark(acc, false);
      if (is_reduce(n.kind) && !n.attrs.keepdim) {
        Attrs a = n.attrs;
        acc = push(LOp{n.kind, {acc}, a, n.name, -1, {}, {}});
        mark(acc, false);
      }
      tile[x] = acc;
    }
    // Savers.
    std::vector<Saver> savers;
    for (int o : io.outputs) {
      const PNode& n = g.nodes[o];
      Saver sv{tile.at(o), {}, {}, g.device_dtype(o), n.name, static_cast<int>(n.shape.size())};
      for (const GridDim& d : s.grid) {
        if (n.split > 0 && d.label == g.split_label)
          sv.omap.push_back(0);
        else
          sv.omap.push_back(dim_with(o, d.label, n.split > 0 ? 1 : 0));
      }
      if (s.grid.empty()) sv.omap.push_back(-1);
      if (s.loop_label >= 0)
        sv.fmap.push_back(is_looped(sv.value) ? dim_with(o, s.loop_label) : -1);
      savers.push_back(std::move(sv));
    }
    (void)partial;
    res.block = emit_fused(grid, s.block_threads, loop, descs, ops, savers, target, max_block_ops);
  } catch (const LowerError& e) {
    res.failure = e.f;
    res.message = e.msg;
  } catch (const UserError& e) {
    res.failure = failure_of(e);
    res.message = e.render();
  }
  return res;
}

namespace {

std::shared_ptr<const BlockGraph> emit_fused(const std::vector<int64_t>& grid, int block_threads,
                                             const std::vector<int64_t>& loop,
                                             const std::vector<TensorDesc>& descs,
                                             const std::vector<LOp>& ops,
                                             const std::vector<Saver>& savers, const Target& target,
                                             int max_block_ops) {
  // Thread-level fusion: single-use elementwise producers fold into their elementwise
  // consumer; constants fold into every elementwise consumer.
  size_t n_ops = ops.size();
  std::vector<std::vector<int>> users(n_ops);
  std::vector<int> saved(n_ops, 0);
  for (size_t i = 0; i < n_ops; ++i)
    for (int j : ops[i].in) users[j].push_back(static_cast<int>(i));
  for (const Saver& sv : savers) saved[sv.value]++;
  auto elementwise_nonconst_inputs = [&](int c) {
    for (int j : ops[c].in)
      if (ops[j].kind != OpKind::Constant) return true;
    return false;
  };
  std::vector<bool> absorbed(n_ops, false);
  for (size_t i = 0; i < n_ops; ++i) {
    if (!is_elementwise(ops[i].kind) || saved[i]) continue;
    if (ops[i].kind == OpKind::Constant) {
      bool ok = !users[i].empty();
      for (int u : users[i])
        ok &= is_elementwise(ops[u].kind) && ops[u].kind != OpKind::Constant &&
              elementwise_nonconst_inputs(u);
      absorbed[i] = ok;
    } else {
      absorbed[i] = users[i].size() == 1 && is_elementwise(ops[users[i][0]].kind);
    }
  }
  // The size of each fused tree, counted forwards (the trees are gathered recursively below;
  // a 70,000-op chain overflowed the stack before the builder could refuse it).
  std::vector<int64_t> tree_ops(n_ops, 1);
  for (size_t i = 0; i < n_ops; ++i) {
    for (int k : ops[i].in)
      if (absorbed[k]) tree_ops[i] += tree_ops[k];
    if (tree_ops[i] > kMaxThreadOps && !absorbed[i])
      throw LowerError{LowerFailure::Ops, fmt::format("a fused chain of {} thread ops (limit {})",
                                                      tree_ops[i], kMaxThreadOps)};
  }
  // Emission.
  BlockGraphBuilder bb(grid, block_threads, loop, descs);
  std::vector<int> emitted(n_ops, -1);
  int count = 0;
  for (size_t i = 0; i < n_ops; ++i) {
    const LOp& op = ops[i];
    if (op.kind == OpKind::Input) {
      emitted[i] = bb.input(op.io, op.imap, op.fmap, op.name);
      ++count;
      continue;
    }
    if (absorbed[i]) continue;
    if (!is_elementwise(op.kind) || op.kind == OpKind::Constant) {
      std::vector<int> in;
      for (int j : op.in) in.push_back(emitted[j]);
      emitted[i] = bb.op(op.kind, in, op.attrs, op.name);
      ++count;
      continue;
    }
    // An elementwise root: gather its tree of absorbed producers.
    std::vector<int> leaves;
    std::function<void(int)> collect = [&](int j) {
      for (int k : ops[j].in) {
        if (absorbed[k]) {
          if (ops[k].kind != OpKind::Constant) collect(k);
        } else if (std::find(leaves.begin(), leaves.end(), k) == leaves.end()) {
          leaves.push_back(k);
        }
      }
    };
    collect(static_cast<int>(i));
    bool tree = std::any_of(op.in.begin(), op.in.end(), [&](int k) { return absorbed[k]; });
    if (!tree) {
      std::vector<int> in;
      for (int j : op.in) in.push_back(emitted[j]);
      emitted[i] = bb.op(op.kind, in, op.attrs, op.name);
      ++count;
      continue;
    }
    ThreadGraph tg;
    tg.num_inputs = static_cast<int>(leaves.size());
    std::function<int(int)> build = [&](int j) -> int {
      ThreadOp t{ops[j].kind, {}, ops[j].attrs};
      for (int k : ops[j].in) {
        if (absorbed[k])
          t.inputs.push_back(build(k));
        else
          t.inputs.push_back(
              static_cast<int>(std::find(leaves.begin(), leaves.end(), k) - leaves.begin()));
      }
      tg.ops.push_back(std::move(t));
      return tg.num_inputs + static_cast<int>(tg.ops.size()) - 1;
    };
    build(static_cast<int>(i));
    std::vector<int> in;
    for (int k : leaves) in.push_back(emitted[k]);
    emitted[i] = bb.fused(std::move(tg), in, op.name);
    ++count;
  }
  for (const Saver& sv : savers) {
    bb.output(emitted[sv.value], sv.omap, sv.fmap, sv.dtype, sv.name, sv.rank, "save_" + sv.name);
    ++count;
  }
  if (count > max_block_ops)
    throw LowerError{LowerFailure::Ops,
                     fmt::format("{} block ops (limit {})", count, max_block_ops)};
  return std::make_shared<const BlockGraph>(std::move(bb).finish(target));
}

}  // namespace

Lowered fuse_block(const BlockGraph& bg, const Target& target, int max_block_ops) {
  Lowered res;
  try {
    std::vector<LOp> ops;
    std::vector<Saver> savers;
    std::vector<int> lop(bg.ops.size(), -1);
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& o = bg.ops[i];
      KILN_ASSERT(o.kind != OpKind::Fused, "fuse_block on a fused graph");
      if (o.kind == OpKind::Output) {
        const TensorDesc& t = bg.outputs[o.io];
        savers.push_back(Saver{lop[o.inputs[0]], o.imap, o.fmap, t.dtype, t.name,
                               static_cast<int>(t.shape.size())});
        continue;
      }
      LOp l{o.kind, {}, o.attrs, o.name, o.io, o.imap, o.fmap};
      for (int j : o.inputs) l.in.push_back(lop[j]);
      lop[i] = static_cast<int>(ops.size());
      ops.push_back(std::move(l));
    }
    res.block = emit_fused(bg.grid, bg.block_threads, bg.loop, bg.inputs, ops, savers, target,
                           max_block_ops);
  } catch (const LowerError& e) {
    res.failure = e.f;
    res.message = e.msg;
  } catch (const UserError& e) {
    res.failure = failure_of(e);
    res.message = e.render();
  }
  return res;
}

// ---------------------------------------------------------------------------------------------
// Assembly.

bool predefined_ok(const PGraph& g, int n) {
  const PNode& x = g.nodes[n];
  if (x.split > 0 || x.kind == OpKind::Input) return false;
  // The dtype rule over the inputs' node dtypes (spec_dts) and over their device dtypes (a
  // partial is f32 on the device). A node whose own dtype is not the spec rule's was widened to
  // f32 by expand_spec (it feeds an f32 output) and states it; any other node keeps the rule.
  std::vector<DType> spec_dts, dev_dts;
  std::vector<bool> is_const;
  for (int i : x.inputs) {
    spec_dts.push_back(g.nodes[i].dtype);
    dev_dts.push_back(g.device_dtype(i));
    is_const.push_back(g.is_const(i));
  }
  return x.dtype != infer_op_dtype(x.kind, spec_dts, is_const) ||
         infer_op_dtype(x.kind, dev_dts, is_const) == g.device_dtype(n);
}

KernelGraph assemble(const PGraph& g, const std::vector<KernelChoice>& kernels, Arch arch) {
  KernelGraphBuilder kb(g.name, g.doc, arch);
  std::map<int, int> tensor;  // node -> tensor id
  for (int i : g.inputs) tensor[i] = kb.input(g.nodes[i].name, g.nodes[i].shape, g.nodes[i].dtype);
  auto constant = [&](int c) {
    if (!tensor.count(c))
      tensor[c] = kb.op(OpKind::Constant, {}, g.nodes[c].attrs, g.nodes[c].name);
    return tensor[c];
  };
  int k = 0;
  for (const KernelChoice& kc : kernels) {
    if (!kc.block) {
      KILN_ASSERT(kc.group.size() == 1, "a predefined kernel has one op");
      int x = kc.group[0];
      const PNode& n = g.nodes[x];
      KILN_ASSERT(n.split == 0, "a partial reduction as a predefined op");
      std::vector<int> in;
      for (int i : n.inputs) in.push_back(g.is_const(i) ? constant(i) : tensor.at(i));
      tensor[x] = kb.op(n.kind, in, n.attrs, n.name, g.device_dtype(x));
      ++k;
      continue;
    }
    GroupIO io = group_io(g, kc.group);
    std::vector<int> in;
    for (int i : io.inputs) in.push_back(tensor.at(i));
    std::vector<int> outs =
        kb.graph_defined(kc.block, in, fmt::format("k{}_{}", k, g.nodes[kc.group.back()].name));
    KILN_ASSERT(outs.size() == io.outputs.size(), "kernel outputs");
    for (size_t i = 0; i < outs.size(); ++i) {
      // A saver whose maps do not rebuild its node's shape is a lowering bug; refusing it here
      // keeps a wrong-shaped graph output from reaching the verifier (which would reject the
      // whole run as a user error).
      const PNode& n = g.nodes[io.outputs[i]];
      const Shape& got = kb.peek().tensor(outs[i]).shape;
      if (got != n.shape)
        user_error(ErrorCode::Shape, "generator: kernel {} saves {} as {}, but {} is {}", k, n.name,
                   shape_str(got), n.name, shape_str(n.shape));
      tensor[io.outputs[i]] = outs[i];
    }
    ++k;
  }
  for (int o : g.outputs) kb.output(g.is_const(o) ? constant(o) : tensor.at(o));
  return std::move(kb).finish();
}

KernelGraph kernel_alone(const PGraph& g, const KernelChoice& kc, Arch arch) {
  GroupIO io = group_io(g, kc.group);
  KernelGraphBuilder kb("k", "", arch);
  std::map<int, int> t;
  for (int i : io.inputs) t[i] = kb.input(g.nodes[i].name, g.nodes[i].shape, g.device_dtype(i));
  if (kc.block) {
    std::vector<int> in;
    for (int i : io.inputs) in.push_back(t[i]);
    for (int o : kb.graph_defined(kc.block, in, "k")) kb.output(o);
  } else {
    const PNode& n = g.nodes[kc.group[0]];
    std::vector<int> in;
    for (int i : n.inputs)
      in.push_back(g.is_const(i) ? kb.op(OpKind::Constant, {}, g.nodes[i].attrs, g.nodes[i].name)
                                 : t[i]);
    kb.output(kb.op(n.kind, in, n.attrs, n.name, g.device_dtype(kc.group[0])));
  }
  return std::move(kb).finish();
}

namespace {

// Every attribute, so that graphs that differ only in eps, gelu's form, a slope or clamp bounds
// never share a fingerprint (and one is never dropped as the other's duplicate).
std::string attrs_key(const Attrs& a) {
  return fmt::format("{},{},{},{},{},{},{},{},{}", a.dim, a.keepdim, a.value,
                     fmt::join(a.perm, "."), a.eps, int(a.approximate), a.negative_slope,
                     a.min ? fmt::format("{}", *a.min) : "-",
                     a.max ? fmt::format("{}", *a.max) : "-");
}

}  // namespace

std::string fingerprint(const KernelGraph& g) {
  std::string s;
  for (int i : g.inputs)
    s += fmt::format("in{}{};", shape_str(g.tensor(i).shape), int(g.tensor(i).dtype));
  for (const KernelOp& op : g.ops) {
    s += fmt::format("op{}(", int(op.kind));
    for (int i : op.inputs) s += fmt::format("{},", i);
    s += fmt::format(")a{};", attrs_key(op.attrs));
    // The storage dtypes of what it writes (an intermediate kept in f32 or in f16 is another
    // kernel: the range rule tells them apart).
    for (int t : op.outputs) s += fmt::format("d{};", int(g.tensor(t).dtype));
    if (op.block) {
      const BlockGraph& b = *op.block;
      s += fmt::format("g[{}]t{}l[{}]", fmt::join(b.grid, ","), b.block_threads,
                       fmt::join(b.loop, ","));
      for (const BlockOp& o : b.ops) {
        s += fmt::format("b{}({})io{}i[{}]f[{}]a{}", int(o.kind), fmt::join(o.inputs, ","), o.io,
                         fmt::join(o.imap, ","), fmt::join(o.fmap, ","), attrs_key(o.attrs));
        if (o.thread)
          for (const ThreadOp& t : o.thread->ops)
            s +=
                fmt::format("t{}({}){}", int(t.kind), fmt::join(t.inputs, ","), attrs_key(t.attrs));
        s += ";";
      }
      for (const TensorDesc& t : b.outputs)
        s += fmt::format("o{}{};", shape_str(t.shape), int(t.dtype));
    }
  }
  for (int o : g.outputs) s += fmt::format("out{};", o);
  return hash_hex(s);
}

}  // namespace kiln::search
