// The TOB_* engine switches (core/env_switch.h): accepted values read through, anything else is
// refused by CheckEnvSwitches and by Session::Create with the variable, its value and what it
// accepts named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/env_switch.h"
#include "ir/graph.h"
#include "runtime/session.h"

namespace tob {
namespace {

// Sets one variable for a test's scope and restores what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value == nullptr) unsetenv(name);
    else setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

StatusOr<std::unique_ptr<Session>> NegSession() {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{3})).ok());
  EXPECT_TRUE(g->AddNode("Neg", "", {"x"}, {"y"}, {}, "neg").ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  return Session::Create(std::move(g), SessionOptions{});
}

TEST(EnvSwitch, UnsetEmptyAndAcceptedValuesReadThrough) {
  {
    ScopedEnv env("TOB_ROTARY_FUSION", nullptr);
    EXPECT_EQ(EnvSwitchValue(EnvSwitch::kRotaryFusion), "");
    EXPECT_TRUE(EnvSwitchOn(EnvSwitch::kRotaryFusion));
    EXPECT_TRUE(CheckEnvSwitches().ok());
  }
  {
    ScopedEnv env("TOB_ROTARY_FUSION", "");
    EXPECT_TRUE(EnvSwitchOn(EnvSwitch::kRotaryFusion));
    EXPECT_TRUE(CheckEnvSwitches().ok());
  }
  {
    ScopedEnv env("TOB_ROTARY_FUSION", "0");
    EXPECT_EQ(EnvSwitchValue(EnvSwitch::kRotaryFusion), "0");
    EXPECT_FALSE(EnvSwitchOn(EnvSwitch::kRotaryFusion));
    EXPECT_TRUE(CheckEnvSwitches().ok());
  }
  {
    ScopedEnv env("TOB_CONV_PACKED", "1");
    EXPECT_EQ(EnvSwitchValue(EnvSwitch::kConvPacked), "1");
    EXPECT_TRUE(CheckEnvSwitches().ok());
  }
  {
    ScopedEnv env("TOB_QGEMM", "portable");
    EXPECT_EQ(EnvSwitchValue(EnvSwitch::kQgemm), "portable");
    EXPECT_TRUE(CheckEnvSwitches().ok());
  }
}

TEST(EnvSwitch, BatchedMatMulTransposeSwitch) {
  {
    ScopedEnv env("TOB_BATCHED_MATMUL_TRANSPOSE", "0");
    EXPECT_FALSE(EnvSwitchOn(EnvSwitch::kBatchedMatMulTranspose));
    EXPECT_TRUE(CheckEnvSwitches().ok());
  }
  ScopedEnv env("TOB_BATCHED_MATMUL_TRANSPOSE", "no");
  EXPECT_TRUE(EnvSwitchOn(EnvSwitch::kBatchedMatMulTranspose));  // read as unset; the check reports it
  Status s = CheckEnvSwitches();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TOB_BATCHED_MATMUL_TRANSPOSE='no' is not a value it accepts"), std::string::npos)
      << s.message();
}

TEST(EnvSwitch, AValueItDoesNotAcceptIsRefusedByName) {
  ScopedEnv env("TOB_RMS_NORM_FUSION", "off");
  // The hot-path read treats it as unset; the check is what reports it.
  EXPECT_EQ(EnvSwitchValue(EnvSwitch::kRmsNormFusion), "");
  Status s = CheckEnvSwitches();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TOB_RMS_NORM_FUSION='off' is not a value it accepts ('0' or '1', or unset)"),
            std::string::npos)
      << s.message();
}

TEST(EnvSwitch, EveryOffendingSwitchIsNamed) {
  ScopedEnv a("TOB_SGEMM", "2");
  ScopedEnv b("TOB_QGEMM", "vnni");
  Status s = CheckEnvSwitches();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TOB_SGEMM='2'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("TOB_QGEMM='vnni' is not a value it accepts ('portable', or unset)"), std::string::npos)
      << s.message();
}

TEST(EnvSwitch, SessionCreationRefusesABadSwitch) {
  {
    ScopedEnv env("TOB_CONV_PACKED", "yes");
    auto s = NegSession();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("TOB_CONV_PACKED='yes'"), std::string::npos) << s.status().message();
  }
  auto s = NegSession();
  EXPECT_TRUE(s.ok()) << s.status().ToString();
}

}  // namespace
}  // namespace tob
