// The engine's developer switches: TOB_* environment variables that turn a fast path or an optimizer
// pass off (or force it) for A/B measurements and for ruling a path out. docs/architecture.md lists
// them with their values. Each accepts a fixed set of values; Session::Create and the Python
// backend refuse a process whose environment sets one to anything else (CheckEnvSwitches), naming
// the variable and what it accepts, instead of silently running as if it were unset.
#pragma once

#include <string>

#include "core/status.h"

namespace tob {

enum class EnvSwitch {
  kSgemm,                   // TOB_SGEMM: 0 = OpenBLAS for M > 128 and no pre-packing, 1 = ours at every M
  kSmallGemm,               // TOB_SMALL_GEMM: 0 = OpenBLAS for M <= 128 too
  kBf16Gemm,                // TOB_BF16_GEMM: 0 = bfloat16 products through float32
  kConvTiled,               // TOB_CONV_TILED: 0 = whole-image column path for 2-D convs
  kConvPacked,              // TOB_CONV_PACKED: 0 = pack no conv weight, 1 = pack every one
  kConvBatchFold,           // TOB_CONV_BATCH_FOLD: 0 = one GEMM per image always, 1 = fold every batch
  kQgemm,                   // TOB_QGEMM: portable = the portable integer GEMM even with VNNI
  kElementwiseFusion,       // TOB_ELEMENTWISE_FUSION: 0 = pass off
  kRmsNormFusion,           // TOB_RMS_NORM_FUSION: 0 = pass off
  kRotaryFusion,            // TOB_ROTARY_FUSION: 0 = pass off
  kLossGradFusion,          // TOB_LOSS_GRAD_FUSION: 0 = pass off
  kTanhGradFusion,          // TOB_TANHGRAD_FUSION: 0 = TanhGrad is no FusedElementwise instruction
  kBatchedMatMulTranspose,  // TOB_BATCHED_MATMUL_TRANSPOSE: 0 = MatMulTransposeFusion leaves batched products
  kConvImplicit,            // TOB_CONV_IMPLICIT: 0 = no implicit-GEMM conv, 1 = every packed conv implicit
  kElementwiseRemat,        // TOB_ELEMENTWISE_REMAT: 0 = ElementwiseRematerialization off
  kNchwc,                   // TOB_NCHWC: 0 = NchwcLayout pass off (convs stay NCHW)
};

// The switch's value: "" when it is unset or empty, else what it is set to if that is one of the
// values it accepts. A value it does not accept also reads as "" here (callers are hot paths and
// static initialisers with no error path); CheckEnvSwitches is what reports it.
std::string EnvSwitchValue(EnvSwitch which);

// True unless the switch is set to "0".
bool EnvSwitchOn(EnvSwitch which);

// "TOB_X=value;..." of every switch as it reads now (EnvSwitchValue): what a cache of sessions keys
// on, since several switches are read when a session is created (the pass pipeline's).
std::string EnvSwitchSignature();

// OK when every TOB_* switch is unset, empty or set to a value it accepts; else InvalidArgument
// naming each offending variable, its value and the values it accepts.
Status CheckEnvSwitches();

}  // namespace tob
