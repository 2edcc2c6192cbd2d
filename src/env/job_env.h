// A job's environment as `epkit env --check` reads it: `env` output or a .env
// file (KEY=VALUE lines, host::Env's grammar), or a Kubernetes container's
// env: list (YAML with "- name:" / "value:" entries).
#pragma once

#include <epkit/result.h>

#include <string>
#include <string_view>

#include "host/env.h"

namespace epkit::env {

/// The file's variables. A file that is neither (NUL bytes, lines that are no
/// KEY=VALUE and no env: entry) is an invalid error naming file:line.
Result<host::Env> read_job_env(const std::string& path);

/// The k8s env: list in `text`. Entries with valueFrom (secrets, field refs)
/// have no value to check and are left out.
Result<host::Env> parse_k8s_env(std::string_view text, std::string origin);

/// Whether `text` looks like a k8s env: list rather than KEY=VALUE lines.
bool looks_like_k8s_env(std::string_view text);

}  // namespace epkit::env
