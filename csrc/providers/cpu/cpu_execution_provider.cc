#include "providers/cpu/cpu_execution_provider.h"

#include <cstring>

namespace tob {

Status CpuExecutionProvider::CopyTensor(const Tensor& src, Tensor& dst) const {
  if (src.dtype() != dst.dtype() || src.nbytes() != dst.nbytes())
    return InvalidArgument("CopyTensor: source ", DTypeName(src.dtype()), ShapeToString(src.shape()),
                           " does not match destination ", DTypeName(dst.dtype()), ShapeToString(dst.shape()));
  if (src.nbytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  return Status::OK();
}

}  // namespace tob
