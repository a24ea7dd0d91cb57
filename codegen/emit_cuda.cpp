// The emitter's driver: one standalone .cu per kernel graph. Each op's kernel and launch come
// from the lowering its plan names (kiln/codegen/lowerings.h; codegen/lowerings/). The launch
// function places every tensor (arguments, or the workspace for intermediates) and enqueues the
// kernels in graph order.
#include <algorithm>
#include <array>
#include <set>

#include "emit_internal.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/print.h"
#include "kiln/version.h"

namespace kiln {

namespace cgen {

void fused_lambda(Code& c, const BlockOp& o, const std::vector<bool>* uniform) {
  const ThreadGraph& tg = *o.thread;
  std::vector<std::string> ps;
  for (int i = 0; i < tg.num_inputs; ++i) ps.push_back(fmt::format("float a{}", i));
  c.open(fmt::format("auto fz_{} = []({}) -> float {{", o.name, fmt::join(ps, ", ")));
  // Per value (inputs, then ops): the same for every call of the caller's loop.
  std::vector<bool> same(tg.num_inputs + tg.ops.size(), false);
  if (uniform)
    for (int i = 0; i < tg.num_inputs; ++i) same[i] = (*uniform)[i];
  for (size_t j = 0; j < tg.ops.size(); ++j) {
    std::vector<std::string> xs;
    bool all_same = uniform != nullptr;
    for (int r : tg.ops[j].inputs) {
      xs.push_back(r < tg.num_inputs ? fmt::format("a{}", r)
                                     : fmt::format("t{}", r - tg.num_inputs));
      all_same = all_same && same[r];
    }
    same[tg.num_inputs + j] = all_same;
    const ThreadOp& to = tg.ops[j];
    if (uniform && to.kind == OpKind::Div && same[to.inputs[1]] && !same[to.inputs[0]])
      c.f("const float t{} = {};", j, div_by_uniform(xs[0], xs[1]));
    else
      c.f("const float t{} = {};", j, ew_expr(to.kind, to.attrs, xs));
  }
  c.f("return t{};", tg.ops.size() - 1);
  c.close("};");
}

std::string div_by_uniform(const std::string& x, const std::string& d) {
  return fmt::format("({} * (1.0f / {}))", x, d);
}

RowView row_view(const Shape& x, int dim) {
  RowView v;
  for (int d = 0; d < static_cast<int>(x.size()); ++d) {
    if (d < dim) v.outer *= x[d];
    if (d == dim) v.R = x[d];
    if (d > dim) v.inner *= x[d];
  }
  return v;
}

void launch_check(Code& c) {
  c.line("if ((err = cudaGetLastError()) != cudaSuccess) return err;");
}

void emit_launch(Code& c, const std::string& kernel, const std::string& grid,
                 const std::string& block, const std::string& smem, int cluster,
                 const std::string& args) {
  c.f("if ((err = kiln::rt::launch({}, dim3({}), dim3({}), {}, stream, {}{}{})) != cudaSuccess) "
      "return err;",
      kernel, grid, block, smem, cluster, args.empty() ? "" : ", ", args);
}

void kernel_entry(Code& c, bool early_trigger) {
  c.line(early_trigger ? "kiln::rt::pdl_entry(true);  // waits for the previous kernel in the "
                         "stream; the next may launch (base.cuh)"
                       : "kiln::rt::pdl_entry();  // waits for the previous kernel in the stream "
                         "(base.cuh)");
}

// The kernel parameters `const T* p<j>` (and launch arguments) of op's non-constant inputs j;
// constants are folded into the expressions instead. Returns the indices j it added.
std::vector<int> operand_params(GraphCtx& x, const KernelOp& op, std::vector<std::string>& params,
                                std::vector<std::string>& args) {
  std::vector<int> loaded;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    int t = op.inputs[j];
    if (x.is_const(t)) continue;
    params.push_back(fmt::format("const {}* __restrict__ p{}", x.ty(t), j));
    args.push_back(x.ptr(t));
    loaded.push_back(static_cast<int>(j));
  }
  return loaded;
}

// Loads V consecutive elements of each of op's non-constant inputs, at element offset `at` of
// p<j>, into `float a<j>[V]`, and returns the per-element operand expressions for ew_expr (a<j>[q],
// or the folded constant). V elements are 16 bytes of the inputs' dtype.
std::vector<std::string> vector_operands(GraphCtx& x, const KernelOp& op, Code& c, int V,
                                         const std::string& at) {
  std::vector<std::string> xs;
  for (size_t j = 0; j < op.inputs.size(); ++j) {
    int t = op.inputs[j];
    if (x.is_const(t)) {
      xs.push_back(flit(x.const_value(t)));
    } else {
      c.f("float a{}[{}];", j, V);
      c.f("kiln::rt::load16_f32(p{} + {}, a{});", j, at, j);
      xs.push_back(fmt::format("a{}[q]", j));
    }
  }
  return xs;
}

void emit_graph_body(const KernelGraph& g, const Schedule& s, const std::string& name, Code& out) {
  GraphCtx x{g, s, {}, {}};
  x.launch.set_indent(1);
  for (const KernelPlan& kp : s.kernels) {
    const KernelOp& op = g.ops[kp.op];
    std::visit([&](const auto& p) { p.emit(x, op, kp); }, kp.plan);
  }
  const std::string ns = "kiln_gen_" + name;
  out.f("namespace {} {{", ns);
  out.line("");
  out.append(x.kernels);
  out.f("}}  // namespace {}", ns);
  out.line("");
  out.f("extern \"C\" size_t kiln_{}_workspace_bytes(void) {{ return {}; }}", name,
        s.workspace_bytes);
  out.line("");
  std::vector<std::string> params;
  for (size_t i = 0; i < g.inputs.size(); ++i) params.push_back(fmt::format("const void* in{}", i));
  for (size_t i = 0; i < g.outputs.size(); ++i) params.push_back(fmt::format("void* out{}", i));
  params.push_back("void* workspace");
  params.push_back("cudaStream_t stream");
  out.open(fmt::format("extern \"C\" cudaError_t kiln_{}({}) {{", name, fmt::join(params, ", ")));
  out.f("using namespace {};", ns);
  out.line("cudaError_t err = cudaSuccess;");
  out.line("unsigned char* const ws = static_cast<unsigned char*>(workspace);");
  out.line("(void)ws;");
  // Tensor placement.
  std::set<int> placed;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int t = g.inputs[i];
    if (placed.insert(t).second)
      out.f("const {0}* const t{1} = static_cast<const {0}*>(in{2});", x.ty(t), t, i);
  }
  std::vector<std::string> copies;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int t = g.outputs[i];
    int64_t bytes = numel(g.tensor(t).shape) * dtype_bytes(g.tensor(t).dtype);
    if (placed.insert(t).second) {
      out.f("{0}* const t{1} = static_cast<{0}*>(out{2});", x.ty(t), t, i);
    } else {
      copies.push_back(fmt::format(
          "if ((err = cudaMemcpyAsync(out{}, t{}, {}, cudaMemcpyDeviceToDevice, stream)) != "
          "cudaSuccess) return err;",
          i, t, bytes));
    }
  }
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (s.tensor_offset[t] >= 0 && placed.insert(static_cast<int>(t)).second)
      out.f("{0}* const t{1} = reinterpret_cast<{0}*>(ws + {2});", x.ty(static_cast<int>(t)), t,
            s.tensor_offset[t]);
  out.append(x.launch);
  for (const std::string& c : copies) out.line(c);
  out.line("return cudaSuccess;");
  out.close();
}

}  // namespace cgen

namespace {

std::string comment_block(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string l = text.substr(start, end - start);
    out += l.empty() ? "//\n" : "//   " + l + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string nvcc_command(const std::string& cu_path, const std::string& out, Arch arch,
                         bool both_archs) {
  bool object = out.size() > 2 && out.substr(out.size() - 2) == ".o";
  std::string gen = arch == Arch::Sm80 ? "-gencode=arch=compute_80,code=sm_80"
                                       : "-gencode=arch=compute_90a,code=sm_90a";
  if (both_archs && object)
    gen = "-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80";
  return fmt::format("nvcc -O3 -std=c++17 {} {}{} -o {}", gen, object ? "-c " : "", cu_path, out);
}

std::string emitted_name(const KernelGraph& g, const EmitOptions& opt) {
  std::string name = opt.name.empty() ? g.name : opt.name;
  if (!is_valid_name(name))
    throw UserError(ErrorCode::Name,
                    fmt::format("invalid name \"{}\" for the emitted symbols", name),
                    "names match [A-Za-z_][A-Za-z0-9_]*");
  return name;
}

namespace {

// The .cu's file name for its header comment, and the object its build line writes.
std::string cu_file_name(const std::string& name, const EmitOptions& opt) {
  return opt.cu_file.empty() ? "kiln_" + name + ".cu" : opt.cu_file;
}
std::string object_name(const std::string& cu) {
  size_t dot = cu.rfind('.');
  return (dot == std::string::npos || dot == 0 ? cu : cu.substr(0, dot)) + ".o";
}

}  // namespace

std::string emit_cuda(const KernelGraph& g, const EmitOptions& opt) {
  Schedule s = plan_schedule(g, target_for(opt.arch), PlanOptions{opt.lowerings});
  return emit_cuda(g, s, opt);
}

std::string emit_cuda(const KernelGraph& g, const Schedule& s, const EmitOptions& opt) {
  const std::string name = emitted_name(g, opt);
  cgen::Code out;
  const std::string file = cu_file_name(name, opt);
  out.raw(fmt::format("// {}: generated by Kiln {} for {} (the file also builds for sm_80).\n",
                      file, KILN_VERSION, target_for(opt.arch).name));
  if (!opt.source.empty()) out.raw(fmt::format("// Source: {}\n", opt.source));
  out.raw(fmt::format("// Verdict: {}\n", opt.verdict.empty() ? "(none given)" : opt.verdict));
  out.raw("// Build:\n//   " + nvcc_command(file, object_name(file), opt.arch) + "\n");
  std::vector<std::string> ins, outs;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.inputs[i]);
    ins.push_back(fmt::format("{} {}{}", t.name, dtype_name(t.dtype), shape_str(t.shape)));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    outs.push_back(fmt::format("{} {}{}", t.name, dtype_name(t.dtype), shape_str(t.shape)));
  }
  out.raw(
      fmt::format("// ABI:\n"
                  "//   extern \"C\" size_t kiln_{0}_workspace_bytes(void);  // {1} bytes\n"
                  "//   extern \"C\" cudaError_t kiln_{0}(inputs..., outputs..., void* workspace, "
                  "cudaStream_t stream);\n"
                  "//   inputs:  {2}\n"
                  "//   outputs: {3}\n"
                  "//   Device pointers, 16-byte aligned, dense row-major. Enqueues on `stream` "
                  "only (CUDA-graph\n"
                  "//   capturable); returns the first launch error.\n",
                  name, s.workspace_bytes, fmt::join(ins, ", "), fmt::join(outs, ", ")));
  if (!opt.header_file.empty())
    out.raw(fmt::format("//   C declarations (C or C++, no nvcc needed): {}\n", opt.header_file));
  out.raw(fmt::format(
      "//   Every other symbol is in namespace kiln_gen_{0} (kernels) or kiln::lib_{0} (device\n"
      "//   library): emitted files of distinct names link into one program, with or without "
      "-rdc.\n",
      name));
  if (opt.include_listing) {
    out.raw("//\n// μGraph:\n");
    out.raw(comment_block(to_text(g)));
    out.raw("//\n// Schedule:\n");
    out.raw(comment_block(schedule_to_text(g, s)));
  }
  out.raw(
      "\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
      "#include <stddef.h>\n#include <stdint.h>\n\n");
  // The device library defines kiln::rt and kiln::cg; declaring both first inside an inline
  // namespace of this file's own makes every name the library defines kiln::lib_NAME::..., still
  // spelled kiln::rt:: / kiln::cg::, so two emitted files never define the same symbol (an
  // unnamed namespace would give internal linkage, but nvcc refuses extern __shared__ arrays in
  // an inline unnamed namespace).
  out.raw(fmt::format(
      "// The device library below is this file's own: kiln::lib_{0}::rt and ::cg, spelled\n"
      "// kiln::rt and kiln::cg.\n"
      "namespace kiln {{ inline namespace lib_{0} {{ namespace rt {{}} namespace cg {{}} }} }}\n\n",
      name));
  out.raw(device_library_text());
  out.raw("\n// ==== generated kernels " + std::string(70, '=') + "\n\n");
  cgen::emit_graph_body(g, s, name, out);
  return out.str();
}

namespace {

// A C and C++ parameter name for tensor `t` not in `used`: the tensor's name, with a trailing _
// where it is a keyword of either language, a name the header itself uses, or already taken.
std::string param_name(const std::string& t, std::set<std::string>& used) {
  static const std::set<std::string> reserved = {
      // C (to C23)
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
      "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
      "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
      "union", "unsigned", "void", "volatile", "while", "_Alignas", "_Alignof", "_Atomic", "_Bool",
      "_Complex", "_Generic", "_Imaginary", "_Noreturn", "_Static_assert", "_Thread_local",
      "alignas", "alignof", "bool", "constexpr", "false", "nullptr", "static_assert",
      "thread_local", "true", "typeof", "typeof_unqual",
      // C++ (to C++20)
      "and", "and_eq", "asm", "bitand", "bitor", "catch", "char8_t", "char16_t", "char32_t",
      "class", "compl", "concept", "consteval", "constinit", "const_cast", "co_await", "co_return",
      "co_yield", "decltype", "delete", "dynamic_cast", "explicit", "export", "friend", "mutable",
      "namespace", "new", "noexcept", "not", "not_eq", "operator", "or", "or_eq", "private",
      "protected", "public", "reinterpret_cast", "requires", "static_cast", "template", "this",
      "throw", "try", "typeid", "typename", "using", "virtual", "wchar_t", "xor", "xor_eq",
      // the header's own names
      "workspace", "stream", "size_t", "cudaError_t", "cudaStream_t", "NULL"};
  std::string p = t;
  if (reserved.count(p)) p += "_";
  while (!used.insert(p).second) p += "_";
  return p;
}

}  // namespace

std::string emit_header(const KernelGraph& g, const EmitOptions& opt) {
  Schedule s = plan_schedule(g, target_for(opt.arch), PlanOptions{opt.lowerings});
  return emit_header(g, s, opt);
}

std::string emit_header(const KernelGraph& g, const Schedule& s, const EmitOptions& opt) {
  const std::string name = emitted_name(g, opt);
  const std::string cu = cu_file_name(name, opt);
  const std::string self = opt.header_file.empty() ? "kiln_" + name + ".h" : opt.header_file;
  const std::string guard = "KILN_" + name + "_H";
  const std::string m = "KILN_" + name + "_";
  cgen::Code h;
  h.raw(fmt::format(
      "/* {0}: C declarations of {1}, generated by Kiln {2} for {3}.\n"
      " * Source: {4}\n"
      " *\n"
      " * Build: {5}\n"
      " * then link the object with the CUDA runtime (libcudart), and include this header from C\n"
      " * or C++ (only the CUDA toolkit's include directory is needed). Emitted files of distinct\n"
      " * names (kiln emit --name) link into one program, with or without -rdc.\n"
      " *\n"
      " * kiln_{6}() only enqueues work on `stream` (it is CUDA-graph capturable) and returns the\n"
      " * first launch error. Every pointer is a device pointer, aligned to KILN_{6}_ALIGNMENT\n"
      " * bytes, to a dense row-major tensor of the dtype and shape given below (f16: IEEE half,\n"
      " * bf16: bfloat16, f32: float). `workspace` holds kiln_{6}_workspace_bytes() bytes ({7} for "
      "this\n"
      " * schedule; null is allowed when that is 0) and belongs to the call until `stream` "
      "reaches\n"
      " * its end.\n"
      " */\n"
      "#ifndef {8}\n#define {8}\n\n#include <stddef.h>\n#include <cuda_runtime.h>\n\n",
      self, cu, KILN_VERSION, target_for(opt.arch).name,
      opt.source.empty() ? "(not given)" : opt.source, nvcc_command(cu, object_name(cu), opt.arch),
      name, s.workspace_bytes, guard));
  h.f("#define {}ALIGNMENT 16 /* bytes, every pointer argument */", m);
  h.f("#define {}NUM_INPUTS {}", m, g.inputs.size());
  h.f("#define {}NUM_OUTPUTS {}", m, g.outputs.size());
  h.line("");
  // Per tensor (once, though it may be both an input and an output).
  std::set<int> described;
  auto describe = [&](int t, const std::string& role) {
    const TensorDesc& d = g.tensor(t);
    h.f("/* {}: {}, {} {} */", role, d.name, dtype_name(d.dtype), shape_str(d.shape));
    if (!described.insert(t).second) return;
    const int64_t n = numel(d.shape);
    h.f("#define {}{}_DTYPE \"{}\"", m, d.name, dtype_name(d.dtype));
    h.f("#define {}{}_RANK {}", m, d.name, d.shape.size());
    if (!d.shape.empty()) h.f("#define {}{}_SHAPE {{{}}}", m, d.name, fmt::join(d.shape, ", "));
    h.f("#define {}{}_NUMEL {}", m, d.name, n);
    h.f("#define {}{}_BYTES {}", m, d.name, n * dtype_bytes(d.dtype));
  };
  for (size_t i = 0; i < g.inputs.size(); ++i) describe(g.inputs[i], fmt::format("input {}", i));
  for (size_t i = 0; i < g.outputs.size(); ++i) describe(g.outputs[i], fmt::format("output {}", i));
  h.line("");
  // One parameter a line, with what it points to.
  std::set<std::string> used;
  std::vector<std::pair<std::string, std::string>> params;
  auto param = [&](int t, const char* type, const std::string& role) {
    const TensorDesc& d = g.tensor(t);
    params.push_back({fmt::format("{} {}", type, param_name(d.name, used)),
                      fmt::format("{}: {} {}", role, dtype_name(d.dtype), shape_str(d.shape))});
  };
  for (size_t i = 0; i < g.inputs.size(); ++i)
    param(g.inputs[i], "const void*", fmt::format("input {}", i));
  for (size_t i = 0; i < g.outputs.size(); ++i)
    param(g.outputs[i], "void*", fmt::format("output {}", i));
  params.push_back({"void* workspace", fmt::format("kiln_{}_workspace_bytes() bytes", name)});
  params.push_back({"cudaStream_t stream", ""});
  size_t width = 0;
  for (const auto& p : params) width = std::max(width, p.first.size() + 1);
  h.line("#ifdef __cplusplus\nextern \"C\" {\n#endif\n");
  h.f("/* Bytes of device memory kiln_{}() needs as its workspace. */", name);
  h.f("size_t kiln_{}_workspace_bytes(void);", name);
  h.line("");
  h.f("/* Enqueues {} on `stream`: inputs, then outputs, in graph order. */", name);
  h.f("cudaError_t kiln_{}(", name);
  for (size_t i = 0; i < params.size(); ++i) {
    const bool last = i + 1 == params.size();
    const std::string decl = params[i].first + (last ? ");" : ",");
    if (params[i].second.empty())
      h.f("    {}", decl);
    else
      h.f("    {:<{}} /* {} */", decl, width, params[i].second);
  }
  h.line("\n#ifdef __cplusplus\n}  /* extern \"C\" */\n#endif\n");
  h.f("#endif /* {} */", guard);
  return h.str();
}

}  // namespace kiln
