#include "ep/network_leg/emulated_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "ep/core/hex.h"

namespace epkit::ep::network_leg {

namespace {

constexpr std::size_t kLine = 64;

std::size_t align_line(std::size_t bytes) {
  return (bytes + kLine - 1) / kLine * kLine;
}

// The request ring's words in one allocation: requests, ready words, then
// the four counters a cache line each (producers hammer `reserved`, the
// proxy writes `head`).
std::size_t ring_bytes(std::uint32_t slots) {
  return align_line(slots * sizeof(PutRequest)) + align_line(slots * sizeof(std::uint64_t)) +
         4 * kLine;
}

RequestRing place_ring(void* memory, std::uint32_t slots) {
  auto* at = static_cast<std::uint8_t*>(memory);
  RequestRing ring;
  ring.slots = slots;
  ring.requests = reinterpret_cast<PutRequest*>(at);
  at += align_line(slots * sizeof(PutRequest));
  ring.ready = reinterpret_cast<std::uint64_t*>(at);
  at += align_line(slots * sizeof(std::uint64_t));
  ring.reserved = reinterpret_cast<std::uint64_t*>(at);
  ring.head = reinterpret_cast<std::uint64_t*>(at + kLine);
  ring.abandoned = reinterpret_cast<std::uint64_t*>(at + 2 * kLine);
  ring.done = reinterpret_cast<std::uint64_t*>(at + 3 * kLine);
  return ring;
}

std::uint64_t load_acquire(const std::uint64_t* word) {
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(word))
      .load(std::memory_order_acquire);
}

// [offset, offset + bytes) inside a range of `size`, without overflow.
bool fits(std::uint64_t offset, std::uint64_t bytes, std::uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

// Fixed-width little-endian fields, so the descriptor's form does not
// depend on the compiler's struct layout.
class Writer {
 public:
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void bytes(const std::string& b) { m_out += b; }
  const std::string& out() const { return m_out; }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) m_out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string m_out;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : m_in(in) {}
  std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  std::string bytes(std::size_t n) {
    std::string out(m_in.substr(m_at, n));
    m_at += n;
    return out;
  }

 private:
  // The caller checked the total size first, so every read is in range.
  std::uint64_t get(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      v |= std::uint64_t{static_cast<unsigned char>(m_in[m_at + static_cast<std::size_t>(i)])}
           << (8 * i);
    }
    m_at += static_cast<std::size_t>(n);
    return v;
  }
  std::string_view m_in;
  std::size_t m_at = 0;
};

Error bad_option(const std::string& what) {
  return make_error(ErrorCode::invalid, "emulated NIC: EmulatedNicOptions." + what);
}

}  // namespace

// ---- InProcessMapper ----

void InProcessMapper::Free::operator()(void* p) const {
  ::operator delete (p, std::align_val_t{kLine});
}

Result<void*> InProcessMapper::allocate(std::size_t bytes, Placement) {
  void* p = ::operator new (bytes, std::align_val_t{kLine}, std::nothrow);
  if (p == nullptr) {
    return make_error(ErrorCode::unavailable,
                      fmt::format("in-process mapper: {} bytes not allocated", bytes));
  }
  std::memset(p, 0, bytes);
  m_allocations.emplace_back(p);
  return p;
}

Result<std::string> InProcessMapper::export_memory(void* base, std::size_t) {
  Writer w;
  w.u64(reinterpret_cast<std::uintptr_t>(base));
  return w.out();
}

Result<void*> InProcessMapper::import_memory(int rank, std::string_view handle, std::size_t) {
  if (handle.size() != handle_bytes()) {
    return make_error(ErrorCode::invalid,
                      fmt::format("rank {} sent a {}-byte in-process handle", rank, handle.size()));
  }
  const auto value = Reader(handle).u64();
  if (value == 0) {
    return make_error(ErrorCode::invalid, fmt::format("rank {} sent a null address", rank));
  }
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(value));
}

Result<void> InProcessMapper::copy(void* dst, const void* src, std::size_t bytes) {
  std::memmove(dst, src, bytes);  // a put within one window may overlap itself
  return {};
}

Result<void> InProcessMapper::write_u64(std::uint64_t* dst, std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(*dst).store(value, std::memory_order_release);
  return {};
}

// ---- EmulatedNicOptions ----

Result<void> EmulatedNicOptions::validate() const {
  // Upper bounds catch units mixed up (bits for bytes, ns for s): no NIC
  // moves 10 TB/s, no emulated latency or jitter needs a second.
  const auto& p = pacing;
  if (!std::isfinite(p.bytes_per_s) || p.bytes_per_s <= 0 || p.bytes_per_s > 1e13) {
    return bad_option(
        fmt::format("pacing.bytes_per_s = {} (above 0, at most 1e13)", p.bytes_per_s));
  }
  if (p.burst_bytes > (std::size_t{1} << 34)) {
    return bad_option(fmt::format("pacing.burst_bytes = {} (at most 16 GiB)", p.burst_bytes));
  }
  if (p.latency_ns < 0 || p.latency_ns > 1'000'000'000) {
    return bad_option(fmt::format("pacing.latency_ns = {} (0 to 1 s)", p.latency_ns));
  }
  if (p.reorder_jitter_ns < 0 || p.reorder_jitter_ns > 1'000'000'000) {
    return bad_option(fmt::format("pacing.reorder_jitter_ns = {} (0 to 1 s)", p.reorder_jitter_ns));
  }
  if (ring_slots == 0 || ring_slots > (1u << 20)) {
    return bad_option(fmt::format("ring_slots = {} (1 to 2^20)", ring_slots));
  }
  if (num_signals == 0 || num_signals > RankDescriptor::kMaxSignals) {
    return bad_option(
        fmt::format("num_signals = {} (1 to {})", num_signals, RankDescriptor::kMaxSignals));
  }
  if (!std::isfinite(timeout_s) || timeout_s <= 0 || timeout_s > 86400) {
    return bad_option(fmt::format("timeout_s = {} (above 0, at most a day)", timeout_s));
  }
  if (batch == 0) return bad_option("batch = 0 (at least 1)");
  return {};
}

// ---- RankDescriptor ----

std::string RankDescriptor::encode() const {
  Writer w;
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(static_cast<std::uint16_t>(signals_handle.size()));
  w.u32(static_cast<std::uint32_t>(rank));
  w.u32(static_cast<std::uint32_t>(world));
  w.u32(static_cast<std::uint32_t>(BackendKind::emulated_nic));
  w.u32(num_signals);
  w.u32(static_cast<std::uint32_t>(windows.size()));
  w.u32(process.pid);
  w.u64(process.pid_namespace);
  w.bytes(signals_handle);
  for (const auto& window : windows) {
    w.u64(window.bytes);
    w.bytes(window.handle);
  }
  return to_hex(w.out().data(), w.out().size());
}

Result<RankDescriptor> RankDescriptor::decode(std::string_view text, int rank, int world,
                                              std::size_t handle_bytes) {
  auto refuse = [&](const std::string& why) -> Error {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: rank {}'s descriptor refused: {}", rank, why));
  };
  // Hex text of a header and a bounded number of windows: anything longer
  // is refused before it is decoded.
  const std::size_t most = kHeaderBytes + handle_bytes + kMaxWindows * (8 + handle_bytes);
  if (text.size() % 2 != 0 || text.size() / 2 < kHeaderBytes || text.size() / 2 > most) {
    return refuse(fmt::format("{} hex characters (a whole number of bytes from {} to {})",
                              text.size(), kHeaderBytes, most));
  }
  std::string raw(text.size() / 2, '\0');
  if (!from_hex(std::string(text), raw.data(), raw.size())) return refuse("not hex text");
  Reader r(raw);
  const auto magic = r.u32();
  if (magic != kMagic) return refuse(fmt::format("magic {:#010x}, not \"EPNL\"", magic));
  const auto version = r.u16();
  if (version != kVersion) {
    return refuse(fmt::format("version {} (this build reads version {})", version, kVersion));
  }
  const auto their_handle_bytes = r.u16();
  if (their_handle_bytes != handle_bytes) {
    return refuse(fmt::format("{}-byte handles (this rank's mapper uses {})", their_handle_bytes,
                              handle_bytes));
  }
  RankDescriptor d;
  d.rank = static_cast<std::int32_t>(r.u32());
  d.world = static_cast<std::int32_t>(r.u32());
  if (d.rank != rank || d.world != world) {
    return refuse(fmt::format("it says rank {} of {}, the bootstrap says rank {} of {}", d.rank,
                              d.world, rank, world));
  }
  const auto kind = r.u32();
  if (kind != static_cast<std::uint32_t>(BackendKind::emulated_nic)) {
    return refuse(fmt::format("backend kind {} (every rank must use the emulated NIC)", kind));
  }
  d.num_signals = r.u32();
  if (d.num_signals == 0 || d.num_signals > kMaxSignals) {
    return refuse(fmt::format("{} signals (1 to {})", d.num_signals, kMaxSignals));
  }
  const auto num_windows = r.u32();
  if (num_windows > kMaxWindows) {
    return refuse(fmt::format("{} windows (at most {})", num_windows, kMaxWindows));
  }
  d.process.pid = r.u32();
  if (d.process.pid > kMaxPid) {
    return refuse(fmt::format("pid {} (0, unknown, to {})", d.process.pid, kMaxPid));
  }
  d.process.pid_namespace = r.u64();
  const std::size_t want = kHeaderBytes + handle_bytes + num_windows * (8 + handle_bytes);
  if (raw.size() != want) {
    return refuse(fmt::format("{} bytes; {} windows of {}-byte handles take {}", raw.size(),
                              num_windows, handle_bytes, want));
  }
  d.signals_handle = r.bytes(handle_bytes);
  for (std::uint32_t i = 0; i < num_windows; ++i) {
    Window window;
    window.bytes = r.u64();
    window.handle = r.bytes(handle_bytes);
    if (window.bytes == 0 || window.bytes > kMaxWindowBytes) {
      return refuse(
          fmt::format("window {} of {} bytes (1 to {})", i, window.bytes, kMaxWindowBytes));
    }
    d.windows.push_back(std::move(window));
  }
  return d;
}

// ---- EmulatedBackend ----

Result<std::unique_ptr<EmulatedBackend>> EmulatedBackend::create(
    const EmulatedNicOptions& options, std::unique_ptr<MemoryMapper> mapper, Clock* clock) {
  EPKIT_TRY(options.validate());
  if (!mapper) return make_error(ErrorCode::invalid, "emulated NIC: no memory mapper");
  std::unique_ptr<EmulatedBackend> backend(new EmulatedBackend(options, std::move(mapper), clock));
  EPKIT_TRY(backend->init());
  return backend;
}

EmulatedBackend::EmulatedBackend(const EmulatedNicOptions& options,
                                 std::unique_ptr<MemoryMapper> mapper, Clock* clock)
    : m_options(options), m_mapper(std::move(mapper)), m_clock(clock) {
  if (m_clock == nullptr) {
    m_own_clock = std::make_unique<SteadyClock>();
    m_clock = m_own_clock.get();
  }
}

// The proxy and pacing refer to the mapper's memory: they go first.
EmulatedBackend::~EmulatedBackend() {
  m_proxy.reset();
  m_pacing.reset();
}

Result<void> EmulatedBackend::init() {
  auto signals = m_mapper->allocate(m_options.num_signals * sizeof(std::uint64_t),
                                    MemoryMapper::Placement::device);
  if (!signals) return signals.error();
  m_signals = static_cast<std::uint64_t*>(signals.value());
  auto handle = m_mapper->export_memory(m_signals, m_options.num_signals * sizeof(std::uint64_t));
  if (!handle) return handle.error();
  m_signals_handle = std::move(handle).value();
  auto ring =
      m_mapper->allocate(ring_bytes(m_options.ring_slots), MemoryMapper::Placement::host_mapped);
  if (!ring) return ring.error();
  m_ring = place_ring(ring.value(), m_options.ring_slots);
  auto exited = m_mapper->allocate(sizeof(std::uint64_t), MemoryMapper::Placement::host_mapped);
  if (!exited) return exited.error();
  m_exited = static_cast<std::uint64_t*>(exited.value());
  *m_exited = 0;
  if (m_options.producer_moves) {
    auto grants = m_mapper->allocate(m_options.ring_slots * sizeof(std::uint64_t),
                                     MemoryMapper::Placement::host_mapped);
    if (!grants) return grants.error();
    m_grants = static_cast<std::uint64_t*>(grants.value());
  }
  return {};
}

Result<void> EmulatedBackend::publish_peer_tables() {
  std::size_t most = 0;
  for (const auto& peer : m_peers) most = std::max(most, peer.windows.size());
  m_windows_per_peer = static_cast<std::uint32_t>(std::max<std::size_t>(most, 1));
  const auto world = static_cast<std::size_t>(m_world);
  auto windows = m_mapper->allocate(world * m_windows_per_peer * sizeof(PeerWindow),
                                    MemoryMapper::Placement::host_mapped);
  if (!windows) return windows.error();
  m_peer_windows = static_cast<PeerWindow*>(windows.value());
  auto signals =
      m_mapper->allocate(world * sizeof(std::uint64_t*), MemoryMapper::Placement::host_mapped);
  if (!signals) return signals.error();
  m_peer_signals = static_cast<std::uint64_t**>(signals.value());
  for (std::size_t r = 0; r < world; ++r) {
    const auto& peer = m_peers[r];
    m_peer_signals[r] = peer.signals;
    for (std::size_t w = 0; w < peer.windows.size(); ++w)
      m_peer_windows[r * m_windows_per_peer + w] =
          PeerWindow{peer.windows[w].base, peer.windows[w].bytes};
  }
  return {};
}

Result<WindowId> EmulatedBackend::register_window(void* base, std::size_t bytes) {
  std::lock_guard lock(m_mutex);
  if (m_exchanged) {
    return make_error(ErrorCode::invalid,
                      "emulated NIC: register_window after exchange (peers already hold this "
                      "rank's windows; register every window first)");
  }
  if (base == nullptr || bytes == 0 || bytes > RankDescriptor::kMaxWindowBytes) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: window at {} of {} bytes (a non-null base, 1 to "
                                  "{} bytes)",
                                  base, bytes, RankDescriptor::kMaxWindowBytes));
  }
  if (m_windows.size() >= RankDescriptor::kMaxWindows) {
    return make_error(ErrorCode::invalid, fmt::format("emulated NIC: more than {} windows",
                                                      RankDescriptor::kMaxWindows));
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  if (begin + bytes < begin) {
    return make_error(ErrorCode::invalid, "emulated NIC: window wraps the address space");
  }
  for (std::size_t i = 0; i < m_windows.size(); ++i) {
    const auto other = reinterpret_cast<std::uintptr_t>(m_windows[i].base);
    if (begin < other + m_windows[i].bytes && other < begin + bytes) {
      return make_error(
          ErrorCode::invalid,
          fmt::format("emulated NIC: window at {} of {} bytes overlaps window {}", base, bytes, i));
    }
  }
  auto handle = m_mapper->export_memory(base, bytes);
  if (!handle) return handle.error();
  m_windows.push_back({static_cast<std::uint8_t*>(base), bytes, std::move(handle).value()});
  return WindowId{static_cast<std::uint32_t>(m_windows.size() - 1)};
}

Result<void> EmulatedBackend::exchange(Bootstrap& bootstrap) {
  std::lock_guard lock(m_mutex);
  if (m_exchanged) return make_error(ErrorCode::invalid, "emulated NIC: exchange called twice");
  m_rank = bootstrap.rank();
  m_world = bootstrap.world_size();
  if (m_world < 1 || m_rank < 0 || m_rank >= m_world) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: rank {} of {}", m_rank, m_world));
  }
  RankDescriptor mine;
  mine.rank = m_rank;
  mine.world = m_world;
  mine.num_signals = m_options.num_signals;
  mine.process = ProcessWatch::self();
  mine.signals_handle = m_signals_handle;
  for (const auto& window : m_windows) mine.windows.push_back({window.bytes, window.handle});
  auto all = bootstrap.all_gather(mine.encode());
  if (!all) return all.error();
  EPKIT_TRY(import_peers(all.value()));
  m_processes[static_cast<std::size_t>(m_rank)] = mine.process;
  m_watch = ProcessWatch(m_processes, m_rank);
  if (m_options.producer_moves) EPKIT_TRY(publish_peer_tables());

  // The model spans the world so that drops name any rank, but only this
  // rank's NIC sends.
  auto made = EmulatedPacing::create(m_world, m_options.pacing, *m_clock);
  if (!made) return made.error();
  m_pacing.emplace(std::move(made).value());
  m_proxy.emplace(m_rank, m_world, m_ring, *m_pacing, hooks(), m_options.batch);
  m_watched_since_ns = m_clock->now_ns();
  m_exchanged = true;
  // Nobody may put into a peer before that peer has mapped every window.
  auto mapped = bootstrap.all_gather("mapped");
  if (!mapped) return mapped.error();
  return {};
}

Result<void> EmulatedBackend::import_peers(const std::vector<std::string>& descriptors) {
  if (descriptors.size() != static_cast<std::size_t>(m_world)) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("emulated NIC: the bootstrap gathered {} descriptors for {} ranks",
                    descriptors.size(), m_world));
  }
  m_peers.assign(static_cast<std::size_t>(m_world), Peer{});
  m_processes.assign(static_cast<std::size_t>(m_world), ProcessId{});
  for (int r = 0; r < m_world; ++r) {
    auto& peer = m_peers[static_cast<std::size_t>(r)];
    if (r == m_rank) {
      // This rank's own memory needs no mapping (and CUDA IPC cannot map a
      // process's own handle).
      peer.signals = m_signals;
      peer.num_signals = m_options.num_signals;
      peer.windows = m_windows;
      continue;
    }
    auto d = RankDescriptor::decode(descriptors[static_cast<std::size_t>(r)], r, m_world,
                                    m_mapper->handle_bytes());
    if (!d) return d.error();
    const auto signal_bytes = d.value().num_signals * sizeof(std::uint64_t);
    auto signals = m_mapper->import_memory(r, d.value().signals_handle, signal_bytes);
    if (!signals) {
      return make_error(signals.error().code,
                        fmt::format("emulated NIC: mapping rank {}'s signal array: {}", r,
                                    signals.error().message));
    }
    peer.signals = static_cast<std::uint64_t*>(signals.value());
    peer.num_signals = d.value().num_signals;
    m_processes[static_cast<std::size_t>(r)] = d.value().process;
    for (std::size_t i = 0; i < d.value().windows.size(); ++i) {
      const auto& window = d.value().windows[i];
      auto base = m_mapper->import_memory(r, window.handle, window.bytes);
      if (!base) {
        return make_error(base.error().code,
                          fmt::format("emulated NIC: mapping rank {}'s window {}: {}", r, i,
                                      base.error().message));
      }
      peer.windows.push_back({static_cast<std::uint8_t*>(base.value()), window.bytes, {}});
    }
  }
  return {};
}

Result<void> EmulatedBackend::check_request(const PutRequest& request) const {
  auto refuse = [&](const std::string& why) -> Error {
    return make_error(ErrorCode::invalid, fmt::format("rank {} posted a put to rank {} that {}",
                                                      m_rank, request.peer, why));
  };
  const auto& peer = m_peers[static_cast<std::size_t>(request.peer)];
  if (request.signal_add > 0 && request.signal.value >= peer.num_signals) {
    return refuse(fmt::format("adds to signal {} of {}", request.signal.value, peer.num_signals));
  }
  if (request.bytes == 0) return {};
  if (request.src_window.value >= m_windows.size()) {
    return refuse(
        fmt::format("reads window {} of its {}", request.src_window.value, m_windows.size()));
  }
  if (request.dst_window.value >= peer.windows.size()) {
    return refuse(fmt::format("writes window {} of the peer's {}", request.dst_window.value,
                              peer.windows.size()));
  }
  const auto& src = m_windows[request.src_window.value];
  const auto& dst = peer.windows[request.dst_window.value];
  if (!fits(request.src_offset, request.bytes, src.bytes)) {
    return refuse(fmt::format("reads {} bytes at {} of its {}-byte window {}", request.bytes,
                              request.src_offset, src.bytes, request.src_window.value));
  }
  if (!fits(request.dst_offset, request.bytes, dst.bytes)) {
    return refuse(fmt::format("writes {} bytes at {} of the peer's {}-byte window {}",
                              request.bytes, request.dst_offset, dst.bytes,
                              request.dst_window.value));
  }
  return {};
}

ProxyHooks EmulatedBackend::hooks() {
  ProxyHooks h;
  h.check = [this](int, const PutRequest& request) { return check_request(request); };
  // Both run after check_request passed the request, so every index and
  // range is in bounds.
  h.copy = [this](int, const PutRequest& request) -> Result<void> {
    const auto& src = m_windows[request.src_window.value];
    const auto& dst =
        m_peers[static_cast<std::size_t>(request.peer)].windows[request.dst_window.value];
    // A copy engine reports a bad copy at the next call, not this one: the
    // error then says which put came before it (kept as the request, put
    // into words only on an error: this runs for every put).
    m_last_put = request;
    auto copied =
        m_mapper->copy(dst.base + request.dst_offset, src.base + request.src_offset, request.bytes);
    if (!copied.ok())
      return make_error(copied.error().code, copied.error().message + "; " + describe_last_put());
    return copied;
  };
  // A put's source counts as read (the producer's flush) only once the
  // mapper's copy has finished, not when it was queued.
  h.fence = [this] { return m_mapper->fence(); };
  h.completed = [this] { return m_mapper->completed(); };
  if (m_options.producer_moves) {
    // The producer moves its bytes once granted: no copy, no CUDA call here.
    h.land = [this](int, std::uint64_t ticket, const PutRequest&) -> Result<void> {
      std::atomic_ref<std::uint64_t>(m_grants[ticket % m_options.ring_slots])
          .store(ticket + 1, std::memory_order_release);
      return {};
    };
  }
  h.write_signal = [this](int dst, SignalId signal, std::uint64_t value) -> Result<void> {
    auto written =
        m_mapper->write_u64(m_peers[static_cast<std::size_t>(dst)].signals + signal.value, value);
    if (!written.ok())
      return make_error(
          written.error().code,
          fmt::format("{} (signal {} of rank {}, mapped at {}); {}", written.error().message,
                      signal.value, dst,
                      static_cast<void*>(m_peers[static_cast<std::size_t>(dst)].signals),
                      describe_last_put()));
    return written;
  };
  return h;
}

std::string EmulatedBackend::describe_last_put() const {
  if (!m_last_put) return "no put before it";
  const PutRequest& r = *m_last_put;
  const auto& src = m_windows[r.src_window.value];
  const auto& dst = m_peers[static_cast<std::size_t>(r.peer)].windows[r.dst_window.value];
  return fmt::format(
      "the last put: {} bytes from window {} + {} (of {}) to rank {}'s window {} + {} (of {}, "
      "mapped at {})",
      r.bytes, r.src_window.value, r.src_offset, src.bytes, r.peer, r.dst_window.value,
      r.dst_offset, dst.bytes, static_cast<void*>(dst.base));
}

void EmulatedBackend::set_fault(int rank, std::string reason) {
  if (!m_fault) m_fault = Fault{rank, std::move(reason)};
}

void EmulatedBackend::watch_producers(const ProxyStep& step) {
  // A ticket claimed and never published stops the ring for good (the
  // consumer drains in ticket order): the producer that held it died.
  const auto now = m_clock->now_ns();
  const auto head = load_acquire(m_ring.head);
  if (step.posted > 0 || head != m_watched_head || m_proxy->pending() == 0) {
    m_watched_head = head;
    m_watched_since_ns = now;
    return;
  }
  const auto limit = static_cast<std::int64_t>(m_options.timeout_s * 1e9);
  if (now - m_watched_since_ns >= limit) {
    set_fault(m_rank, fmt::format("rank {}: ticket {} of its request queue was claimed and not "
                                  "published for {} s (its producer stopped mid-post)",
                                  m_rank, head, m_options.timeout_s));
  }
}

Result<void> EmulatedBackend::progress() {
  if (m_aborted.load(std::memory_order_acquire)) {
    return make_error(ErrorCode::unavailable, "emulated NIC: aborted");
  }
  std::lock_guard lock(m_mutex);
  if (!m_exchanged) return make_error(ErrorCode::invalid, "emulated NIC: progress before exchange");
  auto step = m_proxy->step();
  if (const auto& f = m_proxy->fault()) set_fault(f->rank, f->reason);
  if (!step) return step.error();
  m_moved.store(step->posted + step->landed > 0, std::memory_order_relaxed);
  watch_producers(step.value());
  watch_processes();
  return {};
}

void EmulatedBackend::watch_processes() {
  // A poll() a millisecond at most: a death is seen well within any wait's
  // bound, and the progress loop stays cheap.
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  if (now - m_watched_processes_ns < 1000000) return;
  m_watched_processes_ns = now;
  const auto gone = m_watch.exited();
  if (!gone || __atomic_load_n(m_exited, __ATOMIC_ACQUIRE) != 0) return;
  __atomic_store_n(m_exited, static_cast<std::uint64_t>(*gone) + 1, __ATOMIC_RELEASE);
}

std::optional<int> EmulatedBackend::exited_rank() const {
  if (m_exited == nullptr) return std::nullopt;
  const std::uint64_t v = __atomic_load_n(m_exited, __ATOMIC_ACQUIRE);
  if (v == 0) return std::nullopt;
  return static_cast<int>(v - 1);
}

std::optional<int> EmulatedBackend::exited_rank_now() {
  if (m_exited == nullptr) return std::nullopt;
  {
    std::lock_guard lock(m_mutex);
    const auto gone = m_watch.exited();
    if (gone && __atomic_load_n(m_exited, __ATOMIC_ACQUIRE) == 0)
      __atomic_store_n(m_exited, static_cast<std::uint64_t>(*gone) + 1, __ATOMIC_RELEASE);
  }
  return exited_rank();
}

std::optional<Fault> EmulatedBackend::fault() const {
  std::lock_guard lock(m_mutex);
  if (m_fault) return m_fault;
  if (m_proxy && m_proxy->fault()) return m_proxy->fault();
  return std::nullopt;
}

void EmulatedBackend::abort() {
  // Nothing more lands: puts in flight are forgotten and the ring is no
  // longer drained, so every wait on them times out.
  m_aborted.store(true, std::memory_order_release);
}

DeviceLeg EmulatedBackend::device_leg() const {
  DeviceLeg leg;
  leg.kind = BackendKind::emulated_nic;
  leg.rank = m_rank;
  leg.world_size = m_world;
  leg.signals = m_signals;
  leg.num_signals = m_options.num_signals;
  leg.requests = m_ring.requests;
  leg.queue_ready = m_ring.ready;
  leg.queue_slots = m_ring.slots;
  leg.queue_tail = m_ring.reserved;
  leg.queue_head = m_ring.head;
  leg.queue_abandoned = m_ring.abandoned;
  leg.queue_done = m_ring.done;
  leg.exited = m_exited;
  if (m_options.producer_moves) {
    leg.grants = m_grants;
    leg.peer_windows = m_peer_windows;
    leg.windows_per_peer = m_windows_per_peer;
    leg.peer_signals = m_peer_signals;
  }
  return leg;
}

PostStatus EmulatedBackend::post(const PutRequest& request) {
  return post_request(m_ring, request, static_cast<std::int64_t>(m_options.timeout_s * 1e9));
}

std::size_t EmulatedBackend::in_flight() const {
  std::lock_guard lock(m_mutex);
  return m_proxy ? m_proxy->in_flight() : 0;
}

Result<void> EmulatedBackend::drop_rank(int rank) {
  std::lock_guard lock(m_mutex);
  if (!m_pacing) return make_error(ErrorCode::invalid, "emulated NIC: drop_rank before exchange");
  if (rank < 0 || rank >= m_world) {
    return make_error(ErrorCode::invalid,
                      fmt::format("emulated NIC: drop_rank({}) in a world of {}", rank, m_world));
  }
  m_pacing->drop_rank(rank);
  return {};
}

Result<void> EmulatedBackend::stall(int rank, std::int64_t duration_ns) {
  std::lock_guard lock(m_mutex);
  if (!m_pacing) return make_error(ErrorCode::invalid, "emulated NIC: stall before exchange");
  if (rank < 0 || rank >= m_world || duration_ns < 0) {
    return make_error(
        ErrorCode::invalid,
        fmt::format("emulated NIC: stall({}, {} ns) in a world of {}", rank, duration_ns, m_world));
  }
  m_pacing->stall(rank, duration_ns);
  return {};
}

Result<void> EmulatedBackend::set_bytes_per_s(double bytes_per_s) {
  std::lock_guard lock(m_mutex);
  if (!m_pacing)
    return make_error(ErrorCode::invalid, "emulated NIC: set_bytes_per_s before exchange");
  EPKIT_TRY(m_pacing->set_bytes_per_s(bytes_per_s));
  m_options.pacing.bytes_per_s = bytes_per_s;
  return {};
}

Result<EmulatedPacing::Idle> EmulatedBackend::take_idle() {
  std::lock_guard lock(m_mutex);
  if (!m_pacing) return make_error(ErrorCode::invalid, "emulated NIC: take_idle before exchange");
  return m_pacing->take_idle(m_rank);
}

std::string EmulatedBackend::describe() const {
  PacingConfig p;
  {
    std::lock_guard lock(m_mutex);  // set_bytes_per_s changes the cap
    p = m_options.pacing;
  }
  auto text = fmt::format("emulated NIC, {:g} GB/s, {:g} us", p.bytes_per_s * 1e-9,
                          static_cast<double>(p.latency_ns) * 1e-3);
  if (p.reorder_jitter_ns > 0) {
    text += fmt::format(", reordered up to {:g} us (seed {})",
                        static_cast<double>(p.reorder_jitter_ns) * 1e-3, p.seed);
  }
  return text + ", " + m_mapper->describe();
}

}  // namespace epkit::ep::network_leg
