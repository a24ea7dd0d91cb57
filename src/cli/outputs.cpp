// Output paths of the CLI: every file a subcommand writes may name directories that do not exist
// yet (the README's `-o out/gqa --trace out/gqa.trace` on a fresh checkout), so they are created
// first; when that is impossible the error says why and what to do instead.
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/ir/diag.h"

namespace kiln::cli {

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec, ignored;
  fs::create_directories(dir, ec);
  if (!ec && fs::is_directory(dir, ignored)) return;
  std::string why = ec ? ec.message() : "not a directory";
  // The usual reason: a file where a directory should be (the deepest existing part of the path).
  fs::path p = dir;
  while (!p.empty() && !fs::exists(p, ignored)) p = p.parent_path();
  if (!p.empty() && !fs::is_directory(p, ignored)) why = p.string() + " is a file, not a directory";
  throw UserError(ErrorCode::Io, fmt::format("cannot create the directory {}: {}", dir, why),
                  "choose an output path under a directory you can write to");
}

void make_parent_dirs(const std::string& path) {
  make_dirs(std::filesystem::path(path).parent_path().string());
}

std::string file_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

}  // namespace kiln::cli
