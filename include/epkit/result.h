// Result<T>: the error type every epkit library returns (the engine and the tools).
//
// C++20 has no std::expected; this is the small subset epkit needs. An error
// carries a code that callers branch on (not_found and unavailable make a
// doctor check SKIP rather than FAIL) and a message that names the cause.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace epkit {

enum class ErrorCode {
  not_found,    // the file, device or variable is absent
  unavailable,  // a library or facility cannot be used here (dlopen failed, no GPU)
  permission,   // it exists but we may not read it
  invalid,      // it exists but its content is malformed
  cuda,
  nccl,
  timeout,
  internal,
};

const char* to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_value(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : m_value(std::move(error)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(m_value); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(m_value); }
  const T& value() const& { return std::get<T>(m_value); }
  T&& value() && { return std::get<T>(std::move(m_value)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<Error>(m_value); }

  template <typename U>
  T value_or(U&& fallback) const {
    return ok() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, Error> m_value;
};

// Result<void>.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : m_error(std::move(error)), m_ok(false) {}  // NOLINT
  bool ok() const { return m_ok; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return m_error; }

 private:
  Error m_error;
  bool m_ok = true;
};

inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

}  // namespace epkit

// Propagate an error to the caller, adding nothing (the message already says
// where it started).
#define EPKIT_TRY(expr)                                       \
  do {                                                        \
    auto&& epkit_try_result_ = (expr);                        \
    if (!epkit_try_result_) return epkit_try_result_.error(); \
  } while (0)
