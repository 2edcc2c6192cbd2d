// What check.h declares for every check: a status's name, the outcome
// makers, and which of two statuses is worse.
#include "checks/check.h"

#include <string>
#include <utility>

namespace epkit::checks {

const char* to_string(Status status) {
  switch (status) {
    case Status::pass:
      return "PASS";
    case Status::warn:
      return "WARN";
    case Status::fail:
      return "FAIL";
    case Status::skip:
      return "SKIP";
    case Status::unknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

namespace {

int rank(Status s) {
  switch (s) {
    case Status::skip:
      return 0;
    case Status::pass:
      return 1;
    case Status::unknown:
      return 2;
    case Status::warn:
      return 3;
    case Status::fail:
      return 4;
  }
  return 0;
}

Outcome make(Status status, std::string summary, std::string expected, std::string fix) {
  Outcome out;
  out.status = status;
  out.summary = std::move(summary);
  out.expected = std::move(expected);
  out.fix = std::move(fix);
  return out;
}

}  // namespace

Outcome pass(std::string summary) {
  return make(Status::pass, std::move(summary), {}, {});
}
Outcome warn(std::string summary, std::string expected, std::string fix) {
  return make(Status::warn, std::move(summary), std::move(expected), std::move(fix));
}
Outcome fail(std::string summary, std::string expected, std::string fix) {
  return make(Status::fail, std::move(summary), std::move(expected), std::move(fix));
}
Outcome skip(std::string summary) {
  return make(Status::skip, std::move(summary), {}, {});
}
Outcome unknown(std::string summary) {
  return make(Status::unknown, std::move(summary), {}, {});
}

Status worse(Status a, Status b) {
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace epkit::checks
