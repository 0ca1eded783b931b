// Cast to and from string, as onnx's reference does it (numpy's astype).
//  - to string: integers in decimal, bool as "True"/"False", floats as numpy's str(): the
//    shortest digits that read back to the same value of the source type, positional for
//    1e-4 <= |x| < 1e16 (float64), 1e6 (float32, bfloat16) or 1e3 (float16), else scientific
//    ("1e+16", "1.5e-07"); "nan", "inf", "-inf", "-0.0".
//  - from string: floats as Python's float() reads them (surrounding whitespace, a sign, '_'
//    between digits, "inf"/"infinity"/"nan" in any case; no hex), read as float64 and then
//    rounded once to the target type; integers as Python's int() (decimal only, in the target type's
//    range); bool: true for every non-empty string. A string that does not parse is an error
//    naming it and its position.
#pragma once

#include "framework/kernel.h"

namespace tob::ew {

Status CastToStrings(const KernelContext& ctx, const Tensor& x, Tensor& y);
Status CastFromStrings(const KernelContext& ctx, const Tensor& x, Tensor& y);

// One value as Cast writes it (exposed for the tests of the formatting rules).
std::string FormatFloat64(double v);
std::string FormatFloat32(float v);

}  // namespace tob::ew
