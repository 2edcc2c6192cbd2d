#include "env/var_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace epkit::env {
namespace {

// Sources, by short name, so that each row says where its facts come from.
constexpr std::string_view k_nccl_doc =
    "NCCL user guide, Environment Variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/"
    "env.html)";
constexpr std::string_view k_nccl_ib = "NCCL src/transport/net_ib.cc NCCL_PARAM / ncclGetEnv";
constexpr std::string_view k_nccl_notes = "NCCL release notes";
constexpr std::string_view k_nvshmem_doc =
    "NVSHMEM docs, Environment Variables (docs.nvidia.com/nvshmem/api/gen/env.html)";
constexpr std::string_view k_nvshmem_defs = "NVSHMEM src/include/internal/host/env_defs.h";
constexpr std::string_view k_nvshmem_345 = "NVSHMEM 3.4.5 release notes";
constexpr std::string_view k_deepep =
    "DeepEP csrc (DEEP_EP_DEVICE_TO_HCA_MAPPING, added by DeepEP PR #466)";
constexpr std::string_view k_torch = "PyTorch torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp";
constexpr std::string_view k_gib = "gIB plugin (Google, /usr/local/gib); NCCL tuner plugin API";
constexpr std::string_view k_ld = "ld.so(8)";

constexpr Version k_now{0, 0};
constexpr Version k_nccl_any = k_nccl_floor;
constexpr Version k_nvshmem_any = k_nvshmem_floor;

// Sorted by name (find_var relies on it; a test checks it).
constexpr VarSpec k_table[] = {
    {"DEEP_EP_DEVICE_TO_HCA_MAPPING", Library::deepep, "list", "", {0, 0}, k_now, k_deepep},
    {"LD_LIBRARY_PATH", Library::loader, "list", "", {0, 0}, k_now, k_ld},
    {"LD_PRELOAD", Library::loader, "list", "", {0, 0}, k_now, k_ld},
    {"NCCL_CROSS_NIC", Library::nccl, "int", "2", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_CUMEM_ENABLE", Library::nccl, "bool", "1", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_DEBUG", Library::nccl, "string", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_GIN_ENABLE", Library::nccl, "bool", "1", {2, 28}, k_now, k_nccl_notes},
    {"NCCL_IB_ADAPTIVE_ROUTING", Library::nccl, "bool", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_IB_ADDR_FAMILY", Library::nccl, "string", "AF_INET", {2, 21}, k_now, k_nccl_doc},
    {"NCCL_IB_ADDR_RANGE", Library::nccl, "string", "", {2, 21}, k_now, k_nccl_doc},
    {"NCCL_IB_DISABLE", Library::nccl, "bool", "0", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_IB_FIFO_TC",
     Library::nccl,
     "int",
     "",
     {2, 22},
     k_now,
     "NCCL PR #1194 (traffic class of the CTS/FIFO queue pair)"},
    {"NCCL_IB_GDR_LEVEL",
     Library::nccl,
     "string",
     "",
     {2, 0},
     {2, 3},
     "NCCL 2.3.4 release notes (renamed NCCL_NET_GDR_LEVEL)"},
    {"NCCL_IB_GID_INDEX", Library::nccl, "int", "-1", k_nccl_any, k_now, k_nccl_ib},
    {"NCCL_IB_HCA", Library::nccl, "list", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_IB_QPS_PER_CONNECTION", Library::nccl, "int", "1", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_IB_ROCE_VERSION_NUM", Library::nccl, "int", "2", {2, 21}, k_now, k_nccl_doc},
    {"NCCL_IB_SL", Library::nccl, "int", "0", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_IB_TC", Library::nccl, "int", "0", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_LL_THRESHOLD",
     Library::nccl,
     "size",
     "",
     {2, 0},
     {2, 4},
     "NCCL 2.5 release notes (thresholds replaced by the tuning model)"},
    {"NCCL_NET", Library::nccl, "string", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_NET_GDR_LEVEL", Library::nccl, "string", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_NET_PLUGIN", Library::nccl, "string", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_NVLS_CHUNKSIZE", Library::nccl, "size", "131072", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_NVLS_ENABLE", Library::nccl, "bool", "2", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_P2P_NET_CHUNKSIZE", Library::nccl, "size", "131072", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_RAS_ENABLE", Library::nccl, "bool", "1", {2, 24}, k_now, k_nccl_notes},
    {"NCCL_SOCKET_IFNAME", Library::nccl, "list", "", k_nccl_any, k_now, k_nccl_doc},
    {"NCCL_TREE_THRESHOLD",
     Library::nccl,
     "size",
     "",
     {2, 0},
     {2, 4},
     "NCCL 2.5 release notes (thresholds replaced by the tuning model)"},
    {"NCCL_TUNER_CONFIG_PATH", Library::gib, "path", "", {2, 19}, k_now, k_gib},
    {"NCCL_TUNER_PLUGIN", Library::nccl, "string", "", {2, 19}, k_now, k_nccl_doc},
    {"NVSHMEM_BOOTSTRAP", Library::nvshmem, "string", "PMI", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_DEBUG", Library::nvshmem, "string", "", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_DISABLE_CUDA_VMM", Library::nvshmem, "bool", "false", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"NVSHMEM_DISABLE_DATA_DIRECT",
     Library::nvshmem,
     "bool",
     "false",
     {3, 4},
     k_now,
     k_nvshmem_345},
    {"NVSHMEM_DISABLE_GDRCOPY", Library::nvshmem, "bool", "false", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"NVSHMEM_ENABLE_NIC_PE_MAPPING", Library::nvshmem, "bool", "false", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"NVSHMEM_HCA_LIST", Library::nvshmem, "list", "", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_HCA_PE_MAPPING", Library::nvshmem, "list", "", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_HCA_PREFIX", Library::nvshmem, "string", "mlx5", {3, 4}, k_now, k_nvshmem_345},
    {"NVSHMEM_HOME",
     Library::loader,
     "path",
     "",
     {0, 0},
     k_now,
     "install scripts (DeepEP build, NVSHMEM packaging); no library reads it at run time"},
    {"NVSHMEM_IBGDA_NIC_HANDLER", Library::nvshmem, "string", "auto", k_nvshmem_any, k_now,
     k_nvshmem_defs},
    {"NVSHMEM_IBGDA_NUM_DCI", Library::nvshmem, "int", "", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_IBGDA_NUM_RC_PER_PE", Library::nvshmem, "int", "", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"NVSHMEM_IB_ENABLE_IBGDA", Library::nvshmem, "bool", "false", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"NVSHMEM_IB_GID_INDEX", Library::nvshmem, "int", "0", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_IB_TRAFFIC_CLASS", Library::nvshmem, "int", "0", k_nvshmem_any, k_now, k_nvshmem_doc},
    {"NVSHMEM_REMOTE_TRANSPORT", Library::nvshmem, "string", "ibrc", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"NVSHMEM_SYMMETRIC_SIZE", Library::nvshmem, "size", "1073741824", k_nvshmem_any, k_now,
     k_nvshmem_doc},
    {"TORCH_NCCL_USE_COMM_NONBLOCKING", Library::torch, "bool", "", {0, 0}, k_now, k_torch},
};

}  // namespace

const char* to_string(Library lib) {
  switch (lib) {
    case Library::nccl:
      return "NCCL";
    case Library::nvshmem:
      return "NVSHMEM";
    case Library::deepep:
      return "DeepEP";
    case Library::torch:
      return "PyTorch";
    case Library::gib:
      return "gIB";
    case Library::loader:
      return "ld.so";
  }
  return "?";
}

std::string Version::str() const {
  return fmt::format("{}.{}", major, minor);
}

std::optional<Version> parse_version(std::string_view text) {
  Version v;
  const char* end = text.data() + text.size();
  auto [p1, e1] = std::from_chars(text.data(), end, v.major);
  if (e1 != std::errc() || p1 == end || *p1 != '.') return std::nullopt;
  auto [p2, e2] = std::from_chars(p1 + 1, end, v.minor);
  if (e2 != std::errc()) return std::nullopt;
  return v;
}

std::span<const VarSpec> var_table() {
  return k_table;
}

const VarSpec* find_var(std::string_view name) {
  auto it = std::lower_bound(std::begin(k_table), std::end(k_table), name,
                             [](const VarSpec& s, std::string_view n) { return s.name < n; });
  return it != std::end(k_table) && it->name == name ? it : nullptr;
}

bool reads(const VarSpec& spec, Version v) {
  if (v < spec.since) return false;
  return spec.until == Version{0, 0} || v <= spec.until;
}

}  // namespace epkit::env
