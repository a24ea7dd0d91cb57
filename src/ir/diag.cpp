// Rendering of user diagnostics.
#include "kiln/ir/diag.h"

namespace kiln {

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::Io:
      return "io";
    case ErrorCode::Syntax:
      return "syntax";
    case ErrorCode::Schema:
      return "schema";
    case ErrorCode::Name:
      return "name";
    case ErrorCode::Op:
      return "op";
    case ErrorCode::Shape:
      return "shape";
    case ErrorCode::Map:
      return "map";
    case ErrorCode::Resource:
      return "resource";
    case ErrorCode::Structure:
      return "structure";
    case ErrorCode::Unsupported:
      return "unsupported";
  }
  return "?";
}

UserError& UserError::with_path(const std::string& outer) {
  if (outer.empty()) return *this;
  if (path_.empty()) {
    path_ = outer;
  } else if (path_[0] == '[') {
    path_ = outer + path_;
  } else {
    path_ = outer + "." + path_;
  }
  return *this;
}

std::string UserError::render() const {
  std::string out;
  if (!file_.empty()) out += file_ + ": ";
  if (!path_.empty()) out += path_ + ": ";
  out += message_;
  if (!hint_.empty()) out += " (hint: " + hint_ + ")";
  return out;
}

}  // namespace kiln
