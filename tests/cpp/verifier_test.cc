// The graph verifier: one test per error it reports, plus a valid graph it must accept.
#include <gtest/gtest.h>

#include "graph_pass_test_util.h"
#include "optimizer/pass.h"

namespace tob {
namespace {

using testing::F32;
using testing::GraphBuilder;
using testing::Registries;

Status Verify(const Graph& g) { return VerifyGraph(g, Registries().schemas); }

TEST(Verifier, AcceptsAValidGraph) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2})).Const("c", {1, 2}, {2});
  GraphBuilder(g).Op("Add", {"x", "c"}, {"s"});
  GraphBuilder(g).Op("Dropout", {"s"}, {"d", ""});  // omitted optional output
  GraphBuilder(g).Output("d").Output("x");
  Status s = Verify(g);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(Verifier, ACycleNamesANodeOnTheCycle) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Relu", {"x"}, {"p"}, {}, "", "head");
  Node* downstream = GraphBuilder(g).Op("Neg", {"p"}, {"q"}, {}, "", "downstream");
  Node* a = GraphBuilder(g).Op("Add", {"x", "x"}, {"a"}, {}, "", "cycle_a");
  GraphBuilder(g).Op("Neg", {"a"}, {"b"}, {}, "", "cycle_b");
  GraphBuilder(g).Output("q");
  // By hand: cycle_a reads cycle_b's output, and `downstream` (added before both) hangs off it.
  g.SetNodeInput(a, 1, g.FindValue("b"));
  g.SetNodeInput(downstream, 0, g.FindValue("b"));
  Status s = Verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidModel);
  EXPECT_NE(s.message().find("cycle"), std::string::npos) << s.message();
  EXPECT_TRUE(s.message().find("'cycle_a'") != std::string::npos || s.message().find("'cycle_b'") != std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("downstream"), std::string::npos) << s.message();
}

TEST(Verifier, AMissingSchemaIsNotImplementedNamingOpDomainAndOpset) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  g.SetOpset("custom.domain", 3);
  GraphBuilder(g).Op("Frobnicate", {"x"}, {"y"}, {}, "custom.domain", "frob");
  GraphBuilder(g).Output("y");
  Status s = Verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotImplemented);
  for (const char* part : {"Frobnicate", "custom.domain", "opset 3", "'frob'"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in " << s.message();
}

TEST(Verifier, TooManyInputsIsBadArity) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Relu", {"x", "x"}, {"y"}, {}, "", "two_input_relu");
  GraphBuilder(g).Output("y");
  Status s = Verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidModel);
  EXPECT_NE(s.message().find("'two_input_relu'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("takes 1..1 inputs, got 2"), std::string::npos) << s.message();
}

TEST(Verifier, TooManyOutputsIsBadArity) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Neg", {"x"}, {"y", "z"}, {}, "", "two_output_neg");
  GraphBuilder(g).Output("y");
  Status s = Verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has 1..1 outputs, got 2"), std::string::npos) << s.message();
}

TEST(Verifier, AnOmittedRequiredInputIsAnError) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Add", {"x", ""}, {"y"}, {}, "", "half_add");
  GraphBuilder(g).Output("y");
  Status s = Verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("required input 1 is missing"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tob
