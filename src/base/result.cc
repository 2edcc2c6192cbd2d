#include <epkit/result.h>

namespace epkit {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::permission:
      return "permission";
    case ErrorCode::invalid:
      return "invalid";
    case ErrorCode::cuda:
      return "cuda";
    case ErrorCode::nccl:
      return "nccl";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::internal:
      return "internal";
  }
  return "internal";
}

}  // namespace epkit
