// The human-readable forms of a kernel graph: the text listing `kiln show` prints, Graphviz DOT
// and a self-laid-out SVG drawing.
//
// The text listing is meant to be read top to bottom like a program: inputs, then each kernel op
// with its result types, and for a graph-defined op its launch shape, its resource use against
// the target, and a table of block ops (name, tile, stage, expression, maps) with thread graphs
// written out under their fused op. Nothing here is parsed back; the JSON form is the exchange
// format.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/ir/print.h"

namespace kiln {

namespace {

// "dim=1, keepdim=true": the attrs the op accepts, in table order (clamp bounds only when set).
std::vector<std::string> attr_strings(OpKind kind, const Attrs& a) {
  std::vector<std::string> out;
  uint16_t bits = op_info(kind).attrs;
  if (bits & kAttrDim) out.push_back(fmt::format("dim={}", a.dim));
  if (bits & kAttrKeepdim) out.push_back(fmt::format("keepdim={}", a.keepdim));
  if (bits & kAttrPerm) out.push_back(fmt::format("perm=[{}]", fmt::join(a.perm, ", ")));
  if (bits & kAttrValue) out.push_back(fmt::format("value={}", a.value));
  if (bits & kAttrEps) out.push_back(fmt::format("eps={}", a.eps));
  if (bits & kAttrApproximate)
    out.push_back(
        fmt::format("approximate={}", a.approximate == GeluApprox::Tanh ? "tanh" : "none"));
  if (bits & kAttrNegativeSlope) out.push_back(fmt::format("negative_slope={}", a.negative_slope));
  if ((bits & kAttrMin) && a.min) out.push_back(fmt::format("min={}", *a.min));
  if ((bits & kAttrMax) && a.max) out.push_back(fmt::format("max={}", *a.max));
  return out;
}

// "op(a, b, attr=...)".
std::string call(OpKind kind, const std::vector<std::string>& args, const Attrs& attrs) {
  std::vector<std::string> all = args;
  for (std::string& s : attr_strings(kind, attrs)) all.push_back(std::move(s));
  return fmt::format("{}({})", op_name(kind), fmt::join(all, ", "));
}

std::string type_str(const TensorDesc& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), shape_str(t.shape));
}

std::string map_str(const std::vector<int>& m) {
  return fmt::format("[{}]", fmt::join(m, ", "));
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}

std::vector<std::string> operand_names(const BlockGraph& bg, const std::vector<int>& ins) {
  std::vector<std::string> out;
  for (int i : ins) out.push_back(bg.ops.at(i).name);
  return out;
}

// The expression column of a block op.
std::string block_expr(const KernelGraph& g, const KernelOp& kop, const BlockGraph& bg,
                       const BlockOp& op) {
  switch (op_info(op.kind).cls) {
    case OpClass::Input:
      return fmt::format("input {}", g.tensor(kop.inputs.at(op.io)).name);
    case OpClass::Output:
      return fmt::format("output({}) -> {}", bg.ops.at(op.inputs.at(0)).name,
                         bg.outputs.at(op.io).name);
    case OpClass::Fused:
      return fmt::format("fused({})", fmt::join(operand_names(bg, op.inputs), ", "));
    case OpClass::Matmul:
    case OpClass::Transpose:
    case OpClass::Binary:
    case OpClass::Unary:
    case OpClass::Constant:
    case OpClass::Reduce:
    case OpClass::Softmax:
    case OpClass::RmsNorm:
    case OpClass::GraphDefined:
    case OpClass::Accum:
      return call(op.kind, operand_names(bg, op.inputs), op.attrs);
  }
}

// The map columns of an input or output op: {"imap [..]" or "omap [..]", "fmap [..]"}.
std::vector<std::string> block_maps(const BlockOp& op) {
  switch (op_info(op.kind).cls) {
    case OpClass::Input:
      return {"imap " + map_str(op.imap), "fmap " + map_str(op.fmap)};
    case OpClass::Output:
      return {"omap " + map_str(op.imap), "fmap " + map_str(op.fmap)};
    case OpClass::Matmul:
    case OpClass::Transpose:
    case OpClass::Binary:
    case OpClass::Unary:
    case OpClass::Constant:
    case OpClass::Reduce:
    case OpClass::Softmax:
    case OpClass::RmsNorm:
    case OpClass::GraphDefined:
    case OpClass::Accum:
    case OpClass::Fused:
      return {};
  }
}

// A fused op's thread graph, one "%j = op(args)" per thread op; operands are the fused op's
// input tiles (by name) or earlier results %j.
std::vector<std::string> thread_lines(const BlockGraph& bg, const BlockOp& op) {
  std::vector<std::string> out;
  if (!op.thread) return out;
  const ThreadGraph& tg = *op.thread;
  auto ref = [&](int r) {
    return r < tg.num_inputs ? bg.ops.at(op.inputs.at(r)).name
                             : fmt::format("%{}", r - tg.num_inputs);
  };
  for (size_t j = 0; j < tg.ops.size(); ++j) {
    std::vector<std::string> args;
    for (int r : tg.ops[j].inputs) args.push_back(ref(r));
    out.push_back(fmt::format("%{} = {}", j, call(tg.ops[j].kind, args, tg.ops[j].attrs)));
  }
  return out;
}

void print_block_graph(const KernelGraph& g, const KernelOp& kop, const std::string& indent,
                       std::string& out) {
  const BlockGraph& bg = *kop.block;
  const Target& target = target_for(g.arch);
  out += fmt::format("{}grid {}, block_threads {}, loop {}  ({} blocks x {} iteration{})\n", indent,
                     shape_str(bg.grid), bg.block_threads, shape_str(bg.loop), bg.num_blocks(),
                     bg.num_iterations(), bg.num_iterations() == 1 ? "" : "s");
  BlockResources r = block_resources(bg);
  out += fmt::format("{}resources: shared memory {} / {} B, registers/thread {} / {} ({})\n",
                     indent, r.smem_bytes, target.smem_per_block, r.regs_per_thread,
                     target.regs_per_thread_max, target.name);

  // One row per block op: name, tile, stage, expression, then the maps of inputs and outputs.
  // Columns are padded to line up; the expression is padded only as wide as the rows with maps
  // need, so a long compute expression does not push the maps of every other row right.
  std::vector<std::vector<std::string>> rows;
  for (const BlockOp& op : bg.ops) {
    std::vector<std::string> row = {op.name, shape_str(op.shape), stage_name(op.stage),
                                    block_expr(g, kop, bg, op)};
    for (std::string& m : block_maps(op)) row.push_back(std::move(m));
    rows.push_back(std::move(row));
  }
  std::vector<size_t> width(6, 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c)
      if (c != 3 || row.size() > 4) width[c] = std::max(width[c], row[c].size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c)
      line += c + 1 == row.size() ? row[c] : pad(row[c], width[c]) + "  ";
    out += line + "\n";
    const BlockOp& op = bg.ops[i];
    if (op.kind != OpKind::Fused) continue;
    std::string sub = indent + std::string(width[0] + 4, ' ');
    std::vector<std::string> lines = thread_lines(bg, op);
    for (size_t j = 0; j < lines.size(); ++j)
      out += fmt::format("{}{}{}\n", sub, lines[j],
                         j + 1 == lines.size() ? fmt::format("  -> {}", op.name) : "");
  }
}

// DOT string literal contents: escapes quotes and backslashes; "\n" stays a DOT line break.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string dot_label(const std::vector<std::string>& lines) {
  std::vector<std::string> esc;
  for (const std::string& l : lines) esc.push_back(dot_escape(l));
  return fmt::format("\"{}\"", fmt::join(esc, "\\n"));
}

// Splits text into lines of at most `width` bytes at spaces (a longer word gets a line alone).
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(at, end - at);
    at = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

std::string to_text(const KernelGraph& g) {
  std::string out;
  out += fmt::format("graph {}  (target {}, {} kernel{})\n", g.name, target_for(g.arch).name,
                     g.num_kernels(), g.num_kernels() == 1 ? "" : "s");
  for (const std::string& line : wrap(g.doc, 96)) out += fmt::format("  # {}\n", line);
  out += "inputs:\n";
  for (int t : g.inputs) out += fmt::format("  {}: {}\n", g.tensor(t).name, type_str(g.tensor(t)));
  out += "kernels:\n";
  for (const KernelOp& op : g.ops) {
    std::vector<std::string> args;
    for (int t : op.inputs) args.push_back(g.tensor(t).name);
    if (op.kind != OpKind::GraphDefined) {
      const TensorDesc& t = g.tensor(op.outputs.at(0));
      out += fmt::format("  {}: {} = {}\n", t.name, type_str(t), call(op.kind, args, op.attrs));
      continue;
    }
    std::vector<std::string> results;
    for (int t : op.outputs)
      results.push_back(fmt::format("{}: {}", g.tensor(t).name, type_str(g.tensor(t))));
    out += fmt::format("  kernel {}({}) -> {}\n", op.name, fmt::join(args, ", "),
                       fmt::join(results, ", "));
    print_block_graph(g, op, "    ", out);
  }
  std::vector<std::string> outs;
  for (int t : g.outputs) outs.push_back(g.tensor(t).name);
  out += fmt::format("outputs: {}\n", fmt::join(outs, ", "));
  return out;
}

std::string to_dot(const KernelGraph& g) {
  std::string out = fmt::format("digraph {} {{\n", dot_label({g.name}));
  out += "  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  out += "  edge [fontname=\"monospace\", fontsize=9];\n";

  // The node that produces each tensor: a graph input, a predefined op, or the saver that writes
  // it inside a graph-defined op's cluster.
  std::vector<std::string> source(g.tensors.size());
  for (int t : g.inputs) {
    source[t] = fmt::format("\"in_{}\"", t);
    out += fmt::format("  {} [label={}, shape=ellipse];\n", source[t],
                       dot_label({g.tensor(t).name, type_str(g.tensor(t))}));
  }
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    if (op.kind != OpKind::GraphDefined) {
      source[op.outputs.at(0)] = fmt::format("\"op_{}\"", k);
      continue;
    }
    for (size_t i = 0; i < op.block->ops.size(); ++i) {
      const BlockOp& b = op.block->ops[i];
      if (b.kind == OpKind::Output) source[op.outputs.at(b.io)] = fmt::format("\"op_{}_{}\"", k, i);
    }
  }

  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    if (op.kind != OpKind::GraphDefined) {
      std::vector<std::string> args;
      for (int t : op.inputs) args.push_back(g.tensor(t).name);
      const TensorDesc& t = g.tensor(op.outputs.at(0));
      out += fmt::format(
          "  \"op_{}\" [label={}];\n", k,
          dot_label({fmt::format("{} = {}", t.name, call(op.kind, args, op.attrs)), type_str(t)}));
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const TensorDesc& in = g.tensor(op.inputs[i]);
        out += fmt::format("  {} -> \"op_{}\" [label={}];\n", source[op.inputs[i]], k,
                           dot_label({in.name, shape_str(in.shape)}));
      }
      continue;
    }
    const BlockGraph& bg = *op.block;
    out += fmt::format("  subgraph cluster_{} {{\n", k);
    out += fmt::format(
        "    label={};\n    style=rounded;\n    color=gray40;\n",
        dot_label({fmt::format("kernel {}: grid {}, loop {}, {} threads", op.name,
                               shape_str(bg.grid), shape_str(bg.loop), bg.block_threads)}));
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& b = bg.ops[i];
      std::string head = fmt::format("{} = {}", b.name, block_expr(g, op, bg, b));
      std::string body = fmt::format("{} {}", shape_str(b.shape), stage_name(b.stage));
      std::vector<std::string> lines = {head, body};
      if (auto m = block_maps(b); !m.empty())
        lines.push_back(fmt::format("{}", fmt::join(m, "  ")));
      for (std::string& l : thread_lines(bg, b)) lines.push_back(std::move(l));
      const char* shape = b.kind == OpKind::Input || b.kind == OpKind::Output ? "box3d" : "box";
      out += fmt::format("    \"op_{}_{}\" [label={}, shape={}];\n", k, i, dot_label(lines), shape);
    }
    for (size_t i = 0; i < bg.ops.size(); ++i)
      for (int in : bg.ops[i].inputs)
        out += fmt::format("    \"op_{}_{}\" -> \"op_{}_{}\";\n", k, in, k, i);
    out += "  }\n";
    // Device tensors enter at the input iterators that read them (or the cluster's first op).
    for (size_t io = 0; io < op.inputs.size(); ++io) {
      const TensorDesc& in = g.tensor(op.inputs[io]);
      bool any = false;
      for (size_t i = 0; i < bg.ops.size(); ++i)
        if (bg.ops[i].kind == OpKind::Input && bg.ops[i].io == static_cast<int>(io)) {
          out += fmt::format("  {} -> \"op_{}_{}\" [label={}];\n", source[op.inputs[io]], k, i,
                             dot_label({in.name, shape_str(in.shape)}));
          any = true;
        }
      if (!any)
        out += fmt::format("  {} -> \"op_{}_0\" [label={}, style=dashed];\n", source[op.inputs[io]],
                           k, dot_label({in.name, shape_str(in.shape)}));
    }
  }

  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    out += fmt::format("  \"out_{}\" [label={}, shape=ellipse];\n", i,
                       dot_label({fmt::format("output {}: {}", i, t.name), type_str(t)}));
    out += fmt::format("  {} -> \"out_{}\";\n", source[g.outputs[i]], i);
  }
  out += "}\n";
  return out;
}

namespace {

// SVG: every box is laid out here (no Graphviz): the graph's inputs in a row, then each kernel op
// in program order (a graph-defined one as a frame holding its block ops in layers by depth),
// then the outputs; edges are straight arrows from a producer's bottom to a consumer's top.
struct SvgBox {
  double x = 0, y = 0, w = 0, h = 0;
  std::vector<std::string> lines;
  std::string cls;  // CSS class: input, output, predefined, io, block, fused
};

constexpr double kCharW = 6.6, kLineH = 13, kPad = 6, kGapX = 14, kGapY = 26;

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  return o;
}

SvgBox make_box(std::vector<std::string> lines, std::string cls) {
  SvgBox b;
  size_t w = 0;
  for (const std::string& l : lines) w = std::max(w, l.size());
  b.w = static_cast<double>(w) * kCharW + 2 * kPad;
  b.h = static_cast<double>(lines.size()) * kLineH + 2 * kPad - 2;
  b.lines = std::move(lines);
  b.cls = std::move(cls);
  return b;
}

// Places a row of boxes centred on `cx` at height y; returns the row's height.
double place_row(std::vector<SvgBox*> row, double cx, double y) {
  double w = 0, h = 0;
  for (SvgBox* b : row) w += b->w, h = std::max(h, b->h);
  w += kGapX * static_cast<double>(row.size() - 1);
  double x = cx - w / 2;
  for (SvgBox* b : row) {
    b->x = x;
    b->y = y;
    x += b->w + kGapX;
  }
  return h;
}

}  // namespace

std::string to_svg(const KernelGraph& g) {
  std::vector<SvgBox> boxes;
  std::vector<SvgBox> frames;                     // one per graph-defined kernel
  std::vector<std::pair<int, int>> edges;         // box -> box
  std::vector<int> source(g.tensors.size(), -1);  // the box producing each tensor
  std::vector<std::vector<int>> bands;            // boxes of each horizontal band, top to bottom
  std::vector<int> band_frame;                    // the frame a band belongs to (-1: none)
  boxes.reserve(16);
  auto add = [&](SvgBox b) {
    boxes.push_back(std::move(b));
    return static_cast<int>(boxes.size()) - 1;
  };
  {
    std::vector<int> row;
    for (int t : g.inputs) {
      source[t] = add(make_box({g.tensor(t).name, type_str(g.tensor(t))}, "input"));
      row.push_back(source[t]);
    }
    bands.push_back(row);
    band_frame.push_back(-1);
  }
  std::vector<std::pair<int, std::vector<int>>> frame_bands;  // frame -> its band indices
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    if (op.kind != OpKind::GraphDefined) {
      std::vector<std::string> args;
      for (int t : op.inputs) args.push_back(g.tensor(t).name);
      const TensorDesc& t = g.tensor(op.outputs.at(0));
      int b = add(make_box({fmt::format("{} = {}", t.name, call(op.kind, args, op.attrs)),
                            type_str(t), "predefined kernel"},
                           "predefined"));
      for (int in : op.inputs)
        if (source[in] >= 0) edges.push_back({source[in], b});
      source[op.outputs.at(0)] = b;
      bands.push_back({b});
      band_frame.push_back(-1);
      continue;
    }
    const BlockGraph& bg = *op.block;
    SvgBox frame = make_box({fmt::format("kernel {}: grid {}, loop {}, {} threads", op.name,
                                         shape_str(bg.grid), shape_str(bg.loop), bg.block_threads)},
                            "frame");
    int fi = static_cast<int>(frames.size());
    std::vector<int> depth(bg.ops.size(), 0), ids(bg.ops.size(), -1);
    int max_depth = 0;
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& b = bg.ops[i];
      for (int in : b.inputs) depth[i] = std::max(depth[i], depth[in] + 1);
      max_depth = std::max(max_depth, depth[i]);
      std::vector<std::string> lines = {
          fmt::format("{} = {}", b.name, block_expr(g, op, bg, b)),
          fmt::format("{} {}", shape_str(b.shape), stage_name(b.stage))};
      if (auto m = block_maps(b); !m.empty())
        lines.push_back(fmt::format("{}", fmt::join(m, "  ")));
      for (std::string& l : thread_lines(bg, b)) lines.push_back("  " + l);
      bool io = b.kind == OpKind::Input || b.kind == OpKind::Output;
      ids[i] = add(make_box(std::move(lines), io ? "io" : b.thread ? "fused" : "block"));
      for (int in : b.inputs) edges.push_back({ids[in], ids[i]});
      if (b.kind == OpKind::Input) {
        int t = op.inputs.at(b.io);
        if (source[t] >= 0) edges.push_back({source[t], ids[i]});
      }
      if (b.kind == OpKind::Output) source[op.outputs.at(b.io)] = ids[i];
    }
    std::vector<int> mine;
    for (int d = 0; d <= max_depth; ++d) {
      std::vector<int> row;
      for (size_t i = 0; i < bg.ops.size(); ++i)
        if (depth[i] == d) row.push_back(ids[i]);
      mine.push_back(static_cast<int>(bands.size()));
      bands.push_back(row);
      band_frame.push_back(fi);
    }
    frames.push_back(std::move(frame));
    frame_bands.push_back({fi, mine});
  }
  {
    std::vector<int> row;
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const TensorDesc& t = g.tensor(g.outputs[i]);
      int b = add(make_box({fmt::format("output {}: {}", i, t.name), type_str(t)}, "output"));
      if (source[g.outputs[i]] >= 0) edges.push_back({source[g.outputs[i]], b});
      row.push_back(b);
    }
    bands.push_back(row);
    band_frame.push_back(-1);
  }
  // Width: the widest band (a frame's bands inside its margins).
  double width = 0;
  for (size_t bi = 0; bi < bands.size(); ++bi) {
    double w = 0;
    for (int b : bands[bi]) w += boxes[b].w + kGapX;
    w += band_frame[bi] >= 0 ? 2 * kGapX : 0;
    width = std::max(width, w);
  }
  for (const SvgBox& f : frames) width = std::max(width, f.w + 2 * kGapX);
  width += 2 * kGapX;
  const double cx = width / 2;
  double y = kGapX;
  int open = -1;  // the frame whose bands are being placed
  for (size_t bi = 0; bi < bands.size(); ++bi) {
    int f = band_frame[bi];
    if (f != open) {
      if (open >= 0) {
        frames[open].h = y - frames[open].y;
        y += kGapY;
      }
      if (f >= 0) {
        frames[f].x = kGapX / 2;
        frames[f].y = y;
        frames[f].w = width - kGapX;
        y += kLineH + 2 * kPad;
      }
      open = f;
    }
    std::vector<SvgBox*> row;
    for (int b : bands[bi]) row.push_back(&boxes[b]);
    if (!row.empty()) y += place_row(row, cx, y) + kGapY;
  }
  if (open >= 0) frames[open].h = y - frames[open].y;
  const double height = y;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"kiln-graph\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"monospace\" "
      "font-size=\"11\">\n",
      width, height, width, height);
  out += fmt::format("<title>{}</title>\n", xml_escape(g.name));
  out +=
      "<defs><marker id=\"kiln-arrow\" viewBox=\"0 0 8 8\" refX=\"8\" refY=\"4\" "
      "markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" "
      "fill=\"#555\"/></marker></defs>\n";
  const std::map<std::string, std::string> fill = {{"input", "#e3f0ff"},      {"output", "#e3ffe8"},
                                                   {"predefined", "#fff4d6"}, {"io", "#f0f0f0"},
                                                   {"block", "#ffffff"},      {"fused", "#fde9f3"}};
  for (const SvgBox& f : frames)
    out += fmt::format(
        "<g class=\"kernel\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "rx=\"8\" fill=\"#fafafa\" stroke=\"#888\" stroke-dasharray=\"4 3\"/><text x=\"{:.1f}\" "
        "y=\"{:.1f}\" font-weight=\"bold\">{}</text></g>\n",
        f.x, f.y, f.w, f.h, f.x + kPad, f.y + kPad + kLineH - 3, xml_escape(f.lines[0]));
  for (const auto& [a, b] : edges) {
    const SvgBox &p = boxes[a], &q = boxes[b];
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555\" "
        "marker-end=\"url(#kiln-arrow)\"/>\n",
        p.x + p.w / 2, p.y + p.h, q.x + q.w / 2, q.y);
  }
  for (const SvgBox& b : boxes) {
    out += fmt::format(
        "<g class=\"{}\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
        "rx=\"{}\" fill=\"{}\" stroke=\"#333\"/>",
        b.cls, b.x, b.y, b.w, b.h, b.cls == "input" || b.cls == "output" ? 10 : 3, fill.at(b.cls));
    for (size_t i = 0; i < b.lines.size(); ++i)
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\"{}>{}</text>", b.x + kPad,
                         b.y + kPad + kLineH * static_cast<double>(i + 1) - 3,
                         i == 0 ? " font-weight=\"bold\"" : "", xml_escape(b.lines[i]));
    out += "</g>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace kiln
