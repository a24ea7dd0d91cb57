// Diagnostics: the two kinds of failure Kiln distinguishes.
//
// A UserError is a problem with what the user gave us (a malformed spec, an invalid μGraph, an
// unsupported shape). It carries where (file and a JSON path such as `nodes[3].inputs[1]`), what
// is wrong, and optionally a hint. The CLI prints it and exits with status 2, writing nothing.
//
// KILN_ASSERT guards our own invariants. A failure is a bug in Kiln: it throws InternalError
// with the source location and context; the CLI reports it and exits with status 1.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kiln {

// What kind of user error. Used by tests to pin diagnostics without matching whole strings.
enum class ErrorCode {
  Io,         // file missing or unreadable
  Syntax,     // not JSON (or not UTF-8, or too deep)
  Schema,     // wrong key, wrong type, missing required key, unknown format version
  Name,       // bad, duplicate or unknown name
  Op,         // unknown op, wrong arity, bad attr
  Shape,      // shapes do not agree, bad dim, overflow
  Map,        // block graph: invalid imap/fmap/omap, tiles that do not divide
  Resource,   // block graph: shared memory, registers or threads exceed the target
  Structure,  // block graph: stage or accumulator misuse, outputs not written
  Unsupported,
};

const char* error_code_name(ErrorCode c);

class UserError : public std::runtime_error {
 public:
  UserError(ErrorCode code, std::string message, std::string hint = {})
      : std::runtime_error(message),
        code_(code),
        message_(std::move(message)),
        hint_(std::move(hint)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Adds location context as the error travels outwards. A path already set is kept as the
  // innermost part: with_path("nodes[2]") on an error at "inputs[1]" gives "nodes[2].inputs[1]".
  UserError& with_file(std::string file) {
    if (file_.empty()) file_ = std::move(file);
    return *this;
  }
  UserError& with_path(const std::string& outer);

  // "FILE: PATH: MESSAGE (hint: HINT)" with the empty parts left out.
  std::string render() const;

 private:
  ErrorCode code_;
  std::string message_, hint_, file_, path_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Throws a UserError built with fmt-style formatting.
template <typename... Args>
[[noreturn]] void user_error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(code, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kiln

#define KILN_ASSERT(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond))                                                                            \
      throw ::kiln::InternalError(fmt::format("internal error at {}:{}: {} ({})", __FILE__, \
                                              __LINE__, #cond, fmt::format(__VA_ARGS__)));  \
  } while (0)
