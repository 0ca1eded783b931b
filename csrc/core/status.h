// Status: errors as values. Anything that depends on input (model, shapes, dtypes, memory)
// returns a Status naming the node, the op and what was expected. TOB_ENFORCE is for internal
// invariants only; it throws tob::InternalError, which the binding maps to RuntimeError.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace tob {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad feed, option or attribute value
  kInvalidModel,     // malformed graph: dangling edge, cycle, wrong attribute type
  kNotImplemented,   // no kernel / no schema for an op
  kOutOfMemory,
  kRuntimeError,      // a kernel failed while running
  kPermissionDenied,  // the model asks for something the session does not allow (docs/security.md)
};

const char* StatusCodeName(StatusCode code);

template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  // Prefixes context ("while running node X: ...") keeping the code.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status InvalidArgument(Args&&... args) {
  return Status(StatusCode::kInvalidArgument, StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status InvalidModel(Args&&... args) {
  return Status(StatusCode::kInvalidModel, StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status NotImplemented(Args&&... args) {
  return Status(StatusCode::kNotImplemented, StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status RuntimeError(Args&&... args) {
  return Status(StatusCode::kRuntimeError, StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status PermissionDenied(Args&&... args) {
  return Status(StatusCode::kPermissionDenied, StrCat(std::forward<Args>(args)...));
}

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : data_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : data_(std::move(value)) {}         // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(data_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(data_); }
  T& value() & { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  const T& value() const& { return std::get<T>(data_); }

 private:
  std::variant<Status, T> data_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace tob

#define TOB_CONCAT_INNER_(a, b) a##b
#define TOB_CONCAT_(a, b) TOB_CONCAT_INNER_(a, b)

#define TOB_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::tob::Status tob_status_ = (expr);        \
    if (!tob_status_.ok()) return tob_status_; \
  } while (0)

// TOB_ASSIGN_OR_RETURN(auto x, MaybeX());
#define TOB_ASSIGN_OR_RETURN(lhs, expr)                                                     \
  auto TOB_CONCAT_(tob_or_, __LINE__) = (expr);                                             \
  if (!TOB_CONCAT_(tob_or_, __LINE__).ok()) return TOB_CONCAT_(tob_or_, __LINE__).status(); \
  lhs = std::move(TOB_CONCAT_(tob_or_, __LINE__)).value()

#define TOB_ENFORCE(cond, ...)                                                                                     \
  do {                                                                                                             \
    if (!(cond))                                                                                                   \
      throw ::tob::InternalError(                                                                                  \
          ::tob::StrCat("internal invariant failed: " #cond " at ", __FILE__, ":", __LINE__, " ", ##__VA_ARGS__)); \
  } while (0)
