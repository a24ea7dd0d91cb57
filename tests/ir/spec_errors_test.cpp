// The errors suite of the spec format: one case per rule of spec-format.md that a file can
// break, and hostile bytes. Each case pins the error code, the JSON path and a key phrase of the
// message or hint, and every error must render short, printable and valid UTF-8, naming the file.
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string label;
  std::string text;
  ErrorCode code;
  std::string path;
  std::string phrase;  // occurs in the rendered error (message or hint)
};

// Keeps gtest from printing multi-kilobyte texts when a case fails.
[[maybe_unused]] void PrintTo(const Case& c, std::ostream* os) {
  *os << c.label;
}

// An error must be fit to print: bounded, no control bytes, valid UTF-8.
void expect_presentable(const UserError& e) {
  const std::string r = e.render();
  EXPECT_LT(r.size(), 1024u) << r.substr(0, 200);
  for (char c : r) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7F) << r;
  EXPECT_NO_THROW((void)nlohmann::json(r).dump()) << "not UTF-8: " << r;
}

void expect_error(const std::string& text, ErrorCode code, const std::string& path,
                  const std::string& phrase, const std::string& file = "t.json") {
  try {
    parse_spec(text, file);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), code) << error_code_name(e.code()) << ": " << e.render();
    EXPECT_EQ(e.path(), path) << e.render();
    EXPECT_NE(e.render().find(phrase), std::string::npos) << e.render();
    EXPECT_EQ(e.file(), file);
    expect_presentable(e);
  }
}

const std::string kX = R"({"name": "X", "shape": [2, 8], "dtype": "f16"})";
const std::string kW = R"({"name": "W", "shape": [8, 4], "dtype": "f16"})";

std::string spec(const std::string& inputs, const std::string& nodes,
                 const std::string& outputs = R"("Y")") {
  return R"({"name": "t", "inputs": [)" + inputs + R"(], "nodes": [)" + nodes +
         R"(], "outputs": [)" + outputs + "]}";
}
// Inputs X [2, 8] and W [8, 4]; the given nodes; output Y.
std::string nodes(const std::string& n, const std::string& outputs = R"("Y")") {
  return spec(kX + ", " + kW, n, outputs);
}
// One input (given); Y = exp(X).
std::string input(const std::string& in) {
  return spec(in, R"({"name": "Y", "op": "exp", "inputs": ["X"]})");
}
// Y = op(inputs) with the given attrs (an object body).
std::string attrs(const std::string& op, const std::string& a, const std::string& in = R"("X")") {
  return nodes(R"({"name": "Y", "op": ")" + op + R"(", "inputs": [)" + in + R"(], "attrs": {)" + a +
               "}}");
}
// The top-level object with `extra` members added to a valid spec's.
std::string top(const std::string& extra) {
  return R"({"name": "t", "inputs": [)" + kX +
         R"(], "nodes": [{"name": "Y", "op": "exp", "inputs": ["X"]}], "outputs": ["Y"])" + extra +
         "}";
}
std::string nested(size_t depth, const std::string& open, const std::string& close) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += open;
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

using E = ErrorCode;

std::vector<Case> cases() {
  return {
      // Not JSON, or JSON we refuse.
      {"trailing_comma", R"({"name": "t",})", E::Syntax, "", "line 1, column 14"},
      {"trailing_garbage", "{}\n{}", E::Syntax, "", "line 2, column 1"},
      {"empty_file", "", E::Syntax, "", "invalid JSON"},
      {"only_whitespace", " \n\t", E::Syntax, "", "invalid JSON"},
      {"comment", "// spec\n{}", E::Syntax, "", "line 1"},
      {"single_quotes", "{'name': 't'}", E::Syntax, "", "invalid JSON"},
      {"raw_newline_in_string", "{\"name\": \"a\nb\"}", E::Syntax, "", "control character"},
      {"nul_in_string", std::string("{\"name\": \"a\0b\"}", 15), E::Syntax, "",
       "line 1, column 12: a NUL byte"},
      {"nul_after_value", std::string("{}\0", 3), E::Syntax, "", "line 1, column 3: a NUL byte"},
      {"invalid_utf8_in_string", "{\"name\": \"t\xC3\x28\"}", E::Syntax, "", "UTF-8"},
      {"overlong_utf8", "{\"name\": \"\xC0\xAF\"}", E::Syntax, "", "UTF-8"},
      {"utf8_surrogate", "{\"name\": \"\xED\xA0\x80\"}", E::Syntax, "", "UTF-8"},
      {"lone_surrogate_escape", R"({"name": "\ud800"})", E::Syntax, "", "surrogate"},
      {"invalid_byte_outside_string", "{\xFF}", E::Syntax, "", "\\xFF"},
      {"deep_arrays", nested(100000, "[", "]"), E::Syntax, "", "deeper than 64"},
      {"deep_objects", nested(100000, R"({"a": )", "}"), E::Syntax, "", "line 1, column 385"},
      {"one_level_too_deep", nested(kMaxJsonDepth + 1, "[", "]"), E::Syntax, "",
       "line 1, column 65"},
      {"deepest_allowed_is_json", nested(kMaxJsonDepth, "[", "]"), E::Schema, "",
       "a spec must be a JSON object, got a list"},
      {"duplicate_top_key", top(R"(, "name": "u")"), E::Syntax, "name", "duplicate key \"name\""},
      {"duplicate_nested_key",
       input(R"({"name": "X", "shape": [2], "shape": [3], "dtype": "f16"})"), E::Syntax,
       "inputs[0].shape", "duplicate key"},
      {"number_overflow", input(R"({"name": "X", "shape": [1e999], "dtype": "f16"})"), E::Syntax,
       "", "number overflow parsing '1e999'"},
      {"negative_number_overflow", attrs("clamp", R"("min": -1e400)"), E::Syntax, "",
       "number overflow"},

      // Schema: keys, types, required members, format.
      {"root_is_a_list", "[]", E::Schema, "", "a spec must be a JSON object"},
      {"root_is_a_string", R"("spec")", E::Schema, "", "got \"spec\""},
      {"unknown_top_key_typo", top(R"(, "ouputs": [])"), E::Schema, "ouputs",
       "did you mean \"outputs\"?"},
      {"unknown_top_key", top(R"(, "extra": 1)"), E::Schema, "extra",
       "the keys here are format, name, doc, inputs, nodes, outputs"},
      {"unknown_format", top(R"(, "format": "spec/2")"), E::Schema, "format",
       "unknown format \"spec/2\""},
      {"mugraph_format", top(R"(, "format": "mugraph/1")"), E::Schema, "format", "μGraph"},
      {"format_not_a_string", top(R"(, "format": 1)"), E::Schema, "format", "must be a string"},
      {"missing_name", R"({"inputs": [], "nodes": [], "outputs": []})", E::Schema, "",
       "missing required key \"name\""},
      {"name_not_a_string", R"({"name": ["t"]})", E::Schema, "name", "got a list"},
      {"doc_not_a_string", top(R"(, "doc": null)"), E::Schema, "doc", "got null"},
      {"missing_inputs", R"({"name": "t", "nodes": [], "outputs": []})", E::Schema, "",
       "missing required key \"inputs\""},
      {"inputs_not_a_list", R"({"name": "t", "inputs": {}})", E::Schema, "inputs",
       "must be a list, got an object"},
      {"no_inputs", spec("", R"({"name": "Y", "op": "constant", "attrs": {"value": 1}})"),
       E::Schema, "inputs", "at least one input"},
      {"missing_nodes", R"({"name": "t", "inputs": [1], "outputs": []})", E::Schema, "",
       "missing required key \"nodes\""},
      {"no_nodes", spec(kX, "", R"("X")"), E::Schema, "nodes", "at least one node"},
      {"missing_outputs", R"({"name": "t", "inputs": [1], "nodes": [1]})", E::Schema, "",
       "missing required key \"outputs\""},
      {"no_outputs", spec(kX, R"({"name": "Y", "op": "exp", "inputs": ["X"]})", ""), E::Schema,
       "outputs", "at least one output"},
      {"outputs_not_a_list", top("").replace(top("").find(R"(["Y"])"), 5, R"("Y")"), E::Schema,
       "outputs", "must be a list, got \"Y\""},
      {"input_not_an_object", input(R"("X")"), E::Schema, "inputs[0]", "must be an object"},
      {"input_unknown_key", input(R"({"name": "X", "shape": [2], "dtyp": "f16"})"), E::Schema,
       "inputs[0].dtyp", "did you mean \"dtype\"?"},
      {"input_missing_shape", input(R"({"name": "X", "dtype": "f16"})"), E::Schema, "inputs[0]",
       "missing required key \"shape\""},
      {"input_missing_dtype", input(R"({"name": "X", "shape": [2]})"), E::Schema, "inputs[0]",
       "missing required key \"dtype\""},
      {"input_missing_name", input(R"({"shape": [2], "dtype": "f16"})"), E::Schema, "inputs[0]",
       "missing required key \"name\""},
      {"shape_not_a_list", input(R"({"name": "X", "shape": 8, "dtype": "f16"})"), E::Schema,
       "inputs[0].shape", "must be a list, got 8"},
      {"extent_fraction", input(R"({"name": "X", "shape": [2, 2.5], "dtype": "f16"})"), E::Schema,
       "inputs[0].shape[1]", "positive integer, got 2.5"},
      {"extent_written_as_float", input(R"({"name": "X", "shape": [8.0], "dtype": "f16"})"),
       E::Schema, "inputs[0].shape[0]", "positive integer, got 8.0"},
      {"extent_exponent", input(R"({"name": "X", "shape": [1e3], "dtype": "f16"})"), E::Schema,
       "inputs[0].shape[0]", "positive integer"},
      {"extent_bool", input(R"({"name": "X", "shape": [true], "dtype": "f16"})"), E::Schema,
       "inputs[0].shape[0]", "got true"},
      {"extent_string", input(R"({"name": "X", "shape": ["8"], "dtype": "f16"})"), E::Schema,
       "inputs[0].shape[0]", "got \"8\""},
      {"extent_null", input(R"({"name": "X", "shape": [null], "dtype": "f16"})"), E::Schema,
       "inputs[0].shape[0]", "got null"},
      {"extent_beyond_uint64",
       input(R"({"name": "X", "shape": [18446744073709551616], "dtype": "f16"})"), E::Schema,
       "inputs[0].shape[0]", "positive integer"},
      {"dtype_unknown", input(R"({"name": "X", "shape": [2], "dtype": "float64"})"), E::Schema,
       "inputs[0].dtype", "f16, bf16 and f32"},
      {"dtype_not_a_string", input(R"({"name": "X", "shape": [2], "dtype": 16})"), E::Schema,
       "inputs[0].dtype", "must be a string"},
      {"node_not_an_object", nodes("[]"), E::Schema, "nodes[0]", "must be an object"},
      {"node_unknown_key", nodes(R"({"name": "Y", "op": "exp", "input": ["X"]})"), E::Schema,
       "nodes[0].input", "did you mean \"inputs\"?"},
      {"node_missing_name", nodes(R"({"op": "exp", "inputs": ["X"]})"), E::Schema, "nodes[0]",
       "missing required key \"name\""},
      {"node_missing_op", nodes(R"({"name": "Y", "inputs": ["X"]})"), E::Schema, "nodes[0]",
       "missing required key \"op\""},
      {"op_not_a_string", nodes(R"({"name": "Y", "op": 3, "inputs": ["X"]})"), E::Schema,
       "nodes[0].op", "must be a string"},
      {"node_inputs_not_a_list", nodes(R"({"name": "Y", "op": "exp", "inputs": "X"})"), E::Schema,
       "nodes[0].inputs", "must be a list"},
      {"node_input_not_a_string", nodes(R"({"name": "Y", "op": "exp", "inputs": [0]})"), E::Schema,
       "nodes[0].inputs[0]", "must be a string, got 0"},
      {"output_not_a_string", nodes(R"({"name": "Y", "op": "exp", "inputs": ["X"]})", "1"),
       E::Schema, "outputs[0]", "must be a string"},

      // Names.
      {"invalid_graph_name", R"({"name": "1abc"})", E::Name, "name", "[A-Za-z_][A-Za-z0-9_]*"},
      {"graph_name_too_long", R"({"name": ")" + std::string(300, 'a') + R"("})", E::Name, "name",
       "invalid graph name"},
      {"invalid_input_name", input(R"({"name": "a-b", "shape": [2], "dtype": "f16"})"), E::Name,
       "inputs[0].name", "invalid name \"a-b\""},
      {"empty_node_name", nodes(R"({"name": "", "op": "exp", "inputs": ["X"]})"), E::Name,
       "nodes[0].name", "invalid name"},
      {"duplicate_input", spec(kX + ", " + kX, R"({"name": "Y", "op": "exp", "inputs": ["X"]})"),
       E::Name, "inputs[1].name", "already defined at inputs[0]"},
      {"duplicate_node",
       nodes(
           R"({"name": "Y", "op": "exp", "inputs": ["X"]}, {"name": "Y", "op": "neg", "inputs": ["X"]})"),
       E::Name, "nodes[1].name", "already defined at nodes[0]"},
      {"unknown_name_typo", nodes(R"({"name": "Y", "op": "exp", "inputs": ["Xq"]})"), E::Name,
       "nodes[0].inputs[0]", "did you mean \"X\"?"},
      {"unknown_name_case", nodes(R"({"name": "Y", "op": "exp", "inputs": ["x"]})"), E::Name,
       "nodes[0].inputs[0]", "did you mean \"X\"?"},
      {"unknown_name", nodes(R"({"name": "Y", "op": "matmul", "inputs": ["X", "Bias"]})"), E::Name,
       "nodes[0].inputs[1]", "unknown name \"Bias\""},
      {"unknown_output", nodes(R"({"name": "Y1", "op": "exp", "inputs": ["X"]})", R"("Y2")"),
       E::Name, "outputs[0]", "did you mean \"Y1\"?"},
      {"self_reference", nodes(R"({"name": "Y", "op": "add", "inputs": ["X", "Y"]})"), E::Name,
       "nodes[0].inputs[1]", "node \"Y\" uses itself"},
      {"two_node_cycle",
       nodes(
           R"({"name": "A", "op": "exp", "inputs": ["B"]}, {"name": "B", "op": "exp", "inputs": ["A"]})",
           R"("B")"),
       E::Name, "nodes[0].inputs[0]", "cycle: A -> B -> A"},

      // Ops and attrs.
      {"unknown_op", nodes(R"({"name": "Y", "op": "frobnicate", "inputs": ["X"]})"), E::Op,
       "nodes[0].op", "unknown op \"frobnicate\""},
      {"op_wrong_case", nodes(R"({"name": "Y", "op": "MatMul", "inputs": ["X", "W"]})"), E::Op,
       "nodes[0].op", "did you mean \"matmul\"?"},
      {"block_level_op", nodes(R"({"name": "Y", "op": "accum_sum", "inputs": ["X"]})"), E::Op,
       "nodes[0].op", "cannot appear in a spec"},
      {"graph_defined_op", nodes(R"({"name": "Y", "op": "graph_defined", "inputs": ["X"]})"), E::Op,
       "nodes[0].op", "cannot appear in a spec"},
      {"unary_with_two_inputs", nodes(R"({"name": "Y", "op": "exp", "inputs": ["X", "X"]})"), E::Op,
       "nodes[0]", "exp takes 1 input, got 2"},
      {"unary_without_inputs", nodes(R"({"name": "Y", "op": "sqrt"})"), E::Op, "nodes[0]",
       "sqrt takes 1 input, got 0"},
      {"binary_with_one_input", nodes(R"({"name": "Y", "op": "add", "inputs": ["X"]})"), E::Op,
       "nodes[0]", "add takes 2 inputs, got 1"},
      {"rms_norm_with_three_inputs",
       nodes(R"({"name": "Y", "op": "rms_norm", "inputs": ["X", "X", "X"]})"), E::Op, "nodes[0]",
       "rms_norm takes 1 to 2 inputs, got 3"},
      // layer_norm, a composite the parser expands (docs/spec-format.md).
      {"layer_norm_typo", nodes(R"({"name": "Y", "op": "layer_nrom", "inputs": ["X"]})"), E::Op,
       "nodes[0].op", "did you mean \"layer_norm\"?"},
      {"layer_norm_four_inputs",
       nodes(R"({"name": "Y", "op": "layer_norm", "inputs": ["X", "X", "X", "X"]})"), E::Op,
       "nodes[0].inputs", "layer_norm takes 1 to 3 inputs (X, weight, bias), got 4"},
      {"layer_norm_no_inputs", nodes(R"({"name": "Y", "op": "layer_norm"})"), E::Op, "nodes[0]",
       "got 0"},
      {"layer_norm_weight_shape",
       nodes(R"({"name": "Y", "op": "layer_norm", "inputs": ["X", "W"]})"), E::Shape,
       "nodes[0].inputs[1]", "weight W is [8, 4], expected [8]"},
      {"layer_norm_attr_typo", attrs("layer_norm", R"("epsilon": 1e-5)"), E::Op,
       "nodes[0].attrs.epsilon", "layer_norm takes eps"},
      {"layer_norm_eps_negative", attrs("layer_norm", R"("eps": -1)"), E::Op, "nodes[0].attrs.eps",
       "eps must be >= 0"},
      {"layer_norm_internal_name_taken", nodes(R"({"name": "Y__mean", "op": "exp", "inputs": ["X"]},
                {"name": "Y", "op": "layer_norm", "inputs": ["X"]})"),
       E::Name, "nodes[1]", "duplicate name \"Y__mean\""},
      {"constant_with_input",
       nodes(R"({"name": "Y", "op": "constant", "inputs": ["X"], "attrs": {"value": 1}})"), E::Op,
       "nodes[0]", "constant takes 0 inputs, got 1"},
      {"attrs_not_an_object", nodes(R"({"name": "Y", "op": "sum", "inputs": ["X"], "attrs": [1]})"),
       E::Op, "nodes[0].attrs", "must be an object"},
      {"attr_typo", attrs("sum", R"("dims": -1)"), E::Op, "nodes[0].attrs.dims",
       "did you mean \"dim\"?"},
      {"attr_of_attrless_op", attrs("exp", R"("dim": 0)"), E::Op, "nodes[0].attrs.dim",
       "exp takes no attrs"},
      {"attr_of_another_op", attrs("sum", R"("dim": 0, "eps": 0.1)"), E::Op, "nodes[0].attrs.eps",
       "sum takes dim, keepdim"},
      {"reduce_without_attrs", nodes(R"({"name": "Y", "op": "sum", "inputs": ["X"]})"), E::Op,
       "nodes[0]", "sum needs attr \"dim\""},
      {"reduce_without_dim", attrs("mean", R"("keepdim": false)"), E::Op, "nodes[0].attrs",
       "mean needs attr \"dim\""},
      {"constant_without_value", nodes(R"({"name": "Y", "op": "constant"})"), E::Op, "nodes[0]",
       "constant needs attr \"value\""},
      {"dim_fraction", attrs("max", R"("dim": 1.5)"), E::Op, "nodes[0].attrs.dim",
       "must be an integer, got 1.5"},
      {"dim_bool", attrs("max", R"("dim": false)"), E::Op, "nodes[0].attrs.dim",
       "must be an integer, got false"},
      {"dim_beyond_int64", attrs("max", R"("dim": 18446744073709551615)"), E::Op,
       "nodes[0].attrs.dim", "out of range"},
      {"keepdim_not_bool", attrs("sum", R"("dim": 0, "keepdim": "yes")"), E::Op,
       "nodes[0].attrs.keepdim", "must be true or false"},
      {"perm_not_a_list", attrs("transpose", R"("perm": 1)"), E::Op, "nodes[0].attrs.perm",
       "must be a list"},
      {"perm_entry_fraction", attrs("transpose", R"("perm": [1, 0.5])"), E::Op,
       "nodes[0].attrs.perm[1]", "must be an integer"},
      {"perm_entry_huge", attrs("transpose", R"("perm": [1, 4294967296])"), E::Op,
       "nodes[0].attrs.perm[1]", "out of range"},
      {"perm_not_a_permutation", attrs("transpose", R"("perm": [0, -2])"), E::Op, "nodes[0]",
       "is not a permutation"},
      {"perm_wrong_length", attrs("transpose", R"("perm": [0])"), E::Op, "nodes[0]",
       "perm has 1 entries but the input has rank 2"},
      {"perm_entry_out_of_rank", attrs("transpose", R"("perm": [0, 2])"), E::Op, "nodes[0]",
       "out of range for rank 2"},
      {"value_not_a_number", nodes(R"({"name": "Y", "op": "constant", "attrs": {"value": "1"}})"),
       E::Op, "nodes[0].attrs.value", "must be a number, got \"1\""},
      {"value_bool", nodes(R"({"name": "Y", "op": "constant", "attrs": {"value": true}})"), E::Op,
       "nodes[0].attrs.value", "got true"},
      {"eps_negative", attrs("rms_norm", R"("eps": -1e-6)"), E::Op, "nodes[0]", "eps must be >= 0"},
      {"eps_not_a_number", attrs("rms_norm", R"("eps": "1e-6")"), E::Op, "nodes[0].attrs.eps",
       "must be a number"},
      {"approximate_unknown", attrs("gelu", R"("approximate": "exact")"), E::Op,
       "nodes[0].attrs.approximate", "\"none\" (erf) or \"tanh\""},
      {"approximate_not_a_string", attrs("gelu", R"("approximate": true)"), E::Op,
       "nodes[0].attrs.approximate", "must be a string"},
      {"negative_slope_not_a_number", attrs("leaky_relu", R"("negative_slope": [0.1])"), E::Op,
       "nodes[0].attrs.negative_slope", "must be a number, got a list"},
      {"clamp_min_above_max", attrs("clamp", R"("min": 3, "max": 1)"), E::Op, "nodes[0]",
       "min 3 is greater than max 1"},
      {"clamp_min_null", attrs("clamp", R"("min": null)"), E::Op, "nodes[0].attrs.min",
       "must be a number, got null"},

      // Shapes.
      {"matmul_of_a_vector",
       spec(kX + R"(, {"name": "v", "shape": [8], "dtype": "f16"})",
            R"({"name": "Y", "op": "matmul", "inputs": ["X", "v"]})"),
       E::Shape, "nodes[0]", "rank >= 2: X is [2, 8], v is [8]"},
      {"matmul_batch_clash",
       spec(
           R"({"name": "A", "shape": [2, 3, 4], "dtype": "f16"}, {"name": "B", "shape": [5, 4, 6], "dtype": "f16"})",
           R"({"name": "Y", "op": "matmul", "inputs": ["A", "B"]})"),
       E::Shape, "nodes[0]", "batch dims do not broadcast"},
      {"broadcast_clash",
       spec(kX + R"(, {"name": "v", "shape": [3], "dtype": "f16"})",
            R"({"name": "Y", "op": "add", "inputs": ["X", "v"]})"),
       E::Shape, "nodes[0]", "add: shapes do not broadcast: X is [2, 8], v is [3]"},
      {"dim_out_of_range", attrs("sum", R"("dim": 2)"), E::Shape, "nodes[0]",
       "dim 2 is out of range for rank 2"},
      {"negative_dim_out_of_range", attrs("max", R"("dim": -3)"), E::Shape, "nodes[0]",
       "dim must be in [-2, 1]"},
      {"softmax_dim_out_of_range", attrs("softmax", R"("dim": 5)"), E::Shape, "nodes[0]",
       "out of range"},
      {"reduce_a_scalar",
       spec(R"({"name": "s", "shape": [], "dtype": "f32"})",
            R"({"name": "Y", "op": "sum", "inputs": ["s"], "attrs": {"dim": 0}})"),
       E::Shape, "nodes[0]", "cannot reduce a scalar"},
      {"rms_norm_of_a_scalar",
       spec(R"({"name": "s", "shape": [], "dtype": "f32"})",
            R"({"name": "Y", "op": "rms_norm", "inputs": ["s"]})"),
       E::Shape, "nodes[0]", "rank >= 1"},
      {"transpose_vector_default_perm",
       spec(R"({"name": "v", "shape": [8], "dtype": "f32"})",
            R"({"name": "Y", "op": "transpose", "inputs": ["v"]})"),
       E::Shape, "nodes[0]", "needs an explicit perm"},
      {"rank_five", input(R"({"name": "X", "shape": [1, 1, 1, 1, 1], "dtype": "f16"})"), E::Shape,
       "inputs[0].shape", "rank 5"},
      {"extent_zero", input(R"({"name": "X", "shape": [2, 0], "dtype": "f16"})"), E::Shape,
       "inputs[0].shape[1]", "must be positive, got 0"},
      {"extent_negative", input(R"({"name": "X", "shape": [-2], "dtype": "f16"})"), E::Shape,
       "inputs[0].shape[0]", "must be positive, got -2"},
      {"extent_above_2_40", input(R"({"name": "X", "shape": [2199023255552], "dtype": "f16"})"),
       E::Shape, "inputs[0].shape[0]", "larger than 2^40"},
      {"product_above_2_40", input(R"({"name": "X", "shape": [1048576, 1048577], "dtype": "f16"})"),
       E::Shape, "inputs[0].shape", "more than 2^40 elements"},
  };
}

class SpecErrors : public testing::TestWithParam<Case> {};

TEST_P(SpecErrors, Rule) {
  const Case& c = GetParam();
  expect_error(c.text, c.code, c.path, c.phrase);
}

INSTANTIATE_TEST_SUITE_P(Spec, SpecErrors, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return i.param.label; });

TEST(SpecErrorFiles, EachFilePinsItsError) {
  // The same rules written out as files, as a user would; also the fuzzer's seeds.
  const std::map<std::string, Case> expected = {
      {"matmul_inner_dims.json",
       {"", "", E::Shape, "nodes[1]",
        "matmul: inner dims differ: N is [2, 4096], W is [4095, 6144]"}},
      {"unknown_op.json",
       {"", "", E::Op, "nodes[1].op", "unknown op \"matmull\" (hint: did you mean \"matmul\"?)"}},
      {"forward_reference.json",
       {"", "", E::Name, "nodes[0].inputs[0]", "uses \"S\", which is defined later at nodes[2]"}},
      {"cycle.json", {"", "", E::Name, "nodes[0].inputs[1]", "cycle: A -> C -> B -> A"}},
      {"duplicate_name.json",
       {"", "", E::Name, "nodes[1].name",
        "duplicate name \"X\"; it is already defined at inputs[0]"}},
      {"duplicate_key.json", {"", "", E::Syntax, "nodes[0].op", "duplicate key \"op\" at line 4"}},
      {"bad_dtype.json", {"", "", E::Schema, "inputs[0].dtype", "unknown dtype \"fp16\""}},
      {"rms_norm_weight.json",
       {"", "", E::Shape, "nodes[1]", "rms_norm: weight w is [1, 16384] but must be [16384]"}},
      {"shape_overflow.json", {"", "", E::Shape, "inputs[0].shape", "more than 2^40 elements"}},
      {"unknown_attr.json",
       {"", "", E::Op, "nodes[0].attrs.dims", "unknown attr \"dims\" for op sum"}},
      {"invalid_utf8.json", {"", "", E::Syntax, "", "line 1, column 12"}},
  };
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests/data/spec_errors";
  size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto it = expected.find(name);
    if (it == expected.end()) {
      ADD_FAILURE() << "no expectation for " << name;
      continue;
    }
    ++seen;
    const Case& c = it->second;
    try {
      parse_spec_file(entry.path().string());
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      EXPECT_EQ(e.code(), c.code) << e.render();
      EXPECT_EQ(e.path(), c.path) << e.render();
      EXPECT_NE(e.render().find(c.phrase), std::string::npos) << e.render();
      EXPECT_EQ(e.file(), entry.path().string());
      expect_presentable(e);
    }
  }
  EXPECT_EQ(seen, expected.size());
}

TEST(SpecErrorRender, NamesFilePathMessageAndHint) {
  try {
    parse_spec(nodes(R"({"name": "Y", "op": "matmull", "inputs": ["X", "W"]})"), "specs/a.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.render(),
              "specs/a.json: nodes[0].op: unknown op \"matmull\" (hint: did you mean \"matmul\"?)");
  }
}

TEST(SpecErrorHostile, TenMegabyteStrings) {
  const std::string big(10 << 20, 'a');
  expect_error(R"({"name": ")" + big + R"("})", E::Name, "name", "invalid graph name \"aaa");
  expect_error(nodes(R"({"name": "Y", "op": ")" + big + R"(", "inputs": ["X"]})"), E::Op,
               "nodes[0].op", "unknown op");
  expect_error(nodes(R"({"name": "Y", "op": "exp", "inputs": [")" + big + R"("]})"), E::Name,
               "nodes[0].inputs[0]", "unknown name");
  expect_error(top(R"(, ")" + big + R"(": 1)"), E::Schema, "[\"" + std::string(32, 'a') + "...\"]",
               "unknown key");
  // Unterminated: the parser's "last read" excerpt is the whole string.
  expect_error(R"({"name": ")" + big, E::Syntax, "", "...");
  expect_error(R"({"name": ")" + big + "\xFF\"}", E::Syntax, "", "UTF-8");
  // A long doc is fine: doc is free text.
  EXPECT_EQ(parse_spec(top(R"(, "doc": ")" + big + R"(")")).doc.size(), big.size());
}

TEST(SpecErrorHostile, LongListsStayCheap) {
  // A million extents or perm entries: rejected with a short message, without building them.
  std::string extents = "1";
  for (int i = 0; i < 1000000; ++i) extents += ",1";
  expect_error(input(R"({"name": "X", "shape": [)" + extents + R"(], "dtype": "f16"})"), E::Shape,
               "inputs[0].shape", "rank 1000001");
  expect_error(attrs("transpose", R"("perm": [)" + extents + "]"), E::Op, "nodes[0]",
               "perm has 1000001 entries");
}

TEST(SpecErrorIo, MissingDirectoryAndOversizedFiles) {
  try {
    parse_spec_file("/nonexistent/spec.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), E::Io);
    EXPECT_EQ(e.file(), "/nonexistent/spec.json");
    EXPECT_NE(e.message().find("cannot open"), std::string::npos) << e.render();
  }
  const fs::path dir = fs::temp_directory_path() / "kiln_spec_errors_test";
  fs::create_directories(dir);
  try {
    parse_spec_file(dir.string());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), E::Io);
    EXPECT_NE(e.message().find("directory"), std::string::npos) << e.render();
  }
  // Sparse: the size check must come before reading.
  const fs::path big = dir / "big.json";
  { std::ofstream(big.string()) << "{}"; }
  fs::resize_file(big, kMaxFileBytes + 1);
  try {
    parse_spec_file(big.string());
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), E::Io);
    EXPECT_NE(e.message().find("64 MiB"), std::string::npos) << e.render();
  }
  fs::remove_all(dir);
  // In-memory text obeys the same limit.
  try {
    parse_spec(std::string(kMaxFileBytes + 1, ' '), "mem.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), E::Io);
    EXPECT_EQ(e.file(), "mem.json");
  }
}

}  // namespace
}  // namespace kiln
