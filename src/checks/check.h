// A doctor check: one function plus one row in its group's table.
//
// A check looks at the node only through its Context (the rooted host and the
// probed topology), so it is tested against fixture trees. It returns an
// Outcome: a status, one line of summary, the evidence it read (value and
// where from), what was expected, and the fix (exact command or variable).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "host/host.h"
#include "topo/snapshot.h"

namespace epkit::checks {

enum class Status {
  pass,
  warn,
  fail,
  skip,     // not applicable on this node
  unknown,  // could not tell: no privilege, no data
};

const char* to_string(Status status);

struct Evidence {
  std::string key;     // "NCCL_IB_HCA", "libibverbs.so.1"
  std::string value;   // what was read
  std::string source;  // "env", "/sys/class/infiniband/mlx5_0/ports/1/state"
};

struct Outcome {
  Status status = Status::pass;
  std::string summary;
  std::vector<Evidence> evidence;
  std::string expected;
  std::string fix;

  Outcome& add(std::string key, std::string value, std::string source) {
    evidence.push_back({std::move(key), std::move(value), std::move(source)});
    return *this;
  }
};

Outcome pass(std::string summary);
Outcome warn(std::string summary, std::string expected = {}, std::string fix = {});
Outcome fail(std::string summary, std::string expected = {}, std::string fix = {});
Outcome skip(std::string summary);
Outcome unknown(std::string summary);

/// Worst of two statuses for a check that finds several things:
/// fail > warn > unknown > pass > skip.
Status worse(Status a, Status b);

struct Context {
  const host::Host& host;
  const topo::Snapshot& topo;
};

using CheckFn = Outcome (*)(const Context&);

struct Check {
  std::string_view id;     // stable: "rdma.provider-abi"
  std::string_view title;  // "RDMA provider matches libibverbs' private ABI"
  CheckFn run;
};

// Group tables, one per file (rdma.cc, gpu.cc, nccl.cc, env.cc, nvshmem.cc,
// system.cc); registry.cc joins them.
std::span<const Check> rdma_checks();
std::span<const Check> gpu_checks();
std::span<const Check> nccl_checks();
std::span<const Check> env_checks();
std::span<const Check> nvshmem_checks();
std::span<const Check> system_checks();

}  // namespace epkit::checks
