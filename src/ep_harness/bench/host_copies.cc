#include "ep_harness/bench/host_copies.h"

#include <cstring>
#include <utility>

namespace epkit::harness::detail {

std::vector<int> as_ints(const std::vector<std::uint8_t>& bytes) {
  std::vector<int> out(bytes.size() / sizeof(int));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(int));
  return out;
}

Result<HostTensor> copy(const TensorView& v) {
  HostTensor h;
  h.dtype = v.dtype;
  if (v.ndim == 1) {
    h.shape = {v.shape[0]};
  } else {
    h.shape = {v.shape[0], v.shape[1]};
  }
  if (v.empty()) {
    // An absent output (no scales for BF16): an empty array of the right
    // rank keeps the comparisons uniform.
    h.shape.assign(h.shape.size(), 0);
    return h;
  }
  auto bytes = ep::to_host(v);
  if (!bytes) return bytes.error();
  h.bytes = std::move(*bytes);
  return h;
}

Result<HostDispatch> copy_dispatch(const ep::DispatchResult& r, bool routing) {
  HostDispatch h;
  h.rows = r.recv_x.rows();
  auto x = copy(r.recv_x);
  if (!x) return x.error();
  h.recv_x = std::move(*x);
  auto s = copy(r.recv_x_scales);
  if (!s) return s.error();
  h.recv_x_scales = std::move(*s);
  if (routing) {
    auto idx = copy(r.recv_topk_idx);
    if (!idx) return idx.error();
    h.recv_topk_idx = std::move(*idx);
    auto w = copy(r.recv_topk_weights);
    if (!w) return w.error();
    h.recv_topk_weights = std::move(*w);
    auto src = copy(r.recv_src_idx);
    if (!src) return src.error();
    h.recv_src_idx = std::move(*src);
  }
  if (r.handle && r.handle->num_nodes > 1) {
    auto p = ep::to_host(r.handle->recv_gbl_rank_prefix_sum);
    if (!p) return p.error();
    h.recv_gbl_rank_prefix_sum = as_ints(*p);
  } else if (r.handle) {
    auto m = ep::to_host(r.handle->rank_prefix_matrix);
    if (!m) return m.error();
    h.rank_prefix_matrix = as_ints(*m);
  }
  h.per_expert = r.num_recv_tokens_per_expert;
  return h;
}

Result<HostDispatch> copy_reference(const ReferenceDispatch& r) {
  HostDispatch h;
  h.rows = r.num_recv_tokens;
  using Pair = std::pair<const ep::DeviceTensor*, HostTensor*>;
  const Pair outputs[] = {{&r.recv_x, &h.recv_x},
                          {&r.recv_x_scales, &h.recv_x_scales},
                          {&r.recv_topk_idx, &h.recv_topk_idx},
                          {&r.recv_topk_weights, &h.recv_topk_weights},
                          {&r.recv_src_idx, &h.recv_src_idx}};
  for (auto [from, to] : outputs) {
    auto t = copy(from->view);
    if (!t) return t.error();
    *to = std::move(*t);
  }
  h.rank_prefix_matrix = r.rank_prefix_matrix;
  h.per_expert = r.num_recv_tokens_per_expert;
  return h;
}

}  // namespace epkit::harness::detail
