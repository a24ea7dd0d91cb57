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
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw UserError(ErrorCode::Io,
                    fmt::format("cannot create the directory {}: {}", dir,
                                ec ? ec.message() : "a file of that name is in the way"),
                    "choose an output path whose directories you can create (no file in the way, "
                    "a writable parent)");
}

void make_parent_dirs(const std::string& path) {
  make_dirs(std::filesystem::path(path).parent_path().string());
}

std::string file_name(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

}  // namespace kiln::cli
