// The device headers carried inside the binary: the text of runtime/*.cuh, runtime/cg/kiln_cg.cuh
// and runtime/harness/*, written into a generated source at build time by cmake/embed_files.cmake
// (and regenerated whenever one of them changes). sources.cpp is the only reader.
#pragma once

#include <cstddef>

namespace kiln::cgen {

struct EmbeddedFile {
  const char* path;  // relative to the source tree, e.g. "runtime/base.cuh"
  const unsigned char* data;
  size_t size;  // bytes, without the terminating 0 that data also holds
};

extern const EmbeddedFile kEmbeddedFiles[];
extern const int kNumEmbeddedFiles;

}  // namespace kiln::cgen
