// Small specs shared by the search tests: big enough to have fusions and splits, small enough
// that a whole search with verification takes well under a second.
#pragma once

#include <string>

#include "kiln/ir/json_io.h"

namespace kiln::search::testing {

inline KernelGraph small_gated_mlp() {
  return parse_spec(R"({
    "name": "gm", "inputs": [
      {"name": "X", "shape": [2, 64], "dtype": "f16"},
      {"name": "W1", "shape": [64, 64], "dtype": "f16"},
      {"name": "W2", "shape": [64, 64], "dtype": "f16"}],
    "nodes": [
      {"name": "G", "op": "matmul", "inputs": ["X", "W1"]},
      {"name": "S", "op": "silu", "inputs": ["G"]},
      {"name": "U", "op": "matmul", "inputs": ["X", "W2"]},
      {"name": "O", "op": "mul", "inputs": ["S", "U"]}],
    "outputs": ["O"]})");
}

inline KernelGraph small_rmsnorm_linear() {
  return parse_spec(R"({
    "name": "rl", "inputs": [
      {"name": "X", "shape": [2, 128], "dtype": "f16"},
      {"name": "W", "shape": [128, 64], "dtype": "f16"}],
    "nodes": [
      {"name": "N", "op": "rms_norm", "inputs": ["X"]},
      {"name": "O", "op": "matmul", "inputs": ["N", "W"]}],
    "outputs": ["O"]})");
}

inline KernelGraph small_matmul() {
  return parse_spec(R"({
    "name": "mm", "inputs": [
      {"name": "X", "shape": [1, 256], "dtype": "f16"},
      {"name": "W", "shape": [256, 32], "dtype": "f16"}],
    "nodes": [{"name": "O", "op": "matmul", "inputs": ["X", "W"]}],
    "outputs": ["O"]})");
}

// X X^T: one tensor in two roles, read through one iterator.
inline KernelGraph gram() {
  return parse_spec(R"({"name": "gram", "inputs": [
      {"name": "X", "shape": [64, 128], "dtype": "f16"}],
    "nodes": [{"name": "XT", "op": "transpose", "inputs": ["X"]},
              {"name": "O", "op": "matmul", "inputs": ["X", "XT"]}], "outputs": ["O"]})");
}

// softmax(X W) at k 4096: logits up to ~384 at std 1, past f32's exp without the max.
inline KernelGraph logits_softmax() {
  return parse_spec(R"({"name": "logits", "inputs": [
      {"name": "X", "shape": [4, 4096], "dtype": "f16"},
      {"name": "W", "shape": [4096, 96], "dtype": "f16"}],
    "nodes": [{"name": "L", "op": "matmul", "inputs": ["X", "W"]},
              {"name": "P", "op": "softmax", "inputs": ["L"]}], "outputs": ["P"]})");
}

}  // namespace kiln::search::testing
