// torch_ort_backend._C: builds engine graphs from Python (the onnx package parses, we build),
// runs sessions with zero-copy tensors, and exposes the kernel registry. Engine Status values
// become Python exceptions of a matching class.
#include <pybind11/detail/exception_translation.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/env_switch.h"
#include "framework/kernel_registry.h"
#include "ir/graph.h"
#include "memory/arena_pool.h"
#include "ops/op_schema.h"
#include "partition/provider_registry.h"
#include "providers/cpu/nn/bf16_gemm.h"
#include "providers/cpu/nn/qgemm.h"
#include "providers/cpu/nn/sgemm_packed.h"
#include "python/status_exceptions.h"
#include "python/tensor_bridge.h"
#include "runtime/session.h"
#ifdef TOB_WITH_TORCH
#include "providers/torch/aten_op_policy.h"
#include "providers/torch/torch_parallel.h"
#include "providers/torch/torch_provider.h"
#include "python/torch_run.h"
#endif

namespace py = pybind11;

namespace tob::python {

namespace {

// A feed or an initializer: a numpy array or a DLPack capsule.
Tensor ToTensor(const py::handle& obj, const std::string& what) {
  if (py::isinstance<py::capsule>(obj)) return TensorFromDLPack(py::reinterpret_borrow<py::capsule>(obj), what);
  if (py::isinstance<py::array>(obj)) return TensorFromNumpy(py::reinterpret_borrow<py::array>(obj), what);
  throw py::type_error(
      StrCat(what, ": expected a numpy array or a DLPack capsule, got ", std::string(py::str(obj.get_type()))));
}

std::optional<Dims> ToDims(const py::object& dims);

// A type from the loader: ONNX dtype, dims, kind (0 tensor, 1 sequence) and whether it is optional.
ValueType ToValueType(int dtype, const py::object& dims, int kind, bool optional) {
  if (kind != 0 && kind != 1)
    throw py::value_error(StrCat("value kind must be 0 (tensor) or 1 (sequence), got ", kind));
  ValueType t(DTypeFromOnnx(dtype), ToDims(dims));
  t.kind = kind == 1 ? ValueKind::kSequence : ValueKind::kTensor;
  t.optional = optional;
  return t;
}

std::optional<Dims> ToDims(const py::object& dims) {
  if (dims.is_none()) return std::nullopt;
  Dims out;
  for (const py::handle& d : dims) {
    if (d.is_none()) out.push_back(Dim::Unknown());
    else if (py::isinstance<py::str>(d)) out.push_back(Dim::Symbol(d.cast<std::string>()));
    else out.emplace_back(d.cast<int64_t>());
  }
  return out;
}

py::object FromDims(const std::optional<Dims>& dims) {
  if (!dims) return py::none();
  py::list l;
  for (const Dim& d : *dims) {
    if (d.is_known()) l.append(d.value);
    else if (d.is_symbolic()) l.append(d.symbol);
    else l.append(py::none());
  }
  return l;
}

// Owns a Graph until a Session (a main graph) or a node's GRAPH attribute (a subgraph) takes it.
class GraphBuilder {
 public:
  GraphBuilder() : graph_(std::make_unique<Graph>()) {}
  explicit GraphBuilder(const std::string& subgraph_name) : graph_(Graph::NewSubgraph(subgraph_name)) {}
  Graph& graph() {
    if (!graph_)
      throw py::value_error("this GraphBuilder was already used (to create a session, or as a node's subgraph)");
    return *graph_;
  }
  std::unique_ptr<Graph> Take() {
    graph();
    return std::move(graph_);
  }

 private:
  std::unique_ptr<Graph> graph_;
};

// The subgraph a GRAPH attribute's value (a GraphBuilder made for a subgraph) holds.
std::shared_ptr<Graph> TakeSubgraph(const std::string& node, const std::string& name, const py::handle& v) {
  if (!py::isinstance<GraphBuilder>(v))
    throw py::type_error(StrCat("node '", node, "' attribute '", name, "': a subgraph must be a GraphBuilder, got ",
                                std::string(py::str(v.get_type()))));
  GraphBuilder& b = v.cast<GraphBuilder&>();
  if (!b.graph().is_subgraph())
    throw py::value_error(
        StrCat("node '", node, "' attribute '", name,
               "': the GraphBuilder was made for a main graph; make it with GraphBuilder(subgraph=name)"));
  return std::shared_ptr<Graph>(b.Take());
}

Attribute ToAttribute(const std::string& node, const std::string& name, int type, const py::handle& v) {
  switch (static_cast<AttrType>(type)) {
    case AttrType::kFloat: return Attribute::Float(v.cast<float>());
    case AttrType::kInt: return Attribute::Int(v.cast<int64_t>());
    case AttrType::kString: return Attribute::String(v.cast<std::string>());
    case AttrType::kFloats: return Attribute::Floats(v.cast<std::vector<float>>());
    case AttrType::kInts: return Attribute::Ints(v.cast<std::vector<int64_t>>());
    case AttrType::kStrings: return Attribute::Strings(v.cast<std::vector<std::string>>());
    case AttrType::kTensor: {
      // (array, onnx dtype[, dims]): the dtype re-labels same-sized data (bfloat16 arrives as
      // uint16, float8 as uint8); a packed type arrives as its packed bytes with its dims.
      auto tup = v.cast<py::tuple>();
      const std::string what = StrCat("node '", node, "' attribute '", name, "'");
      Tensor t = ToTensor(tup[0], what);
      const DType want = DTypeFromOnnx(tup[1].cast<int>());
      std::optional<Shape> shape;
      if (tup.size() > 2 && !tup[2].is_none()) shape = tup[2].cast<Shape>();
      if (want != DType::kUndefined && want != t.dtype()) t = RelabelTensor(t, want, shape, what);
      return Attribute::TensorValue(std::move(t));
    }
    case AttrType::kGraph: return Attribute::Subgraph(TakeSubgraph(node, name, v));
    case AttrType::kGraphs: {
      std::vector<std::shared_ptr<Graph>> graphs;
      for (const py::handle& g : v.cast<py::list>()) graphs.push_back(TakeSubgraph(node, name, g));
      return Attribute::Subgraphs(std::move(graphs));
    }
    case AttrType::kTypeProto: {
      // (onnx dtype, dims, kind, optional), as the loader reads a value's type.
      auto tup = v.cast<py::tuple>();
      if (tup.size() != 4)
        Raise(InvalidModel("node '", node, "': attribute '", name, "' must be (dtype, dims, kind, optional)"));
      return Attribute::TypeProto(ToValueType(tup[0].cast<int>(), py::reinterpret_borrow<py::object>(tup[1]),
                                              tup[2].cast<int>(), tup[3].cast<bool>()));
    }
    default:
      Raise(NotImplemented("node '", node, "': attribute '", name, "' has type ",
                           AttrTypeName(static_cast<AttrType>(type)),
                           ", which the engine does not support (tensor lists)"));
  }
}

py::dict GraphDict(const Graph& g);

py::object FromAttribute(const Attribute& a) {
  switch (a.type) {
    case AttrType::kGraph: return GraphDict(*a.g);
    case AttrType::kGraphs: {
      py::list l;
      for (const auto& g : a.graphs) l.append(GraphDict(*g));
      return l;
    }
    case AttrType::kFloat: return py::float_(a.f);
    case AttrType::kInt: return py::int_(a.i);
    case AttrType::kString: return py::bytes(a.s);
    case AttrType::kFloats: return py::cast(a.floats);
    case AttrType::kInts: return py::cast(a.ints);
    case AttrType::kStrings: {
      py::list l;
      for (const auto& s : a.strings) l.append(py::bytes(s));
      return l;
    }
    case AttrType::kTensor: return a.t.dtype() == DType::kString ? StringTensorToNumpy(a.t) : TensorToDLPack(a.t);
    case AttrType::kTypeProto:
      return py::make_tuple(static_cast<int>(a.type_proto.dtype), FromDims(a.type_proto.shape),
                            static_cast<int>(a.type_proto.kind), a.type_proto.optional);
    default: return py::none();
  }
}

// An engine tensor handed to Python; exported through __dlpack__ without a copy.
struct PyTensor {
  Tensor tensor;
};

// The name a value has where it is defined: a subgraph's outer-scope value is named after the
// value of the enclosing graph it stands for (a pass may have re-pointed it at another one).
std::string DefinedName(const Value* v) {
  while (v->is_outer_scope() && v->outer() != nullptr) v = v->outer();
  return v->name();
}

// A graph as plain data, for saving the optimised model from Python (optimized_model.py):
// nodes in execution order (subgraphs nested in their attributes), constants, value types.
py::dict GraphDict(const Graph& g) {
  py::dict d;
  py::list nodes;
  auto order = g.TopologicalOrder();
  Check(order.status());
  for (const Node* n : order.value()) {
    py::list ins, outs, attrs;
    for (const Value* v : n->inputs()) ins.append(v ? DefinedName(v) : std::string());
    for (const Value* v : n->outputs()) outs.append(v->name());
    for (const auto& [name, a] : n->attributes())
      attrs.append(py::make_tuple(name, static_cast<int>(a.type), FromAttribute(a)));
    nodes.append(py::dict(py::arg("op_type") = n->op_type(), py::arg("domain") = n->domain(),
                          py::arg("name") = n->name(), py::arg("inputs") = ins, py::arg("outputs") = outs,
                          py::arg("attributes") = attrs, py::arg("provider") = n->provider()));
  }
  py::list inits;
  for (const Value* v : g.initializers()) inits.append(py::make_tuple(v->name(), PyTensor{*v->initializer()}));
  py::list values;
  for (const Node* n : order.value())
    for (const Value* v : n->outputs())
      values.append(py::make_tuple(v->name(), static_cast<int>(v->type().dtype), FromDims(v->type().shape),
                                   static_cast<int>(v->type().kind), v->type().optional));
  py::list inputs;
  for (const Value* v : g.inputs())
    inputs.append(py::make_tuple(v->name(), static_cast<int>(v->type().dtype), FromDims(v->type().shape)));
  py::list input_kinds;  // (kind, optional) of each input
  for (const Value* v : g.inputs())
    input_kinds.append(py::make_tuple(static_cast<int>(v->type().kind), v->type().optional));
  py::list outputs;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    outputs.append(py::make_tuple(g.output_names()[i], DefinedName(g.outputs()[i])));
  d["name"] = g.is_subgraph() ? g.name() : std::string("main");
  d["nodes"] = nodes;
  d["initializers"] = inits;
  d["values"] = values;
  d["inputs"] = inputs;
  d["input_kinds"] = input_kinds;
  d["outputs"] = outputs;
  d["opsets"] = g.opsets();
  return d;
}

// A feed for graph input `type`: None is an optional's "no value", a list (or tuple) is a
// sequence of tensors, anything else a tensor.
RuntimeValue ToValue(const py::handle& obj, const ValueType& type, const std::string& what) {
  if (obj.is_none()) {
    if (!type.optional)
      throw py::value_error(StrCat(what, " is ", type.ToString(), ": None is only a value of optional inputs"));
    return RuntimeValue::None(type);
  }
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    if (type.kind != ValueKind::kSequence)
      throw py::value_error(StrCat(what, " is ", type.ToString(), "; a list is a value of sequence inputs"));
    std::vector<Tensor> tensors;
    size_t k = 0;
    for (const py::handle& item : obj) tensors.push_back(ToTensor(item, StrCat(what, " tensor ", k++)));
    const DType dtype = tensors.empty() ? type.dtype : tensors.front().dtype();
    if (dtype == DType::kUndefined)
      throw py::value_error(StrCat(what, ": an empty sequence for an input whose element type is not declared"));
    return RuntimeValue::OfSequence(dtype, std::move(tensors));
  }
  return ToTensor(obj, what);
}

// A fetched value for Python: an EngineTensor, a list of them for a sequence, None for none.
py::object FromValue(RuntimeValue v) {
  if (v.is_none()) return py::none();
  if (v.is_sequence()) {
    py::list l;
    for (const Tensor& t : v.sequence().tensors) l.append(PyTensor{t});
    return l;
  }
  return py::cast(PyTensor{std::move(v.mutable_tensor())});
}

py::dict StatsDict(const RunStats& s) {
  // memory_stats() reads this after every compiled-graph run: the keys are made once (interned,
  // never freed) instead of a new string per key per call.
  static PyObject* const keys[] = {
      PyUnicode_InternFromString("peak_bytes"),          PyUnicode_InternFromString("peak_live_bytes"),
      PyUnicode_InternFromString("arena_bytes"),         PyUnicode_InternFromString("planned"),
      PyUnicode_InternFromString("plan_misses"),         PyUnicode_InternFromString("prepacked_bytes"),
      PyUnicode_InternFromString("prepacked_constants"), PyUnicode_InternFromString("peak_held_bytes")};
  const py::object values[] = {py::int_(s.peak_bytes),          py::int_(s.peak_live_bytes),
                               py::int_(s.arena_bytes),         py::bool_(s.planned),
                               py::int_(s.plan_misses),         py::int_(s.prepacked_bytes),
                               py::int_(s.prepacked_constants), py::int_(s.peak_held_bytes)};
  py::dict d;
  for (size_t i = 0; i < std::size(keys); ++i)
    if (PyDict_SetItem(d.ptr(), keys[i], values[i].ptr()) != 0) throw py::error_already_set();
  return d;
}

class PySession {
 public:
  PySession(GraphBuilder& builder, const SessionOptions& options) {
    std::unique_ptr<Graph> g = builder.Take();
    StatusOr<std::unique_ptr<Session>> s = [&] {
      py::gil_scoped_release release;
      return Session::Create(std::move(g), options);
    }();
    session_ = Unwrap(std::move(s));
    small_graph_ = IsSmallHostGraph(session_->graph());
    for (const IOInfo& io : session_->inputs()) input_labels_.push_back(StrCat("input '", io.name, "'"));
    for (const IOInfo& io : session_->outputs()) {
      output_labels_.push_back(StrCat("output '", io.name, "'"));
      output_dtypes_.push_back(io.type.dtype);
    }
  }

  // Feeds of any kind (ToValue); each fetch an EngineTensor, a list of them, or None.
  py::list Run(const std::vector<std::string>& feed_names, const py::list& feeds,
               const std::vector<std::string>& fetch_names, const std::vector<bool>& donated) {
    if (feed_names.size() != feeds.size())
      throw py::value_error(StrCat("got ", feed_names.size(), " feed names and ", feeds.size(), " values"));
    std::vector<RuntimeValue> values;
    values.reserve(feeds.size());
    for (size_t i = 0; i < feeds.size(); ++i) {
      const py::handle feed = feeds[i];
      const std::string what = StrCat("input '", feed_names[i], "'");
      // Only None and lists need the input's declared type (the common case, a tensor, does not).
      const bool needs_type = feed.is_none() || py::isinstance<py::list>(feed) || py::isinstance<py::tuple>(feed);
      const IOInfo* io = needs_type ? FindIO(feed_names[i]) : nullptr;
      if (io == nullptr) values.push_back(ToTensor(feed, what));  // the run names an unknown input
      else values.push_back(ToValue(feed, io->type, what));
    }
    std::vector<RuntimeValue> fetches;
    RunStats stats;
    Status st;
    {
      InFlight in_flight(in_flight_);
      py::gil_scoped_release release;
      st = session_->RunValues(feed_names, std::move(values), fetch_names, &fetches, &stats, donated);
    }
    last_stats_ = stats;  // under the GIL, as last_run_stats() reads it
    Check(st);
    py::list out;
    for (RuntimeValue& v : fetches) out.append(FromValue(std::move(v)));
    return out;
  }

  const IOInfo* FindIO(const std::string& name) const {
    for (const IOInfo& io : session_->inputs())
      if (io.name == name) return &io;
    return nullptr;
  }

  // The compiled-graph fast path (compiled_graph.py): feeds (DLPack capsules or numpy arrays) in
  // graph-input order, every output back as a DLPack capsule; no names, no per-call strings.
  py::list RunPositional(const py::list& feeds, const std::vector<bool>& donated) {
    const size_t n = feeds.size();
    if (n != input_labels_.size())
      throw py::value_error(StrCat("got ", n, " inputs; the model takes ", input_labels_.size()));
    std::vector<Tensor> tensors;
    tensors.reserve(n);
    for (size_t i = 0; i < n; ++i) tensors.push_back(ToTensor(feeds[i], input_labels_[i]));
    std::vector<Tensor> fetches;
    RunReleasingTheGil(std::move(tensors), donated, &fetches);
    py::list out(fetches.size());
    for (size_t i = 0; i < fetches.size(); ++i) out[i] = TensorToDLPack(fetches[i]);
    return out;
  }

#ifdef TOB_WITH_TORCH
  // RunPositional with torch tensors in and out, no DLPack capsules (python/torch_run.h): the
  // compiled graphs' fast path. The engine checks each input as RunPositional does (CheckInput).
  // A donated input leaves `args` (set to None) once the engine holds it, so that the engine's
  // reference is the last one.
  py::list RunTorch(const py::list& args, const std::vector<bool>& donated) {
    const size_t n = args.size();
    if (n != input_labels_.size())
      throw py::value_error(StrCat("got ", n, " inputs; the model takes ", input_labels_.size()));
    if (!donated.empty() && donated.size() != n)
      throw py::value_error(StrCat("got ", donated.size(), " donation flags for ", n, " inputs"));
    std::vector<Tensor> tensors = EngineTensorsFromTorch(args, input_labels_);
    CheckTorchDTypes(output_labels_, output_dtypes_);  // before donated inputs are consumed
    for (size_t i = 0; i < donated.size(); ++i)
      if (donated[i]) args[i] = py::none();
    // The fetched tensors' vector is this thread's from an earlier run (no allocation once it has
    // grown); a stack, given back on every path, as wrapping the outputs may run Python (a
    // finalizer of a collected object) that runs another graph on this thread.
    struct PooledFetches {
      std::vector<Tensor> fetches;
      PooledFetches() {
        if (!tls_fetches.empty()) {
          fetches = std::move(tls_fetches.back());
          tls_fetches.pop_back();
        }
      }
      ~PooledFetches() {
        fetches.clear();
        if (tls_fetches.size() < 8) tls_fetches.push_back(std::move(fetches));
      }
    } pooled;
    RunReleasingTheGil(std::move(tensors), donated, &pooled.fetches, /*may_keep_gil=*/true);
    return TorchTensorsFromEngine(pooled.fetches, output_labels_);
  }
#endif

  py::list IO(bool inputs) const {
    py::list l;
    for (const IOInfo& io : inputs ? session_->inputs() : session_->outputs())
      l.append(py::make_tuple(io.name, static_cast<int>(io.type.dtype), FromDims(io.type.shape)));
    return l;
  }
  // (kind, optional) of each input or output: kind 0 tensor, 1 sequence.
  py::list IOKinds(bool inputs) const {
    py::list l;
    for (const IOInfo& io : inputs ? session_->inputs() : session_->outputs())
      l.append(py::make_tuple(static_cast<int>(io.type.kind), io.type.optional));
    return l;
  }

  // The optimised graph, for saving as an ONNX model from Python (GraphDict); its inputs are the
  // session's, as the user declared them.
  py::dict OptimizedGraph() const {
    py::dict d = GraphDict(session_->graph());
    d["inputs"] = IO(true);
    d["input_kinds"] = IOKinds(true);
    return d;
  }

  // Session state: the tensor's memory (numpy through the buffer protocol, torch through a DLPack
  // capsule) is bound without a copy; runs write the state's updates into it.
  void BindState(const std::string& name, const py::handle& value) {
    if (py::isinstance<py::array>(value) && !py::reinterpret_borrow<py::array>(value).writeable())
      throw py::value_error(
          StrCat("state '", name, "': the numpy array is read-only; runs write state updates into it"));
    Tensor t = ToTensor(value, StrCat("state '", name, "'"));
    Check(session_->BindState(name, std::move(t)));
  }
  PyTensor State(const std::string& name) const { return PyTensor{Unwrap(session_->State(name))}; }

  Session& session() { return *session_; }
  const RunStats& last_stats() const { return last_stats_; }

 private:
  // Session::RunPositional with the GIL released; its stats recorded once the GIL is back (as
  // last_run_stats() reads them), and its error raised.
  // A run of a small graph on small inputs (`may_keep_gil`: RunTorch's) keeps the GIL when no
  // other run of this session is in progress: releasing and retaking it (two mutex round trips)
  // costs about what the whole run of a one-node graph computes. Safe from deadlock: while this
  // thread holds the GIL no other thread can start a run of this session (every run starts in this
  // binding, under the GIL), so the session's run lock is free; the run's kernels are CPU ones of
  // the engine (no torch provider node, no subgraph: IsSmallHostGraph), which never wait for
  // another thread that needs the GIL; and whatever takes the GIL on this thread during the run
  // (a feed's deleter) takes it again reentrantly.
  void RunReleasingTheGil(std::vector<Tensor> tensors, const std::vector<bool>& donated, std::vector<Tensor>* fetches,
                          bool may_keep_gil = false) {
    RunStats stats;
    Status st;
    bool keep_gil = may_keep_gil && small_graph_ && in_flight_ == 0;
    if (keep_gil) {
      size_t bytes = 0;
      for (const Tensor& t : tensors) bytes += t.nbytes();
      keep_gil = bytes <= kSmallRunInputBytes;
    }
    {
      InFlight in_flight(in_flight_);
      if (keep_gil) {
        st = session_->RunPositional(std::move(tensors), fetches, &stats, donated);
      } else {
        py::gil_scoped_release release;
        st = session_->RunPositional(std::move(tensors), fetches, &stats, donated);
      }
    }
    last_stats_ = stats;
    Check(st);
  }

  // Small: at most kSmallGraphNodes nodes, each on the engine's CPU provider, none with subgraphs.
  static constexpr size_t kSmallGraphNodes = 8;
  static constexpr size_t kSmallRunInputBytes = 64 * 1024;
  static bool IsSmallHostGraph(const Graph& g) {
    if (g.num_nodes() > kSmallGraphNodes) return false;
    for (const Node* n : g.nodes())
      if (n->provider() != kCpuProvider || n->has_subgraphs()) return false;
    return true;
  }
  // Runs of this session in progress (counted under the GIL, which every binding call holds when
  // it starts and ends a run).
  struct InFlight {
    int& count;
    explicit InFlight(int& c) : count(c) { ++count; }
    ~InFlight() { --count; }  // after the GIL is back (declared before the release)
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
  };
#ifdef TOB_WITH_TORCH
  static inline thread_local std::vector<std::vector<Tensor>> tls_fetches;  // RunTorch's, reused
#endif

  std::unique_ptr<Session> session_;
  std::vector<std::string> input_labels_;   // "input 'name'", for the errors of RunPositional
  std::vector<std::string> output_labels_;  // "output 'name'", for the errors of RunTorch
  std::vector<DType> output_dtypes_;        // the outputs' declared dtypes (kUndefined: not known)
  RunStats last_stats_;                     // written under the GIL only
  bool small_graph_ = false;                // IsSmallHostGraph: RunTorch may keep the GIL
  int in_flight_ = 0;                       // runs in progress (InFlight), read and written under the GIL
};

#ifdef TOB_WITH_TORCH
// Session.torch_runner(): a builtin function whose self is a capsule holding the session, so that
// a call is one C call (METH_O) instead of pybind11's dispatch (overload resolution, argument
// casters: ~0.1 us a call, measured with benchmarks/bench_call_overhead.py). Errors are translated
// as pybind11 translates them for run_torch (the same exception types and messages).
struct TorchRunner {
  PyObject* owner = nullptr;  // the Python Session object, kept alive by the runner
  PySession* session = nullptr;
};

void FreeTorchRunner(PyObject* capsule) {
  auto* runner = static_cast<TorchRunner*>(PyCapsule_GetPointer(capsule, nullptr));
  if (runner == nullptr) return;
  Py_XDECREF(runner->owner);
  delete runner;
}

PyObject* CallTorchRunner(PyObject* capsule, PyObject* args) {
  auto* runner = static_cast<TorchRunner*>(PyCapsule_GetPointer(capsule, nullptr));
  if (runner == nullptr) return nullptr;
  if (!PyList_Check(args)) {
    PyErr_Format(PyExc_TypeError, "the runner takes a list of tensors, got %s", Py_TYPE(args)->tp_name);
    return nullptr;
  }
  static const std::vector<bool> kNoDonation;
  try {
    return runner->session->RunTorch(py::reinterpret_borrow<py::list>(args), kNoDonation).release().ptr();
  } catch (...) {
    py::detail::try_translate_exceptions();
    return nullptr;
  }
}

PyMethodDef kTorchRunnerDef = {"torch_runner", CallTorchRunner, METH_O,
                               "Session.run_torch(args) without donation (Session.torch_runner)."};

py::object MakeTorchRunner(py::object self) {
  auto* runner = new TorchRunner{self.ptr(), self.cast<PySession*>()};
  Py_INCREF(runner->owner);
  PyObject* capsule = PyCapsule_New(runner, nullptr, FreeTorchRunner);
  if (capsule == nullptr) {
    Py_DECREF(runner->owner);
    delete runner;
    throw py::error_already_set();
  }
  PyObject* fn = PyCFunction_New(&kTorchRunnerDef, capsule);
  Py_DECREF(capsule);  // the function holds it
  if (fn == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}
#endif

}  // namespace

void RegisterOptimBindings(py::module_& m);  // optim_bindings.cc

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_ort_backend engine binding";

  RegisterStatusExceptions(m);

  m.attr("MICROSOFT_DOMAIN") = kMicrosoftDomain;  // core/domain.h: Python reads the one constant
  m.attr("CPU_PROVIDER") = kCpuProvider;
  m.attr("CUDA_PROVIDER") = kCudaProvider;
#ifdef TOB_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
#ifdef TOB_WITH_TORCH
  // ATen nodes run through torch's dispatcher; every session gets this provider after CPU.
  RegisterTorchProvider();
  // One set of intra-op threads in the process: the engine's parallel work runs on torch's pool.
  UseTorchIntraOpPool(true);
  m.def("use_torch_intra_op_pool", &UseTorchIntraOpPool, py::arg("enable"),
        "Run the engine's intra-op work on torch's intra-op pool (default) or on its own threads.");
  m.attr("TORCH_PROVIDER") = kTorchProvider;
  m.def("aten_op_refusal", &AtenOpRefusal, py::arg("name"), py::arg("overload") = "",
        "Why an ATen node of a session without allow_unsafe_aten_ops may not call this torch operator; '' when "
        "it may (docs/security.md).");
  m.def(
      "aten_policy_entries",
      [] {
        std::vector<std::tuple<std::string, bool, std::string>> out;
        for (const AtenPolicyEntry& e : AtenPolicyEntries()) out.emplace_back(e.name, e.allowed, e.reason);
        return out;
      },
      "The explicit allow and refusal lists of the ATen policy: (name, allowed, reason).");
  m.attr("built_with_torch") = true;
#else
  m.attr("built_with_torch") = false;
#endif
  // Test hook (tests/python/test_status_exceptions.py): fails the way this file's bindings fail,
  // with a Status of `code` (tob::StatusCode), or with a tob::InternalError for a negative code.
  m.def("_raise_status_from_session_binding", [](int code, const std::string& message) {
    if (code < 0) throw InternalError(message);
    Check(Status(static_cast<StatusCode>(code), message));
  });
  m.def("registered_providers", [] { return ProviderRegistry::Global().Names(); });
  m.def("env_switch_signature", &EnvSwitchSignature,
        "Every TOB_* engine switch as it reads now ('TOB_X=value;...'): part of the compiled graphs' session-cache "
        "key, since the pass pipeline reads its switches when a session is created.");
  m.def(
      "check_env_switches", [] { Check(CheckEnvSwitches()); },
      "Raises InvalidArgumentError naming each TOB_* engine switch set to a value it does not accept "
      "(docs/architecture.md lists them); Session creation makes the same check.");
  m.def("bf16_gemm_available", &Bf16GemmAvailable,
        "Whether bfloat16 MatMul/Gemm run on the native AVX512-BF16 kernel (else through float32; TOB_BF16_GEMM=0 "
        "turns it off).");
  m.def("sgemm_available", &SgemmAvailable,
        "Whether float32 MatMul/Gemm run on the engine's AVX-512 kernels at every M and constant weights are "
        "pre-packed (else OpenBLAS for M > 128 and no pre-packing; TOB_SGEMM=0 turns it off).");
  m.def(
      "qgemm_isa", [] { return std::string(qgemm::IsaName(qgemm::DefaultIsa())); },
      "The integer GEMM kernel MatMulInteger / QLinearMatMul / ConvInteger / QLinearConv run on: 'avx512vnni' on "
      "CPUs with VPDPBUSD, else 'portable' (TOB_QGEMM=portable forces it).");
  m.def("fallback_providers", [] { return ProviderRegistry::Global().FallbackNames(); });

  py::class_<PyTensor>(m, "EngineTensor")
      .def_property_readonly("shape", [](const PyTensor& t) { return t.tensor.shape(); })
      .def_property_readonly("dtype", [](const PyTensor& t) { return static_cast<int>(t.tensor.dtype()); })
      .def("data_ptr", [](const PyTensor& t) { return reinterpret_cast<uintptr_t>(t.tensor.raw_data()); })
      .def(
          "strings",
          [](const PyTensor& t) {
            if (t.tensor.dtype() != DType::kString)
              throw py::type_error(StrCat("strings(): the tensor is ", DTypeName(t.tensor.dtype()), ", not string"));
            return StringTensorToNumpy(t.tensor);
          },
          "A string tensor as a numpy array of dtype object holding str (a copy).")
      .def(
          "unpacked_codes", [](const PyTensor& t) { return PyTensor{UnpackedCodes(t.tensor)}; },
          "One element per byte of a low-precision tensor (float8: its own bytes as uint8; the packed types: "
          "their codes in a new uint8 tensor, int8 sign-extended for int4/int2), for numpy's ml_dtypes view.")
      .def("__dlpack__", [](const PyTensor& t, py::kwargs) { return TensorToDLPack(t.tensor); })
      .def("__dlpack_device__", [](const PyTensor& t) {
        Device d = t.tensor.device();
        return py::make_tuple(d.type == DeviceType::kCPU ? 1 : 2, d.index);
      });

  m.attr("MAX_SUBGRAPH_NESTING") = Graph::kMaxNestingDepth;

  py::class_<GraphBuilder>(m, "GraphBuilder")
      .def(py::init<>())
      .def(py::init<const std::string&>(), py::arg("subgraph"),
           "A builder for a subgraph (the value of a GRAPH attribute): names it reads but does not define are values "
           "of the enclosing graphs.")
      .def("set_opset", [](GraphBuilder& b, const std::string& domain, int v) { b.graph().SetOpset(domain, v); })
      .def(
          "add_input",
          [](GraphBuilder& b, const std::string& name, int dtype, const py::object& dims, int kind, bool optional) {
            Unwrap(b.graph().AddInput(name, ToValueType(dtype, dims, kind, optional)));
          },
          py::arg("name"), py::arg("dtype"), py::arg("dims"), py::arg("kind") = 0, py::arg("optional") = false)
      .def(
          "add_initializer",
          [](GraphBuilder& b, const std::string& name, const py::object& value, int dtype,
             const std::optional<Shape>& dims) {
            const std::string what = StrCat("initializer '", name, "'");
            Tensor t = ToTensor(value, what);
            // Reinterpret: bfloat16 arrives as uint16 from numpy, float8 as uint8, the packed
            // types as their packed bytes (uint8) with `dims` giving the shape.
            if (dtype != 0) {
              const DType want = DTypeFromOnnx(dtype);
              if (want == DType::kUndefined)
                throw py::value_error(StrCat(what, ": ONNX dtype ", dtype, " is not supported"));
              if (want != t.dtype()) t = RelabelTensor(t, want, dims, what);
            }
            Unwrap(b.graph().AddInitializer(name, std::move(t)));
          },
          py::arg("name"), py::arg("value"), py::arg("dtype") = 0, py::arg("dims") = py::none())
      .def(
          "add_node",
          [](GraphBuilder& b, const std::string& op_type, const std::string& domain,
             const std::vector<std::string>& inputs, const std::vector<std::string>& outputs, const py::list& attrs,
             const std::string& name, bool recompute) {
            AttributeMap map;
            for (const py::handle& a : attrs) {
              auto tup = a.cast<py::tuple>();
              std::string an = tup[0].cast<std::string>();
              map[an] = ToAttribute(name, an, tup[1].cast<int>(), tup[2]);
            }
            Node* node = Unwrap(b.graph().AddNode(op_type, domain, inputs, outputs, std::move(map), name));
            node->set_recompute(recompute);
          },
          py::arg("op_type"), py::arg("domain"), py::arg("inputs"), py::arg("outputs"), py::arg("attributes"),
          py::arg("name") = "", py::arg("recompute") = false)
      .def(
          "declare_value_type",
          [](GraphBuilder& b, const std::string& name, int dtype, const py::object& dims, int kind, bool optional) {
            // value_info: a type the model states for a node output. Inference refines it; ops
            // that cannot infer (ATen) take it as theirs. Names no node produces are ignored, as
            // onnxruntime does.
            Value* v = b.graph().FindValue(name);
            if (v != nullptr && v->producer() != nullptr && dtype != 0)
              v->Declare(ToValueType(dtype, dims, kind, optional));
          },
          py::arg("name"), py::arg("dtype"), py::arg("dims"), py::arg("kind") = 0, py::arg("optional") = false)
      .def(
          "add_output",
          [](GraphBuilder& b, const std::string& name, int dtype, const py::object& dims, int kind, bool optional) {
            std::optional<ValueType> declared;
            if (dtype != 0) declared = ToValueType(dtype, dims, kind, optional);
            Check(b.graph().AddOutput(name, declared));
          },
          py::arg("name"), py::arg("dtype"), py::arg("dims"), py::arg("kind") = 0, py::arg("optional") = false);

  py::class_<SessionOptions>(m, "SessionOptions")
      .def(py::init<>())
      .def_readwrite("intra_op_threads", &SessionOptions::intra_op_threads)
      .def_property(
          "optimization_level", [](const SessionOptions& o) { return static_cast<int>(o.optimization_level); },
          [](SessionOptions& o, int v) {
            if (v != 0 && v != 1 && v != 2 && v != 99)
              throw py::value_error(StrCat("optimization_level must be 0, 1, 2 or 99, got ", v));
            o.optimization_level = static_cast<OptLevel>(v);
          })
      .def_readwrite("enable_profiling", &SessionOptions::enable_profiling)
      .def_readwrite("profile_file_prefix", &SessionOptions::profile_file_prefix)
      .def_readwrite("enable_memory_pattern", &SessionOptions::enable_memory_pattern)
      .def_readwrite("release_arena_after_run", &SessionOptions::release_arena_after_run)
      .def_readwrite("verify_each_pass", &SessionOptions::verify_each_pass)
      .def_readwrite("allow_unsafe_aten_ops", &SessionOptions::allow_unsafe_aten_ops)
      .def_readwrite("providers", &SessionOptions::providers)
      .def_property(
          "propagate_cast_ops",
          [](const SessionOptions& o) {
            const CastPropagationOptions& c = o.propagate_cast_ops;
            return py::make_tuple(static_cast<int>(c.strategy), c.level, c.allow, static_cast<int>(c.low_precision));
          },
          [](SessionOptions& o, const std::tuple<int, int, std::vector<std::string>, int>& config) {
            // (strategy, level, allow, low-precision ONNX dtype); validated by session.py.
            const auto& [strategy, level, allow, dtype] = config;
            o.propagate_cast_ops.strategy = static_cast<CastPropagationOptions::Strategy>(strategy);
            o.propagate_cast_ops.level = level;
            o.propagate_cast_ops.allow = allow;
            o.propagate_cast_ops.low_precision = DTypeFromOnnx(dtype);
          },
          "cast propagation (optimizer/propagate_cast_ops.cc): (strategy, level, allow, ONNX dtype of the low type)")
      .def_property(
          "state_updates",
          [](const SessionOptions& o) {
            py::list l;
            for (const StateUpdate& u : o.state_updates) l.append(py::make_tuple(u.state_input, u.update_output));
            return l;
          },
          [](SessionOptions& o, const std::vector<std::pair<std::string, std::string>>& updates) {
            o.state_updates.clear();
            for (const auto& [state, update] : updates) o.state_updates.push_back({state, update});
          },
          "(state_input, update_output) pairs: after each run the bound state_input holds update_output");

  py::class_<PySession>(m, "Session")
      .def(py::init<GraphBuilder&, const SessionOptions&>())
      .def("run", &PySession::Run, py::arg("feed_names"), py::arg("feeds"), py::arg("fetch_names"),
           py::arg("donated") = std::vector<bool>{},
           "donated: empty or one flag per feed; the run releases a donated feed after its last reader.")
      .def("run_positional", &PySession::RunPositional, py::arg("feeds"), py::arg("donated") = std::vector<bool>{},
           "Feeds in graph-input order (DLPack capsules or numpy arrays); all outputs as DLPack capsules. "
           "donated: as run's.")
#ifdef TOB_WITH_TORCH
      .def("run_torch", &PySession::RunTorch, py::arg("args"), py::arg("donated") = std::vector<bool>{},
           "Torch tensors in graph-input order (a list; donated ones are set to None in it once the engine "
           "holds them); all outputs as torch tensors over the engine's memory.")
      .def("torch_runner", &MakeTorchRunner,
           "run_torch without donation as a plain function of one argument (the list): the compiled graphs' "
           "fast path calls it without pybind11's argument dispatch. Holds the session.")
#endif
      .def("inputs", [](const PySession& s) { return s.IO(true); })
      .def("outputs", [](const PySession& s) { return s.IO(false); })
      .def("input_kinds", [](const PySession& s) { return s.IOKinds(true); })
      .def("output_kinds", [](const PySession& s) { return s.IOKinds(false); })
      .def("optimized_graph", &PySession::OptimizedGraph)
      .def("partition_report", [](PySession& s) { return s.session().partition_report().ToString(); })
      .def("partition",
           [](PySession& s) {
             py::list l;
             for (const auto& e : s.session().partition_report().nodes)
               l.append(py::make_tuple(e.node, e.op_type, e.provider, e.why_not_earlier));
             return l;
           })
      .def("log", [](PySession& s) { return s.session().log(); })
      .def("applied_passes", [](PySession& s) { return s.session().applied_passes(); })
      .def("end_profiling", [](PySession& s) { return s.session().EndProfiling(); })
      .def("num_threads", [](PySession& s) { return s.session().num_threads(); })
      .def("last_run_stats", [](const PySession& s) { return StatsDict(s.last_stats()); })
      .def("bind_state", &PySession::BindState, py::arg("name"), py::arg("tensor"))
      .def("state", &PySession::State, py::arg("name"))
      .def("bound_states", [](PySession& s) { return s.session().BoundStates(); });

  m.def(
      "arena_pool_free_bytes", [] { return ArenaPool::Global().free_bytes(); },
      "Bytes of the free arenas the process's pool keeps for the next runs (memory/arena_pool.h).");
  m.def("registered_kernels", [] {
    py::list l;
    for (const KernelDef& d : KernelRegistry::Global().defs()) {
      py::list cons;
      for (const auto& c : d.constraints) {
        std::vector<int> types;
        for (DType t : c.allowed) types.push_back(static_cast<int>(t));
        cons.append(py::make_tuple(c.name, c.input_indices, types));
      }
      l.append(py::dict(py::arg("domain") = d.domain, py::arg("op_type") = d.op_type,
                        py::arg("since_version") = d.since_version,
                        py::arg("end_version") = d.end_version == kMaxOpset ? -1 : d.end_version,
                        py::arg("provider") = d.provider, py::arg("family") = d.family, py::arg("constraints") = cons));
    }
    return l;
  });
  m.def(
      "find_kernel",
      [](const std::string& provider, const std::string& domain, const std::string& op_type, int opset,
         const std::vector<int>& input_dtypes, bool non_tensor_values) {
        std::vector<DType> types;
        for (int t : input_dtypes) types.push_back(DTypeFromOnnx(t));
        std::string why;
        const KernelDef* d =
            KernelRegistry::Global().Find(provider, domain, op_type, opset, types, &why, non_tensor_values);
        return py::make_tuple(d != nullptr, why);
      },
      py::arg("provider"), py::arg("domain"), py::arg("op_type"), py::arg("opset"), py::arg("input_dtypes"),
      py::arg("non_tensor_values") = false,
      "non_tensor_values: the node takes or makes sequences or optionals (only value kernels run it).");
  m.def("has_schema", [](const std::string& domain, const std::string& op_type) {
    return OpSchemaRegistry::Global().Find(domain, op_type) != nullptr;
  });

  RegisterOptimBindings(m);
}

}  // namespace tob::python
