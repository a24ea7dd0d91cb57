// The spec/1 reader (../shared/spec-format.md): JSON text to a kernel graph of predefined ops.
//
// The work is split by who can say what is wrong most precisely. This reader checks what only the
// file can tell: keys, JSON types, names and where each is defined, op and attr spellings, attr
// value types. Errors point at the exact JSON path (`nodes[3].inputs[1]`). What depends on shapes
// (broadcasting, matmul inner dims, arity, dim ranges, perms, rms_norm weights, clamp bounds,
// eps >= 0, element limits) is checked by KernelGraphBuilder, which knows the tensors' names; its
// errors get the path of the node or input being built. Attr dims and perm entries are passed to
// the builder as written (possibly negative); the builder normalizes them.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "json_util.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace kiln {

namespace {

using json = nlohmann::json;

constexpr std::string_view kSpecFormat = "spec/1";
// The composite ops the parser writes as primitive nodes (SpecReader::read_layer_norm).
constexpr const char* kLayerNorm = "layer_norm";
constexpr const char* kNameRule = "names match [A-Za-z_][A-Za-z0-9_]*, at most 256 characters";

[[noreturn]] void fail(ErrorCode code, const std::string& path, std::string message,
                       std::string hint = {}) {
  UserError e(code, std::move(message), std::move(hint));
  e.with_path(path);
  throw e;
}

std::string did_you_mean(const std::string& suggestion) {
  return suggestion.empty() ? std::string() : fmt::format("did you mean \"{}\"?", suggestion);
}

// Rejects keys of `obj` that are not in `allowed`, suggesting the nearest allowed one.
void check_keys(const json& obj, const std::string& path,
                const std::vector<std::string_view>& allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string hint = did_you_mean(closest_name(key, allowed));
    if (hint.empty()) hint = fmt::format("the keys here are {}", fmt::join(allowed, ", "));
    fail(ErrorCode::Schema, path_key(path, key), fmt::format("unknown key \"{}\"", printable(key)),
         hint);
  }
}

const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const json& require(const json& obj, const std::string& path, const char* key) {
  const json* v = find(obj, key);
  if (!v) fail(ErrorCode::Schema, path, fmt::format("missing required key \"{}\"", key));
  return *v;
}

const std::string& expect_string(const json& v, const std::string& path,
                                 ErrorCode code = ErrorCode::Schema) {
  if (!v.is_string()) fail(code, path, fmt::format("must be a string, got {}", json_brief(v)));
  return v.get_ref<const std::string&>();
}

const json& expect_object(const json& v, const std::string& path,
                          ErrorCode code = ErrorCode::Schema) {
  if (!v.is_object()) fail(code, path, fmt::format("must be an object, got {}", json_brief(v)));
  return v;
}

const json& expect_list(const json& v, const std::string& path,
                        ErrorCode code = ErrorCode::Schema) {
  if (!v.is_array()) fail(code, path, fmt::format("must be a list, got {}", json_brief(v)));
  return v;
}

// A required, non-empty list.
const json& require_list(const json& obj, const char* key, const char* what) {
  const json& v = expect_list(require(obj, "", key), key);
  if (v.empty()) fail(ErrorCode::Schema, key, fmt::format("a spec needs at least one {}", what));
  return v;
}

// Attr readers: a wrong type is an Op error ("bad attr").
int64_t attr_int(const json& v, const std::string& path) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
    return v.get<int64_t>();
  if (v.is_number_integer())
    fail(ErrorCode::Op, path, fmt::format("{} is out of range", json_brief(v)));
  fail(ErrorCode::Op, path, fmt::format("must be an integer, got {}", json_brief(v)));
}

double attr_number(const json& v, const std::string& path) {
  if (!v.is_number())
    fail(ErrorCode::Op, path, fmt::format("must be a number, got {}", json_brief(v)));
  return v.get<double>();
}

bool attr_bool(const json& v, const std::string& path) {
  if (!v.is_boolean())
    fail(ErrorCode::Op, path, fmt::format("must be true or false, got {}", json_brief(v)));
  return v.get<bool>();
}

std::vector<int> attr_perm(const json& v, const std::string& path) {
  expect_list(v, path, ErrorCode::Op);
  std::vector<int> perm;
  for (size_t k = 0; k < v.size(); ++k) {
    int64_t p = attr_int(v[k], path_index(path, k));
    if (p < -kMaxRank || p >= kMaxRank)
      fail(ErrorCode::Op, path_index(path, k),
           fmt::format("perm entry {} is out of range; a tensor has at most {} dims", p, kMaxRank));
    perm.push_back(static_cast<int>(p));
  }
  return perm;
}

GeluApprox attr_approximate(const json& v, const std::string& path) {
  const std::string& s = expect_string(v, path, ErrorCode::Op);
  if (s == "none") return GeluApprox::None;
  if (s == "tanh") return GeluApprox::Tanh;
  fail(ErrorCode::Op, path, fmt::format("unknown approximate \"{}\"", printable(s)),
       "approximate is \"none\" (erf) or \"tanh\"");
}

struct AttrName {
  std::string_view name;
  uint16_t bit;
};
constexpr AttrName kAttrNames[] = {
    {"dim", kAttrDim},
    {"keepdim", kAttrKeepdim},
    {"perm", kAttrPerm},
    {"value", kAttrValue},
    {"eps", kAttrEps},
    {"approximate", kAttrApproximate},
    {"negative_slope", kAttrNegativeSlope},
    {"min", kAttrMin},
    {"max", kAttrMax},
};

std::vector<std::string_view> accepted_attrs(const OpInfo& info) {
  std::vector<std::string_view> names;
  for (const AttrName& a : kAttrNames)
    if (info.attrs & a.bit) names.push_back(a.name);
  return names;
}

// Reads a node's "attrs" (may be absent) for `info`; `path` is the node's path.
Attrs parse_attrs(const json* attrs, const OpInfo& info, const std::string& path) {
  Attrs a;
  const std::string apath = path_key(path, "attrs");
  if (attrs) {
    expect_object(*attrs, apath, ErrorCode::Op);
    const std::vector<std::string_view> accepted = accepted_attrs(info);
    for (const auto& [key, v] : attrs->items()) {
      const std::string kpath = path_key(apath, key);
      auto known = std::find(accepted.begin(), accepted.end(), key);
      if (known == accepted.end()) {
        std::string hint = did_you_mean(closest_name(key, accepted));
        if (hint.empty())
          hint = accepted.empty()
                     ? fmt::format("{} takes no attrs", info.name)
                     : fmt::format("{} takes {}", info.name, fmt::join(accepted, ", "));
        fail(ErrorCode::Op, kpath,
             fmt::format("unknown attr \"{}\" for op {}", printable(key), info.name), hint);
      }
      if (key == "dim") a.dim = attr_int(v, kpath);
      if (key == "keepdim") a.keepdim = attr_bool(v, kpath);
      if (key == "perm") a.perm = attr_perm(v, kpath);
      if (key == "value") a.value = attr_number(v, kpath);
      if (key == "eps") a.eps = attr_number(v, kpath);
      if (key == "approximate") a.approximate = attr_approximate(v, kpath);
      if (key == "negative_slope") a.negative_slope = attr_number(v, kpath);
      if (key == "min") a.min = attr_number(v, kpath);
      if (key == "max") a.max = attr_number(v, kpath);
    }
  }
  auto require_attr = [&](const char* key, const char* example) {
    if (!attrs || !find(*attrs, key))
      fail(ErrorCode::Op, attrs ? apath : path, fmt::format("{} needs attr \"{}\"", info.name, key),
           fmt::format("for example \"attrs\": {}", example));
  };
  if (info.cls == OpClass::Reduce) require_attr("dim", "{\"dim\": -1}");
  if (info.cls == OpClass::Constant) require_attr("value", "{\"value\": 1.0}");
  return a;
}

// One extent of an input shape: an integer in [1, kMaxElements]. The product is the builder's to
// check.
int64_t parse_extent(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) {
    uint64_t d = v.get<uint64_t>();
    if (d == 0) fail(ErrorCode::Shape, path, "an extent must be positive, got 0");
    if (d > static_cast<uint64_t>(kMaxElements))
      fail(ErrorCode::Shape, path, fmt::format("extent {} is larger than 2^40", d));
    return static_cast<int64_t>(d);
  }
  if (v.is_number_integer())  // nlohmann keeps non-negative integers unsigned: this is < 0
    fail(ErrorCode::Shape, path, fmt::format("an extent must be positive, got {}", v.dump()));
  fail(ErrorCode::Schema, path,
       fmt::format("an extent must be a positive integer, got {}", json_brief(v)));
}

class SpecReader {
 public:
  explicit SpecReader(const json& root) : root_(root) {}

  KernelGraph read() {
    if (!root_.is_object())
      fail(ErrorCode::Schema, "",
           fmt::format("a spec must be a JSON object, got {}", json_brief(root_)));
    check_keys(root_, "", {"format", "name", "doc", "inputs", "nodes", "outputs"});
    read_format();
    const std::string& name = expect_string(require(root_, "", "name"), "name");
    std::string doc;
    if (const json* d = find(root_, "doc")) doc = expect_string(*d, "doc");
    if (!is_valid_name(name))
      fail(ErrorCode::Name, "name", fmt::format("invalid graph name \"{}\"", printable(name)),
           kNameRule);
    builder_.emplace(name, doc);
    const json& inputs = require_list(root_, "inputs", "input");
    const json& nodes = require_list(root_, "nodes", "node");
    const json& outputs = require_list(root_, "outputs", "output");
    index_nodes(nodes);
    for (size_t i = 0; i < inputs.size(); ++i) read_input(inputs[i], path_index("inputs", i));
    for (size_t i = 0; i < nodes.size(); ++i) read_node(nodes[i], i);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string path = path_index("outputs", i);
      builder_->output(resolve(expect_string(outputs[i], path), path, nullptr));
    }
    return std::move(*builder_).finish();
  }

 private:
  struct Definition {
    int tensor;
    std::string path;  // where it is defined, e.g. "nodes[3]"
  };

  void read_format() {
    const json* f = find(root_, "format");
    if (!f) return;
    const std::string& format = expect_string(*f, "format");
    if (format != kSpecFormat)
      fail(ErrorCode::Schema, "format", fmt::format("unknown format \"{}\"", printable(format)),
           format.starts_with("mugraph/") ? "this is a μGraph file; a spec has format \"spec/1\""
                                          : "this version of Kiln reads format \"spec/1\"");
  }

  // Where each node name is defined and what each node uses, for forward-reference messages.
  void index_nodes(const json& nodes) {
    node_inputs_.resize(nodes.size());
    node_names_.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      const json& n = nodes[i];
      if (!n.is_object()) continue;
      if (const json* name = find(n, "name"); name && name->is_string()) {
        node_names_[i] = name->get<std::string>();
        node_index_.try_emplace(node_names_[i], i);
      }
      if (const json* in = find(n, "inputs"); in && in->is_array())
        for (const json& u : *in)
          if (u.is_string()) node_inputs_[i].push_back(u.get<std::string>());
    }
  }

  void define(const std::string& name, int tensor, const std::string& path) {
    auto it = defined_.emplace(name, Definition{tensor, path}).first;
    defined_order_.push_back(it->first);
  }

  // Checks a new name (valid, not yet defined) before the builder sees it.
  void check_new_name(const std::string& name, const std::string& path) {
    if (!is_valid_name(name))
      fail(ErrorCode::Name, path, fmt::format("invalid name \"{}\"", printable(name)), kNameRule);
    if (auto it = defined_.find(name); it != defined_.end())
      fail(ErrorCode::Name, path,
           fmt::format("duplicate name \"{}\"; it is already defined at {}", name, it->second.path),
           "names are unique across inputs and nodes");
  }

  void read_input(const json& in, const std::string& path) {
    expect_object(in, path);
    check_keys(in, path, {"name", "shape", "dtype"});
    const std::string name_path = path_key(path, "name");
    const std::string& name = expect_string(require(in, path, "name"), name_path);
    check_new_name(name, name_path);
    const std::string shape_path = path_key(path, "shape");
    const json& shape_json = expect_list(require(in, path, "shape"), shape_path);
    if (shape_json.size() > static_cast<size_t>(kMaxRank))
      fail(ErrorCode::Shape, shape_path,
           fmt::format("rank {} is more than the {} dims a tensor may have", shape_json.size(),
                       kMaxRank));
    Shape shape;
    for (size_t k = 0; k < shape_json.size(); ++k)
      shape.push_back(parse_extent(shape_json[k], path_index(shape_path, k)));
    const std::string dtype_path = path_key(path, "dtype");
    const std::string& dtype_name = expect_string(require(in, path, "dtype"), dtype_path);
    std::optional<DType> dtype = dtype_from_name(dtype_name);
    if (!dtype)
      fail(ErrorCode::Schema, dtype_path,
           fmt::format("unknown dtype \"{}\"", printable(dtype_name)),
           "the dtypes are f16, bf16 and f32 (also spelled float16, bfloat16, float32)");
    try {
      define(name, builder_->input(name, std::move(shape), *dtype), path);
    } catch (UserError& e) {
      e.with_path(shape_path);  // name and dtype are checked above; what is left is the shape
      throw;
    }
  }

  void read_node(const json& node, size_t index) {
    const std::string path = path_index("nodes", index);
    expect_object(node, path);
    check_keys(node, path, {"name", "op", "inputs", "attrs"});
    const std::string name_path = path_key(path, "name");
    const std::string& name = expect_string(require(node, path, "name"), name_path);
    check_new_name(name, name_path);

    const std::string op_path = path_key(path, "op");
    const std::string& op_name = expect_string(require(node, path, "op"), op_path);
    if (op_name == kLayerNorm) return read_layer_norm(node, path, name);
    std::optional<OpKind> kind = op_from_name(op_name);
    if (!kind) {
      // The closest of the ops and of the composite ops the parser expands.
      std::vector<std::string_view> names = {kLayerNorm};
      for (const OpInfo& i : all_ops())
        if ((i.levels & kKernel) && i.cls != OpClass::GraphDefined) names.push_back(i.name);
      fail(ErrorCode::Op, op_path, fmt::format("unknown op \"{}\"", printable(op_name)),
           did_you_mean(closest_name(op_name, names)));
    }
    const OpInfo& info = op_info(*kind);
    if (!(info.levels & kKernel) || info.cls == OpClass::GraphDefined)
      fail(ErrorCode::Op, op_path, fmt::format("op \"{}\" cannot appear in a spec", op_name),
           "it exists only inside μGraphs");

    std::vector<int> inputs = read_inputs(node, path, name);
    Attrs attrs = parse_attrs(find(node, "attrs"), info, path);
    try {
      define(name, builder_->op(*kind, std::move(inputs), attrs, name), path);
    } catch (UserError& e) {
      e.with_path(path);
      throw;
    }
  }

  // The inputs of a node, resolved (the node's own name tells a cycle apart).
  std::vector<int> read_inputs(const json& node, const std::string& path, const std::string& name) {
    std::vector<int> inputs;
    if (const json* in = find(node, "inputs")) {
      const std::string in_path = path_key(path, "inputs");
      expect_list(*in, in_path);
      for (size_t k = 0; k < in->size(); ++k) {
        const std::string use_path = path_index(in_path, k);
        inputs.push_back(resolve(expect_string((*in)[k], use_path), use_path, &name));
      }
    }
    return inputs;
  }

  // `layer_norm` (a Kiln extension, docs/spec-format.md): inputs X and optionally a weight w and
  // a bias b (each of X's last extent), attr eps (default 1e-5, as torch.nn.LayerNorm), over the
  // last dim:  (x - mean(x)) * rsqrt(mean((x - mean(x))^2) + eps) [* w] [+ b].
  // It is a composite: the parser writes it as those primitive nodes (named NAME__mean,
  // NAME__centered, ...; the last one is NAME), so every later stage sees ops it knows and its
  // meaning is defined in this one place.
  void read_layer_norm(const json& node, const std::string& path, const std::string& name) {
    double eps = 1e-5;
    if (const json* attrs = find(node, "attrs")) {
      const std::string apath = path_key(path, "attrs");
      expect_object(*attrs, apath, ErrorCode::Op);
      for (const auto& [key, v] : attrs->items()) {
        const std::string kpath = path_key(apath, key);
        if (key != "eps") {
          std::string hint = did_you_mean(closest_name(key, {"eps"}));
          fail(ErrorCode::Op, kpath,
               fmt::format("unknown attr \"{}\" for op layer_norm", printable(key)),
               hint.empty() ? "layer_norm takes eps" : hint);
        }
        eps = attr_number(v, kpath);
        if (!(eps >= 0)) fail(ErrorCode::Op, kpath, "layer_norm: eps must be >= 0");
      }
    }
    const std::vector<int> in = read_inputs(node, path, name);
    const std::string in_path = path_key(path, "inputs");
    if (in.empty() || in.size() > 3)
      fail(ErrorCode::Op, in.empty() ? path : in_path,
           fmt::format("layer_norm takes 1 to 3 inputs (X, weight, bias), got {}", in.size()));
    const KernelGraph& g = builder_->peek();
    const Shape& xs = g.tensor(in[0]).shape;
    if (xs.empty())
      fail(ErrorCode::Shape, path_index(in_path, 0), "layer_norm of a scalar: X needs a last dim");
    for (size_t k = 1; k < in.size(); ++k) {
      const TensorDesc& t = g.tensor(in[k]);
      if (t.shape != Shape{xs.back()})
        fail(ErrorCode::Shape, path_index(in_path, k),
             fmt::format("layer_norm: {} {} is {}, expected [{}] (the last dim of X)",
                         k == 1 ? "weight" : "bias", t.name, shape_str(t.shape), xs.back()));
    }
    // The primitive nodes; each internal name must be new too.
    auto node_op = [&](OpKind k, std::vector<int> args, Attrs a, const std::string& out) {
      if (out != name) check_new_name(out, path);
      try {
        const int t = builder_->op(k, std::move(args), a, out);
        define(out, t, path);
        return t;
      } catch (UserError& e) {
        e.with_path(path);
        throw;
      }
    };
    Attrs last;
    last.dim = -1;
    last.keepdim = true;
    Attrs c;
    c.value = eps;
    const bool weight = in.size() >= 2, bias = in.size() == 3;
    const int mean = node_op(OpKind::Mean, {in[0]}, last, name + "__mean");
    const int xc = node_op(OpKind::Sub, {in[0], mean}, {}, name + "__centered");
    const int sq = node_op(OpKind::Square, {xc}, {}, name + "__sq");
    const int var = node_op(OpKind::Mean, {sq}, last, name + "__var");
    const int e = node_op(OpKind::Constant, {}, c, name + "__eps");
    const int ve = node_op(OpKind::Add, {var, e}, {}, name + "__var_eps");
    const int r = node_op(OpKind::Rsqrt, {ve}, {}, name + "__rstd");
    int y = node_op(OpKind::Mul, {xc, r}, {}, weight ? name + "__normed" : name);
    if (weight) y = node_op(OpKind::Mul, {y, in[1]}, {}, bias ? name + "__scaled" : name);
    if (bias) node_op(OpKind::Add, {y, in[2]}, {}, name);
  }

  // The tensor a use of `name` at `path` refers to. `user` is the node's own name (null for
  // outputs), which tells a self-reference and a cycle apart from a plain forward reference.
  int resolve(const std::string& name, const std::string& path, const std::string* user) {
    if (auto it = defined_.find(name); it != defined_.end()) return it->second.tensor;
    if (user && name == *user)
      fail(ErrorCode::Name, path, fmt::format("node \"{}\" uses itself", name),
           "a node may only use inputs and earlier nodes");
    if (auto later = node_index_.find(name); later != node_index_.end()) {
      std::string hint = "a node may only use inputs and earlier nodes";
      if (user) {
        std::vector<std::string> cycle = find_cycle(later->second, *user);
        if (!cycle.empty())
          hint +=
              fmt::format("; these nodes form a cycle: {} -> {}", *user, fmt::join(cycle, " -> "));
      }
      fail(ErrorCode::Name, path,
           fmt::format("uses \"{}\", which is defined later at {}", name,
                       path_index("nodes", later->second)),
           hint);
    }
    std::string hint = did_you_mean(closest_name(name, defined_order_));
    fail(ErrorCode::Name, path, fmt::format("unknown name \"{}\"", printable(name)), hint);
  }

  // The names along a path of uses from node `from` back to `target` ("O", ..., `target`), or
  // empty if `from` does not depend on `target`. Breadth-first, so the shortest such path.
  std::vector<std::string> find_cycle(size_t from, const std::string& target) const {
    std::vector<size_t> parent(node_inputs_.size(), SIZE_MAX);
    std::vector<size_t> queue = {from};
    parent[from] = from;
    for (size_t q = 0; q < queue.size(); ++q) {
      size_t n = queue[q];
      for (const std::string& use : node_inputs_[n]) {
        if (use == target) {
          std::vector<std::string> chain = {target};
          for (size_t k = n;; k = parent[k]) {
            chain.push_back(node_names_[k]);
            if (k == from) break;
          }
          std::reverse(chain.begin(), chain.end());
          return chain;
        }
        auto it = node_index_.find(use);
        if (it != node_index_.end() && parent[it->second] == SIZE_MAX) {
          parent[it->second] = n;
          queue.push_back(it->second);
        }
      }
    }
    return {};
  }

  const json& root_;
  std::optional<KernelGraphBuilder> builder_;
  std::unordered_map<std::string, Definition> defined_;
  // Keys of defined_ in file order, so that suggestions do not depend on hash order.
  std::vector<std::string_view> defined_order_;
  std::unordered_map<std::string, size_t> node_index_;  // first node of each name
  std::vector<std::string> node_names_;                 // "" where a node has no string name
  std::vector<std::vector<std::string>> node_inputs_;   // names each node uses
};

}  // namespace

KernelGraph parse_spec(std::string_view text, const std::string& file) {
  try {
    json root = parse_json_text(text, file);
    // Intermediates that f32 outputs depend on are stored in f32 (the spec's values are exact),
    // and those whose range is unbounded (the range rule) too.
    return store_unbounded_intermediates(store_exact_intermediates(SpecReader(root).read()));
  } catch (UserError& e) {
    e.with_file(file);
    throw;
  }
}

KernelGraph parse_spec_file(const std::string& path) {
  return parse_spec(read_file_text(path), path);
}

}  // namespace kiln
