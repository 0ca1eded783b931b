#include "core/env_switch.h"

#include <cstdlib>
#include <string_view>
#include <vector>

namespace tob {

namespace {

struct SwitchSpec {
  EnvSwitch which;
  const char* variable;
  std::vector<std::string_view> accepted;
};

constexpr std::string_view kOff = "0";
constexpr std::string_view kOn = "1";

const std::vector<SwitchSpec>& Specs() {
  static const std::vector<SwitchSpec> specs = {
      {EnvSwitch::kSgemm, "TOB_SGEMM", {kOff, kOn}},
      {EnvSwitch::kSmallGemm, "TOB_SMALL_GEMM", {kOff, kOn}},
      {EnvSwitch::kBf16Gemm, "TOB_BF16_GEMM", {kOff, kOn}},
      {EnvSwitch::kConvTiled, "TOB_CONV_TILED", {kOff, kOn}},
      {EnvSwitch::kConvPacked, "TOB_CONV_PACKED", {kOff, kOn}},
      {EnvSwitch::kConvBatchFold, "TOB_CONV_BATCH_FOLD", {kOff, kOn}},
      {EnvSwitch::kQgemm, "TOB_QGEMM", {"portable"}},
      {EnvSwitch::kElementwiseFusion, "TOB_ELEMENTWISE_FUSION", {kOff, kOn}},
      {EnvSwitch::kRmsNormFusion, "TOB_RMS_NORM_FUSION", {kOff, kOn}},
      {EnvSwitch::kRotaryFusion, "TOB_ROTARY_FUSION", {kOff, kOn}},
      {EnvSwitch::kLossGradFusion, "TOB_LOSS_GRAD_FUSION", {kOff, kOn}},
      {EnvSwitch::kTanhGradFusion, "TOB_TANHGRAD_FUSION", {kOff, kOn}},
      {EnvSwitch::kBatchedMatMulTranspose, "TOB_BATCHED_MATMUL_TRANSPOSE", {kOff, kOn}},
      {EnvSwitch::kConvImplicit, "TOB_CONV_IMPLICIT", {kOff, kOn}},
      {EnvSwitch::kElementwiseRemat, "TOB_ELEMENTWISE_REMAT", {kOff, kOn}},
      {EnvSwitch::kNchwc, "TOB_NCHWC", {kOff, kOn, "convs"}},
  };
  return specs;
}

const SwitchSpec& SpecOf(EnvSwitch which) {
  for (const SwitchSpec& spec : Specs())
    if (spec.which == which) return spec;
  TOB_ENFORCE(false, "EnvSwitch ", static_cast<int>(which), " has no entry in env_switch.cc");
  return Specs().front();
}

bool Accepted(const SwitchSpec& spec, std::string_view value) {
  for (std::string_view ok : spec.accepted)
    if (value == ok) return true;
  return false;
}

}  // namespace

std::string EnvSwitchValue(EnvSwitch which) {
  const SwitchSpec& spec = SpecOf(which);
  const char* env = std::getenv(spec.variable);
  if (env == nullptr || !Accepted(spec, env)) return "";
  return env;
}

bool EnvSwitchOn(EnvSwitch which) { return EnvSwitchValue(which) != kOff; }

std::string EnvSwitchSignature() {
  std::string signature;
  for (const SwitchSpec& spec : Specs()) signature += StrCat(spec.variable, "=", EnvSwitchValue(spec.which), ";");
  return signature;
}

Status CheckEnvSwitches() {
  std::string problems;
  for (const SwitchSpec& spec : Specs()) {
    const char* env = std::getenv(spec.variable);
    if (env == nullptr || *env == '\0' || Accepted(spec, env)) continue;
    std::string accepted;
    for (std::string_view ok : spec.accepted) accepted += StrCat(accepted.empty() ? "" : " or ", "'", ok, "'");
    problems += StrCat(problems.empty() ? "" : "; ", spec.variable, "='", env, "' is not a value it accepts (",
                       accepted, ", or unset)");
  }
  if (problems.empty()) return Status::OK();
  return InvalidArgument("engine switch: ", problems, " (docs/architecture.md lists the TOB_* switches)");
}

}  // namespace tob
