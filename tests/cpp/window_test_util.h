// The window attributes (kernel_shape, strides, dilations, pads) of the conv and pool op tests.
#pragma once

#include <cstdint>
#include <vector>

#include "op_tester.h"

namespace tob::window_test {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  size_t rank() const { return kernel.size(); }
  int64_t s(size_t d) const { return strides.empty() ? 1 : strides[d]; }
  int64_t dil(size_t d) const { return dilations.empty() ? 1 : dilations[d]; }
  int64_t pb(size_t d) const { return pads.empty() ? 0 : pads[d]; }
  int64_t pe(size_t d) const { return pads.empty() ? 0 : pads[d + pads.size() / 2]; }
};

inline void SetWindowAttrs(testing::OpTester& t, const Window& w, bool with_kernel_shape) {
  if (with_kernel_shape) t.Attr("kernel_shape", Attribute::Ints(w.kernel));
  if (!w.strides.empty()) t.Attr("strides", Attribute::Ints(w.strides));
  if (!w.dilations.empty()) t.Attr("dilations", Attribute::Ints(w.dilations));
  if (!w.pads.empty()) t.Attr("pads", Attribute::Ints(w.pads));
}

}  // namespace tob::window_test
