// The partitioner with a fake device provider defined here (another Device, claims only Relu and
// Add): placement, the copies inserted where edges cross devices, the report, and the error when
// nobody can run a node.
#include <gtest/gtest.h>

#include <cstring>

#include "graph_pass_test_util.h"
#include "ir/graph_printer.h"
#include "partition/partitioner.h"
#include "providers/cpu/cpu_execution_provider.h"

namespace tob {
namespace {

using testing::F32;
using testing::GraphBuilder;
using testing::Registries;

class FakeDeviceProvider final : public ExecutionProvider {
 public:
  FakeDeviceProvider(std::string name, int device_index, std::vector<std::string> ops)
      : name_(std::move(name)), index_(device_index), ops_(std::move(ops)) {}
  std::string name() const override { return name_; }
  Device device() const override { return Device{DeviceType::kCUDA, index_}; }
  std::shared_ptr<Allocator> allocator() const override { return CpuAllocator::Default(); }
  Status CopyTensor(const Tensor& src, Tensor& dst) const override {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return Status::OK();
  }
  bool CanRun(const Node& node, int, const KernelRegistry&, std::string* why_not) const override {
    for (const std::string& op : ops_)
      if (node.domain().empty() && node.op_type() == op) return true;
    *why_not = name_ + " runs only " + Join();
    return false;
  }

 private:
  std::string Join() const {
    std::string s;
    for (size_t i = 0; i < ops_.size(); ++i) s += (i ? (i + 1 == ops_.size() ? " and " : ", ") : "") + ops_[i];
    return s;
  }
  std::string name_;
  int index_;
  std::vector<std::string> ops_;
};

const FakeDeviceProvider& Fake() {
  static FakeDeviceProvider* p = new FakeDeviceProvider("FakeDeviceEP", 0, {"Relu", "Add"});
  return *p;
}

const CpuExecutionProvider& Cpu() {
  static CpuExecutionProvider* p = new CpuExecutionProvider();
  return *p;
}

Status Partition(Graph& g, const std::vector<const ExecutionProvider*>& providers, PartitionReport* report) {
  return PartitionGraph(g, providers, Registries().kernels, report);
}

Node* OnProvider(Node* n, const std::string& provider) {
  n->set_provider(provider);
  return n;
}

TEST(Partition, PlacesNodesByPriorityAndInsertsCopiesAtDeviceBorders) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Relu", {"x"}, {"r"}, {}, "", "relu");
  GraphBuilder(g).Op("Neg", {"r"}, {"n"}, {}, "", "neg");
  GraphBuilder(g).Op("Add", {"n", "r"}, {"y"}, {}, "", "add");
  GraphBuilder(g).Output("y");
  PartitionReport report;
  Status s = Partition(g, {&Fake(), &Cpu()}, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();

  const std::string dev = "FakeDeviceEP", cpu = kCpuProvider, ms = kMicrosoftDomain;
  Graph expected;
  GraphBuilder eb(expected);
  eb.Input("x", F32({4}));
  OnProvider(eb.Op("MemcpyFromHost", {"x"}, {"x_dev"}, {}, ms), dev);
  OnProvider(eb.Op("Relu", {"x_dev"}, {"r"}), dev);
  OnProvider(eb.Op("MemcpyToHost", {"r"}, {"r_host"}, {}, ms), dev);
  OnProvider(eb.Op("Neg", {"r_host"}, {"n"}), cpu);
  OnProvider(eb.Op("MemcpyFromHost", {"n"}, {"n_dev"}, {}, ms), dev);
  OnProvider(eb.Op("Add", {"n_dev", "r"}, {"y_dev"}), dev);
  OnProvider(eb.Op("MemcpyToHost", {"y_dev"}, {"y"}, {}, ms), dev);
  eb.Output("y");
  EXPECT_EQ(GraphToText(g), GraphToText(expected));
  EXPECT_EQ(g.output_names(), std::vector<std::string>{"y"});
  EXPECT_EQ(g.Opset(kMicrosoftDomain), 1);
  EXPECT_EQ(g.FindValue("r")->uses().size(), 2u);  // Add still reads the device copy of r
  Status valid = VerifyGraph(g, Registries().schemas);
  EXPECT_TRUE(valid.ok()) << valid.ToString();

  EXPECT_EQ(report.copies_inserted, 4);
  ASSERT_EQ(report.nodes.size(), 7u);
  EXPECT_EQ(report.nodes[0].node, "relu");
  EXPECT_EQ(report.nodes[0].provider, dev);
  EXPECT_EQ(report.nodes[0].why_not_earlier, "");
  EXPECT_EQ(report.nodes[1].node, "neg");
  EXPECT_EQ(report.nodes[1].provider, cpu);
  EXPECT_EQ(report.nodes[1].why_not_earlier, "FakeDeviceEP runs only Relu and Add");
  EXPECT_EQ(report.nodes[3].op_type, "com.microsoft::MemcpyFromHost");
  EXPECT_EQ(report.nodes[3].why_not_earlier, "copies 'x' cpu -> cuda:0");
  std::string table = report.ToString();
  EXPECT_NE(table.find("node"), std::string::npos) << table;
  size_t neg_row = table.find("\nneg ");
  ASSERT_NE(neg_row, std::string::npos) << table;
  std::string row = table.substr(neg_row + 1, table.find('\n', neg_row + 1) - neg_row - 1);
  EXPECT_NE(row.find(" Neg "), std::string::npos) << row;
  EXPECT_NE(row.find(" CPUExecutionProvider  FakeDeviceEP runs only Relu and Add"), std::string::npos) << row;
  EXPECT_NE(table.find("7 nodes (1 on CPUExecutionProvider, 6 on FakeDeviceEP); 4 copies inserted"), std::string::npos)
      << table;
}

TEST(Partition, PartitioningTwiceChangesNothing) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Relu", {"x"}, {"r"});
  GraphBuilder(g).Op("Neg", {"r"}, {"y"});
  GraphBuilder(g).Output("y");
  ASSERT_TRUE(Partition(g, {&Fake(), &Cpu()}, nullptr).ok());
  std::string once = GraphToText(g);
  PartitionReport report;
  ASSERT_TRUE(Partition(g, {&Fake(), &Cpu()}, &report).ok());
  EXPECT_EQ(GraphToText(g), once);
  EXPECT_EQ(report.copies_inserted, 0);
}

TEST(Partition, OneCopyPerValueAndDevice) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Relu", {"x"}, {"r"});
  GraphBuilder(g).Op("Add", {"x", "r"}, {"y"});
  GraphBuilder(g).Op("Neg", {"y"}, {"a"});
  GraphBuilder(g).Op("Neg", {"y"}, {"b"});
  GraphBuilder(g).Output("a").Output("b").Output("y");
  PartitionReport report;
  ASSERT_TRUE(Partition(g, {&Fake(), &Cpu()}, &report).ok());

  const std::string dev = "FakeDeviceEP", cpu = kCpuProvider, ms = kMicrosoftDomain;
  Graph expected;
  GraphBuilder eb(expected);
  eb.Input("x", F32({4}));
  OnProvider(eb.Op("MemcpyFromHost", {"x"}, {"x_dev"}, {}, ms), dev);
  OnProvider(eb.Op("Relu", {"x_dev"}, {"r"}), dev);
  OnProvider(eb.Op("Add", {"x_dev", "r"}, {"y_dev"}), dev);
  OnProvider(eb.Op("MemcpyToHost", {"y_dev"}, {"y"}, {}, ms), dev);
  OnProvider(eb.Op("Neg", {"y"}, {"a"}), cpu);
  OnProvider(eb.Op("Neg", {"y"}, {"b"}), cpu);
  eb.Output("a").Output("b").Output("y");
  EXPECT_EQ(GraphToText(g), GraphToText(expected));
  EXPECT_EQ(report.copies_inserted, 2);
}

TEST(Partition, DeviceToDeviceGoesThroughTheHost) {
  FakeDeviceProvider second("SecondDeviceEP", 1, {"Neg"});
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Relu", {"x"}, {"r"});
  GraphBuilder(g).Op("Neg", {"r"}, {"y"});
  GraphBuilder(g).Output("y");
  PartitionReport report;
  ASSERT_TRUE(Partition(g, {&Fake(), &second, &Cpu()}, &report).ok());

  const std::string ms = kMicrosoftDomain;
  Graph expected;
  GraphBuilder eb(expected);
  eb.Input("x", F32({4}));
  OnProvider(eb.Op("MemcpyFromHost", {"x"}, {"x0"}, {}, ms), "FakeDeviceEP");
  OnProvider(eb.Op("Relu", {"x0"}, {"r"}), "FakeDeviceEP");
  OnProvider(eb.Op("MemcpyToHost", {"r"}, {"r_host"}, {}, ms), "FakeDeviceEP");
  OnProvider(eb.Op("MemcpyFromHost", {"r_host"}, {"r1"}, {}, ms), "SecondDeviceEP");
  OnProvider(eb.Op("Neg", {"r1"}, {"y1"}), "SecondDeviceEP");
  OnProvider(eb.Op("MemcpyToHost", {"y1"}, {"y"}, {}, ms), "SecondDeviceEP");
  eb.Output("y");
  EXPECT_EQ(GraphToText(g), GraphToText(expected));
  EXPECT_EQ(report.copies_inserted, 4);
}

TEST(Partition, HostOnlyGraphsGetNoCopies) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4})).Const("c", {1, 2, 3, 4}, {4});
  GraphBuilder(g).Op("Relu", {"x"}, {"r"});
  GraphBuilder(g).Op("Add", {"r", "c"}, {"y"});
  GraphBuilder(g).Output("y");
  PartitionReport report;
  Status s = Partition(g, {&Cpu()}, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(report.copies_inserted, 0);
  EXPECT_EQ(g.num_nodes(), 2u);
  for (const Node* n : g.nodes()) EXPECT_EQ(n->provider(), kCpuProvider);
  EXPECT_EQ(g.Opset(kMicrosoftDomain), -1);
}

TEST(Partition, CpuDeclinesAnUnsupportedDtypeWithTheReason) {
  Graph g;
  GraphBuilder(g).Input("x", ValueType(DType::kInt32, Dims{4}));
  GraphBuilder(g).Op("Neg", {"x"}, {"y"}, {}, "", "int_neg");
  GraphBuilder(g).Output("y");
  Status s = Partition(g, {&Fake(), &Cpu()}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotImplemented);
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
}

TEST(Partition, NoProviderIsNotImplementedNamingOpDomainOpsetAndReasons) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Sin", {"x"}, {"y"}, {}, "", "sine");
  GraphBuilder(g).Output("y");
  Status s = Partition(g, {&Fake(), &Cpu()}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotImplemented);
  for (const char* part : {"'sine'", "ai.onnx::Sin", "opset 17", "FakeDeviceEP runs only Relu and Add",
                           "CPUExecutionProvider has no kernel for ai.onnx::Sin"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in " << s.message();
}

TEST(Partition, MemcpySchemasAndHostKernelsAreRegistered) {
  for (const char* op : {"MemcpyFromHost", "MemcpyToHost"}) {
    EXPECT_NE(OpSchemaRegistry::Global().Find(kMicrosoftDomain, op), nullptr) << op;
    EXPECT_NE(KernelRegistry::Global().Find(kCpuProvider, kMicrosoftDomain, op, 1, {DType::kFloat16}), nullptr) << op;
  }
}

}  // namespace
}  // namespace tob
