// A Plan written out for its consumer: a shell to source (sh), a .env file
// (dotenv), a Kubernetes container's env: list (k8s), mpirun -x flags
// (mpirun), or JSON. Each variable comes with its one-line why and fact, as
// far as the format has comments.
#pragma once

#include <epkit/result.h>

#include <string>
#include <string_view>

#include "env/plan.h"

namespace epkit::env {

enum class Format { sh, json, k8s, mpirun, dotenv };

const char* to_string(Format format);
Result<Format> parse_format(std::string_view text);

std::string render(const Plan& plan, Format format);

}  // namespace epkit::env
