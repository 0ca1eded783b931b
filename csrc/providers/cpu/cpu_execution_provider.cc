#include "providers/cpu/cpu_execution_provider.h"

namespace tob {

Status CpuExecutionProvider::CopyTensor(const Tensor& src, Tensor& dst) const {
  if (src.dtype() != dst.dtype() || src.nbytes() != dst.nbytes())
    return InvalidArgument("CopyTensor: source ", DTypeName(src.dtype()), ShapeToString(src.shape()),
                           " does not match destination ", DTypeName(dst.dtype()), ShapeToString(dst.shape()));
  CopyTensorData(src, dst);  // strings element by element
  return Status::OK();
}

}  // namespace tob
