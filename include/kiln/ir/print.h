// Human-readable forms of a kernel graph: an indented text listing (tile shapes, stages, maps
// and resources of every block graph), a Graphviz DOT graph (kernel ops as nodes, each
// graph-defined op as a cluster holding its block graph), and an SVG drawing laid out here.
#pragma once

#include <string>

#include "kiln/ir/kernel_graph.h"

namespace kiln {

std::string to_text(const KernelGraph& g);
std::string to_dot(const KernelGraph& g);
// A standalone SVG document (no Graphviz): the graph's inputs, each kernel op in program order
// (a graph-defined one as a dashed frame, class "kernel", holding its block ops laid out by
// depth, each box with its tile, stage, maps and thread chain), the outputs, and an arrow per
// data dependence. Every text is XML-escaped.
std::string to_svg(const KernelGraph& g);

}  // namespace kiln
