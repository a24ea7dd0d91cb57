// libFuzzer entry for the μGraph reader (mugraph/1, docs/mugraph-format.md). The contract under
// test: any bytes either decode to a graph that passes every structural check of the builders or
// raise a UserError whose rendering is short, printable UTF-8; and a graph that decodes writes
// back exactly: write_mugraph -> parse_mugraph -> write_mugraph gives the same text. Anything else
// (an InternalError or other exception, a sanitizer report, a crash, a hang, unbounded memory, a
// round trip that differs) escapes or aborts here, and the fuzzer reports it.
//
// parse_mugraph is what load_graph_file (kiln show, verify, emit, eval, bench) runs on a file
// whose "format" is "mugraph/1": parse_json_text, then mugraph_from_json.
//
// Byte mutations alone mostly break the JSON syntax, and a graph must be valid to reach the
// round trip, so half the mutations are made on the JSON tree instead (LLVMFuzzerCustomMutator
// below): a node is replaced by a boundary value or a copy of another node, list items and members
// are dropped, duplicated or swapped, integers stepped. The other half are libFuzzer's own.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/print.h"

namespace {

[[noreturn]] void bug(const char* what, const std::string& a, const std::string& b = {}) {
  std::fprintf(stderr, "fuzz_mugraph: %s\n--- first ---\n%s\n--- second ---\n%s\n", what, a.c_str(),
               b.c_str());
  std::abort();
}

void check_error(const kiln::UserError& e) {
  const std::string r = e.render();
  if (r.size() > 4096) bug("error rendering over 4 KiB", r.substr(0, 4096));
  for (char c : r)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) bug("control byte in an error", r);
  (void)nlohmann::json(r).dump();  // throws (and so crashes the run) on invalid UTF-8
}

// What a decoded graph must satisfy: it writes, the text reads back (any error there, a
// UserError included, is the writer's or the reader's bug), and writing that gives the same
// text. kiln show's printers must also accept it.
void check_graph(const kiln::KernelGraph& g) {
  if (g.inputs.empty() || g.outputs.empty()) bug("decoded graph without inputs or outputs", "");
  const std::string first = kiln::write_mugraph(g);
  kiln::KernelGraph again;
  try {
    again = kiln::parse_mugraph(first, "round_trip.mugraph.json");
  } catch (const kiln::UserError& e) {
    bug("written graph does not read back", first, e.render());
  }
  const std::string second = kiln::write_mugraph(again);
  if (second != first) bug("round trip is not exact", first, second);
  (void)kiln::to_text(g);
  (void)kiln::to_dot(g);
}

// ---------------------------------------------------------------------------------------------
// Structure-aware mutation

using json = nlohmann::json;

void collect(json& v, std::vector<json*>& nodes, std::vector<std::string>& strings,
             std::vector<std::string>& keys) {
  nodes.push_back(&v);
  if (v.is_string()) strings.push_back(v.get<std::string>());
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it) {
      keys.push_back(it.key());
      collect(it.value(), nodes, strings, keys);
    }
  if (v.is_array())
    for (json& x : v) collect(x, nodes, strings, keys);
}

json boundary_value(std::mt19937& rng, const std::vector<std::string>& strings) {
  static const json values[] = {nullptr,
                                true,
                                false,
                                0,
                                1,
                                -1,
                                2,
                                3,
                                4,
                                7,
                                16,
                                32,
                                64,
                                128,
                                1024,
                                1 << 24,
                                65535,
                                65536,
                                2147483647,
                                2147483648LL,
                                1.5,
                                -0.0,
                                1e-300,
                                5e-324,
                                0.1,
                                1e308,
                                json::array(),
                                json::object(),
                                "",
                                "mugraph/1",
                                "f16",
                                "bf16",
                                "f32",
                                "sm_80",
                                "input",
                                "output",
                                "fused",
                                "accum_sum",
                                "matmul",
                                "graph_defined",
                                "exp",
                                "constant",
                                "sum",
                                "tanh"};
  if (!strings.empty() && rng() % 3 == 0) return strings[rng() % strings.size()];
  return values[rng() % std::size(values)];
}

// One structural edit of `root`; false when the picked edit does not apply.
bool mutate_tree(json& root, std::mt19937& rng) {
  std::vector<json*> nodes;
  std::vector<std::string> strings, keys;
  collect(root, nodes, strings, keys);
  json& n = *nodes[rng() % nodes.size()];
  switch (rng() % 6) {
    case 0:
      n = boundary_value(rng, strings);
      return true;
    case 1: {
      const json* other = nodes[rng() % nodes.size()];
      json copy = *other;  // before the assignment: `other` may be inside `n`
      n = std::move(copy);
      return true;
    }
    case 2:  // drop an item or a member
      if (n.is_array() && !n.empty()) {
        n.erase(rng() % n.size());
        return true;
      }
      if (n.is_object() && !n.empty()) {
        auto it = n.begin();
        std::advance(it, rng() % n.size());
        n.erase(it);
        return true;
      }
      return false;
    case 3:  // duplicate an item, or add a member
      if (n.is_array() && !n.empty()) {
        size_t i = rng() % n.size();
        json copy = n[i];
        n.insert(n.begin() + static_cast<std::ptrdiff_t>(rng() % (n.size() + 1)), std::move(copy));
        return true;
      }
      if (n.is_object() && !keys.empty()) {
        json copy = *nodes[rng() % nodes.size()];
        n[keys[rng() % keys.size()]] = std::move(copy);
        return true;
      }
      return false;
    case 4:  // swap two items
      if (n.is_array() && n.size() >= 2) {
        std::swap(n[rng() % n.size()], n[rng() % n.size()]);
        return true;
      }
      return false;
    default:  // step a number
      if (n.is_number_integer()) {
        // Wrapping arithmetic: the fuzzer itself must not overflow.
        uint64_t x = static_cast<uint64_t>(n.get<int64_t>());
        const uint64_t steps[] = {x + 1, x - 1, x * 2, x / 2, 0 - x, 0};
        n = static_cast<int64_t>(steps[rng() % std::size(steps)]);
        return true;
      }
      if (n.is_number_float()) {
        double x = n.get<double>();
        const double steps[] = {x * 2, x / 2, -x, x + 1, 0.0};
        n = steps[rng() % std::size(steps)];
        return true;
      }
      return false;
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937 rng(seed);
  if (rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  json root;
  try {  // the strict reader: bounded nesting, so the recursion below is bounded too
    root = kiln::parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "");
  } catch (const kiln::UserError&) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  bool changed = false;
  for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits)
    changed |= mutate_tree(root, rng);
  // Pretty or compact: the reader must not care, and line structure helps byte mutations.
  std::string out = changed ? root.dump(rng() % 2 ? 1 : -1) : std::string();
  if (out.empty() || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::KernelGraph g;
  try {
    g = kiln::parse_mugraph(text, "fuzz.mugraph.json");
  } catch (const kiln::UserError& e) {
    check_error(e);
    return 0;
  }
  check_graph(g);
  return 0;
}
