// Human-readable forms of a kernel graph: an indented text listing (tile shapes, stages, maps
// and resources of every block graph) and a Graphviz DOT graph (kernel ops as nodes, each
// graph-defined op as a cluster holding its block graph).
#pragma once

#include <string>

#include "kiln/ir/kernel_graph.h"

namespace kiln {

std::string to_text(const KernelGraph& g);
std::string to_dot(const KernelGraph& g);

}  // namespace kiln
