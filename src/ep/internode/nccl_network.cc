// Network over NCCL's host API: one communicator per rail (the ranks with
// the same local index, one per node), grouped ncclSend/ncclRecv of bytes on
// the Buffer's stream. NCCL picks the transport (IB, RoCE, gIB, EFA through
// its plugin, sockets) and, by topology, the NIC nearest the GPU.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "ep/core/hex.h"
#include "ep/internode/network.h"
#include "host/dl/nccl.h"

namespace epkit::ep {
namespace {

class NcclNetwork final : public Network {
 public:
  NcclNetwork(const host::dl::NcclLibrary& nccl, int node, int nodes, int local)
      : m_nccl(nccl), m_node(node), m_nodes(nodes), m_local(local) {}
  ~NcclNetwork() override {
    if (m_comm == nullptr) return;
    if (m_aborted || m_failed)
      m_nccl.api.comm_abort(m_comm);
    else
      m_nccl.api.comm_destroy(m_comm);
  }
  NcclNetwork(const NcclNetwork&) = delete;
  NcclNetwork& operator=(const NcclNetwork&) = delete;

  Result<void> init(const ncclUniqueId& id, double timeout_s) {
    m_timeout_s = timeout_s;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // a dead peer must not hold the init forever
    ncclResult_t rc = m_nccl.api.comm_init_rank_config(&m_comm, m_nodes, id, m_node, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) return error(rc, "ncclCommInitRankConfig");
    return settle("ncclCommInitRankConfig", timeout_s);
  }

  Result<void> exchange(std::span<const Transfer> sends, std::span<const Transfer> receives,
                        cudaStream_t stream) override {
    if (m_aborted) return make_error(ErrorCode::unavailable, "the network leg was aborted");
    const auto& api = m_nccl.api;
    ncclResult_t rc = api.group_start();
    for (const Transfer& t : sends) {
      if (rc != ncclSuccess) break;
      if (t.node != m_node && t.bytes != 0)
        rc = api.send(t.data, t.bytes, ncclUint8, t.node, m_comm, stream);
    }
    for (const Transfer& t : receives) {
      if (rc != ncclSuccess) break;
      if (t.node != m_node && t.bytes != 0)
        rc = api.recv(t.data, t.bytes, ncclUint8, t.node, m_comm, stream);
    }
    ncclResult_t end = api.group_end();
    if (rc != ncclSuccess) return error(rc, "ncclSend/ncclRecv");
    if (end != ncclSuccess && end != ncclInProgress) return error(end, "ncclGroupEnd");
    // A non-blocking communicator may still be enqueueing (and connecting
    // to a peer it never sent to before); the kernels must be on the stream
    // before anything after them is. A peer that never connects ends it
    // within the Buffer's timeout.
    return settle("ncclGroupEnd", m_timeout_s);
  }

  Result<void> health() override {
    if (m_aborted) return make_error(ErrorCode::unavailable, "the network leg was aborted");
    ncclResult_t state = ncclSuccess;
    ncclResult_t q = m_nccl.api.comm_get_async_error(m_comm, &state);
    if (q != ncclSuccess) return error(q, "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) return error(state, "the network leg");
    return {};
  }

  void abort() override {
    if (m_comm != nullptr && !m_aborted) m_nccl.api.comm_abort(m_comm);
    m_comm = nullptr;
    m_aborted = true;
  }

  std::string describe() const override {
    return fmt::format("NCCL {} ({}), one communicator of {} ranks per rail",
                       host::dl::nccl_version_string(m_nccl.version), m_nccl.path, m_nodes);
  }

 private:
  Error error(ncclResult_t rc, const std::string& what) {
    m_failed = true;
    const char* last = m_comm != nullptr ? m_nccl.api.get_last_error(m_comm) : nullptr;
    return make_error(
        ErrorCode::unavailable,
        fmt::format("{} on rail {} (node {} of {}): {}{}{}", what, m_local, m_node, m_nodes,
                    m_nccl.api.describe(rc), last != nullptr && *last != '\0' ? ": " : "",
                    last != nullptr ? last : ""));
  }

  Result<void> settle(const char* what, double timeout_s) {
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    for (;;) {
      ncclResult_t state = ncclInProgress;
      ncclResult_t q = m_nccl.api.comm_get_async_error(m_comm, &state);
      if (q != ncclSuccess) return error(q, "ncclCommGetAsyncError");
      if (state == ncclSuccess) return {};
      if (state != ncclInProgress) return error(state, what);
      if (std::chrono::steady_clock::now() > deadline) {
        m_failed = true;
        return make_error(ErrorCode::timeout,
                          fmt::format("{} on rail {} did not finish within {} s (a rank of this "
                                      "rail on another node is missing)",
                                      what, m_local, timeout_s));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  const host::dl::NcclLibrary& m_nccl;
  int m_node;
  int m_nodes;
  int m_local;
  ncclComm_t m_comm = nullptr;
  bool m_aborted = false;
  bool m_failed = false;
  double m_timeout_s = 30.0;
};

}  // namespace

Result<std::unique_ptr<Network>> make_nccl_network(Bootstrap& bootstrap, int ranks_per_node,
                                                   double timeout_s) {
  const int rank = bootstrap.rank();
  const int world = bootstrap.world_size();
  if (ranks_per_node < 1 || world % ranks_per_node != 0)
    return make_error(ErrorCode::invalid,
                      fmt::format("{} ranks do not split into nodes of {}", world, ranks_per_node));
  auto nccl = host::dl::load_nccl();
  const int node = rank / ranks_per_node;
  const int local = rank % ranks_per_node;
  // Every rank takes part in the trade, even one whose NCCL failed to load,
  // so that the others hear why instead of timing out. (Built in one go: GCC
  // 12's -Wrestrict misfires on assigning a literal to a std::string, PR 105329.)
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  const std::string mine = [&]() -> std::string {
    if (!nccl) return "!";
    if (node != 0) return "-";
    if ((*nccl)->api.get_unique_id(&id) != ncclSuccess) return "!";
    return to_hex(&id, sizeof id);
  }();
  auto all = bootstrap.all_gather(mine);
  if (!nccl)
    return make_error(nccl.error().code,
                      fmt::format("the internode leg needs NCCL: {}", nccl.error().message));
  if (!all) return all.error();
  for (int r = 0; r < world; ++r)
    if ((*all)[static_cast<std::size_t>(r)] == "!")
      return make_error(ErrorCode::unavailable,
                        fmt::format("rank {} could not load NCCL or make an ncclUniqueId", r));
  if (node != 0 && !from_hex((*all)[static_cast<std::size_t>(local)], &id, sizeof id))
    return make_error(ErrorCode::invalid,
                      fmt::format("rank {} sent a malformed ncclUniqueId", local));
  auto net = std::make_unique<NcclNetwork>(**nccl, node, world / ranks_per_node, local);
  EPKIT_TRY(net->init(id, timeout_s));
  return std::unique_ptr<Network>(std::move(net));
}

}  // namespace epkit::ep
