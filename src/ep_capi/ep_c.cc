// The C ABI (include/epkit/ep_c.h) over ep::Buffer. Each entry point converts
// its arguments, calls the C++ API and turns a Result or an exception into a
// status plus this thread's last-error message: nothing crosses the ABI as a
// C++ exception.
#include <cuda_runtime_api.h>
#include <epkit/ep.h>
#include <epkit/ep_c.h>
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ep_capi/ep_c_convert.h"

struct epkit_ep_buffer {
  std::unique_ptr<epkit::ep::Buffer> buffer;
  std::vector<std::int32_t> recv_counts;  // the last dispatch's per-expert list
  std::string network;                    // Buffer::network(), kept for the C string
  int device = 0;
};

struct epkit_ep_handle {
  std::shared_ptr<const epkit::ep::DispatchHandle> handle;
};

struct epkit_ep_hook {
  epkit::ep::LowLatencyHook hook;
  int device = 0;
};

namespace ep = epkit::ep;
using epkit::capi::fail;
using epkit::capi::from_view;
using epkit::capi::guard;
using epkit::capi::to_view;

namespace {

/// ep::Bootstrap over the caller's fixed-size all_gather: one round for the
/// lengths, one for the payloads padded to the longest.
class CallbackBootstrap final : public ep::Bootstrap {
 public:
  CallbackBootstrap(int rank, int world, epkit_ep_all_gather_fn fn, void* user)
      : m_rank(rank), m_world(world), m_fn(fn), m_user(user) {}
  int rank() const override { return m_rank; }
  int world_size() const override { return m_world; }

  epkit::Result<std::vector<std::string>> all_gather(const std::string& mine) override {
    auto world = static_cast<std::size_t>(m_world);
    std::uint64_t length = mine.size();
    std::vector<std::uint64_t> lengths(world);
    if (m_fn(m_user, &length, sizeof(length), lengths.data()) != 0) return failed("lengths");
    std::uint64_t longest = 0;
    for (auto l : lengths) longest = std::max(longest, l);
    if (longest > (1u << 20))
      return epkit::make_error(epkit::ErrorCode::invalid,
                               fmt::format("bootstrap all_gather: a rank sent a {}-byte length, "
                                           "more than the 1 MiB a handshake takes",
                                           longest));
    std::string padded = mine;
    padded.resize(longest, '\0');
    std::string all(world * longest, '\0');
    if (longest > 0 && m_fn(m_user, padded.data(), longest, all.data()) != 0)
      return failed("payloads");
    std::vector<std::string> out(world);
    for (std::size_t r = 0; r < world; ++r) out[r] = all.substr(r * longest, lengths[r]);
    return out;
  }

 private:
  static epkit::Error failed(const char* what) {
    return epkit::make_error(epkit::ErrorCode::nccl,
                             fmt::format("the caller's bootstrap all_gather of the {} failed "
                                         "(returned non-zero)",
                                         what));
  }
  int m_rank;
  int m_world;
  epkit_ep_all_gather_fn m_fn;
  void* m_user;
};

ep::Config to_config(const epkit_ep_config& c) {
  ep::Config out;
  out.num_sms = c.num_sms;
  out.num_warps = c.num_warps;
  out.nvl_chunk = c.nvl_chunk;
  return out;
}

ep::StreamOrder to_order(const epkit_ep_order& o) {
  ep::StreamOrder out;
  out.stream = static_cast<cudaStream_t>(o.stream);
  out.previous = static_cast<cudaEvent_t>(o.previous);
  out.async = o.async_finish != 0;
  out.want_event = o.want_event != 0;
  return out;
}

/// The operation's completion event, handed to the caller when it asked for
/// one (the engine made one only then: StreamOrder::want_event).
epkit_ep_status take_event(ep::Event& event, const epkit_ep_order& order, void** out) {
  *out = order.want_event != 0 ? event.release() : nullptr;
  return EPKIT_EP_OK;
}

/// The ranks a Buffer of these options may span: 1 to 8 on one node; an
/// internode Buffer whole nodes of ranks_per_node, up to the engine's limit.
epkit_ep_status check_ranks(const epkit_ep_options& o, int32_t num_ranks) {
  const int per_node = o.ranks_per_node;
  if (per_node < 0 || per_node > 8)
    return fail(
        EPKIT_EP_ERR_INVALID,
        fmt::format("ranks_per_node = {}: a node has 1 to 8 ranks (0: one node)", per_node));
  if (per_node == 0 || per_node >= num_ranks) {
    if (num_ranks < 1 || num_ranks > 8)
      return fail(EPKIT_EP_ERR_INVALID,
                  fmt::format("num_ranks = {}: a Buffer spans 1 to 8 ranks of one node (set "
                              "ranks_per_node to span nodes)",
                              num_ranks));
    return EPKIT_EP_OK;
  }
  if (num_ranks > 256 || num_ranks % per_node != 0)
    return fail(EPKIT_EP_ERR_INVALID,
                fmt::format("num_ranks = {}: an internode Buffer spans whole nodes of "
                            "ranks_per_node = {} ranks, 256 at most",
                            num_ranks, per_node));
  return EPKIT_EP_OK;
}

/// A usable Buffer, with its device current on this thread (the current
/// device is per thread: autograd and data-loader threads start on 0).
epkit_ep_status check_buffer(const epkit_ep_buffer* b) {
  if (b == nullptr || !b->buffer) return fail(EPKIT_EP_ERR_INVALID, "the buffer is null");
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != b->device) {
    cudaError_t rc = cudaSetDevice(b->device);
    if (rc != cudaSuccess)
      return fail(EPKIT_EP_ERR_CUDA,
                  fmt::format("cudaSetDevice({}): {}", b->device, cudaGetErrorString(rc)));
  }
  return EPKIT_EP_OK;
}

/// The C handle's views and sizes as the engine's (and back).
epkit_ep_status to_ll_handle(const epkit_ep_ll_handle& c, ep::LowLatencyHandle& out) {
  const std::pair<const epkit_ep_tensor*, ep::TensorView*> views[] = {
      {&c.src_info, &out.src_info},
      {&c.layout_range, &out.layout_range},
      {&c.recv_count, &out.recv_count}};
  const char* names[] = {"handle.src_info", "handle.layout_range", "handle.recv_count"};
  for (std::size_t i = 0; i < std::size(views); ++i)
    if (epkit_ep_status s = to_view(*views[i].first, names[i], *views[i].second); s != EPKIT_EP_OK)
      return s;
  out.num_max_dispatch_tokens_per_rank = c.num_max_dispatch_tokens_per_rank;
  out.hidden = c.hidden;
  out.num_experts = c.num_experts;
  out.num_ranks = c.num_ranks;
  out.num_topk = c.num_topk;
  out.buffer = c.buffer;
  return EPKIT_EP_OK;
}

epkit_ep_ll_handle from_ll_handle(const ep::LowLatencyHandle& h) {
  epkit_ep_ll_handle c{};
  c.src_info = from_view(h.src_info);
  c.layout_range = from_view(h.layout_range);
  c.recv_count = from_view(h.recv_count);
  c.num_max_dispatch_tokens_per_rank = h.num_max_dispatch_tokens_per_rank;
  c.hidden = h.hidden;
  c.num_experts = h.num_experts;
  c.num_ranks = h.num_ranks;
  c.num_topk = h.num_topk;
  c.buffer = h.buffer;
  return c;
}

/// Converts named optional/required inputs in one loop.
epkit_ep_status to_views(
    std::initializer_list<std::tuple<const epkit_ep_tensor*, const char*, ep::TensorView*>> list) {
  for (const auto& [t, name, v] : list)
    if (epkit_ep_status s = to_view(*t, name, *v); s != EPKIT_EP_OK) return s;
  return EPKIT_EP_OK;
}

epkit_ep_hook* wrap_hook(ep::LowLatencyHook hook, int device) {
  if (!hook) return nullptr;
  return new epkit_ep_hook{std::move(hook), device};
}

}  // namespace

extern "C" {

int32_t epkit_ep_abi_version(void) {
  return EPKIT_EP_ABI_VERSION;
}

const char* epkit_ep_version(void) {
  return EPKIT_VERSION;
}

uint64_t epkit_ep_struct_size(const char* name) {
  if (name == nullptr) return 0;
  const std::pair<const char*, std::size_t> sizes[] = {
      {"tensor", sizeof(epkit_ep_tensor)},
      {"options", sizeof(epkit_ep_options)},
      {"config", sizeof(epkit_ep_config)},
      {"order", sizeof(epkit_ep_order)},
      {"layout_out", sizeof(epkit_ep_layout_out)},
      {"dispatch_into", sizeof(epkit_ep_dispatch_into)},
      {"dispatch_args", sizeof(epkit_ep_dispatch_args)},
      {"dispatch_out", sizeof(epkit_ep_dispatch_out)},
      {"combine_args", sizeof(epkit_ep_combine_args)},
      {"combine_out", sizeof(epkit_ep_combine_out)},
      {"handle_info", sizeof(epkit_ep_handle_info)},
      {"ll_handle", sizeof(epkit_ep_ll_handle)},
      {"ll_dispatch_args", sizeof(epkit_ep_ll_dispatch_args)},
      {"ll_dispatch_out", sizeof(epkit_ep_ll_dispatch_out)},
      {"ll_combine_args", sizeof(epkit_ep_ll_combine_args)},
      {"ll_combine_out", sizeof(epkit_ep_ll_combine_out)}};
  for (const auto& [n, size] : sizes)
    if (std::strcmp(n, name) == 0) return size;
  return 0;
}

epkit_ep_status epkit_ep_device_count(int32_t* count) {
  return guard([&]() -> epkit_ep_status {
    if (count == nullptr) return fail(EPKIT_EP_ERR_INVALID, "count is null");
    *count = 0;
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess)
      return fail(EPKIT_EP_ERR_UNAVAILABLE,
                  fmt::format("no usable CUDA device: cudaGetDeviceCount: {} ({})",
                              cudaGetErrorString(rc), cudaGetErrorName(rc)));
    if (n == 0) return fail(EPKIT_EP_ERR_UNAVAILABLE, "no CUDA device is visible");
    *count = n;
    return EPKIT_EP_OK;
  });
}

epkit_ep_status epkit_ep_set_device(int32_t device) {
  cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess)
    return fail(rc == cudaErrorInvalidDevice ? EPKIT_EP_ERR_INVALID : EPKIT_EP_ERR_UNAVAILABLE,
                fmt::format("cudaSetDevice({}): {} ({})", device, cudaGetErrorString(rc),
                            cudaGetErrorName(rc)));
  return EPKIT_EP_OK;
}

epkit_ep_status epkit_ep_default_options(epkit_ep_options* out) {
  if (out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "options is null");
  ep::BufferOptions o;
  out->max_tokens = o.max_tokens;
  out->max_hidden = o.max_hidden;
  out->max_topk = o.max_topk;
  out->num_bytes = o.num_bytes;
  out->timeout_s = o.timeout_s;
  out->ranks_per_node = o.ranks_per_node;
  out->low_latency_bytes = o.low_latency_bytes;
  out->output_arena_bytes = o.output_arena_bytes;
  out->network_leg = static_cast<std::int32_t>(o.network_leg);
  out->emulated_nic_gbps = o.emulated_nic_gbps;
  out->emulated_nic_latency_us = o.emulated_nic_latency_us;
  out->internode_rings = o.internode_rings ? 1 : 0;
  return EPKIT_EP_OK;
}

epkit_ep_status epkit_ep_default_config(epkit_ep_config* out) {
  if (out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "config is null");
  ep::Config c;
  *out = {c.num_sms, c.num_warps, c.nvl_chunk};
  return EPKIT_EP_OK;
}

epkit_ep_status epkit_ep_bytes_needed(const epkit_ep_options* options, int32_t num_ranks,
                                      uint64_t* out) {
  return guard([&]() -> epkit_ep_status {
    if (options == nullptr || out == nullptr)
      return fail(EPKIT_EP_ERR_INVALID, "options or out is null");
    if (epkit_ep_status s = check_ranks(*options, num_ranks); s != EPKIT_EP_OK) return s;
    *out = ep::Buffer::bytes_needed(epkit::capi::to_options(*options), num_ranks);
    return EPKIT_EP_OK;
  });
}

epkit_ep_status epkit_ep_buffer_create(int32_t rank, int32_t world_size,
                                       epkit_ep_all_gather_fn all_gather, void* user,
                                       const epkit_ep_options* options, epkit_ep_buffer** out) {
  return guard([&]() -> epkit_ep_status {
    if (out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "out is null");
    *out = nullptr;
    if (all_gather == nullptr) return fail(EPKIT_EP_ERR_INVALID, "all_gather is null");
    if (options == nullptr) return fail(EPKIT_EP_ERR_INVALID, "options is null");
    if (epkit_ep_status s = check_ranks(*options, world_size); s != EPKIT_EP_OK) return s;
    if (rank < 0 || rank >= world_size)
      return fail(EPKIT_EP_ERR_INVALID, fmt::format("rank {} of {} ranks", rank, world_size));
    int32_t devices = 0;
    if (epkit_ep_status s = epkit_ep_device_count(&devices); s != EPKIT_EP_OK)
      return fail(s, fmt::format("cannot create an EP Buffer: {}", epkit_ep_last_error()));
    CallbackBootstrap boot(rank, world_size, all_gather, user);
    auto made = ep::Buffer::create(boot, epkit::capi::to_options(*options));
    if (!made) return epkit::capi::fail_with(made.error());
    auto holder = std::make_unique<epkit_ep_buffer>();
    holder->buffer = std::move(*made);
    holder->network = holder->buffer->network();
    cudaGetDevice(&holder->device);
    *out = holder.release();
    return EPKIT_EP_OK;
  });
}

void epkit_ep_buffer_destroy(epkit_ep_buffer* buffer) {
  try {
    delete buffer;
  } catch (...) {  // NOLINT: a destructor failure must not cross the ABI
  }
}

epkit_ep_status epkit_ep_buffer_info(const epkit_ep_buffer* buffer, int32_t* rank,
                                     int32_t* num_ranks, void** comm_stream) {
  if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
  if (rank != nullptr) *rank = buffer->buffer->rank();
  if (num_ranks != nullptr) *num_ranks = buffer->buffer->num_ranks();
  if (comm_stream != nullptr) *comm_stream = buffer->buffer->comm_stream();
  return EPKIT_EP_OK;
}

epkit_ep_status epkit_ep_buffer_nodes(const epkit_ep_buffer* buffer, int32_t* num_nodes,
                                      const char** network) {
  if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
  if (num_nodes != nullptr) *num_nodes = buffer->buffer->num_nodes();
  if (network != nullptr) *network = buffer->network.c_str();
  return EPKIT_EP_OK;
}

epkit_ep_status epkit_ep_layout(epkit_ep_buffer* buffer, const epkit_ep_tensor* topk_idx,
                                int32_t num_experts, const epkit_ep_order* order,
                                epkit_ep_layout_out* out) {
  return epkit_ep_layout_into(buffer, topk_idx, num_experts, order, nullptr, out);
}

epkit_ep_status epkit_ep_layout_into(epkit_ep_buffer* buffer, const epkit_ep_tensor* topk_idx,
                                     int32_t num_experts, const epkit_ep_order* order,
                                     const epkit_ep_layout_out* into, epkit_ep_layout_out* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (topk_idx == nullptr || order == nullptr || out == nullptr)
      return fail(EPKIT_EP_ERR_INVALID, "topk_idx, order or out is null");
    ep::TensorView idx;
    if (epkit_ep_status s = to_view(*topk_idx, "topk_idx", idx); s != EPKIT_EP_OK) return s;
    ep::LayoutOutputs mine;
    if (into != nullptr) {
      if (epkit_ep_status s = to_views(
              {{&into->num_tokens_per_rank, "into.num_tokens_per_rank", &mine.num_tokens_per_rank},
               {&into->num_tokens_per_expert, "into.num_tokens_per_expert",
                &mine.num_tokens_per_expert},
               {&into->is_token_in_rank, "into.is_token_in_rank", &mine.is_token_in_rank},
               {&into->num_tokens_per_rdma_rank, "into.num_tokens_per_rdma_rank",
                &mine.num_tokens_per_rdma_rank},
               {&into->topk_idx_copy, "into.topk_idx_copy", &mine.topk_idx_copy}});
          s != EPKIT_EP_OK)
        return s;
    }
    auto layout = buffer->buffer->layout(idx, num_experts, to_order(*order), mine);
    if (!layout) return epkit::capi::fail_with(layout.error());
    out->num_tokens_per_rank = from_view(layout->num_tokens_per_rank);
    out->num_tokens_per_expert = from_view(layout->num_tokens_per_expert);
    out->is_token_in_rank = from_view(layout->is_token_in_rank);
    out->num_tokens_per_rdma_rank = from_view(layout->num_tokens_per_rdma_rank);
    out->topk_idx_copy = from_view(mine.topk_idx_copy);
    return take_event(layout->event, *order, &out->event);
  });
}

epkit_ep_status epkit_ep_dispatch(epkit_ep_buffer* buffer, const epkit_ep_dispatch_args* args,
                                  epkit_ep_dispatch_out* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (args == nullptr || out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "args or out is null");
    std::memset(out, 0, sizeof(*out));
    ep::DispatchArgs d;
    const std::pair<const epkit_ep_tensor*, ep::TensorView*> inputs[] = {
        {&args->x, &d.x},
        {&args->x_scales, &d.x_scales},
        {&args->topk_idx, &d.topk_idx},
        {&args->topk_weights, &d.topk_weights},
        {&args->num_tokens_per_rank, &d.num_tokens_per_rank},
        {&args->is_token_in_rank, &d.is_token_in_rank},
        {&args->num_tokens_per_expert, &d.num_tokens_per_expert}};
    const char* names[] = {"x",
                           "x_scales",
                           "topk_idx",
                           "topk_weights",
                           "num_tokens_per_rank",
                           "is_token_in_rank",
                           "num_tokens_per_expert"};
    for (std::size_t i = 0; i < std::size(inputs); ++i)
      if (epkit_ep_status s = to_view(*inputs[i].first, names[i], *inputs[i].second);
          s != EPKIT_EP_OK)
        return s;
    if (args->handle != nullptr) d.handle = args->handle->handle;
    d.expert_alignment = args->expert_alignment;
    d.num_worst_tokens = args->num_worst_tokens;
    d.config = to_config(args->config);
    d.order = to_order(args->order);
    if (args->into != nullptr) {
      d.into = [fn = args->into,
                user = args->into_user](std::int64_t rows) -> epkit::Result<ep::DispatchOutputs> {
        epkit_ep_dispatch_into into;
        std::memset(&into, 0, sizeof(into));
        if (fn(user, rows, &into) != 0)
          return epkit::make_error(epkit::ErrorCode::invalid,
                                   "the dispatch's into callback declined");
        ep::DispatchOutputs o;
        const std::pair<const epkit_ep_tensor*, ep::TensorView*> views[] = {
            {&into.recv_x, &o.recv_x},
            {&into.recv_x_scales, &o.recv_x_scales},
            {&into.recv_topk_idx, &o.recv_topk_idx},
            {&into.recv_topk_weights, &o.recv_topk_weights},
            {&into.recv_src_idx, &o.recv_src_idx},
            {&into.rank_prefix_matrix, &o.rank_prefix_matrix}};
        for (const auto& [t, v] : views)
          if (to_view(*t, "into", *v) != EPKIT_EP_OK)
            return epkit::make_error(epkit::ErrorCode::invalid,
                                     "the dispatch's into callback gave a bad tensor");
        return o;
      };
    }
    auto result = buffer->buffer->dispatch(d);
    if (!result) return epkit::capi::fail_with(result.error());
    out->recv_x = from_view(result->recv_x);
    out->recv_x_scales = from_view(result->recv_x_scales);
    out->recv_topk_idx = from_view(result->recv_topk_idx);
    out->recv_topk_weights = from_view(result->recv_topk_weights);
    out->recv_src_idx = from_view(result->recv_src_idx);
    out->recv_tokens_per_expert = from_view(result->recv_tokens_per_expert);
    buffer->recv_counts.assign(result->num_recv_tokens_per_expert.begin(),
                               result->num_recv_tokens_per_expert.end());
    out->num_recv_tokens_per_expert = buffer->recv_counts.data();
    out->num_local_experts = static_cast<int32_t>(buffer->recv_counts.size());
    out->num_recv_tokens = result->handle ? result->handle->num_recv_tokens : -1;
    if (result->handle) out->handle = new epkit_ep_handle{result->handle};
    out->written = result->written;
    return take_event(result->event, args->order, &out->event);
  });
}

epkit_ep_status epkit_ep_combine(epkit_ep_buffer* buffer, const epkit_ep_combine_args* args,
                                 epkit_ep_combine_out* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (args == nullptr || out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "args or out is null");
    std::memset(out, 0, sizeof(*out));
    if (args->handle == nullptr)
      return fail(EPKIT_EP_ERR_INVALID, "combine needs the handle of a dispatch");
    ep::CombineArgs c;
    if (epkit_ep_status s = to_view(args->x, "x", c.x); s != EPKIT_EP_OK) return s;
    if (epkit_ep_status s = to_view(args->topk_weights, "topk_weights", c.topk_weights);
        s != EPKIT_EP_OK)
      return s;
    for (std::size_t b = 0; b < c.bias.size(); ++b)
      if (epkit_ep_status s = to_view(args->bias[b], b == 0 ? "bias[0]" : "bias[1]", c.bias[b]);
          s != EPKIT_EP_OK)
        return s;
    if (epkit_ep_status s =
            to_views({{&args->out_x, "out_x", &c.out_x},
                      {&args->out_topk_weights, "out_topk_weights", &c.out_topk_weights}});
        s != EPKIT_EP_OK)
      return s;
    c.handle = args->handle->handle;
    c.config = to_config(args->config);
    c.order = to_order(args->order);
    auto result = buffer->buffer->combine(c);
    if (!result) return epkit::capi::fail_with(result.error());
    out->combined_x = from_view(result->combined_x);
    out->combined_topk_weights = from_view(result->combined_topk_weights);
    return take_event(result->event, args->order, &out->event);
  });
}

epkit_ep_status epkit_ep_output_arena(const epkit_ep_buffer* buffer, void** data, uint64_t* bytes) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (data == nullptr || bytes == nullptr) return fail(EPKIT_EP_ERR_INVALID, "out is null");
    const ep::Buffer::Region arena = buffer->buffer->output_arena();
    *data = arena.data;
    *bytes = arena.bytes;
    return EPKIT_EP_OK;
  });
}

epkit_ep_status epkit_ep_combine_input(epkit_ep_buffer* buffer, int64_t rows, int64_t hidden,
                                       epkit_ep_tensor* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "out is null");
    auto view = buffer->buffer->combine_input(rows, hidden);
    if (!view) return epkit::capi::fail_with(view.error());
    *out = from_view(*view);
    return EPKIT_EP_OK;
  });
}

epkit_ep_status epkit_ep_barrier(epkit_ep_buffer* buffer) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    auto r = buffer->buffer->barrier();
    return r ? EPKIT_EP_OK : epkit::capi::fail_with(r.error());
  });
}

epkit_ep_status epkit_ep_synchronize(epkit_ep_buffer* buffer) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    auto r = buffer->buffer->synchronize();
    return r ? EPKIT_EP_OK : epkit::capi::fail_with(r.error());
  });
}

epkit_ep_status epkit_ep_copy(epkit_ep_buffer* buffer, int32_t n, const epkit_ep_tensor* dst,
                              const epkit_ep_tensor* src, const epkit_ep_order* order,
                              void** event) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (n < 0 || (n > 0 && (dst == nullptr || src == nullptr)) || order == nullptr)
      return fail(EPKIT_EP_ERR_INVALID, "copy: n < 0, or dst, src or order is null");
    if (event != nullptr) *event = nullptr;
    cudaStream_t stream = buffer->buffer->comm_stream();
    std::vector<ep::CopySpan> spans(static_cast<std::size_t>(n));
    for (int32_t i = 0; i < n; ++i)
      if (epkit_ep_status s =
              epkit::capi::copy_span(dst[i], src[i], i, spans[static_cast<std::size_t>(i)]);
          s != EPKIT_EP_OK)
        return s;
    if (auto r = ep::copy_spans(spans.data(), n, stream); !r)
      return epkit::capi::fail_with(r.error());
    return epkit::capi::finish_on(stream, *order, event);
  });
}

epkit_ep_status epkit_ep_handle_info_get(const epkit_ep_handle* handle, epkit_ep_handle_info* out) {
  if (handle == nullptr || !handle->handle || out == nullptr)
    return fail(EPKIT_EP_ERR_INVALID, "handle or out is null");
  const ep::DispatchHandle& h = *handle->handle;
  out->num_tokens = h.num_tokens;
  out->num_ranks = h.num_ranks;
  out->hidden = h.hidden;
  out->num_recv_tokens = h.num_recv_tokens;
  out->num_worst_tokens = h.num_worst_tokens;
  out->rank_prefix_matrix = from_view(h.rank_prefix_matrix);
  out->send_row = from_view(h.send_row);
  out->num_nodes = h.num_nodes;
  out->recv_gbl_rank_prefix_sum = from_view(h.recv_gbl_rank_prefix_sum);
  return EPKIT_EP_OK;
}

void epkit_ep_handle_release(epkit_ep_handle* handle) {
  try {
    delete handle;
  } catch (...) {  // NOLINT: a destructor failure must not cross the ABI
  }
}

epkit_ep_status epkit_ep_ll_size_hint(int32_t num_max_dispatch_tokens_per_rank, int32_t hidden,
                                      int32_t num_ranks, int32_t num_experts, uint64_t* out) {
  return guard([&]() -> epkit_ep_status {
    if (out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "out is null");
    if (num_max_dispatch_tokens_per_rank < 1 || hidden < 1 || num_ranks < 1 || num_experts < 1)
      return fail(
          EPKIT_EP_ERR_INVALID,
          fmt::format("low-latency size hint of {} tokens, hidden {}, {} ranks, {} experts: "
                      "every figure must be positive",
                      num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts));
    *out = ep::Buffer::low_latency_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
                                             num_experts);
    return EPKIT_EP_OK;
  });
}

epkit_ep_status epkit_ep_ll_dispatch(epkit_ep_buffer* buffer, const epkit_ep_ll_dispatch_args* args,
                                     epkit_ep_ll_dispatch_out* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (args == nullptr || out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "args or out is null");
    std::memset(out, 0, sizeof(*out));
    ep::LowLatencyDispatchArgs d;
    if (epkit_ep_status s =
            to_views({{&args->x, "x", &d.x},
                      {&args->topk_idx, "topk_idx", &d.topk_idx},
                      {&args->cumulative_local_expert_recv_stats,
                       "cumulative_local_expert_recv_stats", &d.cumulative_local_expert_recv_stats},
                      {&args->dispatch_wait_recv_cost_stats, "dispatch_wait_recv_cost_stats",
                       &d.dispatch_wait_recv_cost_stats}});
        s != EPKIT_EP_OK)
      return s;
    d.num_max_dispatch_tokens_per_rank = args->num_max_dispatch_tokens_per_rank;
    d.num_experts = args->num_experts;
    d.use_fp8 = args->use_fp8 != 0;
    d.round_scale = args->round_scale != 0;
    d.use_ue8m0 = args->use_ue8m0 != 0;
    d.return_recv_hook = args->return_recv_hook != 0;
    d.num_sms = args->num_sms;
    d.order = to_order(args->order);
    auto result = buffer->buffer->low_latency_dispatch(d);
    if (!result) return epkit::capi::fail_with(result.error());
    out->recv_x = from_view(result->recv_x);
    out->recv_x_scales = from_view(result->recv_x_scales);
    out->recv_count = from_view(result->recv_count);
    out->handle = from_ll_handle(result->handle);
    out->hook = wrap_hook(std::move(result->hook), buffer->device);
    return take_event(result->event, args->order, &out->event);
  });
}

epkit_ep_status epkit_ep_ll_combine(epkit_ep_buffer* buffer, const epkit_ep_ll_combine_args* args,
                                    epkit_ep_ll_combine_out* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (args == nullptr || out == nullptr) return fail(EPKIT_EP_ERR_INVALID, "args or out is null");
    std::memset(out, 0, sizeof(*out));
    ep::LowLatencyCombineArgs c;
    if (epkit_ep_status s =
            to_views({{&args->x, "x", &c.x},
                      {&args->topk_idx, "topk_idx", &c.topk_idx},
                      {&args->topk_weights, "topk_weights", &c.topk_weights},
                      {&args->out, "out", &c.out},
                      {&args->combine_wait_recv_cost_stats, "combine_wait_recv_cost_stats",
                       &c.combine_wait_recv_cost_stats}});
        s != EPKIT_EP_OK)
      return s;
    if (epkit_ep_status s = to_ll_handle(args->handle, c.handle); s != EPKIT_EP_OK) return s;
    c.zero_copy = args->zero_copy != 0;
    c.use_logfmt = args->use_logfmt != 0;
    c.return_recv_hook = args->return_recv_hook != 0;
    c.num_sms = args->num_sms;
    c.order = to_order(args->order);
    auto result = buffer->buffer->low_latency_combine(c);
    if (!result) return epkit::capi::fail_with(result.error());
    out->combined_x = from_view(result->combined_x);
    out->hook = wrap_hook(std::move(result->hook), buffer->device);
    return take_event(result->event, args->order, &out->event);
  });
}

epkit_ep_status epkit_ep_ll_next_combine_buffer(epkit_ep_buffer* buffer,
                                                const epkit_ep_ll_handle* handle,
                                                epkit_ep_tensor* out) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    if (handle == nullptr || out == nullptr)
      return fail(EPKIT_EP_ERR_INVALID, "handle or out is null");
    ep::LowLatencyHandle h;
    if (epkit_ep_status s = to_ll_handle(*handle, h); s != EPKIT_EP_OK) return s;
    auto view = buffer->buffer->get_next_low_latency_combine_buffer(h);
    if (!view) return epkit::capi::fail_with(view.error());
    *out = from_view(*view);
    return EPKIT_EP_OK;
  });
}

epkit_ep_status epkit_ep_ll_clean(epkit_ep_buffer* buffer, int32_t num_max_dispatch_tokens_per_rank,
                                  int32_t hidden, int32_t num_experts) {
  return guard([&]() -> epkit_ep_status {
    if (epkit_ep_status s = check_buffer(buffer); s != EPKIT_EP_OK) return s;
    auto r = buffer->buffer->clean_low_latency_buffer(num_max_dispatch_tokens_per_rank, hidden,
                                                      num_experts);
    return r ? EPKIT_EP_OK : epkit::capi::fail_with(r.error());
  });
}

epkit_ep_status epkit_ep_hook_call(epkit_ep_hook* hook) {
  return guard([&]() -> epkit_ep_status {
    if (hook == nullptr) return fail(EPKIT_EP_ERR_INVALID, "the hook is null");
    // Hooks run from the caller's thread, whatever device it has current.
    if (cudaError_t rc = cudaSetDevice(hook->device); rc != cudaSuccess)
      return fail(EPKIT_EP_ERR_CUDA,
                  fmt::format("cudaSetDevice({}): {}", hook->device, cudaGetErrorString(rc)));
    auto r = hook->hook();
    return r ? EPKIT_EP_OK : epkit::capi::fail_with(r.error());
  });
}

void epkit_ep_hook_release(epkit_ep_hook* hook) {
  try {
    delete hook;
  } catch (...) {  // NOLINT: a destructor failure must not cross the ABI
  }
}

epkit_ep_status epkit_ep_event_record(void* stream, void** event) {
  if (event == nullptr) return fail(EPKIT_EP_ERR_INVALID, "event is null");
  *event = nullptr;
  return epkit::capi::record_on(static_cast<cudaStream_t>(stream), event);
}

epkit_ep_status epkit_ep_event_wait(void* event, void* stream) {
  if (event == nullptr) return fail(EPKIT_EP_ERR_INVALID, "event is null");
  cudaError_t rc =
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
  if (rc != cudaSuccess)
    return fail(EPKIT_EP_ERR_CUDA, fmt::format("cudaStreamWaitEvent: {}", cudaGetErrorString(rc)));
  return EPKIT_EP_OK;
}

epkit_ep_status epkit_ep_event_synchronize(void* event) {
  if (event == nullptr) return fail(EPKIT_EP_ERR_INVALID, "event is null");
  cudaError_t rc = cudaEventSynchronize(static_cast<cudaEvent_t>(event));
  if (rc != cudaSuccess)
    return fail(EPKIT_EP_ERR_CUDA, fmt::format("cudaEventSynchronize: {}", cudaGetErrorString(rc)));
  return EPKIT_EP_OK;
}

void epkit_ep_event_destroy(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

}  // extern "C"
