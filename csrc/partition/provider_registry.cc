#include "partition/provider_registry.h"

#include "providers/cpu/cpu_execution_provider.h"
#ifdef TOB_WITH_CUDA
#include "providers/cuda/cuda_provider.h"
#endif

namespace tob {

ProviderRegistry& ProviderRegistry::Global() {
  static ProviderRegistry* registry = [] {
    auto* r = new ProviderRegistry();
    r->Register(kCpuProvider, []() -> StatusOr<std::unique_ptr<ExecutionProvider>> {
      return std::unique_ptr<ExecutionProvider>(new CpuExecutionProvider());
    });
#ifdef TOB_WITH_CUDA
    r->Register(kCudaProvider, []() -> StatusOr<std::unique_ptr<ExecutionProvider>> {
      if (!CudaDeviceAvailable())
        return InvalidArgument("provider ", kCudaProvider, " was requested but no CUDA device is visible");
      return std::unique_ptr<ExecutionProvider>(new CudaExecutionProvider(0));
    });
#endif
    return r;
  }();
  return *registry;
}

void ProviderRegistry::Register(const std::string& name, ProviderFactory factory, bool fallback) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (e.name == name) {
      e.factory = std::move(factory);
      e.fallback = fallback;
      return;
    }
  }
  entries_.push_back(Entry{name, std::move(factory), fallback});
}

StatusOr<std::unique_ptr<ExecutionProvider>> ProviderRegistry::Create(const std::string& name) const {
  ProviderFactory factory;
  std::string available;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (e.name == name) factory = e.factory;
      available += (available.empty() ? "" : ", ") + e.name;
    }
  }
  if (!factory) return InvalidArgument("unknown execution provider '", name, "'; available: ", available);
  return factory();
}

std::vector<std::string> ProviderRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

std::vector<std::string> ProviderRegistry::FallbackNames() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const Entry& e : entries_)
    if (e.fallback) names.push_back(e.name);
  return names;
}

}  // namespace tob
