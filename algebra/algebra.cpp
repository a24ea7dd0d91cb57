// The algebra pass (algebra.h): load, saturate, extract.
#include "kiln/algebra/algebra.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/hash.h"

namespace kiln::algebra {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

const char* stop_name(Stop s) {
  switch (s) {
    case Stop::Saturated:
      return "saturated";
    case Stop::IterationLimit:
      return "iteration limit";
    case Stop::NodeLimit:
      return "node limit";
    case Stop::TimeLimit:
      return "time limit";
  }
  return "?";
}

TermGraph term_graph(const KernelGraph& g) {
  TermGraph t;
  t.name = g.name;
  t.doc = g.doc;
  std::vector<int> node_of(g.tensors.size(), -1);
  auto add = [&](TermNode n, int tensor) {
    t.nodes.push_back(std::move(n));
    node_of[tensor] = static_cast<int>(t.nodes.size()) - 1;
  };
  for (int i : g.inputs) {
    TermNode n;
    n.kind = OpKind::Input;
    n.shape = g.tensor(i).shape;
    n.dtype = g.tensor(i).dtype;
    n.name = g.tensor(i).name;
    add(std::move(n), i);
    t.inputs.push_back(node_of[i]);
  }
  for (const KernelOp& op : g.ops) {
    KILN_ASSERT(op.kind != OpKind::GraphDefined, "term_graph of a μGraph ({})", op.name);
    TermNode n;
    n.kind = op.kind;
    n.attrs = op.attrs;
    for (int i : op.inputs) n.inputs.push_back(node_of[i]);
    const TensorDesc& d = g.tensor(op.outputs[0]);
    n.shape = d.shape;
    n.dtype = d.dtype;
    n.name = d.name;
    add(std::move(n), op.outputs[0]);
  }
  for (int o : g.outputs) t.outputs.push_back(node_of[o]);
  return t;
}

KernelGraph to_kernel_graph(const TermGraph& g, Arch arch) {
  KernelGraphBuilder b(g.name, g.doc, arch);
  std::vector<int> tensor(g.nodes.size(), -1);
  for (int i : g.inputs) tensor[i] = b.input(g.nodes[i].name, g.nodes[i].shape, g.nodes[i].dtype);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const TermNode& x = g.nodes[n];
    if (x.kind == OpKind::Input) {
      KILN_ASSERT(tensor[n] >= 0, "input node {} is not a graph input", x.name);
      continue;
    }
    std::vector<int> in;
    for (int i : x.inputs) in.push_back(tensor[i]);
    tensor[n] = b.op(x.kind, std::move(in), x.attrs, x.name,
                     x.kind == OpKind::Constant ? std::nullopt : std::optional<DType>(x.dtype));
  }
  for (int o : g.outputs) b.output(tensor[o]);
  return std::move(b).finish();
}

SaturationReport saturate(EGraph& g, const Limits& lim, const std::vector<Rule>& rules) {
  const Clock::time_point start = Clock::now();
  const Deadline own = Deadline::in(lim.max_seconds);
  auto out_of_time = [&] { return own.passed() || lim.deadline.passed(); };
  SaturationReport rep;
  g.rebuild();
  const size_t max_nodes = std::max(lim.max_nodes, 2 * g.num_nodes());
  for (int it = 0;; ++it) {
    if (it >= lim.max_iterations) {
      rep.stop = Stop::IterationLimit;
      break;
    }
    if (g.num_nodes() >= max_nodes) {
      rep.stop = Stop::NodeLimit;
      break;
    }
    if (out_of_time()) {
      rep.stop = Stop::TimeLimit;
      break;
    }
    const Clock::time_point t0 = Clock::now();
    const size_t before = g.num_nodes();
    IterationStats s;
    // Search every node first, then apply (a rule sees the graph as the iteration found it).
    std::vector<Match> matches;
    for (ClassId c : g.class_ids())
      for (const ENode& n : g.cls(c).nodes)
        for (const Rule& r : rules) r.find(g, c, n, matches);
    s.matches = matches.size();
    bool cut = false;
    for (size_t i = 0; i < matches.size(); ++i) {
      if (g.num_nodes() >= max_nodes) {
        cut = true;
        break;
      }
      if ((i & 255) == 255 && out_of_time()) {
        cut = true;
        break;
      }
      if (apply_match(g, matches[i])) {
        ++s.applied;
        ++rep.applied[matches[i].rule];
      }
    }
    g.rebuild();
    s.nodes = g.num_nodes();
    s.classes = g.num_classes();
    s.seconds = since(t0);
    rep.iterations.push_back(s);
    if (!cut && s.applied == 0 && g.num_nodes() == before) {
      rep.stop = Stop::Saturated;
      break;
    }
  }
  rep.nodes = g.num_nodes();
  rep.classes = g.num_classes();
  rep.seconds = since(start);
  return rep;
}

double op_cost(OpKind kind, const Shape& out, DType out_dtype, const std::vector<Shape>& in,
               const std::vector<DType>& in_dtypes) {
  const OpClass cls = op_info(kind).cls;
  if (cls == OpClass::Input || cls == OpClass::Constant) return 0;
  double bytes = double(numel(out)) * dtype_bytes(out_dtype);
  bool narrow = true;
  for (size_t i = 0; i < in.size(); ++i) {
    bytes += double(numel(in[i])) * dtype_bytes(in_dtypes[i]);
    narrow &= in_dtypes[i] != DType::F32;
  }
  const double mem_us = bytes / 3.0e6;  // 3 TB/s
  switch (cls) {
    case OpClass::Matmul: {
      const double k = double(in[0].back());
      const double flops = 2.0 * double(numel(out)) * k;
      const double rate = narrow ? 600e6 : 50e6;  // flops per µs: tensor cores, or f32 FMA
      return std::max(mem_us, flops / rate) + 2.0;
    }
    case OpClass::Transpose:
      return 0.5 * mem_us + 0.5;
    case OpClass::Reduce:
      return mem_us + 1.0;
    default:
      return mem_us + 0.5;
  }
}

namespace {

double enode_cost(const EGraph& g, const ENode& n, ClassId c) {
  std::vector<Shape> in;
  std::vector<DType> dt;
  for (ClassId k : n.kids) {
    in.push_back(g.cls(k).shape);
    dt.push_back(g.cls(k).dtype);
  }
  return op_cost(n.kind, g.cls(c).shape, n.dtype, in, dt);
}

double graph_cost(const TermGraph& t) {
  double s = 0;
  for (const TermNode& n : t.nodes) {
    std::vector<Shape> in;
    std::vector<DType> dt;
    for (int i : n.inputs) {
      in.push_back(t.nodes[i].shape);
      dt.push_back(t.nodes[i].dtype);
    }
    s += op_cost(n.kind, n.shape, n.dtype, in, dt);
  }
  return s;
}

// Extraction: the cheapest node of every class (tree cost, to a fixed point: the graph may have
// cycles, which never win since every op costs more than its operands), then graphs built from a
// choice per class.
class Extractor {
 public:
  Extractor(const EGraph& g, const TermGraph& written, const std::vector<ClassId>& input_class,
            const std::vector<ClassId>& roots)
      : g_(g), written_(written), input_class_(input_class), roots_(roots) {
    for (const TermNode& n : written.nodes) names_.insert(n.name);
    ids_ = g.class_ids();
    for (ClassId c : ids_) cost_[c] = kInf;
    for (bool changed = true; changed;) {
      changed = false;
      for (ClassId c : ids_) {
        const EClass& e = g.cls(c);
        for (size_t i = 0; i < e.nodes.size(); ++i) {
          double v = enode_cost(g, e.nodes[i], c);
          for (ClassId k : e.nodes[i].kids) v += cost_[g.find(k)];
          if (v < cost_[c] * (1 - 1e-12) - 1e-12) {
            cost_[c] = v;
            best_[c] = i;
            changed = true;
          }
        }
      }
    }
  }

  // The graph of the best choices with `override` (class -> node index); nullopt when it has a
  // cycle, an output that is an input or two outputs that are one class.
  std::optional<Extracted> build(const std::unordered_map<ClassId, size_t>& override) const {
    Extracted x;
    TermGraph& t = x.graph;
    t.name = written_.name;
    t.doc = written_.doc;
    std::unordered_map<ClassId, int> node_of;
    std::set<ClassId> on_stack;
    // Output classes are named as the written outputs.
    std::unordered_map<ClassId, std::string> name_of;
    for (size_t i = 0; i < roots_.size(); ++i) {
      ClassId r = g_.find(roots_[i]);
      if (!name_of.emplace(r, written_.nodes[written_.outputs[i]].name).second) return std::nullopt;
    }
    std::set<std::string> used;
    for (const auto& [c, nm] : name_of) used.insert(nm);
    for (size_t i = 0; i < input_class_.size(); ++i) {
      const TermNode& in = written_.nodes[written_.inputs[i]];
      const ClassId c = g_.find(input_class_[i]);
      if (name_of.count(c)) return std::nullopt;  // an output became an input
      TermNode n = in;
      n.inputs.clear();
      t.nodes.push_back(n);
      t.inputs.push_back(static_cast<int>(t.nodes.size()) - 1);
      node_of.emplace(c, t.inputs.back());
      used.insert(in.name);
    }
    bool ok = true;
    std::vector<std::pair<std::string, std::string>> made;  // rule, node name
    std::function<int(ClassId)> visit = [&](ClassId c) -> int {
      c = g_.find(c);
      if (auto it = node_of.find(c); it != node_of.end()) return it->second;
      if (!on_stack.insert(c).second || cost_.at(c) == kInf) {
        ok = false;
        return 0;
      }
      const EClass& e = g_.cls(c);
      auto ov = override.find(c);
      const size_t pick = ov != override.end() ? ov->second : best_.at(c);
      const ENode& n = e.nodes[pick];
      if (n.kind == OpKind::Input) {  // an input class not among the written inputs: a bug
        ok = false;
        return 0;
      }
      TermNode tn;
      tn.kind = n.kind;
      tn.attrs = n.attrs;
      tn.shape = e.shape;
      tn.dtype = n.dtype;
      for (ClassId k : n.kids) {
        tn.inputs.push_back(visit(k));
        if (!ok) return 0;
      }
      on_stack.erase(c);
      tn.name = class_name(c, name_of, used);
      const std::string& why = g_.why(e.origin[pick]);
      if (why != "spec") made.emplace_back(why, tn.name);
      t.nodes.push_back(std::move(tn));
      node_of.emplace(c, static_cast<int>(t.nodes.size()) - 1);
      return static_cast<int>(t.nodes.size()) - 1;
    };
    for (ClassId r : roots_) {
      int id = visit(r);
      if (!ok) return std::nullopt;
      t.outputs.push_back(id);
    }
    // "rule at A, B": the nodes each rule made, rules in order of first use.
    for (size_t i = 0; i < made.size(); ++i) {
      bool first = true;
      for (size_t j = 0; j < i; ++j) first &= made[j].first != made[i].first;
      if (!first) continue;
      std::vector<std::string> at;
      for (const auto& [rule, nm] : made)
        if (rule == made[i].first) at.push_back(nm);
      x.rewrites.push_back(fmt::format("{} at {}", made[i].first, fmt::join(at, ", ")));
      x.rules.push_back(made[i].first);
    }
    std::sort(x.rules.begin(), x.rules.end());
    x.cost_us = graph_cost(t);
    return x;
  }

  // Every class the best graph uses, with each node it could take instead.
  std::vector<std::pair<ClassId, size_t>> alternatives() const {
    std::vector<std::pair<ClassId, size_t>> alt;
    std::set<ClassId> seen;
    std::vector<ClassId> stack(roots_.begin(), roots_.end());
    while (!stack.empty()) {
      ClassId c = g_.find(stack.back());
      stack.pop_back();
      if (!seen.insert(c).second || cost_.at(c) == kInf) continue;
      const EClass& e = g_.cls(c);
      for (size_t i = 0; i < e.nodes.size(); ++i)
        if (i != best_.at(c) && e.nodes[i].kind != OpKind::Input) alt.emplace_back(c, i);
      for (ClassId k : e.nodes[best_.at(c)].kids) stack.push_back(k);
    }
    return alt;
  }

 private:
  std::string class_name(ClassId c, const std::unordered_map<ClassId, std::string>& name_of,
                         std::set<std::string>& used) const {
    if (auto it = name_of.find(c); it != name_of.end()) return it->second;
    // The written name of a node of the class (the first), else a fresh one.
    const EClass& e = g_.cls(c);
    std::vector<ClassId> origins = e.origin;
    std::sort(origins.begin(), origins.end());
    for (ClassId o : origins) {
      const std::string& nm = g_.name(o);
      if (!nm.empty() && used.insert(nm).second) return nm;
    }
    std::string nm = fmt::format("{}_e{}", written_.name, c);
    while (names_.count(nm) || !used.insert(nm).second) nm += "_";
    return nm;
  }

  const EGraph& g_;
  const TermGraph& written_;
  const std::vector<ClassId>& input_class_;
  const std::vector<ClassId>& roots_;
  std::set<std::string> names_;
  std::vector<ClassId> ids_;
  std::unordered_map<ClassId, double> cost_;
  std::unordered_map<ClassId, size_t> best_;
};

// A graph's structure without names, node order or intermediate dtypes, for telling extracted
// graphs apart: each node's text names its op, attrs and its operands' texts' hashes (inputs by
// position). Two graphs that differ only in how an intermediate is stored are one structure (a
// rule's f32 copy of a written 16-bit product is no new way to compute it).
std::string structure(const TermGraph& t) {
  std::vector<uint64_t> h(t.nodes.size(), 0);
  for (size_t i = 0; i < t.inputs.size(); ++i) h[t.inputs[i]] = hash64(fmt::format("input {}", i));
  for (size_t n = 0; n < t.nodes.size(); ++n) {
    const TermNode& x = t.nodes[n];
    if (x.kind == OpKind::Input) continue;
    std::string s = fmt::format("{}:{}:{}:{}:{}", static_cast<int>(x.kind), x.attrs.dim,
                                x.attrs.keepdim, fmt::join(x.attrs.perm, ","), x.attrs.value);
    for (int i : x.inputs) s += fmt::format(":{:x}", h[i]);
    h[n] = hash64(s);
  }
  std::string key;
  for (int o : t.outputs) key += fmt::format("{:016x};", h[o]);
  return key;
}

}  // namespace

AlgebraResult rewrite(const TermGraph& written, const AlgebraOptions& opt) {
  const Clock::time_point start = Clock::now();
  AlgebraResult res;
  Extracted as_written;
  as_written.graph = written;
  as_written.as_written = true;
  as_written.cost_us = graph_cost(written);
  res.graphs.push_back(as_written);

  EGraph g;
  std::vector<ClassId> class_of(written.nodes.size());
  std::vector<ClassId> input_class;
  for (size_t i = 0; i < written.inputs.size(); ++i) {
    const TermNode& n = written.nodes[written.inputs[i]];
    class_of[written.inputs[i]] = g.add_input(static_cast<int64_t>(i), n.shape, n.dtype, n.name);
    input_class.push_back(class_of[written.inputs[i]]);
  }
  for (size_t i = 0; i < written.nodes.size(); ++i) {
    const TermNode& n = written.nodes[i];
    if (n.kind == OpKind::Input) continue;
    ENode e;
    e.kind = n.kind;
    e.dtype = n.kind == OpKind::Constant ? DType::F32 : n.dtype;
    e.attrs = n.attrs;
    for (int k : n.inputs) e.kids.push_back(class_of[k]);
    class_of[i] = g.add(std::move(e), "spec", n.name);
  }
  std::vector<ClassId> roots;
  for (int o : written.outputs) roots.push_back(class_of[o]);
  res.initial_nodes = g.num_nodes();
  res.saturation = saturate(g, opt.limits, opt.rules ? *opt.rules : all_rules());

  Extractor ex(g, written, input_class, roots);
  std::vector<Extracted> pool;
  if (auto best = ex.build({})) pool.push_back(std::move(*best));
  // One deviation per alternative node, the first kMaxDeviations of them (nearest the outputs
  // first): each build walks the whole graph.
  constexpr size_t kMaxDeviations = 64;
  const std::vector<std::pair<ClassId, size_t>> alt = ex.alternatives();
  for (size_t i = 0; i < alt.size() && i < kMaxDeviations; ++i)
    if (auto x = ex.build({{alt[i].first, alt[i].second}})) pool.push_back(std::move(*x));
  std::stable_sort(pool.begin(), pool.end(),
                   [](const Extracted& a, const Extracted& b) { return a.cost_us < b.cost_us; });
  // Cheapest first, each structure once, within the cost ratio; a new set of rules before one
  // already taken (linear_mean's scale placed on either side of the sum is one way to compute it).
  std::set<std::string> seen{structure(written)};
  std::vector<Extracted*> eligible;
  for (Extracted& x : pool)
    if ((opt.keep_costlier || x.cost_us <= opt.max_cost_ratio * as_written.cost_us) &&
        seen.insert(structure(x.graph)).second)
      eligible.push_back(&x);
  std::vector<std::vector<std::string>> rule_sets;
  for (const Extracted* x : eligible) rule_sets.push_back(x->rules);
  for (size_t i : new_rules_first(rule_sets)) {
    if (static_cast<int>(res.graphs.size()) >= opt.max_graphs) break;
    res.graphs.push_back(std::move(*eligible[i]));
  }
  std::stable_sort(res.graphs.begin() + 1, res.graphs.end(),
                   [](const Extracted& a, const Extracted& b) { return a.cost_us < b.cost_us; });
  res.seconds = since(start);
  return res;
}

std::vector<size_t> new_rules_first(const std::vector<std::vector<std::string>>& rule_sets) {
  std::vector<size_t> first, rest;
  std::set<std::vector<std::string>> seen;
  for (size_t i = 0; i < rule_sets.size(); ++i)
    (seen.insert(rule_sets[i]).second ? first : rest).push_back(i);
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

std::string AlgebraResult::summary() const {
  size_t applied = 0;
  for (const auto& [r, n] : saturation.applied) applied += n;
  return fmt::format(
      "{} after {} iteration{} ({} unions): {} -> {} e-nodes in {} classes; {} graph{} "
      "extracted ({:.3f} s)",
      stop_name(saturation.stop), saturation.iterations.size(),
      saturation.iterations.size() == 1 ? "" : "s", applied, initial_nodes, saturation.nodes,
      saturation.classes, graphs.size(), graphs.size() == 1 ? "" : "s", seconds);
}

}  // namespace kiln::algebra
