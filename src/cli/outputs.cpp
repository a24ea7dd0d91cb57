// Output paths of the CLI: every file a subcommand writes may name directories that do not exist
// yet (the README's `-o out/gqa --trace out/gqa.trace` on a fresh checkout), so they are created
// first; when that is impossible the error says why and what to do instead. And the output set
// of `kiln optimize -o DIR` with its lock (commands.h, docs/reliability.md).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "log.h"

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

// ---- The output set -----------------------------------------------------------------------------

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void fault_point() {
  static const long limit = [] {
    const char* e = std::getenv("KILN_FAULT_KILL_AFTER_WRITES");
    if (!e || !*e) return 0L;
    char* end = nullptr;
    long v = std::strtol(e, &end, 10);
    return *end == 0 && v > 0 ? v : 0L;
  }();
  static long count = 0;
  if (limit > 0 && ++count == limit) std::raise(SIGKILL);
}

FileLock lock_output_dir(const std::string& dir) {
  FileLock lock(dir + "/.kiln.lock",
                [&] { note("waiting for another kiln run writing {} ...", dir); });
  if (!lock.held())
    throw UserError(ErrorCode::Io,
                    fmt::format("-o {}: cannot lock {}/.kiln.lock: {}", dir, dir, lock.error()),
                    "remove that path if it is not a regular file, or write to a local directory "
                    "(the lock keeps concurrent runs from mixing their files)");
  return lock;
}

namespace {

constexpr const char* kStagePrefix = ".kiln-stage-";

// A top-level file name a set may own, and so that a commit may remove: only the kinds of file
// Kiln writes there, never a path (a hand-edited or hostile report.json names nothing outside
// DIR), a hidden file or the report itself.
bool owned_name(const std::string& n) {
  auto ends = [&](const char* s) {
    size_t k = std::strlen(s);
    return n.size() > k && n.compare(n.size() - k, k, s) == 0;
  };
  return !n.empty() && n[0] != '.' && n.find('/') == std::string::npos &&
         (ends(".mugraph.json") || ends(".cu") || ends(".h"));
}

bool is_regular(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The owned top-level names a JSON file lists: a journal (an array of names) or a report.json (its
// "files"). Whatever cannot be read or parsed lists nothing: an old report.json without "files"
// (an earlier Kiln) leaves only the run's own names to remove.
std::set<std::string> listed_names(const std::string& path) {
  std::set<std::string> names;
  if (!is_regular(path)) return names;  // a FIFO there must not hang the run
  try {
    nlohmann::json j = nlohmann::json::parse(read_file_text(path));
    const nlohmann::json& list = j.is_object() ? j.at("files") : j;
    for (const nlohmann::json& e : list) {
      std::string n = e.is_string() ? e.get<std::string>() : e.at("path").get<std::string>();
      if (owned_name(n)) names.insert(n);
    }
  } catch (const std::exception&) {
  }
  return names;
}

[[noreturn]] void commit_failed(const std::string& what, const std::string& path, int err) {
  UserError e(ErrorCode::Io, fmt::format("cannot {} {}: {}", what, path, std::strerror(err)),
              "the output directory holds no complete set now (no report.json); free the "
              "disk or fix the permissions and run again");
  throw e;
}

}  // namespace

OutputSet::OutputSet(std::string dir, std::vector<std::string> replaces)
    : dir_(std::move(dir)), replaces_(replaces.begin(), replaces.end()) {
  namespace fs = std::filesystem;
  // Every stage directory here belongs to a dead run: the caller holds DIR's lock, and a run
  // creates its stage only while holding it. Their journals name files of sets they had begun
  // to commit; they are kept (in this run's journal) before the stages go.
  std::set<std::string> inherited;
  std::vector<fs::path> leftovers;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().rfind(kStagePrefix, 0) != 0) continue;
    leftovers.push_back(it->path());
    for (const std::string& n : listed_names((it->path() / "journal.json").string()))
      inherited.insert(n);
  }
  // pid and time: a reused pid never names a leftover's directory.
  stage_ = fmt::format("{}/{}{}-{}", dir_, kStagePrefix, static_cast<long>(::getpid()),
                       std::chrono::steady_clock::now().time_since_epoch().count());
  if (!fs::create_directory(stage_, ec) || !fs::create_directory(stage_ + "/candidates", ec))
    throw UserError(ErrorCode::Io,
                    fmt::format("cannot create the stage directory {}: {}", stage_,
                                ec ? ec.message() : "it exists"),
                    "choose an output directory you can write");
  if (!inherited.empty()) write_journal(inherited);
  for (const fs::path& p : leftovers) fs::remove_all(p, ec);
}

OutputSet::~OutputSet() {
  std::error_code ec;
  if (!committed_) std::filesystem::remove_all(stage_, ec);
}

void OutputSet::write_journal(const std::set<std::string>& names) {
  write_file_text(stage_ + "/journal.json", nlohmann::json(names).dump() + "\n");
}

void OutputSet::add(const std::string& rel, const std::string& text) {
  write_file_text(stage_ + "/" + rel, text);
  staged_.push_back({rel, text.size(), fnv1a64(text)});
  fault_point();
}

void OutputSet::commit(nlohmann::json report) {
  // The journal: every top-level file that a set in DIR may have left there (the previous
  // report's list, the journals of killed commits, this run's own names) and this set's, written
  // before DIR changes, so a run killed below leaves the next run the list of what to remove.
  std::set<std::string> names = replaces_;
  for (const std::string& n : listed_names(dir_ + "/report.json")) names.insert(n);
  for (const std::string& n : listed_names(stage_ + "/journal.json")) names.insert(n);
  std::set<std::string> fresh;
  for (const Staged& s : staged_)
    if (s.rel.find('/') == std::string::npos) fresh.insert(s.rel);
  std::set<std::string> journal = names;
  journal.insert(fresh.begin(), fresh.end());
  write_journal(journal);
  fault_point();

  // The commit marker goes first: from here until the new one is in place, DIR holds no set.
  const std::string report_path = dir_ + "/report.json";
  if (::unlink(report_path.c_str()) != 0 && errno != ENOENT)
    commit_failed("remove", report_path, errno);
  fault_point();
  // candidates/ as a whole: the old directory aside (into the stage, removed with it), the new
  // one in; no candidate of an earlier run survives, whatever its --top was.
  const std::string cands = dir_ + "/candidates";
  struct stat st;
  if (::lstat(cands.c_str(), &st) == 0) {
    if (std::rename(cands.c_str(), (stage_ + "/candidates.old").c_str()) != 0)
      commit_failed("move aside", cands, errno);
    fault_point();
  }
  if (std::rename((stage_ + "/candidates").c_str(), cands.c_str()) != 0)
    commit_failed("move into place", cands, errno);
  fault_point();
  for (const std::string& n : names) {
    if (fresh.count(n)) continue;
    const std::string p = dir_ + "/" + n;
    if (::unlink(p.c_str()) == 0)
      fault_point();
    else if (errno != ENOENT)
      commit_failed("remove", p, errno);
  }
  for (const std::string& n : fresh) {
    const std::string p = dir_ + "/" + n;
    if (std::rename((stage_ + "/" + n).c_str(), p.c_str()) != 0)
      commit_failed("move into place", p, errno);
    fault_point();
  }
  // report.json last, listing the set.
  std::vector<Staged> files = staged_;
  std::sort(files.begin(), files.end(),
            [](const Staged& a, const Staged& b) { return a.rel < b.rel; });
  nlohmann::json list = nlohmann::json::array();
  for (const Staged& f : files)
    list.push_back(
        {{"path", f.rel}, {"bytes", f.bytes}, {"fnv1a64", fmt::format("{:016x}", f.fnv1a64)}});
  report["files"] = list;
  write_file_text(stage_ + "/report.json", report.dump(2) + "\n");
  fault_point();
  if (std::rename((stage_ + "/report.json").c_str(), report_path.c_str()) != 0)
    commit_failed("move into place", report_path, errno);
  committed_ = true;
  fault_point();
  std::error_code ec;
  std::filesystem::remove_all(stage_, ec);
}

}  // namespace kiln::cli
