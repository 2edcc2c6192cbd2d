#include "env/known_vars.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "util/text.h"

namespace epkit::env {
namespace {

// NCCL 2.28.9 (names the library reads), sorted. Subsystem and enum names
// that happen to start with NCCL_ (NCCL_INIT, NCCL_LOG_WARN, ...) are left out.
constexpr std::string_view k_nccl[] = {
    "NCCL_ALGO", "NCCL_ALLOC_P2P_NET_LL_BUFFERS", "NCCL_BUFFSIZE", "NCCL_CGA_CLUSTER_SIZE",
    "NCCL_CHECK_POINTERS", "NCCL_CHUNK_SIZE", "NCCL_COLLNET_ENABLE", "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_COMM_BLOCKING", "NCCL_COMM_ID", "NCCL_COMM_SHRINK_SHARE_RESOURCES",
    "NCCL_COMM_SPLIT_SHARE_RESOURCES", "NCCL_CONF_FILE", "NCCL_CONNECT_ROUND_MAX_PEERS",
    "NCCL_CREATE_THREAD_CONTEXT", "NCCL_CROSS_NIC", "NCCL_CTA_POLICY", "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE", "NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_DEVICE_UNPACK",
    "NCCL_DMABUF_ENABLE", "NCCL_ENV_PLUGIN", "NCCL_GDRCOPY_ENABLE", "NCCL_GDRCOPY_FIFO_ENABLE",
    "NCCL_GDRCOPY_FLUSH_ENABLE", "NCCL_GDRCOPY_SYNC_ENABLE", "NCCL_GDR_FLUSH_DISABLE",
    "NCCL_GIN_COUNTER_POOL_SIZE", "NCCL_GIN_ENABLE", "NCCL_GIN_ERROR_QUERY_SEC",
    "NCCL_GIN_GDAKI_NIC_HANDLER", "NCCL_GIN_GDAKI_QP_DEPTH", "NCCL_GIN_NCONTEXTS",
    "NCCL_GIN_PROXY_QUEUE_SIZE", "NCCL_GIN_SIGNAL_POOL_SIZE", "NCCL_GIN_TYPE",
    "NCCL_GRAPH_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE_RANK", "NCCL_GRAPH_FILE",
    "NCCL_GRAPH_HELPER_DISABLE", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_GRAPH_REGISTER",
    "NCCL_GROUP_CUDA_STREAM", "NCCL_HOSTID", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE", "NCCL_IB_AR_THRESHOLD", "NCCL_IB_DATA_DIRECT", "NCCL_IB_DISABLE",
    "NCCL_IB_ECE_ENABLE", "NCCL_IB_FIFO_TC", "NCCL_IB_GID_INDEX", "NCCL_IB_HCA",
    "NCCL_IB_MERGE_NICS", "NCCL_IB_MERGE_VFS", "NCCL_IB_MQP_RETRY_ALL", "NCCL_IB_MQP_RETRY_CNT",
    "NCCL_IB_MQP_RETRY_SLEEP_MSEC", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_PKEY",
    "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_RETRY_CNT", "NCCL_IB_RETURN_ASYNC_EVENTS",
    "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ROUTABLE_FLID_GID_INDEX", "NCCL_IB_SL",
    "NCCL_IB_SL_DEFAULT", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_TC", "NCCL_IB_TC_DEFAULT",
    "NCCL_IB_TIMEOUT", "NCCL_IB_USE_INLINE", "NCCL_IB_WARN_RAIL_LOCAL", "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_IGNORE_DISABLED_P2P", "NCCL_IPC_COLLECTIVE", "NCCL_IPC_SENDRECV",
    "NCCL_L1_SHARED_MEMORY_CARVEOUT", "NCCL_LAUNCH_MODE", "NCCL_LAUNCH_ORDER_IMPLICIT",
    "NCCL_LAUNCH_RACE_FATAL", "NCCL_LEGACY_CUDA_REGISTER", "NCCL_LL128_BUFFSIZE", "NCCL_LL128_C2C",
    "NCCL_LL128_NTHREADS", "NCCL_LL_BUFFSIZE", "NCCL_LOCAL_REGISTER", "NCCL_MAX_CGA_CLUSTER_SIZE",
    "NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS", "NCCL_MAX_P2P_NCHANNELS",
    "NCCL_MEM_SYNC_DOMAIN", "NCCL_MIN_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS",
    "NCCL_MIN_P2P_NCHANNELS", "NCCL_MNNVL_CLIQUE_ID", "NCCL_MNNVL_ENABLE",
    "NCCL_MNNVL_RAIL_PER_HOST", "NCCL_MNNVL_SCATTER_NETS_ENABLE", "NCCL_MNNVL_UUID",
    "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_NET", "NCCL_NETDEVS_POLICY", "NCCL_NET_DISABLE_INTRA",
    "NCCL_NET_FORCE_FLUSH", "NCCL_NET_FORCE_MERGE", "NCCL_NET_GDR_C2C", "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ", "NCCL_NET_MERGE_LEVEL", "NCCL_NET_OPTIONAL_RECV_COMPLETION",
    "NCCL_NET_OVERHEAD", "NCCL_NET_PLUGIN", "NCCL_NET_PLUGIN_REF_COUNT", "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS", "NCCL_NSOCKS_PERTHREAD", "NCCL_NTHREADS", "NCCL_NVB_DISABLE",
    "NCCL_NVB_PRECONNECT", "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "NCCL_NVLSTREE_MAX_CHUNKSIZE",
    "NCCL_NVLS_CHUNKSIZE", "NCCL_NVLS_ENABLE", "NCCL_NVLS_NCHANNELS", "NCCL_NVTX_DISABLE",
    "NCCL_OOB_NET_ENABLE", "NCCL_OOB_NET_IFNAME", "NCCL_P2P_DIRECT_DISABLE", "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL", "NCCL_P2P_LL_THRESHOLD", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_PXN_LEVEL", "NCCL_P2P_READ_ENABLE",
    "NCCL_P2P_SCHEDULE_GROUP_SIZE", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_PAT_ENABLE",
    "NCCL_PROFILER_PLUGIN", "NCCL_PROGRESS_APPENDOP_FREQ", "NCCL_PROTO",
    "NCCL_PROXY_APPEND_BATCH_SIZE", "NCCL_PROXY_CPUSET", "NCCL_PROXY_DUMP_SIGNAL", "NCCL_PXN_C2C",
    "NCCL_PXN_DISABLE", "NCCL_RAS_ADDR", "NCCL_RAS_ENABLE", "NCCL_RAS_TIMEOUT_FACTOR",
    "NCCL_REPORT_CONNECT_PROGRESS", "NCCL_RUNTIME_CONNECT", "NCCL_SET_CPU_STACK_SIZE",
    "NCCL_SET_STACK_SIZE", "NCCL_SET_THREAD_NAME", "NCCL_SHM_DISABLE", "NCCL_SHM_LOCALITY",
    "NCCL_SHM_MEMCPY_MODE", "NCCL_SHM_USE_CUDA_MEMCPY", "NCCL_SINGLE_PROC_MEM_REG_ENABLE",
    "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_INLINE", "NCCL_SOCKET_MIN_TASKSIZE",
    "NCCL_SOCKET_NTHREADS", "NCCL_SOCKET_RCVBUF", "NCCL_SOCKET_RETRY_CNT",
    "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_SOCKET_SNDBUF", "NCCL_SYM_CTAS", "NCCL_SYM_KERNEL",
    "NCCL_THREAD_THRESHOLDS", "NCCL_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE_RANK", "NCCL_TOPO_FILE",
    "NCCL_TUNER_PLUGIN", "NCCL_UID_STAGGER_RATE", "NCCL_UID_STAGGER_THRESHOLD",
    "NCCL_UNPACK_DOUBLE_NCHANNELS", "NCCL_WARN_ENABLE_DEBUG_INFO", "NCCL_WIN_ENABLE",
    "NCCL_WIN_STRIDE", "NCCL_WORK_ARGS_BYTES", "NCCL_WORK_FIFO_BYTES",
    // Documented names that older releases read (still in job scripts; not typos).
    "NCCL_CHECKS_DISABLE", "NCCL_IB_CUDA_SUPPORT", "NCCL_IB_GDR_LEVEL", "NCCL_IGNORE_NET_MISMATCH",
    "NCCL_LL_THRESHOLD", "NCCL_SINGLE_RING_THRESHOLD", "NCCL_TREE_THRESHOLD",
    "NCCL_WORK_FIFO_DEPTH"};

// NVSHMEM 3.4 runtime names (env_defs.h of the core, transports and UID
// bootstrap), plus the newer releases' additions so that a newer install is
// not flagged.
constexpr std::string_view k_nvshmem[] = {"NVSHMEM_ASSERT_ATOMICS_SYNC",
                                          "NVSHMEM_BARRIER_DISSEM_KVAL",
                                          "NVSHMEM_BARRIER_TG_DISSEM_KVAL",
                                          "NVSHMEM_BCAST_ALGO",
                                          "NVSHMEM_BCAST_TREE_KVAL",
                                          "NVSHMEM_BOOTSTRAP",
                                          "NVSHMEM_BOOTSTRAP_MPI_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_PMI",
                                          "NVSHMEM_BOOTSTRAP_PMI2_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_PMIX_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_PMI_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_SHMEM_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_TWO_STAGE",
                                          "NVSHMEM_BOOTSTRAP_UID_PLUGIN",
                                          "NVSHMEM_BOOTSTRAP_UID_SESSION_ID",
                                          "NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY",
                                          "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME",
                                          "NVSHMEM_BYPASS_ACCESSIBILITY_CHECK",
                                          "NVSHMEM_BYPASS_FLUSH",
                                          "NVSHMEM_CONF_FILE",
                                          "NVSHMEM_CPU_AFFINITY",
                                          "NVSHMEM_CUDA_LIMIT_STACK_SIZE",
                                          "NVSHMEM_CUDA_PATH",
                                          "NVSHMEM_CUMEM_GRANULARITY",
                                          "NVSHMEM_CUMEM_HANDLE_TYPE",
                                          "NVSHMEM_DEBUG",
                                          "NVSHMEM_DEBUG_ATTACH_DELAY",
                                          "NVSHMEM_DEBUG_FILE",
                                          "NVSHMEM_DEBUG_SUBSYS",
                                          "NVSHMEM_DISABLE_CE_COLLECTIVES",
                                          "NVSHMEM_DISABLE_CUDA_VMM",
                                          "NVSHMEM_DISABLE_DATA_DIRECT",
                                          "NVSHMEM_DISABLE_GDRCOPY",
                                          "NVSHMEM_DISABLE_IB_NATIVE_ATOMICS",
                                          "NVSHMEM_DISABLE_LOCAL_ONLY_PROXY",
                                          "NVSHMEM_DISABLE_MNNVL",
                                          "NVSHMEM_DISABLE_NCCL",
                                          "NVSHMEM_DISABLE_NVLS",
                                          "NVSHMEM_DISABLE_NVLS_SHARING",
                                          "NVSHMEM_DISABLE_P2P",
                                          "NVSHMEM_DISABLE_SELF_WRITE_CE_COLL",
                                          "NVSHMEM_ENABLE_ALIGNED_MALLOC",
                                          "NVSHMEM_ENABLE_ERROR_CHECKS",
                                          "NVSHMEM_ENABLE_LOGICAL_ENDPOINT",
                                          "NVSHMEM_ENABLE_NIC_PE_MAPPING",
                                          "NVSHMEM_ENABLE_RAIL_OPT",
                                          "NVSHMEM_FCOLLECT_ALGO",
                                          "NVSHMEM_FCOLLECT_LL128_THRESHOLD",
                                          "NVSHMEM_FCOLLECT_LL_THRESHOLD",
                                          "NVSHMEM_FCOLLECT_NTHREADS",
                                          "NVSHMEM_FCOLLECT_NVLS_THRESHOLD",
                                          "NVSHMEM_GPUNETIO_ENABLE_GDAKI",
                                          "NVSHMEM_G_BUF_SIZE",
                                          "NVSHMEM_G_COALESCING_BUF_SIZE",
                                          "NVSHMEM_HCA_LIST",
                                          "NVSHMEM_HCA_PE_MAPPING",
                                          "NVSHMEM_HCA_PREFIX",
                                          "NVSHMEM_HEAP_KIND",
                                          "NVSHMEM_IBGDA_DCI_MAP_BY",
                                          "NVSHMEM_IBGDA_ENABLE_MULTI_PORT",
                                          "NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE",
                                          "NVSHMEM_IBGDA_NIC_HANDLER",
                                          "NVSHMEM_IBGDA_NUM_DCI",
                                          "NVSHMEM_IBGDA_NUM_DCT",
                                          "NVSHMEM_IBGDA_NUM_FETCH_SLOTS_PER_DCI",
                                          "NVSHMEM_IBGDA_NUM_FETCH_SLOTS_PER_RC",
                                          "NVSHMEM_IBGDA_NUM_RC_PER_PE",
                                          "NVSHMEM_IBGDA_NUM_REQUESTS_IN_BATCH",
                                          "NVSHMEM_IBGDA_NUM_SHARED_DCI",
                                          "NVSHMEM_IBGDA_RC_MAP_BY",
                                          "NVSHMEM_IB_ADDR_FAMILY",
                                          "NVSHMEM_IB_ADDR_RANGE",
                                          "NVSHMEM_IB_DISABLE_DMABUF",
                                          "NVSHMEM_IB_ENABLE_IBGDA",
                                          "NVSHMEM_IB_ENABLE_RELAXED_ORDERING",
                                          "NVSHMEM_IB_GID_INDEX",
                                          "NVSHMEM_IB_NUM_RC_PER_DEVICE",
                                          "NVSHMEM_IB_ROCE_VERSION_NUM",
                                          "NVSHMEM_IB_SL",
                                          "NVSHMEM_IB_TRAFFIC_CLASS",
                                          "NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                          "NVSHMEM_INFO",
                                          "NVSHMEM_INFO_HIDDEN",
                                          "NVSHMEM_LIBFABRIC_MAX_NIC_PER_PE",
                                          "NVSHMEM_LIBFABRIC_PROVIDER",
                                          "NVSHMEM_LIMIT_PTR_P2P_ACCESS",
                                          "NVSHMEM_MAX_CTAS",
                                          "NVSHMEM_MAX_MEMORY_PER_GPU",
                                          "NVSHMEM_MAX_PEER_STREAMS",
                                          "NVSHMEM_MAX_TEAMS",
                                          "NVSHMEM_MNNVL_OVERRIDE_MC_CLIQUE_ID",
                                          "NVSHMEM_NETDEVS_POLICY",
                                          "NVSHMEM_NVTX",
                                          "NVSHMEM_PROXY_REQUEST_BATCH_MAX",
                                          "NVSHMEM_QP_DEPTH",
                                          "NVSHMEM_REDMAXLOC_ALGO",
                                          "NVSHMEM_REDUCESCATTER_ALGO",
                                          "NVSHMEM_REDUCESCATTER_NTHREADS",
                                          "NVSHMEM_REDUCESCATTER_NVLS_THRESHOLD",
                                          "NVSHMEM_REDUCE_ALGO",
                                          "NVSHMEM_REDUCE_NTHREADS",
                                          "NVSHMEM_REDUCE_NVLS_THRESHOLD",
                                          "NVSHMEM_REDUCE_RECEXCH_KVAL",
                                          "NVSHMEM_REDUCE_SCRATCH_SIZE",
                                          "NVSHMEM_REMOTE_TRANSPORT",
                                          "NVSHMEM_SRQ_DEPTH",
                                          "NVSHMEM_SYMMETRIC_SIZE",
                                          "NVSHMEM_TMA_POLICY",
                                          "NVSHMEM_TRANSPORT_BATCH_MAX_OPS",
                                          "NVSHMEM_VERSION"};

constexpr KnownName k_other[] = {
    // PyTorch's ProcessGroupNCCL still honours these old spellings of its TORCH_NCCL_* names.
    {"NCCL_ASYNC_ERROR_HANDLING", "PyTorch (old name of TORCH_NCCL_ASYNC_ERROR_HANDLING)"},
    {"NCCL_BLOCKING_WAIT", "PyTorch (old name of TORCH_NCCL_BLOCKING_WAIT)"},
    {"NCCL_DESYNC_DEBUG", "PyTorch (old name of TORCH_NCCL_DESYNC_DEBUG)"},
    {"NCCL_ENABLE_TIMING", "PyTorch (old name of TORCH_NCCL_ENABLE_TIMING)"},
    // nvidia/cuda and NGC images record the packaged libnccl2 version; nothing reads it.
    {"NCCL_VERSION", "nvidia/cuda images (packaged NCCL version, informational)"},
    // Build systems locating NCCL (nccl-tests' Makefile, PyTorch's setup).
    {"NCCL_HOME", "build systems (nccl-tests, PyTorch)"},
    {"NCCL_ROOT", "build systems (PyTorch)"},
    {"NCCL_ROOT_DIR", "build systems (PyTorch)"},
    {"NCCL_INCLUDE_DIR", "build systems (PyTorch)"},
    {"NCCL_LIB_DIR", "build systems (PyTorch)"},
    // NVSHMEM's CMake build reads these from the environment; they do nothing at run time.
    {"NVSHMEM_BUILD_EXAMPLES", "NVSHMEM build"},
    {"NVSHMEM_BUILD_HYDRA_LAUNCHER", "NVSHMEM build"},
    {"NVSHMEM_BUILD_PACKAGES", "NVSHMEM build"},
    {"NVSHMEM_BUILD_TESTS", "NVSHMEM build"},
    {"NVSHMEM_BUILD_TXZ_PACKAGE", "NVSHMEM build"},
    {"NVSHMEM_DEFAULT_PMIX", "NVSHMEM build"},
    {"NVSHMEM_DEFAULT_UCX", "NVSHMEM build"},
    {"NVSHMEM_IBDEVX_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_IBGDA_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_IBRC_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_LIBFABRIC_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_MPI_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_PMIX_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_PREFIX", "NVSHMEM build"},
    {"NVSHMEM_SHMEM_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_TIMEOUT_DEVICE_POLLING", "NVSHMEM build"},
    {"NVSHMEM_UCX_SUPPORT", "NVSHMEM build"},
    {"NVSHMEM_USE_GDRCOPY", "NVSHMEM build"},
    {"NVSHMEM_USE_NCCL", "NVSHMEM build"},
    // Where NVSHMEM is installed, for DeepEP's build and install scripts.
    {"NVSHMEM_DIR", "DeepEP build"},
    {"NVSHMEM_HOME", "install scripts (DeepEP, NVSHMEM packaging)"},
    // NVSHMEM's perftest programs.
    {"NVSHMEM_MACHINE_READABLE_OUTPUT", "NVSHMEM perftests"},
    {"NVSHMEM_PERF_COLL_MAX_ELEMS", "NVSHMEM perftests"},
};

// Plugins and tools that read NCCL_* names of their own. NCCL_IB_* is not
// here: gIB reads the same NCCL_IB_* names as NCCL's IB transport, so those
// are checked against NCCL's list.
constexpr KnownName k_prefixes[] = {
    {"NCCL_GIB_", "Google gIB net plugin"},
    {"NCCL_TUNER_", "NCCL tuner plugins (gIB's NCCL_TUNER_CONFIG_PATH)"},
    {"NCCL_FASTRAK_", "Google GPUDirect-TCPXO plugin"},
    {"NCCL_GPUDIRECTTCPX_", "Google GPUDirect-TCPX plugin"},
    {"NCCL_SHIMNET_", "Google NCCL shim guest config checker"},
    {"NCCL_UCX_", "nccl-rdma-sharp-plugins (UCX)"},
    {"NCCL_SHARP_", "nccl-rdma-sharp-plugins (SHARP)"},
    {"NCCL_PROFILER_", "NCCL profiler plugins"},
    {"NCCL_INSPECTOR_", "NCCL inspector profiler plugin"},
    {"NCCL_TESTS_", "nccl-tests"},
};

bool contains(std::span<const std::string_view> list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

}  // namespace

std::span<const std::string_view> known_nccl_vars() {
  return k_nccl;
}
std::span<const std::string_view> known_nvshmem_vars() {
  return k_nvshmem;
}
std::span<const KnownName> known_other_vars() {
  return k_other;
}
std::span<const KnownName> known_prefixes() {
  return k_prefixes;
}

std::optional<std::string_view> who_reads(std::string_view name) {
  if (contains(k_nccl, name)) return "NCCL";
  if (contains(k_nvshmem, name)) return "NVSHMEM";
  for (const auto& other : k_other) {
    if (other.name == name) return other.reader;
  }
  for (const auto& prefix : k_prefixes) {
    if (name.starts_with(prefix.name)) return prefix.reader;
  }
  return std::nullopt;
}

NearestName nearest_known(std::string_view name) {
  std::vector<std::string_view> pool;
  if (name.starts_with("NCCL_")) {
    pool.assign(std::begin(k_nccl), std::end(k_nccl));
  } else if (name.starts_with("NVSHMEM_")) {
    pool.assign(std::begin(k_nvshmem), std::end(k_nvshmem));
  } else {
    return {};
  }
  auto family = name.starts_with("NCCL_") ? std::string_view("NCCL_") : "NVSHMEM_";
  for (const auto& other : k_other) {
    if (other.name.starts_with(family)) pool.push_back(other.name);
  }
  // Past the longest known name a suggestion means nothing, and the full
  // distance of a 4 MiB name from an env file took seconds per candidate:
  // the head is compared, the rest counted as insertions.
  constexpr std::size_t k_compared = 128;
  std::string_view head = name.substr(0, k_compared);
  std::size_t rest = name.size() - head.size();
  NearestName best{{}, std::numeric_limits<std::size_t>::max()};
  for (auto candidate : pool) {
    std::size_t d = util::edit_distance(head, candidate) + rest;
    if (d < best.distance) best = {candidate, d};
  }
  return best;
}

}  // namespace epkit::env
