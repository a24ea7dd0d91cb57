// A spec that applies every elementwise op of the table (kiln/ir/elementwise.h) once, with attrs
// variants where attrs change the function, so that tests can run every op through every layer.
#pragma once

#include <string>
#include <vector>

#include "kiln/ir/elementwise.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::testing {

// One op application of all_ops_spec: its output's name, op and attrs.
struct OpCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
};

// Every unary op (and the attrs variants of gelu, leaky_relu and clamp) and every binary op.
inline std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
  for (const OpInfo& info : all_ops()) {
    if (!is_elementwise(info.kind)) continue;
    cases.push_back({info.name, info.kind, {}});
    if (info.kind == OpKind::Gelu) {
      Attrs a;
      a.approximate = GeluApprox::Tanh;
      cases.push_back({"gelu_tanh", info.kind, a});
    }
    if (info.kind == OpKind::LeakyRelu) {
      Attrs a;
      a.negative_slope = 0.2;
      cases.push_back({"leaky_relu_02", info.kind, a});
    }
    if (info.kind == OpKind::Clamp) {
      Attrs a;
      a.min = -0.3;
      a.max = 0.4;
      cases.push_back({"clamp_lo_hi", info.kind, a});
      Attrs b;
      b.max = 0.1;
      cases.push_back({"clamp_hi", info.kind, b});
    }
  }
  return cases;
}

// Ops defined only for positive arguments get P = exp(X) (positive at any input); the others get
// X itself, of both signs; binary ops get (X, P). Outputs are named O_<case>, all f32.
inline KernelGraph all_ops_spec(int64_t rows = 4, int64_t cols = 64) {
  KernelGraphBuilder b("all_ops");
  const int x = b.input("X", {rows, cols}, DType::F32);
  const int p = b.op(OpKind::Exp, {x}, {}, "P");
  for (const OpCase& c : elementwise_cases()) {
    const bool positive = c.kind == OpKind::Log || c.kind == OpKind::Sqrt ||
                          c.kind == OpKind::Rsqrt || c.kind == OpKind::Reciprocal;
    std::vector<int> in = op_class(c.kind) == OpClass::Binary ? std::vector<int>{x, p}
                          : positive                          ? std::vector<int>{p}
                                                              : std::vector<int>{x};
    b.output(b.op(c.kind, in, c.attrs, "O_" + c.name));
  }
  return std::move(b).finish();
}

}  // namespace kiln::testing
