// The kernel graph: launches over device tensors. A parsed spec is a kernel graph of
// predefined ops; a μGraph is a kernel graph whose ops may also be graph-defined (each owning a
// BlockGraph). Both are the same type, built only through KernelGraphBuilder, which checks
// names, arities, attrs and shapes and infers every tensor's shape and dtype.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/ir/block_graph.h"

namespace kiln {

struct KernelOp {
  OpKind kind;
  std::string name;         // predefined: the name of its output tensor; graph-defined: kernel name
  std::vector<int> inputs;  // tensor ids
  std::vector<int> outputs;                 // tensor ids (one for predefined ops)
  Attrs attrs;                              // dims normalized to be non-negative
  std::shared_ptr<const BlockGraph> block;  // GraphDefined only
};

struct KernelGraph {
  std::string name;  // [A-Za-z_][A-Za-z0-9_]*
  std::string doc;
  Arch arch = Arch::Sm90a;          // the target the block graphs were checked against
  std::vector<TensorDesc> tensors;  // every device tensor; id = index
  std::vector<int> inputs;          // tensor ids, in order
  std::vector<int> outputs;         // tensor ids, in order (may repeat or name an input)
  std::vector<KernelOp> ops;        // topological order
  // Per tensor: the index of the op that produces it, -1 for none; set by
  // KernelGraphBuilder::finish so that producer() is O(1) (passes that ask it for every tensor
  // were quadratic in a 20,000-node spec). A graph edited after building may leave it stale:
  // producer() checks the answer and scans when it does not hold.
  std::vector<int> producer_index;

  const TensorDesc& tensor(int id) const { return tensors.at(id); }
  int find_tensor(std::string_view name) const;  // -1 if none
  int producer(int tensor_id) const;             // index into ops, -1 for graph inputs
  int num_kernels() const;                       // launches: ops other than constants
  bool is_spec() const;                          // no graph-defined ops
};

// Result dtype of a predefined op (spec rule: the first input that is not a constant; f32 if
// all are constants).
class KernelGraphBuilder {
 public:
  explicit KernelGraphBuilder(std::string name, std::string doc = {}, Arch arch = Arch::Sm90a);

  int input(std::string name, Shape shape, DType dtype);
  // A predefined op; returns its output tensor's id. Normalizes negative dims in attrs. The
  // result's dtype follows the spec rule (infer_op_dtype) unless `dtype` names the type it is
  // stored in (store_exact_intermediates keeps intermediates that f32 outputs depend on in f32).
  int op(OpKind kind, std::vector<int> inputs, Attrs attrs, std::string name,
         std::optional<DType> dtype = std::nullopt);
  // A graph-defined op. inputs must match block->inputs in shape and dtype; returns the ids of
  // the new output tensors, named block->outputs[i].name.
  std::vector<int> graph_defined(std::shared_ptr<const BlockGraph> block, std::vector<int> inputs,
                                 std::string kernel_name);
  void output(int tensor_id);

  KernelGraph finish() &&;

  const KernelGraph& peek() const { return g_; }

 private:
  int add_tensor(TensorDesc t);
  KernelGraph g_;
  // Indexes that keep building linear in the graph's size (a spec may have many nodes).
  std::unordered_map<std::string, int> tensor_ids_;
  std::vector<int> producer_;  // per tensor id: index of its op, -1 for inputs
  std::unordered_map<std::string, bool> kernel_names_;
};

// Shape and dtype inference for a predefined op over input descs, with attrs normalized in
// place (negative dims made non-negative, default perm filled). Throws UserError(Shape/Op).
// Shared by the kernel and block builders.
// `names`, when given, name the inputs in messages ("N is [2, 4096]").
Shape infer_op_shape(OpKind kind, const std::vector<Shape>& inputs, Attrs& attrs,
                     const std::vector<std::string>* names = nullptr);
// The dtype of the first input that is not a constant; f32 where there is none (a constant op,
// or an op of constants only).
DType infer_op_dtype(OpKind kind, const std::vector<DType>& input_dtypes,
                     const std::vector<bool>& input_is_constant);

bool is_valid_name(std::string_view name);  // [A-Za-z_][A-Za-z0-9_]*

// A spec's values are exact (spec-format.md, "Semantics"): a node's dtype rounds it only where it
// is an output. Storing an intermediate in its 16-bit dtype is within the tolerance of 16-bit
// outputs but not of f32 ones (1e-4 against ~5e-4 for an f16 rounding). Returns g (predefined ops
// only) with every intermediate that an f32 output depends on stored in f32: its op gets an f32
// dtype, and where it is a 16-bit output itself, a twin op (the same computation, named
// NAME_f32, stored in f32) feeds its readers instead. Output dtypes and the function of every
// output are unchanged. g unchanged when no output is f32 or g has graph-defined ops.
KernelGraph store_exact_intermediates(const KernelGraph& g);

// The range rule of the spec format: an intermediate may be stored in 16 bits only where its
// range is safe for std-1 inputs. Returns g (predefined ops only) with every intermediate whose
// range is unbounded stored in f32: the result of an exp whose argument is not x - max(x) (or a
// softmax), and what is computed from one, up to a normalization e / sum(e) (or a log, tanh,
// sigmoid, softmax, rms_norm), which bounds it again; and every f16 intermediate whose magnitude
// at std 1 (magnitude.h: sums and products, such as square(X W) at k 2048) passes 65504. A 16-bit
// output of either kind gets an f32 twin for its readers. Output dtypes and the function are
// unchanged; the spec's own kernels are then right on std-1 inputs (gqa's exp(Q K^T) reaches e^40),
// and the search starts from these dtypes.
KernelGraph store_unbounded_intermediates(const KernelGraph& g);

}  // namespace kiln
