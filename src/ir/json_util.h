// Helpers shared by Kiln's JSON readers (spec parser, μGraph codec) for writing diagnostics about
// values that came from a file: those bytes may be huge or not UTF-8, and a message must stay
// short and printable whatever they are.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

// `s` made safe to print: valid UTF-8 sequences are kept, control characters and invalid bytes
// become \xNN escapes, and the result is cut to about `max_bytes` with "..." appended.
std::string printable(std::string_view s, size_t max_bytes = 64);

// "an object", "a list", "a string", "an integer", "a number", "a boolean", "null".
const char* json_kind(const nlohmann::json& v);

// A short description of a value for "got ..." messages: `"abc"`, `2.5`, `true`, `a list`.
std::string json_brief(const nlohmann::json& v);

// JSON paths as diagnostics print them: path_key("nodes[2]", "attrs") is "nodes[2].attrs",
// path_key("", "name") is "name", a key that is not an identifier prints as `["a key"]`, and
// path_index("nodes", 2) is "nodes[2]".
std::string path_key(std::string_view base, std::string_view key);
std::string path_index(std::string_view base, size_t index);

// The candidate nearest to `name` by edit distance when it is a near miss (a typo), else "".
// Cheap on long lists: candidates that cannot be near are skipped without a full comparison.
std::string closest_name(std::string_view name, const std::vector<std::string_view>& candidates);

}  // namespace kiln
