// Reading and writing Kiln's JSON files: specs (spec/1, see ../shared/spec-format.md) and
// μGraphs (mugraph/1, see docs/mugraph-format.md). Every reader reports malformed input as a
// UserError carrying the file name and the JSON path of the fault, and never crashes, hangs or
// allocates without bound on any bytes.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/ir/kernel_graph.h"

namespace kiln {

// Limits that keep hostile files cheap.
inline constexpr size_t kMaxFileBytes = 64u << 20;
inline constexpr int kMaxJsonDepth = 64;

// Parses JSON text strictly: valid UTF-8, nesting at most kMaxJsonDepth, no duplicate keys,
// finite numbers. Throws UserError(Syntax) with file and (where known) byte offset.
nlohmann::json parse_json_text(std::string_view text, const std::string& file);
// Reads a file (at most kMaxFileBytes) into a string. Throws UserError(Io).
std::string read_file_text(const std::string& path);
// Writes text to path atomically (a temporary file in the same directory, then rename): a reader,
// or a run killed mid-write, sees the old file or the new one, never a truncated one.
// UserError(Io) naming the file if that fails (no temporary file is left behind).
void write_file_text(const std::string& path, const std::string& text);

// spec/1 -> kernel graph of predefined ops.
KernelGraph parse_spec(std::string_view text, const std::string& file = "<input>");
KernelGraph parse_spec_file(const std::string& path);

// mugraph/1 <-> kernel graph. The round trip graph -> JSON -> graph -> JSON is exact.
nlohmann::json mugraph_to_json(const KernelGraph& g);
KernelGraph mugraph_from_json(const nlohmann::json& j, const std::string& file = "<input>");
std::string write_mugraph(const KernelGraph& g);  // pretty-printed, ends with a newline
KernelGraph parse_mugraph(std::string_view text, const std::string& file = "<input>");

// Loads a spec or a μGraph, telling them apart by "format" (absent means spec/1).
KernelGraph load_graph_file(const std::string& path);

}  // namespace kiln
