// The text, DOT and SVG printers: properties every graph's listing must have, not golden text.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/ir/print.h"
#include "mugraph_samples.h"

namespace kiln {
namespace {

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

int graph_defined_ops(const KernelGraph& g) {
  int n = 0;
  for (const KernelOp& op : g.ops) n += op.kind == OpKind::GraphDefined;
  return n;
}

TEST(PrintText, MentionsEveryTensorKernelAndBlockOp) {
  for (auto& [name, g] : samples::all()) {
    SCOPED_TRACE(name);
    std::string text = to_text(g);
    EXPECT_NE(text.find(g.name), std::string::npos);
    for (const TensorDesc& t : g.tensors) {
      EXPECT_NE(text.find(t.name + ": " + dtype_name(t.dtype) + shape_str(t.shape)),
                std::string::npos)
          << t.name;
    }
    for (const KernelOp& op : g.ops) {
      if (op.kind == OpKind::GraphDefined) {
        EXPECT_NE(text.find("kernel " + op.name + "("), std::string::npos) << op.name;
      } else {
        EXPECT_NE(text.find(std::string(" = ") + op_name(op.kind) + "("), std::string::npos)
            << op.name;
      }
      if (!op.block) continue;
      EXPECT_NE(text.find("grid " + shape_str(op.block->grid)), std::string::npos);
      EXPECT_NE(text.find("loop " + shape_str(op.block->loop)), std::string::npos);
      BlockResources r = block_resources(*op.block);
      EXPECT_NE(text.find(fmt::format("shared memory {} ", r.smem_bytes)), std::string::npos);
      EXPECT_NE(text.find(fmt::format("registers/thread {} ", r.regs_per_thread)),
                std::string::npos);
      for (const BlockOp& b : op.block->ops) {
        // One table row per block op: name, tile, stage, in that order.
        std::string row_start = b.name;
        size_t at = text.find("\n    " + row_start + " ");
        ASSERT_NE(at, std::string::npos) << b.name;
        std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
        EXPECT_NE(line.find(shape_str(b.shape)), std::string::npos) << line;
        EXPECT_NE(line.find(stage_name(b.stage)), std::string::npos) << line;
        if (b.kind == OpKind::Input || b.kind == OpKind::Output) {
          EXPECT_NE(line.find("fmap "), std::string::npos) << line;
        }
        if (b.thread) {
          EXPECT_NE(text.find(fmt::format("  -> {}\n", b.name)), std::string::npos);
        }
      }
    }
    EXPECT_NE(text.find("\noutputs: "), std::string::npos);
  }
}

TEST(PrintText, ShowsAttrsAndThreadOps) {
  std::string text = to_text(samples::spec_like());
  EXPECT_NE(text.find("rms_norm(X, g, eps=1e-05)"), std::string::npos) << text;
  EXPECT_NE(text.find("sum(T, dim=1, keepdim=false)"), std::string::npos) << text;
  EXPECT_NE(text.find("clamp(L, min=-1)"), std::string::npos) << text;
  std::string fa = to_text(samples::flash_attention());
  EXPECT_NE(fa.find("%0 = sub(s, mx)"), std::string::npos) << fa;
  EXPECT_NE(fa.find("%1 = exp(%0)  -> e"), std::string::npos) << fa;
  EXPECT_NE(fa.find("accum_rescale(pv, mx)"), std::string::npos) << fa;
}

TEST(PrintDot, IsWellFormedWithOneClusterPerGraphDefinedOp) {
  for (auto& [name, g] : samples::all()) {
    SCOPED_TRACE(name);
    std::string dot = to_dot(g);
    EXPECT_EQ(dot.rfind("digraph ", 0), 0u);
    // Braces balance and never close more than they opened.
    int depth = 0, min_depth = 0;
    for (char c : dot) {
      depth += c == '{';
      depth -= c == '}';
      min_depth = std::min(min_depth, depth);
    }
    EXPECT_EQ(depth, 0);
    EXPECT_EQ(min_depth, 0);
    EXPECT_EQ(count(dot, "\"") % 2, count(dot, "\\\"") % 2) << "unbalanced quotes";
    EXPECT_EQ(static_cast<int>(count(dot, "subgraph cluster_")), graph_defined_ops(g));
    for (const KernelOp& op : g.ops) {
      if (!op.block) continue;
      for (const BlockOp& b : op.block->ops)
        EXPECT_NE(dot.find("\"" + b.name + " = "), std::string::npos) << b.name;
    }
    for (const TensorDesc& t : g.tensors) EXPECT_NE(dot.find(t.name), std::string::npos);
    // Every graph output has a node with an incoming edge.
    for (size_t i = 0; i < g.outputs.size(); ++i)
      EXPECT_NE(dot.find(fmt::format("-> \"out_{}\";", i)), std::string::npos);
  }
}

TEST(PrintDot, EscapesQuotesInNames) {
  KernelGraph g = samples::tiled_matmul();
  g.name = "say \"hi\"";  // not a valid name, but the printer must not break on one
  std::string dot = to_dot(g);
  EXPECT_NE(dot.find("digraph \"say \\\"hi\\\"\""), std::string::npos) << dot.substr(0, 80);
}

// The SVG drawing: one document, tags balanced, a kernel frame per graph-defined op, a box per
// input, block op and output (with its name), an arrow per data dependence, every box inside the
// canvas, and no two boxes of one row overlapping.
TEST(PrintSvg, IsWellFormedAndDrawsEveryOpInsideTheCanvas) {
  for (auto& [name, g] : samples::all()) {
    SCOPED_TRACE(name);
    std::string svg = to_svg(g);
    EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
    EXPECT_EQ(count(svg, "<svg"), 1u);
    EXPECT_EQ(count(svg, "</svg>"), 1u);
    EXPECT_EQ(count(svg, "<g "), count(svg, "</g>"));
    EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
    EXPECT_EQ(static_cast<int>(count(svg, "<g class=\"kernel\">")), graph_defined_ops(g));
    size_t boxes = g.inputs.size() + g.outputs.size(), edges = g.outputs.size();
    for (const KernelOp& op : g.ops) {
      if (!op.block) {
        ++boxes;
        edges += op.inputs.size();
        continue;
      }
      for (const BlockOp& b : op.block->ops) {
        ++boxes;
        edges += b.inputs.size() + (b.kind == OpKind::Input);
        EXPECT_NE(svg.find(">" + b.name + " = "), std::string::npos) << b.name;
      }
    }
    EXPECT_EQ(count(svg, "<rect"), boxes + graph_defined_ops(g));
    EXPECT_EQ(count(svg, "<line"), edges);
    for (int t : g.inputs) EXPECT_NE(svg.find(">" + g.tensor(t).name + "<"), std::string::npos);
    // Geometry: every rect inside the canvas; rects of one row (same y) apart.
    double w = 0, h = 0;
    ASSERT_EQ(std::sscanf(svg.c_str(),
                          "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                          "class=\"kiln-graph\" width=\"%lf\" height=\"%lf\"",
                          &w, &h),
              2);
    std::vector<std::array<double, 4>> rects;
    for (size_t at = svg.find("<rect x=\""); at != std::string::npos;
         at = svg.find("<rect x=\"", at + 1)) {
      std::array<double, 4> r{};
      ASSERT_EQ(
          std::sscanf(svg.c_str() + at, "<rect x=\"%lf\" y=\"%lf\" width=\"%lf\" height=\"%lf\"",
                      &r[0], &r[1], &r[2], &r[3]),
          4);
      EXPECT_GE(r[0], 0);
      EXPECT_GE(r[1], 0);
      EXPECT_LE(r[0] + r[2], w + 0.5);
      EXPECT_LE(r[1] + r[3], h + 0.5);
      rects.push_back(r);
    }
    for (size_t i = 0; i < rects.size(); ++i)
      for (size_t j = i + 1; j < rects.size(); ++j)
        if (rects[i][1] == rects[j][1] && rects[i][2] < w - 20 && rects[j][2] < w - 20)
          EXPECT_TRUE(rects[i][0] + rects[i][2] <= rects[j][0] ||
                      rects[j][0] + rects[j][2] <= rects[i][0])
              << "overlapping boxes " << i << ", " << j;
  }
}

TEST(PrintSvg, EscapesMarkupInNames) {
  KernelGraph g = samples::tiled_matmul();
  g.name = "a<b & \"c\"";
  std::string svg = to_svg(g);
  EXPECT_NE(svg.find("<title>a&lt;b &amp; &quot;c&quot;</title>"), std::string::npos);
}

}  // namespace
}  // namespace kiln
