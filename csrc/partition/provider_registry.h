// Execution providers by name, so that a provider compiled outside the engine (the torch ATen
// bridge, linked only into the Python module) plugs in without the engine knowing it. A
// session creates the providers the user lists, then the CPU provider, then every provider
// registered as a fallback: those run only what nothing before them can (the kernels of last
// resort).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "framework/execution_provider.h"

namespace tob {

using ProviderFactory = std::function<StatusOr<std::unique_ptr<ExecutionProvider>>()>;

class ProviderRegistry {
 public:
  // Holds the built-in providers (CPU, and CUDA when compiled in).
  static ProviderRegistry& Global();

  // A second registration under the same name replaces the first (a reloaded module).
  void Register(const std::string& name, ProviderFactory factory, bool fallback = false);
  // kInvalidArgument naming the available providers when `name` is unknown.
  StatusOr<std::unique_ptr<ExecutionProvider>> Create(const std::string& name) const;
  std::vector<std::string> Names() const;
  // Fallback providers in registration order.
  std::vector<std::string> FallbackNames() const;

 private:
  struct Entry {
    std::string name;
    ProviderFactory factory;
    bool fallback = false;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

}  // namespace tob
