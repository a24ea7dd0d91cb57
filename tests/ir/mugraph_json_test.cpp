// The mugraph/1 codec: exact round trips of graphs built with the builders and of every example
// file, format dispatch in load_graph_file, and the decoding diagnostics (code and JSON path).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <fmt/format.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "mugraph_samples.h"

namespace kiln {
namespace {

using json = nlohmann::json;

// Structural equality of two graphs, including every derived field of every block op.
void expect_same_graph(const KernelGraph& a, const KernelGraph& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.doc, b.doc);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.outputs, b.outputs);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const KernelOp &x = a.ops[i], &y = b.ops[i];
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    EXPECT_EQ(x.attrs, y.attrs);
    ASSERT_EQ(x.block == nullptr, y.block == nullptr);
    if (!x.block) continue;
    const BlockGraph &p = *x.block, &q = *y.block;
    EXPECT_EQ(p.grid, q.grid);
    EXPECT_EQ(p.block_threads, q.block_threads);
    EXPECT_EQ(p.loop, q.loop);
    EXPECT_EQ(p.inputs, q.inputs);
    EXPECT_EQ(p.outputs, q.outputs);
    ASSERT_EQ(p.ops.size(), q.ops.size());
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const BlockOp &u = p.ops[k], &v = q.ops[k];
      EXPECT_EQ(u.kind, v.kind);
      EXPECT_EQ(u.name, v.name);
      EXPECT_EQ(u.inputs, v.inputs);
      EXPECT_EQ(u.attrs, v.attrs) << u.name;
      EXPECT_EQ(u.io, v.io);
      EXPECT_EQ(u.imap, v.imap);
      EXPECT_EQ(u.fmap, v.fmap);
      EXPECT_EQ(u.shape, v.shape);
      EXPECT_EQ(u.stage, v.stage);
      ASSERT_EQ(u.thread == nullptr, v.thread == nullptr);
      if (u.thread) {
        EXPECT_EQ(*u.thread, *v.thread);
      }
    }
  }
}

// graph -> JSON -> graph -> JSON, through both the DOM and the text form.
void expect_round_trip(const KernelGraph& g) {
  json j1 = mugraph_to_json(g);
  KernelGraph g2 = mugraph_from_json(j1);
  EXPECT_EQ(j1, mugraph_to_json(g2));
  expect_same_graph(g, g2);
  std::string text = write_mugraph(g);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  KernelGraph g3 = parse_mugraph(text, "round_trip.json");
  EXPECT_EQ(write_mugraph(g3), text);
  EXPECT_EQ(mugraph_to_json(g3), j1);
}

TEST(MugraphJson, RoundTripsEverySample) {
  for (auto& [name, g] : samples::all()) {
    SCOPED_TRACE(name);
    expect_round_trip(g);
  }
}

TEST(MugraphJson, SamplesCoverEveryBlockAndThreadOpKind) {
  // Guards the round-trip test: adding an op to KILN_OPS without a sample using it fails here.
  std::set<OpKind> kernel, block, thread;
  for (auto& [name, g] : samples::all())
    for (const KernelOp& op : g.ops) {
      kernel.insert(op.kind);
      if (!op.block) continue;
      for (const BlockOp& b : op.block->ops) {
        block.insert(b.kind);
        if (b.thread)
          for (const ThreadOp& t : b.thread->ops) thread.insert(t.kind);
      }
    }
  for (const OpInfo& info : all_ops()) {
    if (info.cls == OpClass::Binary || info.cls == OpClass::Unary) continue;  // a sample each
    if (info.levels & kBlock) {
      EXPECT_TRUE(block.count(info.kind)) << "block op " << info.name;
    }
    if (info.levels & kKernel) {
      EXPECT_TRUE(kernel.count(info.kind)) << "kernel op " << info.name;
    }
  }
  EXPECT_TRUE(thread.count(OpKind::Constant));
  EXPECT_TRUE(thread.count(OpKind::Clamp));
  EXPECT_TRUE(thread.count(OpKind::Gelu));
  EXPECT_TRUE(thread.count(OpKind::LeakyRelu));
}

TEST(MugraphJson, WritesEveryAcceptedAttrExplicitly) {
  json j = mugraph_to_json(samples::spec_like());
  const json& ks = j["kernels"];
  auto find = [&](const std::string& n) -> const json& {
    for (const json& k : ks)
      if (k["name"] == n) return k;
    ADD_FAILURE() << "no kernel " << n;
    return ks[0];
  };
  EXPECT_EQ(find("T")["attrs"], json::parse(R"({"perm": [1, 0]})"));  // default perm filled in
  EXPECT_EQ(find("R")["attrs"], json::parse(R"({"dim": 1, "keepdim": false})"));  // normalized
  EXPECT_EQ(find("P")["attrs"], json::parse(R"({"dim": 1})"));
  EXPECT_EQ(find("G")["attrs"], json::parse(R"({"approximate": "tanh"})"));
  EXPECT_EQ(find("C")["attrs"], json::parse(R"({"min": -1.0})"));  // max unset: absent
  EXPECT_FALSE(find("Y").contains("attrs"));
  EXPECT_EQ(j["format"], "mugraph/1");
  EXPECT_EQ(j["target"], "sm_90a");
}

// Writing is linear in the number of ops: a 100k-op chain (a spec file may hold that many
// nodes) would take hours if each op's dtype check scanned the graph for its inputs' producers.
TEST(MugraphJson, WritingALongChainIsLinear) {
  KernelGraphBuilder b("chain");
  int t = b.input("X", {4}, DType::F16);
  Attrs two;
  two.value = 2.0;
  const int c = b.op(OpKind::Constant, {}, two, "two");
  for (int i = 0; i < 100000; ++i)
    t = b.op(i % 2 ? OpKind::Neg : OpKind::Mul,
             i % 2 ? std::vector<int>{t} : std::vector<int>{c, t}, {}, "n" + std::to_string(i));
  b.output(t);
  const json j = mugraph_to_json(std::move(b).finish());
  ASSERT_EQ(j["kernels"].size(), 100001u);
  EXPECT_FALSE(j["kernels"][2].contains("dtype"));  // mul(2, X) is f16 by the rule
}

TEST(MugraphJson, DoublesSurviveExactly) {
  KernelGraphBuilder b("consts");
  int x = b.input("X", {4}, DType::F32);
  for (double v : {0.1, 1.0 / 3.0, -2.5e-300, 6.02214076e23, 1e-6, 0.0}) {
    Attrs a;
    a.value = v;
    int c = b.op(OpKind::Constant, {}, a, "c" + std::to_string(b.peek().ops.size()));
    x = b.op(OpKind::Add, {x, c}, {}, "a" + std::to_string(b.peek().ops.size()));
  }
  b.output(x);
  KernelGraph g = std::move(b).finish();
  KernelGraph g2 = parse_mugraph(write_mugraph(g));
  for (size_t i = 0; i < g.ops.size(); ++i) EXPECT_EQ(g.ops[i].attrs.value, g2.ops[i].attrs.value);
}

// A predefined op stored in another dtype than the spec rule gives (store_exact_intermediates)
// writes it as "dtype", and only then.
TEST(MugraphJson, StorageDtypeOverridesRoundTrip) {
  KernelGraphBuilder b("exact");
  int bias = b.input("b", {4}, DType::F32), x = b.input("X", {2, 8}, DType::F16);
  int w = b.input("W", {8, 4}, DType::F16);
  int h = b.op(OpKind::MatMul, {x, w}, {}, "H");
  b.output(b.op(OpKind::Add, {bias, b.op(OpKind::Relu, {h}, {}, "R")}, {}, "O"));
  KernelGraph g = store_exact_intermediates(std::move(b).finish());
  ASSERT_EQ(g.tensor(g.find_tensor("H")).dtype, DType::F32);
  expect_round_trip(g);
  json j = mugraph_to_json(g);
  EXPECT_EQ(j["kernels"][0]["dtype"], "f32");
  EXPECT_FALSE(j["kernels"][1].contains("dtype"));  // relu of the f32 H is f32 by the rule
  EXPECT_FALSE(j["kernels"][2].contains("dtype"));
}

TEST(MugraphJson, ReadsByNameOrIndexAndFillsDefaults) {
  // Hand-written forms the canonical writer does not produce: input by index, no block_threads,
  // no loop, no fmap, no name for block ops, a float-typed integer constant.
  const char* text = R"({
    "format": "mugraph/1", "name": "g",
    "inputs": [{"name": "X", "shape": [8, 32], "dtype": "float16"}],
    "kernels": [{"name": "k", "op": "graph_defined", "inputs": ["X"], "grid": [2],
                 "block_ops": [
                   {"op": "input", "input": 0, "imap": [0]},
                   {"op": "exp", "inputs": ["t0"]},
                   {"op": "output", "inputs": ["t1"], "output": "Y", "dtype": "f32", "omap": [0]}]}],
    "outputs": ["Y"]})";
  KernelGraph g = parse_mugraph(text);
  const BlockGraph& bg = *g.ops[0].block;
  EXPECT_EQ(bg.block_threads, 128);
  EXPECT_TRUE(bg.loop.empty());
  EXPECT_EQ(bg.ops[1].shape, (Shape{4, 32}));
  EXPECT_EQ(g.tensor(g.outputs[0]).shape, (Shape{8, 32}));
  json j = mugraph_to_json(g);
  EXPECT_EQ(j["kernels"][0]["block_ops"][0]["input"], "X");
  EXPECT_EQ(j["kernels"][0]["block_threads"], 128);
}

TEST(MugraphJson, LoadGraphFileDispatchesOnFormat) {
  auto dir = std::filesystem::path(KILN_BINARY_DIR) / "mugraph_json_test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  std::string spec = R"({"name": "s", "inputs": [{"name": "X", "shape": [2, 3], "dtype": "f16"}],
                         "nodes": [{"name": "Y", "op": "exp", "inputs": ["X"]}], "outputs": ["Y"]})";
  EXPECT_TRUE(load_graph_file(write("spec.json", spec)).is_spec());
  KernelGraph mg = samples::flash_attention();
  KernelGraph back = load_graph_file(write("fa.mugraph.json", write_mugraph(mg)));
  EXPECT_EQ(mugraph_to_json(back), mugraph_to_json(mg));
  std::string bad = write("bad.json", R"({"format": "graph/9", "name": "x"})");
  try {
    load_graph_file(bad);
    FAIL() << "accepted an unknown format";
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema);
    EXPECT_EQ(e.path(), "format");
    EXPECT_EQ(e.file(), bad);
  }
}

// Issue 21: files are replaced whole. A rewrite leaves the new text and no temporary file; a
// failed write (the path is a directory) leaves nothing behind.
TEST(WriteFileText, ReplacesAtomicallyAndCleansUp) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(KILN_BINARY_DIR) / "write_file_text";
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  const std::string f = (dir / "x.json").string();
  write_file_text(f, std::string(1 << 20, 'a'));
  write_file_text(f, "short\n");
  std::ifstream in(f);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "short\n");
  EXPECT_THROW(write_file_text((dir / "sub").string(), "x"), UserError);
  EXPECT_THROW(write_file_text((dir / "missing" / "y.json").string(), "x"), UserError);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find("kiln-tmp"), std::string::npos) << e.path();
  }
  EXPECT_EQ(entries, 2);  // x.json and sub
}

TEST(MugraphJson, EveryExampleRoundTrips) {
  auto dir = std::filesystem::path(KILN_SOURCE_DIR) / "examples";
  int seen = 0;
  if (std::filesystem::exists(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::string file = entry.path().string();
      if (!file.ends_with(".mugraph.json")) continue;
      SCOPED_TRACE(file);
      ++seen;
      try {
        KernelGraph g = load_graph_file(file);
        EXPECT_FALSE(g.is_spec()) << "an example μGraph with no graph-defined op";
        expect_round_trip(g);
      } catch (const UserError& e) {
        ADD_FAILURE() << e.render();
      }
    }
  if (seen == 0) GTEST_SKIP() << "no examples/*.mugraph.json yet";
}

// Issue 21: reading is linear in the number of block ops. A file may hold 64 MiB, a million
// block ops; the builder's check that names are unique scanned every earlier op (and every
// earlier saver), so a long block graph took hours to read.
TEST(MugraphJson, ReadingALongBlockGraphIsLinear) {
  const int chain = 100000, savers = 20000;
  std::string ops = R"({"name": "x", "op": "input", "input": "X", "imap": [-1]})";
  for (int i = 0; i < chain; ++i)
    ops += fmt::format(R"(, {{"name": "n{}", "op": "neg", "inputs": ["{}"]}})", i,
                       i ? fmt::format("n{}", i - 1) : "x");
  for (int i = 0; i < savers; ++i)
    ops += fmt::format(
        R"(, {{"name": "s{}", "op": "output", "inputs": ["n{}"], "output": "Y{}", "dtype": "f32",
              "omap": [-1]}})",
        i, chain - 1, i);
  const std::string text = R"({"format": "mugraph/1", "name": "chain",
    "inputs": [{"name": "X", "shape": [4], "dtype": "f32"}],
    "kernels": [{"name": "k", "op": "graph_defined", "inputs": ["X"], "grid": [1],
                 "block_ops": [)" +
                           ops + R"(]}],
    "outputs": ["Y0"]})";
  KernelGraph g = parse_mugraph(text, "chain.mugraph.json");
  ASSERT_EQ(g.ops.size(), 1u);
  EXPECT_EQ(g.ops[0].block->ops.size(), size_t{1 + chain + savers});
  EXPECT_EQ(g.ops[0].block->outputs.size(), size_t{savers});
}

// ----------------------------------------------------------------------------------------------
// Decoding errors. Each starts from a valid file and breaks one thing.

json valid() {
  return mugraph_to_json(samples::tiled_matmul());
}

// block_ops of tiled_matmul: 0 x, 1 w, 2 b, 3 m, 4 a, 5 f, 6 save.
json& block_op(json& j, int k) {
  return j["kernels"][0]["block_ops"][k];
}

// An error must be fit to print: bounded, no control bytes, valid UTF-8.
void expect_presentable(const UserError& e) {
  const std::string r = e.render();
  EXPECT_LT(r.size(), 1024u) << r.substr(0, 200);
  for (char c : r) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7F) << r;
  EXPECT_NO_THROW((void)json(r).dump()) << "not UTF-8: " << r;
}

void expect_error(const json& j, ErrorCode code, const std::string& path,
                  const std::string& hint_part = {}) {
  try {
    mugraph_from_json(j, "t.mugraph.json");
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), code) << e.render();
    EXPECT_EQ(e.path(), path) << e.render();
    EXPECT_EQ(e.file(), "t.mugraph.json");
    expect_presentable(e);
    if (!hint_part.empty()) {
      EXPECT_NE(e.hint().find(hint_part), std::string::npos) << e.render();
    }
  }
}

TEST(MugraphJsonErrors, ValidBaseIsAccepted) {
  EXPECT_NO_THROW(mugraph_from_json(valid()));
}

TEST(MugraphJsonErrors, UnknownKeys) {
  json j = valid();
  block_op(j, 1)["imapp"] = json::array({1});
  expect_error(j, ErrorCode::Schema, "kernels[0].block_ops[1].imapp", "\"imap\"");
  j = valid();
  j["kernel"] = json::array();
  expect_error(j, ErrorCode::Schema, "kernel", "\"kernels\"");
  j = valid();
  j["kernels"][0]["block_ops"][5]["thread_ops"][0]["attr"] = json::object();
  expect_error(j, ErrorCode::Schema, "kernels[0].block_ops[5].thread_ops[0].attr");
}

// Issue 21 (found by kiln_fuzz_mugraph): the path of an unknown key held the key's raw bytes, so
// a tab or a megabyte-long key went into the message as is. Keys print as in the spec reader.
TEST(MugraphJsonErrors, UnknownKeysPrintSafelyInPaths) {
  const std::string huge(1 << 20, 'k');
  const std::pair<std::string, std::string> cases[] = {
      {"\ttrs", "kernels[0].block_ops[4][\"\\x09trs\"]"},
      {"a b", "kernels[0].block_ops[4][\"a b\"]"},
      {huge, "kernels[0].block_ops[4][\"" + std::string(32, 'k') + "...\"]"},
  };
  for (const auto& [key, path] : cases) {
    json j = valid();
    block_op(j, 4)[key] = json::object();
    expect_error(j, ErrorCode::Schema, path);
  }
  json j = valid();
  block_op(j, 3)["attrs"] = {{"\x7f", 1}};
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[3].attrs[\"\\x7F\"]");
}

TEST(MugraphJsonErrors, MissingOrMistypedKeys) {
  json j = valid();
  j["kernels"][0].erase("grid");
  expect_error(j, ErrorCode::Schema, "kernels[0]");
  j = valid();
  j.erase("format");
  expect_error(j, ErrorCode::Schema, "");
  j = valid();
  j["format"] = "mugraph/2";
  expect_error(j, ErrorCode::Schema, "format");
  j = valid();
  j["kernels"][0]["block_threads"] = "128";
  expect_error(j, ErrorCode::Schema, "kernels[0].block_threads");
  j = valid();
  block_op(j, 0)["imap"][0] = 1.5;
  expect_error(j, ErrorCode::Schema, "kernels[0].block_ops[0].imap[0]");
  j = valid();
  j["inputs"][0]["dtype"] = "f64";
  expect_error(j, ErrorCode::Schema, "inputs[0].dtype");
  j = valid();
  j["target"] = "sm_70";
  expect_error(j, ErrorCode::Schema, "target");
  j = valid();
  block_op(j, 1).erase("fmap");  // the block graph has a loop dim
  expect_error(j, ErrorCode::Schema, "kernels[0].block_ops[1]");
}

TEST(MugraphJsonErrors, BadMaps) {
  json j = valid();
  block_op(j, 0)["imap"] = json::array({-1, 0});
  expect_error(j, ErrorCode::Map, "kernels[0].block_ops[0].imap");
  j = valid();
  block_op(j, 1)["fmap"] = json::array();
  expect_error(j, ErrorCode::Map, "kernels[0].block_ops[1].fmap");
  j = valid();
  block_op(j, 6)["omap"] = json::array({7});
  expect_error(j, ErrorCode::Map, "kernels[0].block_ops[6]");
  j = valid();
  block_op(j, 6)["omap"] = json::array({-1});  // grid dim of extent 4 left unmapped
  expect_error(j, ErrorCode::Map, "kernels[0].block_ops[6]");
}

TEST(MugraphJsonErrors, TileThatDoesNotDivide) {
  json j = valid();
  j["kernels"][0]["grid"] = json::array({3});  // W's 512 columns over 3 blocks
  expect_error(j, ErrorCode::Map, "kernels[0].block_ops[1]");
}

TEST(MugraphJsonErrors, UnknownOrMisplacedOps) {
  json j = valid();
  block_op(j, 3)["op"] = "matmull";
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[3].op", "\"matmul\"");
  j = valid();
  block_op(j, 3)["op"] = "softmax";
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[3].op");
  j = valid();
  j["kernels"][0]["block_ops"][5]["thread_ops"][1]["op"] = "sum";
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[5].thread_ops[1].op");
  j = valid();
  j["kernels"].push_back(json::parse(R"({"name": "Z", "op": "accum_sum", "inputs": ["O"]})"));
  expect_error(j, ErrorCode::Op, "kernels[1].op");
  j = valid();
  block_op(j, 3)["inputs"] = json::array({"x"});  // matmul of one tile
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[3]");
}

TEST(MugraphJsonErrors, BadAttrs) {
  json j = valid();
  block_op(j, 3)["attrs"] = json::parse(R"({"eps": 1e-5})");
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[3].attrs.eps", "matmul takes no attrs");
  j = valid();
  j["kernels"][0]["block_ops"][5]["thread_ops"][4]["attrs"]["mni"] = 1;
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[5].thread_ops[4].attrs.mni", "min, max");
  j = valid();
  j["kernels"][0]["block_ops"][5]["thread_ops"][6]["attrs"]["approximate"] = "erf";
  expect_error(j, ErrorCode::Op, "kernels[0].block_ops[5].thread_ops[6].attrs.approximate");
  json s = mugraph_to_json(samples::spec_like());
  for (json& k : s["kernels"])
    if (k["name"] == "R") k.erase("attrs");
  expect_error(s, ErrorCode::Op, "kernels[5]");  // a reduction must name its dim
}

TEST(MugraphJsonErrors, UnknownNames) {
  json j = valid();
  j["kernels"][0]["inputs"][1] = "Wx";
  expect_error(j, ErrorCode::Name, "kernels[0].inputs[1]", "\"W\"");
  j = valid();
  block_op(j, 1)["input"] = "V";
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[1].input");
  j = valid();
  block_op(j, 3)["inputs"][1] = "a";  // a later op
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[3].inputs[1]");
  j = valid();
  j["outputs"][0] = "P";
  expect_error(j, ErrorCode::Name, "outputs[0]");
  j = valid();
  block_op(j, 3)["name"] = "x";
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[3].name");
  j = valid();
  j["inputs"][1]["name"] = "X";
  expect_error(j, ErrorCode::Name, "inputs[1].name");
  j = valid();
  block_op(j, 6)["output"] = "W";  // the saved tensor reuses a graph input's name
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[6].output");
}

// Issue 21 (found by kiln_fuzz_mugraph): the block graph builder quoted a block op's name, or a
// saver's tensor name, raw: in its "invalid name" error, and as the op's label in other errors
// (a bad map) raised before the name was checked. Names are now checked first and quoted
// escaped, so a control byte or a megabyte of name never reaches the message.
TEST(MugraphJsonErrors, InvalidBlockOpNamesAreQuotedSafely) {
  const std::string huge(1 << 20, 'n');
  json j = valid();
  block_op(j, 0)["name"] = "x\ty";
  block_op(j, 0)["imap"] = json::array({5});
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[0].name");
  j = valid();
  block_op(j, 3)["name"] = "m" + huge;
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[3].name");
  j = valid();
  block_op(j, 3)["name"] = "\x01";
  block_op(j, 3)["inputs"] = json::array({"x", "x"});  // a shape error, with the op's label
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[3].name");
  j = valid();
  block_op(j, 5)["name"] = "f\n";
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[5].name");
  j = valid();
  block_op(j, 6)["name"] = "\x7f";
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[6]");
  j = valid();
  block_op(j, 6)["output"] = "O\a";
  block_op(j, 6)["omap"] = json::array({7});
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[6]");
  j = valid();
  block_op(j, 6)["output"] = huge;
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[6]");
}

// Issue 21: the hint for an input op naming no input of its kernel listed all of the kernel's
// inputs, up to 64 names of 256 bytes: 16 KiB of hint. It is cut like any quoted text.
TEST(MugraphJsonErrors, HintsListingNamesAreBounded) {
  json j = valid();
  json& kernel = j["kernels"][0];
  for (int i = 0; i < 61; ++i) {
    std::string name = fmt::format("{:_>250}{}", 'T', i);
    j["inputs"].push_back({{"name", name}, {"shape", {4}}, {"dtype", "f32"}});
    kernel["inputs"].push_back(name);
  }
  block_op(j, 1)["input"] = "V";
  expect_error(j, ErrorCode::Name, "kernels[0].block_ops[1].input", "the kernel's inputs are: X");
}

TEST(MugraphJsonErrors, StructureAndStageMisuse) {
  json j = valid();
  block_op(j, 5)["inputs"] = json::array({"a", "m"});  // mixes post and loop tiles
  expect_error(j, ErrorCode::Structure, "kernels[0].block_ops[5]");
  j = valid();
  j["kernels"][0]["block_ops"].erase(6);  // no saver
  expect_error(j, ErrorCode::Structure, "kernels[0]");
  j = valid();
  j["kernels"][0]["block_ops"][5]["thread_ops"][1]["inputs"][0] = 9;  // forward reference
  expect_error(j, ErrorCode::Structure, "kernels[0].block_ops[5]");
}

// Issue 21: a valid-looking loop of 2^31 iterations over a tiny tile (45 hours in the
// interpreter) is refused as not sane, with the kernel's JSON path.
TEST(MugraphJsonErrors, LoopAndGridProductsAreBounded) {
  json j = json::parse(R"({
    "format": "mugraph/1", "name": "spin",
    "inputs": [{"name": "X", "shape": [4, 4], "dtype": "f16"}],
    "kernels": [{"name": "k", "op": "graph_defined", "inputs": ["X"], "grid": [1],
                 "loop": [2147483647],
                 "block_ops": [
                   {"name": "x", "op": "input", "input": "X", "imap": [-1], "fmap": [-1]},
                   {"name": "a", "op": "accum_sum", "inputs": ["x"]},
                   {"name": "s", "op": "output", "inputs": ["a"], "output": "Y", "dtype": "f32",
                    "omap": [-1], "fmap": [-1]}]}],
    "outputs": ["Y"]})");
  expect_error(j, ErrorCode::Structure, "kernels[0]", "2^24");
  j["kernels"][0]["loop"] = json::array({4096, 4096, 2});
  expect_error(j, ErrorCode::Structure, "kernels[0]", "2^24");
  j["kernels"][0]["loop"] = json::array({4096});
  EXPECT_NO_THROW(mugraph_from_json(j));
  j["kernels"][0]["loop"] = json::array({1 << 24});
  j["kernels"][0]["grid"] = json::array({1 << 14});
  expect_error(j, ErrorCode::Structure, "kernels[0]", "2^36");
}

TEST(MugraphJsonErrors, SharedMemoryOverTheTarget) {
  json j = json::parse(R"({
    "format": "mugraph/1", "name": "big", "target": "sm_80",
    "inputs": [{"name": "X", "shape": [256, 512], "dtype": "f16"}],
    "kernels": [{"name": "k", "op": "graph_defined", "inputs": ["X"], "grid": [1],
                 "block_ops": [
                   {"name": "x", "op": "input", "input": "X", "imap": [-1]},
                   {"name": "s", "op": "output", "inputs": ["x"], "output": "Y", "dtype": "f16",
                    "omap": [-1]}]}],
    "outputs": ["Y"]})");
  // 256 KiB of f16 tile: over both targets.
  expect_error(j, ErrorCode::Resource, "kernels[0]");
  // 128 KiB fits sm_90a (227 KiB) and sm_80 (163 KiB); 192 KiB fits only sm_90a.
  j["inputs"][0]["shape"] = json::array({128, 512});
  EXPECT_NO_THROW(mugraph_from_json(j));
  j["inputs"][0]["shape"] = json::array({192, 512});
  expect_error(j, ErrorCode::Resource, "kernels[0]");
  j["target"] = "sm_90a";
  EXPECT_NO_THROW(mugraph_from_json(j));
}

TEST(MugraphJsonErrors, SyntaxErrorsCarryTheFile) {
  try {
    parse_mugraph("{\"format\": ", "broken.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Syntax);
    EXPECT_EQ(e.file(), "broken.json");
  }
  try {
    parse_mugraph("[1, 2]", "list.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Schema);
    EXPECT_EQ(e.file(), "list.json");
  }
}

TEST(MugraphJsonErrors, NonFiniteConstantsCannotBeWritten) {
  KernelGraphBuilder b("inf");
  int x = b.input("X", {4}, DType::F32);
  Attrs a;
  a.value = std::numeric_limits<double>::infinity();
  int c = b.op(OpKind::Constant, {}, a, "c");
  b.output(b.op(OpKind::Maximum, {x, c}, {}, "Y"));
  KernelGraph g = std::move(b).finish();
  try {
    write_mugraph(g);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
}

// Inputs kiln_fuzz_mugraph found (tests/data/mugraph_errors, also its seeds), read the way kiln
// show reads a file. Each is rejected with the code and path given here, in a presentable error,
// or (code nullopt) accepted and written back exactly.
TEST(MugraphJsonErrors, FuzzFindingsStayFixed) {
  struct Expect {
    std::optional<ErrorCode> code;
    std::string path;
  };
  const std::map<std::string, Expect> expected = {
      // A DEL in a block op's name went raw into the message.
      {"block_op_name_control_byte.json", {ErrorCode::Name, "kernels[1].block_ops[3].name"}},
      // A tab in a key went raw into the path.
      {"unknown_key_control_byte.json",
       {ErrorCode::Schema, "kernels[0].block_ops[4][\"\\x09trs\"]"}},
  };
  const auto dir = std::filesystem::path(KILN_SOURCE_DIR) / "tests/data/mugraph_errors";
  size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto it = expected.find(name);
    if (it == expected.end()) {
      ADD_FAILURE() << "no expectation for " << name;
      continue;
    }
    ++seen;
    const Expect& x = it->second;
    try {
      KernelGraph g = load_graph_file(entry.path().string());
      EXPECT_FALSE(x.code) << "accepted";
      std::string text = write_mugraph(g);
      EXPECT_EQ(write_mugraph(parse_mugraph(text)), text);
    } catch (const UserError& e) {
      ASSERT_TRUE(x.code) << e.render();
      EXPECT_EQ(e.code(), *x.code) << e.render();
      EXPECT_EQ(e.path(), x.path) << e.render();
      expect_presentable(e);
    }
  }
  EXPECT_EQ(seen, expected.size());
}

// Random edits of valid files: every outcome is a graph or a UserError, never a crash, an
// InternalError or a stray library exception. A decoded graph must also write back.
TEST(MugraphJsonErrors, RandomEditsOnlyEverGiveUserErrors) {
  std::mt19937 rng(12345);
  const json replacements[] = {json(nullptr),
                               json(true),
                               json(-1),
                               json(0),
                               json(3),
                               json(1 << 30),
                               json(2.5),
                               json(-7.0),
                               json("X"),
                               json("a"),
                               json("mul"),
                               json::array(),
                               json::array({-1}),
                               json::array({0, 1}),
                               json::object(),
                               json(std::numeric_limits<int64_t>::max()),
                               json(std::numeric_limits<uint64_t>::max())};
  int accepted = 0, rejected = 0;
  for (auto& [name, g] : samples::all()) {
    json base = mugraph_to_json(g);
    for (int trial = 0; trial < 400; ++trial) {
      json j = base;
      for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
        // Walk to a random node, then replace, drop or grow it.
        json* node = &j;
        while ((node->is_object() || node->is_array()) && !node->empty() && rng() % 4 != 0) {
          auto it = node->begin();
          std::advance(it, rng() % node->size());
          node = &*it;
        }
        switch (rng() % 3) {
          case 0:
            *node = replacements[rng() % std::size(replacements)];
            break;
          case 1:
            if (node->is_object() && !node->empty())
              node->erase(node->begin());
            else if (node->is_array() && !node->empty())
              node->erase(node->size() - 1);
            break;
          case 2:
            if (node->is_array())
              node->push_back(replacements[rng() % std::size(replacements)]);
            else if (node->is_number_integer() && !node->is_number_unsigned())
              *node = node->get<int64_t>() / 2 + 1;  // no overflow at the int64 limit
            break;
        }
      }
      try {
        KernelGraph d = mugraph_from_json(j);
        EXPECT_EQ(mugraph_to_json(parse_mugraph(write_mugraph(d))), mugraph_to_json(d));
        ++accepted;
      } catch (const UserError&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": " << e.what() << "\n" << j.dump();
      }
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace kiln
