// Strict JSON reading for every Kiln file format.
//
// nlohmann's parser is iterative, but the DOM it builds is not checked for the things a hostile
// file can do to us. So the text goes through nlohmann's SAX interface into our own DOM builder,
// which refuses nesting deeper than kMaxJsonDepth as each container opens (before anything is
// built under it) and refuses duplicate keys. NUL bytes are refused up front (nlohmann would take
// one for the end of the input). nlohmann itself rejects invalid UTF-8, control characters in
// strings, trailing garbage and numbers that overflow double. Every error names a
// line and column; the input is read through a counting iterator so that the builder's own errors
// can name one too.
#include "json_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace kiln {

using json = nlohmann::json;

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b = byte(i);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return len;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// "line L, column C" of the byte at `offset` (both 1-based; the column counts bytes).
std::string location(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  return fmt::format("line {}, column {}", line, offset - line_start + 1);
}

// Iterates over the text for nlohmann's input adapter and publishes how many bytes it has
// consumed, so SAX callbacks know where in the text they are.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* base, const char* p, size_t* consumed)
      : base_(base), p_(p), consumed_(consumed) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    ++p_;
    *consumed_ = static_cast<size_t>(p_ - base_);
    return *this;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }

 private:
  const char* base_;
  const char* p_;
  size_t* consumed_;
};

// Builds the DOM from SAX events with an explicit stack, enforcing depth and unique keys.
// Callbacks throw UserError(Syntax) instead of returning false, so errors carry our message.
class StrictDomBuilder {
 public:
  StrictDomBuilder(std::string_view text, const size_t& consumed)
      : text_(text), consumed_(consumed) {}

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(json::number_integer_t v) { return put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return put(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(v); }
  bool string(json::string_t& v) { return put(std::move(v)); }
  // Required by the SAX interface; only binary formats (CBOR, ...) produce it.
  bool binary(json::binary_t&) { return false; }

  bool start_object(size_t) { return open(json::object()); }
  bool start_array(size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    Frame& f = stack_.back();
    if (f.node->contains(k)) {
      // The key's closing quote was the last byte read.
      UserError e(
          ErrorCode::Syntax,
          fmt::format("duplicate key \"{}\" at {}", printable(k), location(text_, consumed_ - 1)),
          "each key may appear once in an object");
      e.with_path(path_to_key(k));
      throw e;
    }
    f.key = std::move(k);
    return true;
  }

  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    // what() is "[json.exception.KIND.ID] parse error at line L, column C: DETAIL" for syntax
    // errors and "[json.exception.KIND.ID] DETAIL" otherwise; we give our own location.
    std::string_view detail = ex.what();
    if (size_t p = detail.find("] "); p != std::string_view::npos) detail.remove_prefix(p + 2);
    if (detail.starts_with("parse error at line")) {
      if (size_t p = detail.find(": "); p != std::string_view::npos) detail.remove_prefix(p + 2);
    }
    throw UserError(ErrorCode::Syntax, fmt::format("invalid JSON at {}: {}",
                                                   location(text_, position ? position - 1 : 0),
                                                   printable(detail, 200)));
  }

  json take() { return std::move(root_); }

 private:
  struct Frame {
    json* node;
    std::string key;  // objects: the key of the value being read
  };

  // Places a finished value where the innermost open container expects it.
  json* place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = stack_.back();
    if (f.node->is_array()) {
      f.node->push_back(std::move(v));
      return &f.node->back();
    }
    // The key stays in the frame: the error path of anything nested under it needs it.
    return &f.node->get_ref<json::object_t&>().emplace(f.key, std::move(v)).first->second;
  }
  bool put(json v) {
    place(std::move(v));
    return true;
  }
  bool open(json container) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth))
      throw UserError(ErrorCode::Syntax,
                      fmt::format("JSON nested deeper than {} levels at {}", kMaxJsonDepth,
                                  location(text_, consumed_ - 1)));
    stack_.push_back({place(std::move(container)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  // JSON path of `key` in the innermost open object, e.g. `inputs[0].name`.
  std::string path_to_key(std::string_view key) const {
    std::string path;
    for (size_t i = 0; i + 1 < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      path = f.node->is_array() ? path_index(path, f.node->size() - 1) : path_key(path, f.key);
    }
    return path_key(path, key);
  }

  std::string_view text_;
  const size_t& consumed_;
  json root_;
  std::vector<Frame> stack_;
};

}  // namespace

std::string printable(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    size_t n = utf8_sequence_length(s, i);
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (n == 0 || b < 0x20 || b == 0x7F) {
      out += fmt::format("\\x{:02X}", b);
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

std::string path_key(std::string_view base, std::string_view key) {
  if (!is_identifier(key)) return fmt::format("{}[\"{}\"]", base, printable(key, 32));
  return base.empty() ? std::string(key) : fmt::format("{}.{}", base, key);
}

std::string path_index(std::string_view base, size_t index) {
  return fmt::format("{}[{}]", base, index);
}

std::string closest_name(std::string_view name, const std::vector<std::string_view>& candidates) {
  if (name.empty() || name.size() > 64) return {};
  // One-letter names are only matched up to case: any other letter is one edit away.
  const size_t max_d = name.size() == 1 ? 0 : name.size() <= 4 ? 1 : 2;
  auto differ = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) !=
           std::tolower(static_cast<unsigned char>(b));
  };
  std::string_view best;
  size_t best_d = max_d + 1;
  std::vector<size_t> prev(name.size() + 1), cur(name.size() + 1);
  for (std::string_view c : candidates) {
    if (c.size() + max_d < name.size() || c.size() > name.size() + max_d) continue;
    for (size_t j = 0; j <= name.size(); ++j) prev[j] = j;
    bool near = true;
    for (size_t i = 1; i <= c.size() && near; ++i) {
      cur[0] = i;
      size_t row_min = i;
      for (size_t j = 1; j <= name.size(); ++j) {
        cur[j] =
            std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + differ(c[i - 1], name[j - 1])});
        row_min = std::min(row_min, cur[j]);
      }
      near = row_min < best_d;  // a row minimum never decreases further down
      std::swap(prev, cur);
    }
    if (near && prev[name.size()] < best_d) best_d = prev[name.size()], best = c;
  }
  return std::string(best);
}

const char* json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "a list";
    case json::value_t::string:
      return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    default:
      return "a binary value";
  }
}

std::string json_brief(const json& v) {
  if (v.is_string()) return "\"" + printable(v.get_ref<const std::string&>()) + "\"";
  if (v.is_primitive()) return v.dump();
  return json_kind(v);
}

json parse_json_text(std::string_view text, const std::string& file) {
  try {
    if (text.size() > kMaxFileBytes)
      user_error(ErrorCode::Io, "input is {} bytes, more than the limit of {} MiB", text.size(),
                 kMaxFileBytes >> 20);
    // nlohmann takes a NUL byte for the end of the input; every byte must count.
    if (size_t nul = text.find('\0'); nul != std::string_view::npos)
      user_error(ErrorCode::Syntax, "invalid JSON at {}: a NUL byte", location(text, nul));
    size_t consumed = 0;
    StrictDomBuilder builder(text, consumed);
    const char* b = text.data();
    bool ok = json::sax_parse(CountingIterator(b, b, &consumed),
                              CountingIterator(b, b + text.size(), &consumed), &builder);
    KILN_ASSERT(ok, "SAX parse stopped without an error");
    return builder.take();
  } catch (UserError& e) {
    e.with_file(file);
    throw;
  }
}

std::string read_file_text(const std::string& path) {
  auto fail = [&](std::string message) {
    UserError e(ErrorCode::Io, std::move(message));
    e.with_file(path);
    throw e;
  };
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) fail("is a directory, not a file");
  // Regular files are checked up front; pipes and devices by counting as we read.
  if (std::filesystem::is_regular_file(status)) {
    auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxFileBytes)
      fail(fmt::format("file is {} bytes, more than the limit of {} MiB", size,
                       kMaxFileBytes >> 20));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(fmt::format("cannot open: {}", std::strerror(errno)));
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxFileBytes)
      fail(fmt::format("file is more than the limit of {} MiB", kMaxFileBytes >> 20));
  }
  if (in.bad()) fail(fmt::format("read failed: {}", std::strerror(errno)));
  return text;
}

// Atomic: the text goes to a temporary file in the same directory, which then replaces `path`
// by rename, so a reader (or a run killed mid-write) never sees a truncated file.
void write_file_text(const std::string& path, const std::string& text) {
  auto fail = [&](int err) {
    UserError e(ErrorCode::Io, fmt::format("cannot write: {}", std::strerror(err)),
                "write to a path whose directory exists and is writable (not a directory itself)");
    e.with_file(path);
    throw e;
  };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(EISDIR);
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      fmt::format("{}.kiln-tmp.{}.{}", path, static_cast<long>(::getpid()), counter++);
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    out.close();
    if (!out) {
      const int err = errno;
      std::remove(tmp.c_str());
      fail(err);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(err);
  }
}

}  // namespace kiln
