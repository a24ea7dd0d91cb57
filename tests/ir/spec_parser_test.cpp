// What the spec parser accepts: every example of the public suite, every op of the vocabulary
// with its attrs, negative dims, broadcasting, the dtype rule and the dtype aliases. The
// rejections are pinned in spec_errors_test.cpp.
#include <filesystem>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

KernelGraph parse(const std::string& text) {
  try {
    return parse_spec(text, "test.json");
  } catch (const UserError& e) {
    ADD_FAILURE() << e.render();
    throw;
  }
}

// A spec named "t" with the given inputs, nodes and outputs (JSON list bodies).
std::string spec(const std::string& inputs, const std::string& nodes, const std::string& outputs) {
  return R"({"name": "t", "inputs": [)" + inputs + R"(], "nodes": [)" + nodes +
         R"(], "outputs": [)" + outputs + "]}";
}

const TensorDesc& tensor(const KernelGraph& g, const std::string& name) {
  int id = g.find_tensor(name);
  EXPECT_GE(id, 0) << name;
  return g.tensor(id);
}

const KernelOp& op_named(const KernelGraph& g, const std::string& name) {
  for (const KernelOp& op : g.ops)
    if (op.name == name) return op;
  ADD_FAILURE() << "no op " << name;
  return g.ops.front();
}

std::vector<fs::path> example_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "examples"))
    if (e.path().extension() == ".json" && e.path().stem().extension() != ".mugraph")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(SpecParser, EveryExampleParsesAsAnFp16SpecNamedLikeItsFile) {
  // examples/ also holds reference μGraphs (*.mugraph.json); those are the codec's to test.
  std::vector<fs::path> files = example_files();
  // 3 rmsnorm_linear + 4 gated_mlp + 3 gqa + lora + 4 add_rmsnorm + 12 skinny_gemm + default +
  // 3 double_norm (the benchmark suite, all f16) + activations (Kiln's extension ops, bf16, f32)
  // + attention_softmax and rms_qk_attention (issue 16's attention specs) + linear_mean (bf16,
  // m 16 and 1024) and lowrank (issue 17's algebra cases) + 4 linear_act and 3 swiglu (bf16,
  // nn.Linear layout; issue 15) + attention_keys3000 and gqa_keys4032 (attention at key counts
  // the 64-key chunks or the schedule cap did not fit, session 16) + qk_norm_attention (weighted
  // QK norms, session 22). examples/nn_linear/ holds the nn.Linear twins of the f16 matmul cases
  // (TwinsOfTheMatmulCases).
  EXPECT_EQ(files.size(), 47u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    KernelGraph g = parse_spec_file(f.string());
    EXPECT_EQ(g.name, f.stem().string());
    EXPECT_FALSE(g.doc.empty());
    EXPECT_EQ(g.doc.find('\n'), std::string::npos);
    EXPECT_TRUE(g.is_spec());
    if (g.name == "activations" || g.name.rfind("linear_", 0) == 0 ||
        g.name.rfind("swiglu", 0) == 0)
      continue;  // bf16
    // Inputs and outputs are f16; an intermediate is f16 or, where its range is unbounded
    // (store_unbounded_intermediates: attention's exponentials) or it is a constant, f32.
    for (int t : g.inputs) EXPECT_EQ(g.tensor(t).dtype, DType::F16) << g.tensor(t).name;
    for (int t : g.outputs) EXPECT_EQ(g.tensor(t).dtype, DType::F16) << g.tensor(t).name;
    const bool attention =
        g.name.rfind("gqa", 0) == 0 || g.name.find("attention") != std::string::npos;
    for (const TensorDesc& t : g.tensors)
      EXPECT_TRUE(t.dtype == DType::F16 || (t.dtype == DType::F32 && attention)) << t.name;
  }
}

// examples/nn_linear/NAME.json is examples/NAME.json with every matmul weight stored as nn.Linear
// keeps it, (N, K), and read through a transpose (scripts/nn_linear_variants.py): the same
// inputs otherwise, the same outputs, one transpose per weight.
TEST(SpecParser, TwinsOfTheMatmulCases) {
  int twins = 0;
  for (const auto& e :
       fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "examples" / "nn_linear")) {
    SCOPED_TRACE(e.path().string());
    KernelGraph nk = parse_spec_file(e.path().string());
    KernelGraph kn =
        parse_spec_file((fs::path(KILN_SOURCE_DIR) / "examples" / e.path().filename()).string());
    EXPECT_EQ(nk.name, kn.name + "_nk");
    ASSERT_EQ(nk.inputs.size(), kn.inputs.size());
    // Each transpose reads an input whose shape is its twin's, swapped; every other input is
    // unchanged.
    std::set<int> weights;
    for (const KernelOp& op : nk.ops) {
      if (op.kind != OpKind::Transpose) continue;
      auto it = std::find(nk.inputs.begin(), nk.inputs.end(), op.inputs[0]);
      ASSERT_NE(it, nk.inputs.end());
      weights.insert(static_cast<int>(it - nk.inputs.begin()));
    }
    EXPECT_GE(weights.size(), 1u);
    for (size_t i = 0; i < kn.inputs.size(); ++i) {
      const TensorDesc &a = kn.tensor(kn.inputs[i]), &b = nk.tensor(nk.inputs[i]);
      EXPECT_EQ(a.dtype, b.dtype);
      const Shape want =
          weights.count(static_cast<int>(i)) ? Shape{a.shape[1], a.shape[0]} : a.shape;
      EXPECT_EQ(b.shape, want);
    }
    ASSERT_EQ(nk.outputs.size(), kn.outputs.size());
    for (size_t i = 0; i < kn.outputs.size(); ++i)
      EXPECT_EQ(nk.tensor(nk.outputs[i]).shape, kn.tensor(kn.outputs[i]).shape);
    ++twins;
  }
  // 3 rmsnorm_linear + 4 gated_mlp + lora + lowrank + 13 skinny_gemm.
  EXPECT_EQ(twins, 22);
}

TEST(SpecParser, ExamplesHaveTheBenchmarkShapes) {
  auto load = [](const std::string& name) {
    return parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/" + name + ".json");
  };
  auto output_shapes = [](const KernelGraph& g) {
    std::vector<Shape> shapes;
    for (int id : g.outputs) shapes.push_back(g.tensor(id).shape);
    return shapes;
  };
  using Shapes = std::vector<Shape>;

  KernelGraph rl = load("rmsnorm_linear");
  EXPECT_EQ(output_shapes(rl), (Shapes{{2, 6144}}));
  ASSERT_EQ(rl.ops.size(), 2u);
  EXPECT_EQ(rl.ops[0].kind, OpKind::RmsNorm);
  EXPECT_EQ(rl.ops[0].attrs.eps, 1e-6);
  EXPECT_EQ(rl.ops[1].kind, OpKind::MatMul);
  EXPECT_EQ(output_shapes(load("rmsnorm_linear_bs8")), (Shapes{{16, 6144}}));
  EXPECT_EQ(output_shapes(load("rmsnorm_linear_bs16")), (Shapes{{32, 6144}}));

  for (int m : {1, 8, 16, 4096}) {
    KernelGraph g = load(m == 1 ? "gated_mlp" : "gated_mlp_m" + std::to_string(m));
    EXPECT_EQ(output_shapes(g), (Shapes{{m, 4096}}));
    EXPECT_EQ(op_named(g, "S").kind, OpKind::Silu);
  }

  for (int bs : {1, 8, 16}) {
    KernelGraph g = load(bs == 1 ? "gqa" : "gqa_bs" + std::to_string(bs));
    EXPECT_EQ(output_shapes(g), (Shapes{{2 * bs, 256, 64}}));
    EXPECT_EQ(tensor(g, "S").shape, (Shape{2 * bs, 256, 4096}));
    EXPECT_EQ(tensor(g, "L").shape, (Shape{2 * bs, 256, 1}));
    EXPECT_EQ(op_named(g, "L").attrs.dim, 2);  // -1 normalized
  }

  EXPECT_EQ(output_shapes(load("lora")), (Shapes{{16, 4096}}));
  EXPECT_EQ(tensor(load("lora"), "XA").shape, (Shape{16, 16}));

  for (int n : {1, 16, 256, 2048}) {
    KernelGraph g = load(n == 1 ? "add_rmsnorm" : "add_rmsnorm_n" + std::to_string(n));
    EXPECT_EQ(output_shapes(g), (Shapes{{n, 16384}, {n, 16384}}));
    EXPECT_EQ(g.tensor(g.outputs[1]).name, "H");
    EXPECT_EQ(op_named(g, "Y").inputs.size(), 2u);
  }

  for (int n : {1, 16, 128}) {
    KernelGraph g = load(n == 1 ? "double_norm" : "double_norm_n" + std::to_string(n));
    EXPECT_EQ(output_shapes(g), (Shapes{{n, 8192}}));
    EXPECT_EQ(op_named(g, "N1").kind, OpKind::RmsNorm);
    EXPECT_EQ(op_named(g, "O").kind, OpKind::RmsNorm);
  }

  EXPECT_EQ(output_shapes(load("skinny_gemm")), (Shapes{{1, 2304}}));
  for (auto [n, k] : {std::pair{2304, 16384}, {13312, 16384}, {16384, 6656}}) {
    for (int m : {1, 8, 16, 32}) {
      KernelGraph g = load(fmt::format("skinny_gemm_n{}_k{}_m{}", n, k, m));
      EXPECT_EQ(output_shapes(g), (Shapes{{m, n}}));
      EXPECT_EQ(tensor(g, "W").shape, (Shape{k, n}));
    }
  }
}

// One node per op (and per attr form) of the spec vocabulary.
TEST(SpecParser, AcceptsEveryOpWithItsAttrs) {
  const std::string nodes = R"(
    {"name": "mm", "op": "matmul", "inputs": ["A", "B"]},
    {"name": "tr", "op": "transpose", "inputs": ["A"]},
    {"name": "trp", "op": "transpose", "inputs": ["T3"], "attrs": {"perm": [2, 0, 1]}},
    {"name": "ad", "op": "add", "inputs": ["A", "A"]},
    {"name": "sb", "op": "sub", "inputs": ["A", "A"]},
    {"name": "ml", "op": "mul", "inputs": ["A", "A"]},
    {"name": "dv", "op": "div", "inputs": ["A", "A"]},
    {"name": "mx", "op": "maximum", "inputs": ["A", "A"]},
    {"name": "mn", "op": "minimum", "inputs": ["A", "A"]},
    {"name": "c", "op": "constant", "attrs": {"value": -2.5}},
    {"name": "ci", "op": "constant", "inputs": [], "attrs": {"value": 3}},
    {"name": "ng", "op": "neg", "inputs": ["A"]},
    {"name": "ex", "op": "exp", "inputs": ["A"]},
    {"name": "lg", "op": "log", "inputs": ["A"]},
    {"name": "sq", "op": "sqrt", "inputs": ["A"]},
    {"name": "rs", "op": "rsqrt", "inputs": ["A"]},
    {"name": "rc", "op": "reciprocal", "inputs": ["A"]},
    {"name": "sr", "op": "square", "inputs": ["A"]},
    {"name": "th", "op": "tanh", "inputs": ["A"]},
    {"name": "sg", "op": "sigmoid", "inputs": ["A"]},
    {"name": "sl", "op": "silu", "inputs": ["A"]},
    {"name": "rl", "op": "relu", "inputs": ["A"]},
    {"name": "ge", "op": "gelu", "inputs": ["A"]},
    {"name": "gn", "op": "gelu", "inputs": ["A"], "attrs": {"approximate": "none"}},
    {"name": "gt", "op": "gelu", "inputs": ["A"], "attrs": {"approximate": "tanh"}},
    {"name": "lr", "op": "leaky_relu", "inputs": ["A"]},
    {"name": "lrs", "op": "leaky_relu", "inputs": ["A"], "attrs": {"negative_slope": 0.2}},
    {"name": "cl", "op": "clamp", "inputs": ["A"], "attrs": {"min": -1, "max": 1.5}},
    {"name": "clmin", "op": "clamp", "inputs": ["A"], "attrs": {"min": 0}},
    {"name": "clmax", "op": "clamp", "inputs": ["A"], "attrs": {"max": 6}},
    {"name": "cln", "op": "clamp", "inputs": ["A"]},
    {"name": "sp", "op": "softplus", "inputs": ["A"]},
    {"name": "si", "op": "sin", "inputs": ["A"]},
    {"name": "co", "op": "cos", "inputs": ["A"]},
    {"name": "ln", "op": "layer_norm", "inputs": ["A", "w", "w"], "attrs": {"eps": 1e-6}},
    {"name": "su", "op": "sum", "inputs": ["A"], "attrs": {"dim": 1}},
    {"name": "me", "op": "mean", "inputs": ["A"], "attrs": {"dim": 0, "keepdim": false}},
    {"name": "ma", "op": "max", "inputs": ["A"], "attrs": {"dim": -1, "keepdim": true}},
    {"name": "smx", "op": "softmax", "inputs": ["A"]},
    {"name": "smx0", "op": "softmax", "inputs": ["A"], "attrs": {"dim": 0}},
    {"name": "rn", "op": "rms_norm", "inputs": ["A"]},
    {"name": "rnw", "op": "rms_norm", "inputs": ["A", "w"], "attrs": {"eps": 1e-5}}
  )";
  const std::string inputs = R"(
    {"name": "A", "shape": [2, 3], "dtype": "f32"},
    {"name": "B", "shape": [3, 5], "dtype": "f32"},
    {"name": "T3", "shape": [2, 3, 4], "dtype": "f32"},
    {"name": "w", "shape": [3], "dtype": "f32"}
  )";
  KernelGraph g = parse(spec(inputs, nodes, R"("mm", "rnw")"));

  // Every predefined kernel op of the table appears above.
  std::set<OpKind> seen;
  for (const KernelOp& op : g.ops) seen.insert(op.kind);
  for (const OpInfo& info : all_ops()) {
    if ((info.levels & kKernel) && info.cls != OpClass::GraphDefined) {
      EXPECT_TRUE(seen.count(info.kind)) << info.name << " is not covered";
    }
  }

  EXPECT_EQ(tensor(g, "mm").shape, (Shape{2, 5}));
  EXPECT_EQ(tensor(g, "tr").shape, (Shape{3, 2}));
  EXPECT_EQ(op_named(g, "tr").attrs.perm, (std::vector<int>{1, 0}));
  EXPECT_EQ(tensor(g, "trp").shape, (Shape{4, 2, 3}));
  EXPECT_EQ(tensor(g, "c").shape, Shape{});
  EXPECT_EQ(op_named(g, "c").attrs.value, -2.5);
  EXPECT_EQ(op_named(g, "ci").attrs.value, 3.0);
  EXPECT_EQ(op_named(g, "ge").attrs.approximate, GeluApprox::None);
  EXPECT_EQ(op_named(g, "gn").attrs.approximate, GeluApprox::None);
  EXPECT_EQ(op_named(g, "gt").attrs.approximate, GeluApprox::Tanh);
  EXPECT_EQ(op_named(g, "lr").attrs.negative_slope, 0.01);
  EXPECT_EQ(op_named(g, "lrs").attrs.negative_slope, 0.2);
  EXPECT_EQ(op_named(g, "cl").attrs.min, -1.0);
  EXPECT_EQ(op_named(g, "cl").attrs.max, 1.5);
  EXPECT_EQ(op_named(g, "clmin").attrs.max, std::nullopt);
  EXPECT_EQ(op_named(g, "clmax").attrs.min, std::nullopt);
  EXPECT_EQ(op_named(g, "cln").attrs, Attrs{});
  EXPECT_EQ(tensor(g, "su").shape, (Shape{2, 1}));
  EXPECT_EQ(tensor(g, "me").shape, (Shape{3}));
  EXPECT_FALSE(op_named(g, "me").attrs.keepdim);
  EXPECT_EQ(tensor(g, "ma").shape, (Shape{2, 1}));
  EXPECT_EQ(op_named(g, "smx").attrs.dim, 1);
  EXPECT_EQ(op_named(g, "smx0").attrs.dim, 0);
  EXPECT_EQ(op_named(g, "rn").attrs.eps, 1e-6);
  EXPECT_EQ(op_named(g, "rnw").attrs.eps, 1e-5);
  EXPECT_EQ(tensor(g, "rnw").shape, (Shape{2, 3}));
  for (const char* unary : {"ng", "ex", "lg", "sq", "rs", "rc", "sr", "th", "sg", "sl", "rl"})
    EXPECT_EQ(tensor(g, unary).shape, (Shape{2, 3})) << unary;
}

TEST(SpecParser, NegativeDimsAreNormalized) {
  KernelGraph g = parse(spec(R"({"name": "X", "shape": [2, 3, 4], "dtype": "f16"})", R"(
    {"name": "a", "op": "sum", "inputs": ["X"], "attrs": {"dim": -1}},
    {"name": "b", "op": "max", "inputs": ["X"], "attrs": {"dim": -3, "keepdim": false}},
    {"name": "c", "op": "softmax", "inputs": ["X"], "attrs": {"dim": -2}},
    {"name": "d", "op": "transpose", "inputs": ["X"], "attrs": {"perm": [-1, 0, -2]}})",
                             R"("a", "b", "c", "d")"));
  EXPECT_EQ(op_named(g, "a").attrs.dim, 2);
  EXPECT_EQ(tensor(g, "a").shape, (Shape{2, 3, 1}));
  EXPECT_EQ(op_named(g, "b").attrs.dim, 0);
  EXPECT_EQ(tensor(g, "b").shape, (Shape{3, 4}));
  EXPECT_EQ(op_named(g, "c").attrs.dim, 1);
  EXPECT_EQ(op_named(g, "d").attrs.perm, (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(tensor(g, "d").shape, (Shape{4, 2, 3}));
}

TEST(SpecParser, BroadcastsLikeNumpy) {
  KernelGraph g = parse(spec(R"(
    {"name": "A", "shape": [4, 1, 3], "dtype": "f16"},
    {"name": "B", "shape": [5, 1], "dtype": "f16"},
    {"name": "S", "shape": [], "dtype": "f16"},
    {"name": "M", "shape": [3, 1, 2, 4], "dtype": "f16"},
    {"name": "N", "shape": [5, 4, 6], "dtype": "f16"})",
                             R"(
    {"name": "ab", "op": "add", "inputs": ["A", "B"]},
    {"name": "sa", "op": "mul", "inputs": ["S", "A"]},
    {"name": "mn", "op": "matmul", "inputs": ["M", "N"]})",
                             R"("ab", "sa", "mn")"));
  EXPECT_EQ(tensor(g, "S").shape, Shape{});
  EXPECT_EQ(tensor(g, "ab").shape, (Shape{4, 5, 3}));
  EXPECT_EQ(tensor(g, "sa").shape, (Shape{4, 1, 3}));
  EXPECT_EQ(tensor(g, "mn").shape, (Shape{3, 5, 2, 6}));
}

TEST(SpecParser, ResultDtypeIsTheFirstNonConstantInput) {
  KernelGraph g = parse(spec(R"(
    {"name": "H", "shape": [4], "dtype": "f16"},
    {"name": "B", "shape": [4], "dtype": "bf16"},
    {"name": "F", "shape": [4], "dtype": "f32"})",
                             R"(
    {"name": "two", "op": "constant", "attrs": {"value": 2}},
    {"name": "half", "op": "constant", "attrs": {"value": 0.5}},
    {"name": "ch", "op": "mul", "inputs": ["two", "H"]},
    {"name": "hc", "op": "div", "inputs": ["H", "two"]},
    {"name": "bf", "op": "add", "inputs": ["B", "F"]},
    {"name": "fb", "op": "add", "inputs": ["F", "B"]},
    {"name": "cc", "op": "mul", "inputs": ["two", "half"]},
    {"name": "cb", "op": "maximum", "inputs": ["half", "B"]},
    {"name": "e", "op": "exp", "inputs": ["B"]},
    {"name": "ec", "op": "exp", "inputs": ["two"]})",
                             R"("ch", "hc", "bf", "fb", "cc", "cb", "e", "ec")"));
  EXPECT_EQ(tensor(g, "two").dtype, DType::F32);
  EXPECT_EQ(tensor(g, "ch").dtype, DType::F16);
  EXPECT_EQ(tensor(g, "hc").dtype, DType::F16);
  EXPECT_EQ(tensor(g, "bf").dtype, DType::BF16);
  EXPECT_EQ(tensor(g, "fb").dtype, DType::F32);
  EXPECT_EQ(tensor(g, "cc").dtype, DType::F32);
  EXPECT_EQ(tensor(g, "cb").dtype, DType::BF16);
  EXPECT_EQ(tensor(g, "e").dtype, DType::BF16);
  EXPECT_EQ(tensor(g, "ec").dtype, DType::F32);
  EXPECT_EQ(tensor(g, "cc").shape, Shape{});
}

TEST(SpecParser, AcceptsDtypeAliases) {
  const std::map<std::string, DType> names = {{"f16", DType::F16},   {"float16", DType::F16},
                                              {"bf16", DType::BF16}, {"bfloat16", DType::BF16},
                                              {"f32", DType::F32},   {"float32", DType::F32}};
  for (const auto& [name, dtype] : names) {
    KernelGraph g = parse(spec(R"({"name": "X", "shape": [2], "dtype": ")" + name + R"("})",
                               R"({"name": "Y", "op": "relu", "inputs": ["X"]})", R"("Y")"));
    EXPECT_EQ(tensor(g, "X").dtype, dtype) << name;
    EXPECT_EQ(tensor(g, "Y").dtype, dtype) << name;
  }
}

TEST(SpecParser, TopLevelDetails) {
  // format defaults to spec/1 and may be given; doc is optional; outputs may name inputs, may
  // repeat, and keep their order.
  const std::string body = R"("name": "g", "inputs": [{"name": "X", "shape": [3], "dtype": "f32"}],
      "nodes": [{"name": "Y", "op": "neg", "inputs": ["X"]}], "outputs": ["Y", "X", "Y"]})";
  KernelGraph a = parse("{" + body);
  KernelGraph b = parse(R"({"format": "spec/1", "doc": "negation", )" + body);
  EXPECT_EQ(a.doc, "");
  EXPECT_EQ(b.doc, "negation");
  ASSERT_EQ(a.outputs.size(), 3u);
  EXPECT_EQ(a.tensor(a.outputs[0]).name, "Y");
  EXPECT_EQ(a.tensor(a.outputs[1]).name, "X");
  EXPECT_EQ(a.outputs[0], a.outputs[2]);
  ASSERT_EQ(a.inputs.size(), 1u);
  EXPECT_EQ(a.tensor(a.inputs[0]).name, "X");
}

TEST(SpecParser, AcceptsAnyValidJsonLayout) {
  // Whitespace, key order, escapes, a UTF-8 byte-order mark and non-ASCII text in doc.
  KernelGraph g = parse(
      "\xEF\xBB\xBF\n\t{ \"outputs\" : [ \"Y\" ] ,\r\n "
      "\"nodes\":[{\"op\":\"exp\",\"inputs\":[\"\\u0058\"],"
      "\"name\":\"Y\"}],\"inputs\":[{\"dtype\":\"f16\",\"shape\":[1],\"name\":\"X\"}],"
      "\"doc\":\"\xCE\xBC-graph \\\"quoted\\\"\",\"name\":\"g\"}  \n");
  EXPECT_EQ(g.doc, "\xCE\xBC-graph \"quoted\"");
  EXPECT_EQ(g.ops[0].inputs, std::vector<int>{0});
}

TEST(SpecParser, NestingUpToTheLimitIsJson) {
  std::string deep(kMaxJsonDepth, '[');
  deep += std::string(kMaxJsonDepth, ']');
  nlohmann::json j = parse_json_text(deep, "deep.json");
  int depth = 0;
  for (const nlohmann::json* p = &j; p && p->is_array(); p = p->empty() ? nullptr : &p->front())
    ++depth;
  EXPECT_EQ(depth, kMaxJsonDepth);
}

TEST(SpecParser, ParsesLongChains) {
  std::string nodes;
  const int n = 5000;
  for (int i = 0; i < n; ++i)
    nodes += fmt::format(R"({}{{"name": "n{}", "op": "neg", "inputs": ["{}"]}})", i ? "," : "", i,
                         i ? fmt::format("n{}", i - 1) : "X");
  KernelGraph g = parse(spec(R"({"name": "X", "shape": [1], "dtype": "f16"})", nodes,
                             fmt::format(R"("n{}")", n - 1)));
  EXPECT_EQ(g.ops.size(), static_cast<size_t>(n));
}

}  // namespace
}  // namespace kiln
