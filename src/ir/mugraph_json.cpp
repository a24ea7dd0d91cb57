// The mugraph/1 JSON codec (docs/mugraph-format.md) and the format-dispatching loader.
//
// Decoding never builds IR by hand: every graph goes through KernelGraphBuilder and
// BlockGraphBuilder, so a file is accepted exactly when the factories accept the graph it
// describes. This file only checks what the factories cannot see (JSON types, unknown keys, names
// that must resolve, list lengths whose fault is best pinned to one key) and attaches the JSON path
// and file to every UserError on its way out. Encoding writes one canonical form (every accepted
// attr explicit, keys in a fixed order), so graph -> JSON -> graph -> JSON is the identity on the
// JSON.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "json_util.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace kiln {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::string_view kFormat = "mugraph/1";

// ---------------------------------------------------------------------------------------------
// Paths and errors. Paths use json_util's path_key and path_index: a key from the file that is
// not an identifier (a control byte, a megabyte of text) prints escaped and cut, as `["..."]`.

[[noreturn]] void fail(ErrorCode code, const std::string& path, std::string message,
                       std::string hint = {}) {
  UserError e(code, std::move(message), std::move(hint));
  e.with_path(path);
  throw e;
}

// Runs `f` (a builder call) and places any UserError it throws at `path`; `name_path` (when
// given) receives Name errors instead, so a duplicate name points at its "name" key.
template <typename F>
auto at_path(const std::string& path, F&& f, const std::string& name_path = {}) -> decltype(f()) {
  try {
    return f();
  } catch (UserError& e) {
    e.with_path(e.code() == ErrorCode::Name && !name_path.empty() ? name_path : path);
    throw;
  }
}

// "did you mean "x"?" for the closest candidate (json_util's closest_name), else "".
template <typename Range>
std::string did_you_mean(std::string_view got, const Range& candidates) {
  std::vector<std::string_view> names(std::begin(candidates), std::end(candidates));
  std::string best = closest_name(got, names);
  return best.empty() ? std::string() : fmt::format("did you mean \"{}\"?", best);
}

// ---------------------------------------------------------------------------------------------
// Typed access to JSON values. Each checks the JSON type before reading, so no nlohmann
// exception escapes.

void check_keys(const json& obj, const std::string& path,
                std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string hint = did_you_mean(key, allowed);
    if (hint.empty()) hint = fmt::format("allowed keys: {}", fmt::join(allowed, ", "));
    fail(ErrorCode::Schema, path_key(path, key), fmt::format("unknown key \"{}\"", printable(key)),
         hint);
  }
}

const json& expect_object(const json& v, const std::string& path, const char* what,
                          ErrorCode code = ErrorCode::Schema) {
  if (!v.is_object())
    fail(code, path, fmt::format("{} must be an object, got {}", what, json_brief(v)));
  return v;
}

const json& expect_array(const json& v, const std::string& path,
                         ErrorCode code = ErrorCode::Schema) {
  if (!v.is_array()) fail(code, path, fmt::format("expected a list, got {}", json_brief(v)));
  return v;
}

const json& require(const json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end())
    fail(ErrorCode::Schema, path, fmt::format("missing required key \"{}\"", key));
  return *it;
}

const json* find_key(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string get_string(const json& v, const std::string& path, ErrorCode code = ErrorCode::Schema) {
  if (!v.is_string()) fail(code, path, fmt::format("expected a string, got {}", json_brief(v)));
  return v.get<std::string>();
}

int64_t get_int(const json& v, const std::string& path, int64_t lo, int64_t hi,
                ErrorCode code = ErrorCode::Schema) {
  if (!v.is_number_integer())
    fail(code, path, fmt::format("expected an integer, got {}", json_brief(v)));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    fail(code, path, fmt::format("{} is out of range [{}, {}]", json_brief(v), lo, hi));
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail(code, path, fmt::format("{} is out of range [{}, {}]", x, lo, hi));
  return x;
}

int get_small_int(const json& v, const std::string& path, ErrorCode code = ErrorCode::Schema) {
  return static_cast<int>(
      get_int(v, path, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), code));
}

double get_number(const json& v, const std::string& path, ErrorCode code = ErrorCode::Schema) {
  if (!v.is_number()) fail(code, path, fmt::format("expected a number, got {}", json_brief(v)));
  return v.get<double>();
}

bool get_bool(const json& v, const std::string& path, ErrorCode code = ErrorCode::Schema) {
  if (!v.is_boolean())
    fail(code, path, fmt::format("expected true or false, got {}", json_brief(v)));
  return v.get<bool>();
}

std::vector<int64_t> get_int64_list(const json& v, const std::string& path) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < expect_array(v, path).size(); ++i)
    out.push_back(get_int(v[i], path_index(path, i), std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max()));
  return out;
}

std::vector<int> get_int_list(const json& v, const std::string& path,
                              ErrorCode code = ErrorCode::Schema) {
  std::vector<int> out;
  for (size_t i = 0; i < expect_array(v, path, code).size(); ++i)
    out.push_back(get_small_int(v[i], path_index(path, i), code));
  return out;
}

DType get_dtype(const json& v, const std::string& path) {
  std::string s = get_string(v, path);
  auto d = dtype_from_name(s);
  if (!d)
    fail(ErrorCode::Schema, path, fmt::format("unknown dtype \"{}\"", printable(s)),
         "f16, bf16 or f32");
  return *d;
}

// ---------------------------------------------------------------------------------------------
// Attrs. One table of (bit, key) keeps decode and encode in the same order.

struct AttrKey {
  uint16_t bit;
  const char* key;
};
constexpr AttrKey kAttrKeys[] = {
    {kAttrDim, "dim"},
    {kAttrKeepdim, "keepdim"},
    {kAttrPerm, "perm"},
    {kAttrValue, "value"},
    {kAttrEps, "eps"},
    {kAttrApproximate, "approximate"},
    {kAttrNegativeSlope, "negative_slope"},
    {kAttrMin, "min"},
    {kAttrMax, "max"},
};

std::vector<std::string> accepted_attr_names(uint16_t bits) {
  std::vector<std::string> out;
  for (const AttrKey& a : kAttrKeys)
    if (bits & a.bit) out.push_back(a.key);
  return out;
}

// `path` is the op's path; attrs live at path.attrs. Reductions must name their dim, as in
// specs.
Attrs decode_attrs(const json& obj, const std::string& op_path, OpKind kind) {
  Attrs attrs;
  const OpInfo& info = op_info(kind);
  const json* v = find_key(obj, "attrs");
  std::string path = path_key(op_path, "attrs");
  if (info.cls == OpClass::Reduce && !(v && v->is_object() && v->contains("dim")))
    fail(ErrorCode::Op, v ? path : op_path, fmt::format("{} needs attr \"dim\"", info.name));
  if (!v) return attrs;
  expect_object(*v, path, "attrs", ErrorCode::Op);
  for (const auto& [key, value] : v->items()) {
    std::string p = path_key(path, key);
    const AttrKey* a = nullptr;
    for (const AttrKey& k : kAttrKeys)
      if (key == k.key) a = &k;
    if (!a || !(info.attrs & a->bit)) {
      std::vector<std::string> ok = accepted_attr_names(info.attrs);
      std::string hint = ok.empty() ? fmt::format("{} takes no attrs", info.name)
                                    : fmt::format("{} takes: {}", info.name, fmt::join(ok, ", "));
      fail(ErrorCode::Op, p,
           fmt::format("{} attr \"{}\" for {}", a ? "unexpected" : "unknown", printable(key),
                       info.name),
           hint);
    }
    switch (a->bit) {
      case kAttrDim:
        attrs.dim = get_small_int(value, p, ErrorCode::Op);
        break;
      case kAttrKeepdim:
        attrs.keepdim = get_bool(value, p, ErrorCode::Op);
        break;
      case kAttrPerm:
        attrs.perm = get_int_list(value, p, ErrorCode::Op);
        if (attrs.perm.size() > static_cast<size_t>(kMaxRank))
          fail(ErrorCode::Op, p,
               fmt::format("perm has {} entries; at most {} dims", attrs.perm.size(), kMaxRank));
        break;
      case kAttrValue:
        attrs.value = get_number(value, p, ErrorCode::Op);
        break;
      case kAttrEps:
        attrs.eps = get_number(value, p, ErrorCode::Op);
        break;
      case kAttrApproximate: {
        std::string s = get_string(value, p, ErrorCode::Op);
        if (s == "none")
          attrs.approximate = GeluApprox::None;
        else if (s == "tanh")
          attrs.approximate = GeluApprox::Tanh;
        else
          fail(ErrorCode::Op, p, fmt::format("approximate is \"{}\"", printable(s)),
               "\"none\" or \"tanh\"");
        break;
      }
      case kAttrNegativeSlope:
        attrs.negative_slope = get_number(value, p, ErrorCode::Op);
        break;
      case kAttrMin:
        attrs.min = get_number(value, p, ErrorCode::Op);
        break;
      case kAttrMax:
        attrs.max = get_number(value, p, ErrorCode::Op);
        break;
    }
  }
  return attrs;
}

// JSON has no NaN or infinity; such a graph can only come from code, and cannot be written.
double finite(double x, const char* what) {
  if (!std::isfinite(x))
    user_error(ErrorCode::Unsupported, "attr {} is {}, which JSON cannot represent", what, x);
  return x;
}

// Every attr the op accepts, explicitly (clamp's min/max only when set). Empty if none.
ojson encode_attrs(OpKind kind, const Attrs& a) {
  ojson out = ojson::object();
  uint16_t bits = op_info(kind).attrs;
  if (bits & kAttrDim) out["dim"] = a.dim;
  if (bits & kAttrKeepdim) out["keepdim"] = a.keepdim;
  if (bits & kAttrPerm) out["perm"] = a.perm;
  if (bits & kAttrValue) out["value"] = finite(a.value, "value");
  if (bits & kAttrEps) out["eps"] = finite(a.eps, "eps");
  if (bits & kAttrApproximate)
    out["approximate"] = a.approximate == GeluApprox::Tanh ? "tanh" : "none";
  if (bits & kAttrNegativeSlope) out["negative_slope"] = finite(a.negative_slope, "negative_slope");
  if ((bits & kAttrMin) && a.min) out["min"] = finite(*a.min, "min");
  if ((bits & kAttrMax) && a.max) out["max"] = finite(*a.max, "max");
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding

OpKind decode_op_name(const json& obj, const std::string& path, uint8_t level) {
  std::string p = path_key(path, "op");
  std::string name = get_string(require(obj, path, "op"), p);
  auto kind = op_from_name(name);
  if (!kind) {
    std::string close = closest_op_name(name, level);
    fail(ErrorCode::Op, p, fmt::format("unknown op \"{}\"", printable(name)),
         close.empty() ? std::string() : fmt::format("did you mean \"{}\"?", close));
  }
  return *kind;
}

std::string optional_name(const json& obj, const std::string& path) {
  const json* n = find_key(obj, "name");
  return n ? get_string(*n, path_key(path, "name")) : std::string();
}

// Resolves a list of names against `known` (name -> index); unknown names are Name errors.
std::vector<int> resolve_names(const json* list, const std::string& path,
                               const std::map<std::string, int, std::less<>>& known,
                               const char* what) {
  std::vector<int> out;
  if (!list) return out;
  expect_array(*list, path);
  for (size_t i = 0; i < list->size(); ++i) {
    std::string p = path_index(path, i);
    std::string n = get_string((*list)[i], p);
    auto it = known.find(n);
    if (it == known.end()) {
      std::vector<std::string> names;
      for (const auto& [k, v] : known) names.push_back(k);
      fail(ErrorCode::Name, p, fmt::format("unknown {} \"{}\"", what, printable(n)),
           did_you_mean(n, names));
    }
    out.push_back(it->second);
  }
  return out;
}

// A map (imap/omap over grid dims, fmap over loop dims) whose length the decoder checks itself so
// that the error points at the key; entries are checked by the builder.
std::vector<int> decode_map(const json& obj, const std::string& path, const char* key, size_t want,
                            const char* dims) {
  std::string p = path_key(path, key);
  const json* v = find_key(obj, key);
  if (!v) {
    if (want == 0) return {};
    fail(ErrorCode::Schema, path, fmt::format("missing required key \"{}\"", key),
         fmt::format("one entry per {} dim ({}), each a tensor dim or -1", dims, want));
  }
  std::vector<int> m = get_int_list(*v, p);
  if (m.size() != want)
    fail(ErrorCode::Map, p,
         fmt::format("{} has {} entries but the block graph has {} {} dims", key, m.size(), want,
                     dims),
         "one entry per dim: the tensor dim it maps to, or -1 to replicate");
  return m;
}

ThreadGraph decode_thread_graph(const json& v, const std::string& path, int num_inputs) {
  ThreadGraph tg;
  tg.num_inputs = num_inputs;
  expect_array(v, path);
  if (v.empty()) fail(ErrorCode::Structure, path, "a fused op needs at least one thread op");
  for (size_t j = 0; j < v.size(); ++j) {
    std::string p = path_index(path, j);
    const json& t = expect_object(v[j], p, "a thread op");
    check_keys(t, p, {"op", "inputs", "attrs"});
    OpKind kind = decode_op_name(t, p, kThread);
    if (!(op_info(kind).levels & kThread))
      fail(ErrorCode::Op, path_key(p, "op"),
           fmt::format("{} is not an elementwise op; it cannot appear in a thread graph",
                       op_name(kind)));
    ThreadOp op{kind, {}, {}};
    if (const json* in = find_key(t, "inputs"))
      op.inputs = get_int_list(*in, path_key(p, "inputs"));
    op.attrs = decode_attrs(t, p, kind);
    tg.ops.push_back(std::move(op));
  }
  return tg;
}

// Decodes one block op into `bb`; `names` maps earlier block op names to indices.
// `saver_paths` receives the path of each output op's "output" key, in output order.
void decode_block_op(const json& v, const std::string& path, BlockGraphBuilder& bb,
                     std::map<std::string, int, std::less<>>& names,
                     const std::vector<std::string>& kernel_inputs,
                     std::vector<std::string>& saver_paths) {
  const json& obj = expect_object(v, path, "a block op");
  OpKind kind = decode_op_name(obj, path, kBlock);
  const OpInfo& info = op_info(kind);
  std::string name = optional_name(obj, path);
  std::string name_path = path_key(path, "name");
  const BlockGraph& g = bb.peek();
  int index = -1;
  switch (info.cls) {
    case OpClass::Input: {
      check_keys(obj, path, {"name", "op", "input", "imap", "fmap"});
      std::string p = path_key(path, "input");
      const json& in = require(obj, path, "input");
      int io = -1;
      if (in.is_string()) {
        std::string s = in.get<std::string>();
        for (size_t i = 0; i < kernel_inputs.size(); ++i) {
          if (kernel_inputs[i] != s) continue;
          if (io >= 0)
            fail(ErrorCode::Name, p,
                 fmt::format("\"{}\" is more than one input of the kernel", printable(s)),
                 "refer to it by its index in the kernel's inputs");
          io = static_cast<int>(i);
        }
        if (io < 0)
          fail(ErrorCode::Name, p,
               fmt::format("\"{}\" is not an input of the kernel", printable(s)),
               // Up to 64 names of 256 bytes: cut, so the hint stays short.
               fmt::format("the kernel's inputs are: {}",
                           printable(fmt::format("{}", fmt::join(kernel_inputs, ", ")), 200)));
      } else if (in.is_number_integer()) {
        io = get_small_int(in, p);
      } else {
        fail(ErrorCode::Schema, p,
             fmt::format("expected an input name or index, got {}", json_brief(in)));
      }
      std::vector<int> imap = decode_map(obj, path, "imap", g.grid.size(), "grid");
      std::vector<int> fmap = decode_map(obj, path, "fmap", g.loop.size(), "loop");
      index = at_path(
          path, [&] { return bb.input(io, imap, fmap, name); }, name_path);
      break;
    }
    case OpClass::Output: {
      check_keys(obj, path, {"name", "op", "inputs", "output", "dtype", "rank", "omap", "fmap"});
      std::vector<int> in =
          resolve_names(&require(obj, path, "inputs"), path_key(path, "inputs"), names, "block op");
      if (in.size() != 1)
        fail(ErrorCode::Op, path_key(path, "inputs"),
             fmt::format("an output saves one tile, given {}", in.size()));
      std::string tensor = get_string(require(obj, path, "output"), path_key(path, "output"));
      DType dtype = get_dtype(require(obj, path, "dtype"), path_key(path, "dtype"));
      int rank = -1;
      if (const json* r = find_key(obj, "rank"))
        rank = static_cast<int>(get_int(*r, path_key(path, "rank"), 0, kMaxRank));
      std::vector<int> omap = decode_map(obj, path, "omap", g.grid.size(), "grid");
      std::vector<int> fmap = decode_map(obj, path, "fmap", g.loop.size(), "loop");
      index = at_path(
          path, [&] { return bb.output(in[0], omap, fmap, dtype, tensor, rank, name); },
          // Name errors here concern either the saver's name or its tensor's name.
          std::string());
      saver_paths.push_back(path_key(path, "output"));
      break;
    }
    case OpClass::Fused: {
      check_keys(obj, path, {"name", "op", "inputs", "thread_ops"});
      std::vector<int> in =
          resolve_names(&require(obj, path, "inputs"), path_key(path, "inputs"), names, "block op");
      ThreadGraph tg =
          decode_thread_graph(require(obj, path, "thread_ops"), path_key(path, "thread_ops"),
                              static_cast<int>(in.size()));
      index = at_path(
          path, [&] { return bb.fused(std::move(tg), in, name); }, name_path);
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
    case OpClass::Accum: {
      if (!(info.levels & kBlock))
        fail(ErrorCode::Op, path_key(path, "op"),
             fmt::format("{} cannot appear in a block graph", info.name),
             info.cls == OpClass::GraphDefined ? "graph-defined ops appear only in \"kernels\""
                                               : "compose it from block ops");
      check_keys(obj, path, {"name", "op", "inputs", "attrs"});
      std::vector<int> in =
          resolve_names(find_key(obj, "inputs"), path_key(path, "inputs"), names, "block op");
      Attrs attrs = decode_attrs(obj, path, kind);
      index = at_path(
          path, [&] { return bb.op(kind, in, attrs, name); }, name_path);
      break;
    }
  }
  names.emplace(bb.peek().ops[index].name, index);
}

void decode_graph_defined(const json& obj, const std::string& path, KernelGraphBuilder& kb,
                          std::map<std::string, int, std::less<>>& tensors, Arch arch) {
  check_keys(obj, path, {"name", "op", "inputs", "grid", "block_threads", "loop", "block_ops"});
  std::string name = get_string(require(obj, path, "name"), path_key(path, "name"));
  std::vector<int> ins =
      resolve_names(&require(obj, path, "inputs"), path_key(path, "inputs"), tensors, "tensor");
  const OpInfo& info = op_info(OpKind::GraphDefined);
  if (static_cast<int>(ins.size()) < info.min_inputs ||
      static_cast<int>(ins.size()) > info.max_inputs)
    fail(ErrorCode::Op, path_key(path, "inputs"),
         fmt::format("a graph-defined op takes {} to {} inputs, given {}", info.min_inputs,
                     info.max_inputs, ins.size()));
  std::vector<TensorDesc> descs;
  std::vector<std::string> in_names;
  for (int t : ins) {
    descs.push_back(kb.peek().tensor(t));
    in_names.push_back(kb.peek().tensor(t).name);
  }
  std::vector<int64_t> grid = get_int64_list(require(obj, path, "grid"), path_key(path, "grid"));
  int threads = 128;
  if (const json* b = find_key(obj, "block_threads"))
    threads = get_small_int(*b, path_key(path, "block_threads"));
  std::vector<int64_t> loop;
  if (const json* l = find_key(obj, "loop")) loop = get_int64_list(*l, path_key(path, "loop"));

  BlockGraphBuilder bb = at_path(path, [&] {
    return BlockGraphBuilder(std::move(grid), threads, std::move(loop), std::move(descs));
  });
  std::string ops_path = path_key(path, "block_ops");
  const json& ops = expect_array(require(obj, path, "block_ops"), ops_path);
  std::map<std::string, int, std::less<>> names;
  std::vector<std::string> saver_paths;
  for (size_t k = 0; k < ops.size(); ++k)
    decode_block_op(ops[k], path_index(ops_path, k), bb, names, in_names, saver_paths);
  // A saved tensor must not reuse a name of the kernel graph; say so at the saver, not the kernel.
  const std::vector<TensorDesc>& outs_desc = bb.peek().outputs;
  for (size_t i = 0; i < outs_desc.size() && i < saver_paths.size(); ++i)
    if (tensors.count(outs_desc[i].name))
      fail(ErrorCode::Name, saver_paths[i],
           fmt::format("duplicate name \"{}\": a tensor of that name already exists",
                       outs_desc[i].name));
  auto block = at_path(path, [&] {
    return std::make_shared<const BlockGraph>(std::move(bb).finish(target_for(arch)));
  });
  std::vector<int> outs = at_path(
      path, [&] { return kb.graph_defined(block, ins, name); }, path_key(path, "name"));
  for (int t : outs) tensors.emplace(kb.peek().tensor(t).name, t);
}

void decode_kernel_op(const json& v, const std::string& path, KernelGraphBuilder& kb,
                      std::map<std::string, int, std::less<>>& tensors, Arch arch) {
  const json& obj = expect_object(v, path, "a kernel op");
  OpKind kind = decode_op_name(obj, path, kKernel);
  const OpInfo& info = op_info(kind);
  if (info.cls == OpClass::GraphDefined) return decode_graph_defined(obj, path, kb, tensors, arch);
  if (!(info.levels & kKernel))
    fail(ErrorCode::Op, path_key(path, "op"),
         fmt::format("{} is a block op; it can only appear in a graph-defined op's block_ops",
                     info.name));
  check_keys(obj, path, {"name", "op", "inputs", "attrs", "dtype"});
  std::string name = get_string(require(obj, path, "name"), path_key(path, "name"));
  std::vector<int> in =
      resolve_names(find_key(obj, "inputs"), path_key(path, "inputs"), tensors, "tensor");
  Attrs attrs = decode_attrs(obj, path, kind);
  std::optional<DType> dtype;
  if (const json* d = find_key(obj, "dtype")) dtype = get_dtype(*d, path_key(path, "dtype"));
  int t = at_path(
      path, [&] { return kb.op(kind, in, attrs, name, dtype); }, path_key(path, "name"));
  tensors.emplace(kb.peek().tensor(t).name, t);
}

KernelGraph decode_graph(const json& j) {
  expect_object(j, "", "a mugraph file");
  check_keys(j, "", {"format", "name", "doc", "target", "inputs", "kernels", "outputs"});
  const json& format = require(j, "", "format");
  if (!format.is_string() || format.get<std::string>() != kFormat) {
    std::string got = format.is_string() ? format.get<std::string>() : std::string();
    fail(ErrorCode::Schema, "format", fmt::format("format is {}", json_brief(format)),
         got == "spec/1" ? "this is a spec; load it as one (load_graph_file does)"
                         : fmt::format("this Kiln reads \"{}\"", kFormat));
  }
  std::string name = get_string(require(j, "", "name"), "name");
  std::string doc;
  if (const json* d = find_key(j, "doc")) doc = get_string(*d, "doc");
  Arch arch = Arch::Sm90a;
  if (const json* t = find_key(j, "target")) {
    std::string s = get_string(*t, "target");
    auto a = arch_from_name(s);
    if (!a)
      fail(ErrorCode::Schema, "target", fmt::format("unknown target \"{}\"", printable(s)),
           "sm_90a or sm_80");
    arch = *a;
  }
  KernelGraphBuilder kb = at_path("name", [&] { return KernelGraphBuilder(name, doc, arch); });
  std::map<std::string, int, std::less<>> tensors;

  const json& inputs = expect_array(require(j, "", "inputs"), "inputs");
  if (inputs.empty()) fail(ErrorCode::Schema, "inputs", "a graph needs at least one input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string p = path_index("inputs", i);
    const json& in = expect_object(inputs[i], p, "an input");
    check_keys(in, p, {"name", "shape", "dtype"});
    std::string n = get_string(require(in, p, "name"), path_key(p, "name"));
    Shape shape = get_int64_list(require(in, p, "shape"), path_key(p, "shape"));
    DType dtype = get_dtype(require(in, p, "dtype"), path_key(p, "dtype"));
    int t = at_path(
        path_key(p, "shape"), [&] { return kb.input(n, shape, dtype); }, path_key(p, "name"));
    tensors.emplace(n, t);
  }

  const json& kernels = expect_array(require(j, "", "kernels"), "kernels");
  for (size_t k = 0; k < kernels.size(); ++k)
    decode_kernel_op(kernels[k], path_index("kernels", k), kb, tensors, arch);

  const json& outputs = expect_array(require(j, "", "outputs"), "outputs");
  if (outputs.empty()) fail(ErrorCode::Schema, "outputs", "a graph needs at least one output");
  for (int t : resolve_names(&outputs, "outputs", tensors, "tensor")) kb.output(t);
  return std::move(kb).finish();
}

// ---------------------------------------------------------------------------------------------
// Encoding

ojson encode_block_op(const KernelGraph& g, const KernelOp& kop, const BlockGraph& bg,
                      const BlockOp& op) {
  ojson o = ojson::object();
  o["name"] = op.name;
  o["op"] = op_name(op.kind);
  auto input_names = [&] {
    ojson a = ojson::array();
    for (int i : op.inputs) a.push_back(bg.ops.at(i).name);
    return a;
  };
  switch (op_info(op.kind).cls) {
    case OpClass::Input: {
      // By name, unless the kernel reads the same tensor twice.
      const std::string& t = g.tensor(kop.inputs.at(op.io)).name;
      int uses = 0;
      for (int i : kop.inputs) uses += g.tensor(i).name == t;
      if (uses == 1)
        o["input"] = t;
      else
        o["input"] = op.io;
      o["imap"] = op.imap;
      o["fmap"] = op.fmap;
      break;
    }
    case OpClass::Output: {
      const TensorDesc& t = bg.outputs.at(op.io);
      o["inputs"] = input_names();
      o["output"] = t.name;
      o["dtype"] = dtype_name(t.dtype);
      if (t.shape.size() != op.shape.size()) o["rank"] = t.shape.size();
      o["omap"] = op.imap;
      o["fmap"] = op.fmap;
      break;
    }
    case OpClass::Fused: {
      KILN_ASSERT(op.thread != nullptr, "fused op {} without a thread graph", op.name);
      o["inputs"] = input_names();
      ojson ts = ojson::array();
      for (const ThreadOp& t : op.thread->ops) {
        ojson to = ojson::object();
        to["op"] = op_name(t.kind);
        if (!t.inputs.empty()) to["inputs"] = t.inputs;
        ojson attrs = encode_attrs(t.kind, t.attrs);
        if (!attrs.empty()) to["attrs"] = std::move(attrs);
        ts.push_back(std::move(to));
      }
      o["thread_ops"] = std::move(ts);
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
    case OpClass::Accum: {
      if (!op.inputs.empty()) o["inputs"] = input_names();
      ojson attrs = encode_attrs(op.kind, op.attrs);
      if (!attrs.empty()) o["attrs"] = std::move(attrs);
      break;
    }
  }
  return o;
}

// is_const[t]: tensor t is a constant op's result (the dtype rule skips those inputs).
ojson encode_kernel_op(const KernelGraph& g, const KernelOp& op,
                       const std::vector<bool>& is_const) {
  ojson o = ojson::object();
  o["name"] = op.name;
  o["op"] = op_name(op.kind);
  ojson ins = ojson::array();
  for (int t : op.inputs) ins.push_back(g.tensor(t).name);
  if (op.kind != OpKind::GraphDefined) {
    if (!ins.empty()) o["inputs"] = std::move(ins);
    ojson attrs = encode_attrs(op.kind, op.attrs);
    if (!attrs.empty()) o["attrs"] = std::move(attrs);
    // A storage type other than the spec rule's (store_exact_intermediates) is written out.
    std::vector<DType> dts;
    std::vector<bool> in_const;
    for (int t : op.inputs) {
      dts.push_back(g.tensor(t).dtype);
      in_const.push_back(is_const[t]);
    }
    const DType dt = g.tensor(op.outputs[0]).dtype;
    if (dt != infer_op_dtype(op.kind, dts, in_const)) o["dtype"] = dtype_name(dt);
    return o;
  }
  KILN_ASSERT(op.block != nullptr, "graph-defined op {} without a block graph", op.name);
  const BlockGraph& bg = *op.block;
  o["inputs"] = std::move(ins);
  o["grid"] = bg.grid;
  o["block_threads"] = bg.block_threads;
  o["loop"] = bg.loop;
  ojson bops = ojson::array();
  for (const BlockOp& b : bg.ops) bops.push_back(encode_block_op(g, op, bg, b));
  o["block_ops"] = std::move(bops);
  return o;
}

ojson encode_graph(const KernelGraph& g) {
  ojson o = ojson::object();
  o["format"] = kFormat;
  o["name"] = g.name;
  if (!g.doc.empty()) o["doc"] = g.doc;
  o["target"] = target_for(g.arch).name;
  ojson ins = ojson::array();
  for (int t : g.inputs) {
    const TensorDesc& d = g.tensor(t);
    ins.push_back(ojson{{"name", d.name}, {"shape", d.shape}, {"dtype", dtype_name(d.dtype)}});
  }
  o["inputs"] = std::move(ins);
  ojson ks = ojson::array();
  std::vector<bool> is_const(g.tensors.size(), false);
  for (const KernelOp& op : g.ops)
    if (op.kind == OpKind::Constant) is_const[op.outputs[0]] = true;
  for (const KernelOp& op : g.ops) ks.push_back(encode_kernel_op(g, op, is_const));
  o["kernels"] = std::move(ks);
  ojson outs = ojson::array();
  for (int t : g.outputs) outs.push_back(g.tensor(t).name);
  o["outputs"] = std::move(outs);
  return o;
}

json to_unordered(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::object: {
      json o = json::object();
      for (const auto& [k, x] : v.items()) o[k] = to_unordered(x);
      return o;
    }
    case ojson::value_t::array: {
      json a = json::array();
      for (const auto& x : v) a.push_back(to_unordered(x));
      return a;
    }
    case ojson::value_t::string:
      return v.get<std::string>();
    case ojson::value_t::boolean:
      return v.get<bool>();
    case ojson::value_t::number_integer:
      return v.get<int64_t>();
    case ojson::value_t::number_unsigned:
      return v.get<uint64_t>();
    case ojson::value_t::number_float:
      return v.get<double>();
    default:
      return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------
// Pretty printing, in the layout people use when they write these files by hand: a value goes on
// one line when it fits in kWidth columns. Otherwise the top levels (the file, its kernels) put
// one member per line, and block and thread ops, which are many and short, are filled: members
// are packed onto lines that continue one column right of the "{", and a member too long for a
// line of its own is broken the same way one level down (a fused op's thread_ops: one per line).

constexpr size_t kWidth = 100;
constexpr size_t kFillDepth = 4;  // file 0, kernels 1, a kernel 2, block_ops 3, a block op 4

std::string scalar_text(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string compact(const ojson& v) {
  if (v.is_object()) {
    if (v.empty()) return "{}";
    std::string s = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) s += ", ";
      first = false;
      s += scalar_text(ojson(k)) + ": " + compact(x);
    }
    return s + "}";
  }
  if (v.is_array()) {
    if (v.empty()) return "[]";
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + compact(v[i]);
    return s + "]";
  }
  return scalar_text(v);
}

void pretty(const ojson& v, size_t indent, size_t col, size_t depth, std::string& out,
            bool force_break = false);

// An object whose "{" is at column `col`, filled as described above.
void fill_object(const ojson& v, size_t col, size_t depth, std::string& out) {
  size_t cont = col + 1, cur = col + 1, i = 0;
  bool after_break = false;
  out += "{";
  for (const auto& [k, x] : v.items()) {
    bool first = i == 0, last = ++i == v.size();
    std::string key = scalar_text(ojson(k)) + ": ";
    std::string text = key + compact(x);
    size_t tail = last ? 2 : 1;  // room for "," or "},"
    if (!first) {
      out += ",";
      if (!after_break && cur + 2 + text.size() + tail <= kWidth) {
        out += " ";
        cur += 2;
      } else {
        out += "\n" + std::string(cont, ' ');
        cur = cont;
      }
    }
    // A list of objects (thread_ops) gets a line per object, like block_ops one level up.
    bool list_of_objects = x.is_array() && !x.empty() && x[0].is_object();
    if (!list_of_objects && cur + text.size() + tail <= kWidth) {
      out += text;
      cur += text.size();
      after_break = false;
    } else {
      out += key;
      pretty(x, cont, cur + key.size(), depth + 1, out, list_of_objects);
      after_break = true;
    }
  }
  out += "}";
}

// Appends `v`, which starts at column `col` on a line indented by `indent`.
void pretty(const ojson& v, size_t indent, size_t col, size_t depth, std::string& out,
            bool force_break) {
  std::string one = compact(v);
  // The top level always breaks; elsewhere leave room for a trailing comma.
  if ((depth > 0 && !force_break && col + one.size() + 1 <= kWidth) || v.empty() ||
      !(v.is_object() || v.is_array())) {
    out += one;
    return;
  }
  bool obj = v.is_object();
  if (obj && depth >= kFillDepth) return fill_object(v, col, depth, out);
  std::string pad(indent + 2, ' ');
  out += obj ? "{\n" : "[\n";
  bool first = true;
  for (const auto& [k, x] : v.items()) {
    if (!first) out += ",\n";
    first = false;
    out += pad;
    size_t c = pad.size();
    if (obj) {
      std::string key = scalar_text(ojson(k)) + ": ";
      out += key;
      c += key.size();
    }
    pretty(x, indent + 2, c, depth + 1, out);
  }
  out += "\n" + std::string(indent, ' ') + (obj ? "}" : "]");
}

}  // namespace

nlohmann::json mugraph_to_json(const KernelGraph& g) {
  return to_unordered(encode_graph(g));
}

KernelGraph mugraph_from_json(const nlohmann::json& j, const std::string& file) {
  try {
    return decode_graph(j);
  } catch (UserError& e) {
    e.with_file(file);
    throw;
  }
}

std::string write_mugraph(const KernelGraph& g) {
  std::string out;
  pretty(encode_graph(g), 0, 0, 0, out);
  return out + "\n";
}

KernelGraph parse_mugraph(std::string_view text, const std::string& file) {
  return mugraph_from_json(parse_json_text(text, file), file);
}

KernelGraph load_graph_file(const std::string& path) {
  std::string text = read_file_text(path);
  json j = parse_json_text(text, path);
  const json* format = j.is_object() ? find_key(j, "format") : nullptr;
  if (!format || (format->is_string() && format->get<std::string>() == "spec/1"))
    return parse_spec(text, path);
  if (format->is_string() && format->get<std::string>() == kFormat)
    return mugraph_from_json(j, path);
  UserError e(ErrorCode::Schema, fmt::format("unknown format {}", json_brief(*format)),
              fmt::format("\"spec/1\" or \"{}\"", kFormat));
  e.with_path("format").with_file(path);
  throw e;
}

}  // namespace kiln
