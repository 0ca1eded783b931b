// String tensors through the data-movement kernels. Those kernels move bytes by element size (one
// instantiation per size), which must never happen to std::string objects. Instead the same
// kernel, built for the same node, moves int64 element numbers, and each output string is copied
// from the input element its number names: one int64 of scratch per element, and every movement
// op (Transpose, Concat, Split, Slice, Gather*, Expand, Tile, Where, Compress, Scatter*) takes
// strings with no string code of its own.
#pragma once

#include <vector>

#include "framework/kernel_registry.h"

namespace tob::tensor_ops {

// A factory building `inner`'s kernel, wrapped to move strings by element number when the node's
// first data input is a string tensor, or of a type not known when the kernel is made (the wrapper
// then checks each run's input); any other dtype gets `inner`'s kernel itself.
// `data_inputs`: the inputs of the element type the outputs have (numbered in this order);
// {kEveryInput} for a variadic op whose inputs all are (Concat).
inline constexpr int kEveryInput = -1;
KernelFactory MovesStrings(KernelFactory inner, std::vector<int> data_inputs);

}  // namespace tob::tensor_ops
