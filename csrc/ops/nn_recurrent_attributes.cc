#include "ops/nn_recurrent_attributes.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace tob {

namespace {

struct ActivationInfo {
  const char* name;
  rnn::ActivationKind kind;
  bool takes_alpha, takes_beta;
  float default_alpha, default_beta;
};

// The spec's activation names (matched case-insensitively) and the defaults of the ONNX
// operators of the same name.
constexpr ActivationInfo kActivations[] = {
    {"relu", rnn::ActivationKind::kRelu, false, false, 0.0f, 0.0f},
    {"tanh", rnn::ActivationKind::kTanh, false, false, 0.0f, 0.0f},
    {"sigmoid", rnn::ActivationKind::kSigmoid, false, false, 0.0f, 0.0f},
    {"affine", rnn::ActivationKind::kAffine, true, true, 1.0f, 0.0f},
    {"leakyrelu", rnn::ActivationKind::kLeakyRelu, true, false, 0.01f, 0.0f},
    {"thresholdedrelu", rnn::ActivationKind::kThresholdedRelu, true, false, 1.0f, 0.0f},
    {"scaledtanh", rnn::ActivationKind::kScaledTanh, true, true, 1.0f, 1.0f},
    {"hardsigmoid", rnn::ActivationKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", rnn::ActivationKind::kElu, true, false, 1.0f, 0.0f},
    {"softsign", rnn::ActivationKind::kSoftsign, false, false, 0.0f, 0.0f},
    {"softplus", rnn::ActivationKind::kSoftplus, false, false, 0.0f, 0.0f},
};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

StatusOr<RecurrentAttributes> RecurrentAttributes::Read(const Node& node) {
  RecurrentAttributes a;
  const std::string& op = node.op_type();
  if (op == "RNN") a.op = RecurrentOp::kRnn;
  else if (op == "GRU") a.op = RecurrentOp::kGru;
  else if (op == "LSTM") a.op = RecurrentOp::kLstm;
  else return InvalidModel(node.Describe(), ": not a recurrent op");

  std::string direction;
  TOB_RETURN_IF_ERROR(node.GetAttr("direction", &direction, std::string("forward")));
  if (direction == "forward" || direction == "reverse") a.num_directions = 1;
  else if (direction == "bidirectional") a.num_directions = 2;
  else
    return InvalidModel(node.Describe(), ": attribute 'direction' must be forward, reverse or bidirectional, got '",
                        direction, "'");
  a.reverse = direction == "reverse";

  if (node.FindAttribute("hidden_size") != nullptr) {
    TOB_RETURN_IF_ERROR(node.GetAttr("hidden_size", &a.hidden_size));
    if (a.hidden_size <= 0)
      return InvalidModel(node.Describe(), ": attribute 'hidden_size' must be positive, got ", a.hidden_size);
  }
  TOB_RETURN_IF_ERROR(node.GetAttr("layout", &a.layout, int64_t{0}));
  if (a.layout != 0 && a.layout != 1)
    return InvalidModel(node.Describe(), ": attribute 'layout' must be 0 or 1, got ", a.layout);
  if (node.FindAttribute("clip") != nullptr) {
    TOB_RETURN_IF_ERROR(node.GetAttr("clip", &a.clip));
    if (!(a.clip > 0.0f)) return InvalidModel(node.Describe(), ": attribute 'clip' must be positive, got ", a.clip);
  }
  int64_t flag = 0;
  if (a.op == RecurrentOp::kGru) {
    TOB_RETURN_IF_ERROR(node.GetAttr("linear_before_reset", &flag, int64_t{0}));
    a.linear_before_reset = flag != 0;
  }
  if (a.op == RecurrentOp::kLstm) {
    TOB_RETURN_IF_ERROR(node.GetAttr("input_forget", &flag, int64_t{0}));
    a.input_forget = flag != 0;
  }

  std::vector<std::string> names;
  const std::vector<std::string> defaults = a.op == RecurrentOp::kRnn ? std::vector<std::string>{"Tanh"}
                                            : a.op == RecurrentOp::kGru
                                                ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  TOB_RETURN_IF_ERROR(node.GetAttr("activations", &names, defaults));
  const size_t per = static_cast<size_t>(a.activations_per_direction());
  if (names.size() == per && a.num_directions == 2) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != per * static_cast<size_t>(a.num_directions))
    return InvalidModel(node.Describe(), ": attribute 'activations' has ", names.size(), " entries, expected ", per,
                        " per direction (", a.num_directions, " directions)");
  std::vector<float> alphas, betas;
  TOB_RETURN_IF_ERROR(node.GetAttr("activation_alpha", &alphas, std::vector<float>{}));
  TOB_RETURN_IF_ERROR(node.GetAttr("activation_beta", &betas, std::vector<float>{}));
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    const std::string key = Lower(name);
    const ActivationInfo* info = nullptr;
    for (const ActivationInfo& candidate : kActivations)
      if (key == candidate.name) info = &candidate;
    if (info == nullptr)
      return InvalidModel(node.Describe(), ": unknown activation '", name,
                          "' (expected Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                          "HardSigmoid, Elu, Softsign or Softplus)");
    rnn::Activation act{info->kind, info->default_alpha, info->default_beta};
    if (info->takes_alpha && next_alpha < alphas.size()) act.alpha = alphas[next_alpha++];
    if (info->takes_beta && next_beta < betas.size()) act.beta = betas[next_beta++];
    a.activations.push_back(act);
  }
  return a;
}

}  // namespace tob
