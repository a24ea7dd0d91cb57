// Small helpers shared by the interpreter tests: host tensors from literals, one-op graphs, and
// comparisons.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/interp/interp.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::testing {

inline HostTensor host(Shape shape, std::vector<double> data, DType dt = DType::F32) {
  return HostTensor{std::move(shape), dt, HostData(data.begin(), data.end())};
}

// A graph of one predefined op over fresh inputs shaped like `ins`.
inline KernelGraph one_op_graph(OpKind k, const std::vector<HostTensor>& ins, Attrs attrs = {}) {
  KernelGraphBuilder b("one_op");
  std::vector<int> ids;
  for (size_t i = 0; i < ins.size(); ++i) {
    std::string name = "x";
    name += std::to_string(i);
    ids.push_back(b.input(name, ins[i].shape, ins[i].dtype));
  }
  b.output(b.op(k, ids, std::move(attrs), "y"));
  return std::move(b).finish();
}

// Evaluates a one-op graph in F64.
inline HostTensor eval1(OpKind k, const std::vector<HostTensor>& ins, Attrs attrs = {},
                        Precision p = Precision::F64) {
  return evaluate(one_op_graph(k, ins, std::move(attrs)), ins, {p, 0})[0];
}

inline void expect_near(const HostTensor& got, const Shape& shape, const std::vector<double>& want,
                        double tol = 1e-12) {
  ASSERT_EQ(got.shape, shape);
  ASSERT_EQ(got.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "element " << i;
}

inline void expect_same(const HostTensor& a, const HostTensor& b) {
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.data.size(), b.data.size());
  for (size_t i = 0; i < a.data.size(); ++i) ASSERT_EQ(a.data[i], b.data[i]) << "element " << i;
}

}  // namespace kiln::testing
