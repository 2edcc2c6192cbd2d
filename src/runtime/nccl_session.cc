#include "runtime/nccl_session.h"

#ifdef EPKIT_WITH_CUDA

#include <fmt/format.h>

#include <cstring>
#include <thread>

namespace epkit::runtime {
namespace {

constexpr const char* k_unique_id_key = "nccl/unique_id";
// Store calls made to explain a failure get their own short deadline: the
// caller's has usually just passed.
constexpr Millis k_diagnosis_budget{2000};

std::string join_labels(const std::vector<std::string>& labels) {
  std::string out;
  for (const auto& l : labels) out += (out.empty() ? "" : ", ") + l;
  return out;
}

}  // namespace

const std::string& NcclSession::label(int rank) const {
  static const std::string unknown = "?";
  if (rank < 0 || static_cast<std::size_t>(rank) >= m_options.labels.size()) return unknown;
  return m_options.labels[static_cast<std::size_t>(rank)];
}

Result<void> NcclSession::check(ncclResult_t rc, const std::string& what) {
  if (rc == ncclSuccess || rc == ncclInProgress) return {};
  const char* last = api().get_last_error != nullptr ? api().get_last_error(m_comm) : nullptr;
  return make_error(ErrorCode::nccl,
                    fmt::format("{} on {} failed: {}{}", what, label(rank()), api().describe(rc),
                                last != nullptr && *last != 0 ? fmt::format(": {}", last) : ""));
}

Result<void> NcclSession::mark(const std::string& milestone, const char* phase, Deadline deadline) {
  auto added = m_store.add(fmt::format("ms/{}/{}/{}", milestone, phase, rank()), 1, deadline);
  if (!added) return added.error();
  return {};
}

std::string NcclSession::stragglers(const std::string& milestone, Deadline) {
  auto deadline = Deadline::after(k_diagnosis_budget);
  std::vector<std::string> never;
  std::vector<std::string> stuck;
  for (int r = 0; r < world_size(); ++r) {
    auto entered = m_store.add(fmt::format("ms/{}/enter/{}", milestone, r), 0, deadline);
    auto done = m_store.add(fmt::format("ms/{}/done/{}", milestone, r), 0, deadline);
    if (!entered || !done) {
      return fmt::format("(the store could not say which ranks: {})",
                         !entered ? entered.error().message : done.error().message);
    }
    if (*entered == 0) {
      never.push_back(label(r));
    } else if (*done == 0) {
      stuck.push_back(label(r));
    }
  }
  std::string out;
  if (!never.empty()) out += fmt::format("never arrived: {}", join_labels(never));
  if (!stuck.empty()) {
    out += fmt::format("{}stopped answering (reached '{}' but did not complete it): {}",
                       out.empty() ? "" : "; ", milestone, join_labels(stuck));
  }
  return out.empty() ? "every rank completed it (this rank's GPU is stalled)" : out;
}

template <typename Done>
Result<void> NcclSession::poll(const std::string& milestone, Deadline deadline, Done done) {
  auto next_store_check = Clock::now();
  for (;;) {
    auto finished = done();
    if (!finished) return finished.error();
    if (*finished) return {};
    ncclResult_t async = ncclSuccess;
    if (m_comm != nullptr) {
      ncclResult_t rc = api().comm_get_async_error(m_comm, &async);
      if (rc != ncclSuccess) EPKIT_TRY(check(rc, "ncclCommGetAsyncError"));
      if (async != ncclSuccess && async != ncclInProgress) {
        return check(async, fmt::format("'{}'", milestone));
      }
    }
    if (Clock::now() >= next_store_check) {
      // A lost rank fails the store for everyone; that is how a killed peer
      // is told apart from a slow one.
      auto alive = m_store.add("alive", 0, Deadline::after(k_diagnosis_budget));
      if (!alive) {
        return make_error(ErrorCode::unavailable,
                          fmt::format("{} stopped waiting for '{}': {}", label(rank()), milestone,
                                      alive.error().message));
      }
      next_store_check = Clock::now() + m_options.store_poll;
    }
    if (deadline.expired()) {
      return make_error(ErrorCode::timeout,
                        fmt::format("'{}' timed out on {}: {}", milestone, label(rank()),
                                    stragglers(milestone, deadline)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Result<std::unique_ptr<NcclSession>> NcclSession::open(const host::dl::NcclLibrary& nccl,
                                                       Store& store,
                                                       const NcclSessionOptions& options,
                                                       Deadline deadline) {
  std::unique_ptr<NcclSession> s(new NcclSession(nccl, store, options));
  if (cudaError_t rc = cudaSetDevice(options.device); rc != cudaSuccess) {
    return make_error(ErrorCode::cuda, fmt::format("cudaSetDevice({}) on {}: {}", options.device,
                                                   s->label(options.rank), describe_cuda(rc)));
  }
  if (cudaError_t rc = cudaStreamCreateWithFlags(&s->m_stream, cudaStreamNonBlocking);
      rc != cudaSuccess) {
    return make_error(ErrorCode::cuda, fmt::format("cudaStreamCreate on {}: {}",
                                                   s->label(options.rank), describe_cuda(rc)));
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  EPKIT_TRY(s->mark("unique_id", "enter", deadline));
  if (options.rank == 0) {
    if (ncclResult_t rc = nccl.api.get_unique_id(&id); rc != ncclSuccess) {
      return s->check(rc, "ncclGetUniqueId").error();
    }
    EPKIT_TRY(
        store.set(k_unique_id_key, std::string_view(id.internal, sizeof id.internal), deadline));
  } else {
    auto value = store.get(k_unique_id_key, deadline);
    if (!value) {
      return make_error(value.error().code,
                        fmt::format("{} did not get the ncclUniqueId from rank 0 ({}): {}",
                                    s->label(options.rank), s->label(0), value.error().message));
    }
    if (value->size() != sizeof id.internal) {
      return make_error(ErrorCode::invalid,
                        fmt::format("the ncclUniqueId in the store has {} bytes, not {}",
                                    value->size(), sizeof id.internal));
    }
    std::memcpy(id.internal, value->data(), sizeof id.internal);
  }
  EPKIT_TRY(s->mark("unique_id", "done", deadline));

  EPKIT_TRY(s->mark("init", "enter", deadline));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t rc =
      nccl.api.comm_init_rank_config(&s->m_comm, options.world_size, id, options.rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    auto err = s->check(rc, "ncclCommInitRankConfig");
    s->abort();
    return err.error();
  }
  auto ready = s->poll("init", deadline, [&]() -> Result<bool> {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = nccl.api.comm_get_async_error(s->m_comm, &state);
    if (q != ncclSuccess && q != ncclInProgress)
      return s->check(q, "ncclCommGetAsyncError").error();
    return state == ncclSuccess;
  });
  if (!ready) {
    s->abort();
    return ready.error();
  }
  EPKIT_TRY(s->mark("init", "done", deadline));
  return s;
}

Result<void> NcclSession::wait(const std::string& milestone, Deadline deadline) {
  EPKIT_TRY(mark(milestone, "enter", deadline));
  auto done = poll(milestone, deadline, [&]() -> Result<bool> {
    // A non-blocking communicator may still be enqueueing the operation
    // (ncclInProgress): until it is, an empty stream proves nothing.
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = api().comm_get_async_error(m_comm, &state);
    if (q != ncclSuccess) return check(q, "ncclCommGetAsyncError").error();
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) return check(state, fmt::format("'{}'", milestone)).error();
    cudaError_t rc = cudaStreamQuery(m_stream);
    if (rc == cudaSuccess) return true;
    if (rc == cudaErrorNotReady) return false;
    return make_error(ErrorCode::cuda,
                      fmt::format("'{}' on {}: {}", milestone, label(rank()), describe_cuda(rc)));
  });
  if (!done) {
    abort();
    return done.error();
  }
  return mark(milestone, "done", deadline);
}

Result<void> NcclSession::ready(Deadline deadline) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = api().comm_get_async_error(m_comm, &state);
    if (q != ncclSuccess) return check(q, "ncclCommGetAsyncError");
    if (state == ncclSuccess) return {};
    if (state != ncclInProgress) return check(state, "enqueue");
    if (deadline.expired()) {
      return make_error(ErrorCode::timeout,
                        fmt::format("{}: NCCL did not take the operation in time", label(rank())));
    }
    std::this_thread::yield();
  }
}

Result<void> NcclSession::close(Deadline deadline) {
  if (m_comm == nullptr) return {};
  if (m_blocking != nullptr) {
    // Its work is on the same stream, which the last wait() drained.
    api().comm_destroy(m_blocking);
    m_blocking = nullptr;
  }
  ncclResult_t rc = api().comm_finalize(m_comm);
  Result<void> result;
  if (rc != ncclSuccess && rc != ncclInProgress) {
    result = check(rc, "ncclCommFinalize");
  } else {
    result = poll("finalize", deadline, [&]() -> Result<bool> {
      ncclResult_t state = ncclInProgress;
      api().comm_get_async_error(m_comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        return check(state, "ncclCommFinalize").error();
      }
      return state == ncclSuccess;
    });
  }
  if (!result) {
    abort();
    return result;
  }
  api().comm_destroy(m_comm);
  m_comm = nullptr;
  return {};
}

Result<ncclComm_t> NcclSession::blocking_comm(Deadline deadline) {
  if (m_blocking != nullptr) return m_blocking;
  EPKIT_TRY(mark("split", "enter", deadline));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t child = nullptr;
  ncclResult_t rc = api().comm_split(m_comm, 0, rank(), &child, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    auto err = check(rc, "ncclCommSplit");
    abort();
    return err.error();
  }
  // The parent is non-blocking, so the split itself may still be running.
  auto done = poll("split", deadline, [&]() -> Result<bool> {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = api().comm_get_async_error(m_comm, &state);
    if (q != ncclSuccess) return check(q, "ncclCommGetAsyncError").error();
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) return check(state, "ncclCommSplit").error();
    if (child == nullptr) return false;
    ncclResult_t child_state = ncclInProgress;
    q = api().comm_get_async_error(child, &child_state);
    if (q != ncclSuccess) return check(q, "ncclCommGetAsyncError").error();
    if (child_state != ncclSuccess && child_state != ncclInProgress) {
      return check(child_state, "ncclCommSplit").error();
    }
    return child_state == ncclSuccess;
  });
  if (!done) {
    if (child != nullptr) api().comm_abort(child);
    abort();
    return done.error();
  }
  m_blocking = child;
  EPKIT_TRY(mark("split", "done", deadline));
  return m_blocking;
}

void NcclSession::abort() {
  if (m_blocking != nullptr) {
    api().comm_abort(m_blocking);
    m_blocking = nullptr;
  }
  if (m_comm != nullptr) {
    api().comm_abort(m_comm);
    m_comm = nullptr;
  }
}

NcclSession::~NcclSession() {
  abort();
  if (m_stream != nullptr) cudaStreamDestroy(m_stream);
}

}  // namespace epkit::runtime

#endif
