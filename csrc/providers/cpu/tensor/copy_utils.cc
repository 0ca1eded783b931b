#include "providers/cpu/tensor/copy_utils.h"

#include <algorithm>

#include "core/status.h"

namespace tob::tensor_ops {

const std::vector<DType>& DataMovementTypes() {
  static const std::vector<DType> v = [] {
    std::vector<DType> r = AllTypesAndString();
    r.insert(r.end(), {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                       DType::kFloat8E8M0});
    return r;
  }();
  return v;
}

void ParallelCopy(ThreadPool* pool, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (pool == nullptr || bytes < 4 * kMinTaskBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  constexpr size_t kBlock = 16 * 1024;
  int64_t blocks = static_cast<int64_t>((bytes + kBlock - 1) / kBlock);
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  ParallelFor(pool, blocks, CopyGrain(kBlock), [&](int64_t begin, int64_t end) {
    size_t from = static_cast<size_t>(begin) * kBlock;
    size_t to = std::min(bytes, static_cast<size_t>(end) * kBlock);
    std::memcpy(d + from, s + from, to - from);
  });
}

namespace {

// Rows of `inner` elements; row r's source starts at the offset the odometer over the outer dims
// gives, and its elements are `inner_stride` apart.
template <typename E>
void CopyRows(const E* src, E* dst, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
              int64_t row_begin, int64_t row_end) {
  const int outer_rank = static_cast<int>(dims.size()) - 1;
  const int64_t inner = dims.back();
  const int64_t inner_stride = strides.back();
  std::vector<int64_t> index(static_cast<size_t>(outer_rank), 0);
  int64_t offset = 0;
  for (int64_t d = outer_rank - 1, r = row_begin; d >= 0; --d) {
    index[d] = r % dims[d];
    r /= dims[d];
    offset += index[d] * strides[d];
  }
  E* out = dst + row_begin * inner;
  for (int64_t row = row_begin; row < row_end; ++row, out += inner) {
    const E* in = src + offset;
    if (inner_stride == 1) {
      std::memcpy(out, in, static_cast<size_t>(inner) * sizeof(E));
    } else if (inner_stride == 0) {
      std::fill(out, out + inner, *in);
    } else {
      for (int64_t i = 0; i < inner; ++i) out[i] = in[i * inner_stride];
    }
    for (int d = outer_rank - 1; d >= 0; --d) {
      offset += strides[d];
      if (++index[d] < dims[d]) break;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
}

}  // namespace

void StridedCopy(ThreadPool* pool, const void* src, void* dst, size_t elem_size, const Shape& shape,
                 const std::vector<int64_t>& src_strides) {
  TOB_ENFORCE(shape.size() == src_strides.size(), "StridedCopy rank mismatch");
  if (NumElements(shape) == 0) return;
  // Drop size-1 dims, then merge neighbours whose source strides chain (dst is contiguous).
  std::vector<int64_t> dims, strides;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!dims.empty() && strides.back() == src_strides[i] * shape[i]) {
      dims.back() *= shape[i];
      strides.back() = src_strides[i];
    } else {
      dims.push_back(shape[i]);
      strides.push_back(src_strides[i]);
    }
  }
  if (dims.empty()) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  if (dims.size() == 1 && strides[0] == 1) {
    ParallelCopy(pool, dst, src, static_cast<size_t>(dims[0]) * elem_size);
    return;
  }
  const int64_t inner = dims.back();
  const int64_t rows = NumElements(dims) / inner;
  bool done = DispatchElementSize(elem_size, [&]<typename E>() {
    ParallelFor(pool, rows, CopyGrain(static_cast<size_t>(inner) * sizeof(E)), [&](int64_t begin, int64_t end) {
      CopyRows(static_cast<const E*>(src), static_cast<E*>(dst), dims, strides, begin, end);
    });
  });
  TOB_ENFORCE(done, "StridedCopy: unsupported element size ", elem_size);
}

void CopyUnlessAliased(ThreadPool* pool, const Tensor& in, Tensor* out) {
  if (out->SharesDataWith(in)) return;
  TOB_ENFORCE(out->nbytes() == in.nbytes(), "aliasing op: output size differs from input size");
  if (in.dtype() == DType::kString) return CopyTensorData(in, *out);  // objects, not bytes
  ParallelCopy(pool, out->raw_data(), in.raw_data(), in.nbytes());
}

}  // namespace tob::tensor_ops
