// epkit._C: the per-call path of epkit.deep_ep in C++, a PyTorch extension
// over the engine's C ABI (include/epkit/ep_c.h).
//
// Why it exists: through ctypes a call paid for Python-built argument
// structs, a torch.empty and a copy launch per output and event objects:
// 2.5-4x DeepEP's host time per call while the engine's own C++ call costs a
// few microseconds (docs/performance.md). Here the descriptors, the outputs
// (PyTorch's caching allocator, on the caller's stream or the Buffer's) and
// the stream bookkeeping cost about what DeepEP's own pybind layer does.
//
// It links no copy of the engine: epkit._native loads libepkit_ep.so with
// RTLD_GLOBAL before this module is imported and its C ABI symbols resolve
// from there, so the ctypes fallback and this path share one Buffer.
// Built against the installed PyTorch by epkit/_build_ext.py.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <epkit/ep_c.h>
#include <pybind11/stl.h>
#include <sys/types.h>
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "arena.h"

namespace py = pybind11;

namespace {

using OptTensor = std::optional<at::Tensor>;

// epkit._native.EngineError, taken once at import and kept for the process.
PyObject* g_engine_error = nullptr;

py::str text(const char* s) {
  // The engine's messages may quote bytes from outside (a device name):
  // decode with replacement, never fail on them.
  PyObject* u = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(std::strlen(s)), "replace");
  if (u == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(u);
}

[[noreturn]] void raise_status(epkit_ep_status status) {
  py::object cls = py::reinterpret_borrow<py::object>(g_engine_error);
  py::object err = cls(text(epkit_ep_status_name(status)), text(epkit_ep_last_error()));
  PyErr_SetObject(g_engine_error, err.ptr());
  throw py::error_already_set();
}

inline void check(epkit_ep_status status) {
  if (status != EPKIT_EP_OK) raise_status(status);
}

[[noreturn]] void value_error(const std::string& message) {
  throw py::value_error(message);
}

std::int32_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return EPKIT_EP_BF16;
    case at::kFloat8_e4m3fn:
      return EPKIT_EP_FP8_E4M3;
    case at::kFloat:
      return EPKIT_EP_FP32;
    case at::kInt:
      return EPKIT_EP_INT32;
    case at::kLong:
      return EPKIT_EP_INT64;
    case at::kBool:
      return EPKIT_EP_BOOL;
    default:
      return -1;
  }
}

at::ScalarType scalar_type(std::int32_t code) {
  switch (code) {
    case EPKIT_EP_BF16:
      return at::kBFloat16;
    case EPKIT_EP_FP8_E4M3:
      return at::kFloat8_e4m3fn;
    case EPKIT_EP_FP32:
      return at::kFloat;
    case EPKIT_EP_INT32:
      return at::kInt;
    case EPKIT_EP_INT64:
      return at::kLong;
    case EPKIT_EP_BOOL:
      return at::kBool;
    default:
      value_error("the engine returned an unknown dtype " + std::to_string(code));
  }
}

/// Present: the C ABI's "given" (memory, or a shaped empty matrix).
bool present(const epkit_ep_tensor& v) {
  return v.ndim > 0;
}

std::vector<std::int64_t> shape_of(const epkit_ep_tensor& v) {
  return std::vector<std::int64_t>(v.shape, v.shape + v.ndim);
}

/// epkit.deep_ep's Python types the low-latency calls return, given once by
/// the package (set_types) and kept for the process, as g_engine_error.
struct PythonTypes {
  PyObject* low_latency_handle = nullptr;  // a tuple subclass: cls(items)
  PyObject* event_overlap = nullptr;       // EventOverlap (class defaults: no event)
  PyObject* event_handle = nullptr;        // EventHandle(ptr)
  PyObject* object_new = nullptr;          // object.__new__

  py::object call(PyObject* callable, const py::handle& arg) const {
    PyObject* r = PyObject_CallOneArg(callable, arg.ptr());
    if (r == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(r);
  }
  py::object low_latency_handle_of(const py::tuple& items) const {
    return call(low_latency_handle, items);
  }
};
PythonTypes g_types;

const PythonTypes& python_types() {
  if (g_types.low_latency_handle == nullptr)
    throw std::runtime_error("epkit._C: set_types was not called (epkit.deep_ep does at import)");
  return g_types;
}

/// DeepEP's EventOverlap for an event the engine made (ptr), or one with
/// none: made without __init__, its class's defaults are its fields (a
/// Python frame per call is a tenth of a low-latency call's host cost).
py::object event_overlap(void* ptr) {
  const PythonTypes& t = python_types();
  if (ptr == nullptr) return t.call(t.object_new, py::handle(t.event_overlap));
  py::object handle = t.call(t.event_handle, py::int_(reinterpret_cast<std::intptr_t>(ptr)));
  return t.call(t.event_overlap, handle);
}

/// A receive hook (DeepEP's `hook()`): its first call launches the receive
/// half, later ones raise; the call's tensors stay referenced until then.
/// A C++ object so that a hooked call costs one more step into C++, not a
/// Python object whose call makes two.
class Hook {
 public:
  Hook(epkit_ep_hook* hook, std::vector<at::Tensor> keep) : m_hook(hook), m_keep(std::move(keep)) {}
  Hook(const Hook&) = delete;
  Hook& operator=(const Hook&) = delete;
  ~Hook() {
    if (m_hook != nullptr) epkit_ep_hook_release(m_hook);
  }

  void call() {
    if (m_hook == nullptr) value_error("the hook was called already");
    epkit_ep_hook* hook = m_hook;
    m_hook = nullptr;
    const epkit_ep_status status = epkit_ep_hook_call(hook);
    epkit_ep_hook_release(hook);
    m_keep.clear();
    check(status);
  }

 private:
  epkit_ep_hook* m_hook;
  std::vector<at::Tensor> m_keep;
};

py::object make_hook(epkit_ep_hook* hook, std::vector<at::Tensor> keep) {
  return py::cast(new Hook(hook, std::move(keep)), py::return_value_policy::take_ownership);
}

/// Owns one reference to a dispatch handle until it is handed to Python.
class HandleRef {
 public:
  explicit HandleRef(epkit_ep_handle* h) : m_h(h) {}
  HandleRef(const HandleRef&) = delete;
  HandleRef& operator=(const HandleRef&) = delete;
  ~HandleRef() {
    if (m_h != nullptr) epkit_ep_handle_release(m_h);
  }
  epkit_ep_handle* get() const { return m_h; }
  epkit_ep_handle* release() {
    epkit_ep_handle* h = m_h;
    m_h = nullptr;
    return h;
  }

 private:
  epkit_ep_handle* m_h;
};

// The live Buffers' output arenas, for epkit_arena_free (which only gets a
// pointer), and the one the allocation under way on this thread draws from.
std::mutex g_arenas_mutex;
std::vector<std::shared_ptr<epkit_ext::OutputArena>> g_arenas;
thread_local epkit_ext::OutputArena* t_arena = nullptr;

/// Allocations on `stream` in this scope come from the Buffer's MemPool,
/// whose segments epkit_arena_alloc carves from its arena.
class PoolScope {
 public:
  PoolScope(c10::DeviceIndex device, c10::cuda::MempoolId_t pool, cudaStream_t stream,
            epkit_ext::OutputArena* arena)
      : m_device(device), m_pool(pool) {
    c10::cuda::CUDACachingAllocator::beginAllocateToPool(
        device, pool, [stream](cudaStream_t s) { return s == stream; });
    t_arena = arena;
  }
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;
  ~PoolScope() {
    t_arena = nullptr;
    // begin took a reference to the pool (as torch.cuda.use_mem_pool does).
    c10::cuda::CUDACachingAllocator::endAllocateToPool(m_device, m_pool);
    c10::cuda::CUDACachingAllocator::releasePool(m_device, m_pool);
  }

 private:
  c10::DeviceIndex m_device;
  c10::cuda::MempoolId_t m_pool;
};

/// With allocate_on_comm_stream, outputs come from the Buffer's stream's
/// pool (DeepEP's rule); otherwise from the caller's current stream's.
class AllocationScope {
 public:
  AllocationScope(bool on_comm, const c10::cuda::CUDAStream& comm) {
    if (on_comm) m_guard.emplace(comm);
  }

 private:
  std::optional<c10::cuda::CUDAStreamGuard> m_guard;
};

/// One Buffer's calls. The Buffer itself is owned by the Python object
/// (epkit.deep_ep.Buffer), which calls close() before destroying it.
class Engine {
 public:
  Engine(std::int64_t runtime, int device, std::int64_t comm_stream, int ranks, int nodes)
      : m_rt(reinterpret_cast<epkit_ep_buffer*>(runtime)),
        m_device(static_cast<c10::DeviceIndex>(device)),
        m_comm(c10::cuda::getStreamFromExternal(reinterpret_cast<cudaStream_t>(comm_stream),
                                                static_cast<c10::DeviceIndex>(device))),
        m_ranks(ranks),
        m_nodes(nodes) {
    if (m_rt == nullptr) value_error("epkit._C.Engine: no Buffer");
  }

  ~Engine() { drop_arena(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void close() {
    drop_arena();
    m_rt = nullptr;
    m_views.clear();
  }

  /// Dispatch outputs from now on come from `pool` (a torch.cuda.MemPool
  /// over epkit_arena_alloc/free, made by the Python Buffer), inside the
  /// Buffer's output arena: the senders write them directly.
  void use_arena(const py::tuple& pool_id) {
    void* data = nullptr;
    std::uint64_t bytes = 0;
    check(epkit_ep_output_arena(live(), &data, &bytes));
    if (data == nullptr || bytes < epkit_ext::OutputArena::k_granule)
      value_error("the Buffer has no output arena");
    if (pool_id.size() != 2) value_error("use_arena takes a MemPool's id (a pair)");
    drop_arena();
    m_arena = std::make_shared<epkit_ext::OutputArena>(data, static_cast<std::size_t>(bytes));
    m_pool = c10::cuda::MempoolId_t{pool_id[0].cast<unsigned long long>(),
                                    pool_id[1].cast<unsigned long long>()};
    std::lock_guard<std::mutex> lock(g_arenas_mutex);
    g_arenas.push_back(m_arena);
  }

  /// Bytes of the arena in segments (what the pool holds, live or cached).
  std::int64_t arena_in_use() const {
    return m_arena ? static_cast<std::int64_t>(m_arena->in_use()) : -1;
  }

  /// get_dispatch_layout's tensors and event.
  struct Layout {
    at::Tensor per_rank, per_node, per_expert, in_rank, copy;
    void* event = nullptr;
  };

  /// copy_topk: also a copy of topk_idx, written by the layout kernel
  /// (ElasticBuffer's handle copy without a launch of its own).
  py::tuple layout(const at::Tensor& topk_idx, std::int64_t num_experts, std::int64_t previous,
                   bool async_finish, bool alloc_on_comm, bool copy_topk) {
    Layout l = make_layout(topk_idx, num_experts, previous, async_finish, alloc_on_comm, copy_topk);
    return py::make_tuple(l.per_rank, optional(l.per_node), l.per_expert, l.in_rank,
                          reinterpret_cast<std::int64_t>(l.event), optional(l.copy));
  }

  /// ElasticBuffer's plain dispatch in one step into C++: the layout (with
  /// the handle's copy of topk_idx when asked) and the dispatch, on the
  /// current stream, no event. dispatch's tuple, then is_token_in_rank and
  /// the copy (None when not asked).
  py::tuple layout_dispatch(const at::Tensor& x, const OptTensor& x_scales,
                            const at::Tensor& topk_idx, const OptTensor& topk_weights,
                            std::int64_t num_experts, std::int64_t expert_alignment,
                            std::int64_t num_worst_tokens, std::int64_t num_sms,
                            std::int64_t num_warps, std::int64_t nvl_chunk, bool copy_topk) {
    Layout l = make_layout(topk_idx, num_experts, 0, false, false, copy_topk);
    py::tuple d = dispatch(x, x_scales, 0, l.per_rank, l.in_rank, l.per_expert, topk_idx,
                           topk_weights, expert_alignment, num_worst_tokens, num_sms, num_warps,
                           nvl_chunk, 0, false, false);
    py::tuple result(d.size() + 2);
    for (std::size_t i = 0; i < d.size(); ++i) result[i] = d[i];
    result[d.size()] = py::cast(l.in_rank);
    result[d.size() + 1] = optional(l.copy);
    return result;
  }

  py::tuple dispatch(const at::Tensor& x, const OptTensor& x_scales, std::int64_t handle,
                     const OptTensor& num_tokens_per_rank, const OptTensor& is_token_in_rank,
                     const OptTensor& num_tokens_per_expert, const OptTensor& topk_idx,
                     const OptTensor& topk_weights, std::int64_t expert_alignment,
                     std::int64_t num_worst_tokens, std::int64_t num_sms, std::int64_t num_warps,
                     std::int64_t nvl_chunk, std::int64_t previous, bool async_finish,
                     bool alloc_on_comm) {
    epkit_ep_buffer* rt = live();
    const bool cached = handle != 0;
    epkit_ep_dispatch_args a{};
    a.x = describe(x, "x");
    if (x_scales) a.x_scales = describe(*x_scales, "x_scales");
    if (cached) {
      a.handle = reinterpret_cast<const epkit_ep_handle*>(handle);
    } else {
      if (num_tokens_per_rank)
        a.num_tokens_per_rank = describe(*num_tokens_per_rank, "num_tokens_per_rank");
      if (is_token_in_rank) a.is_token_in_rank = describe(*is_token_in_rank, "is_token_in_rank");
      if (num_tokens_per_expert)
        a.num_tokens_per_expert = describe(*num_tokens_per_expert, "num_tokens_per_expert");
      if (topk_idx) a.topk_idx = describe(*topk_idx, "topk_idx");
      if (topk_weights) a.topk_weights = describe(*topk_weights, "topk_weights");
    }
    a.expert_alignment = static_cast<std::int32_t>(expert_alignment);
    a.num_worst_tokens = static_cast<std::int32_t>(num_worst_tokens);
    a.config = config_of(num_sms, num_warps, nvl_chunk);
    // The copy of what the senders could not write finishes the operation
    // (nothing, usually): the dispatch itself neither makes the caller's
    // stream wait nor an event.
    a.order = order_of(previous, true, false);
    // The outputs are allocated once the engine knows the row count (the
    // into callback), from the arena's pool when there is one.
    Outputs o;
    o.engine = this;
    o.cached = cached;
    o.alloc_on_comm = alloc_on_comm;
    o.x_type = x.scalar_type();
    o.hidden = x.dim() == 2 ? x.size(1) : 0;
    o.scales = x_scales.has_value();
    o.topk = !cached && topk_idx.has_value() && topk_idx->dim() == 2;
    o.num_topk = o.topk ? topk_idx->size(1) : 0;
    o.topk_type = o.topk ? topk_idx->scalar_type() : at::kLong;
    o.weights = o.topk && topk_weights.has_value();
    a.into = &Engine::into_callback;
    a.into_user = &o;
    epkit_ep_dispatch_out out{};
    check(epkit_ep_dispatch(rt, &a, &out));
    HandleRef ref(out.handle);

    // What the caller gets, in DeepEP's order; absent ones stay undefined.
    std::array<epkit_ep_tensor, 6> views{out.recv_x,        out.recv_x_scales,
                                         out.recv_topk_idx, out.recv_topk_weights,
                                         out.recv_src_idx,  epkit_ep_tensor{}};
    if (cached) {
      views[2] = views[3] = views[4] = epkit_ep_tensor{};
    } else {
      epkit_ep_handle_info info{};
      check(epkit_ep_handle_info_get(ref.get(), &info));
      views[5] = m_nodes > 1 ? info.recv_gbl_rank_prefix_sum : info.rank_prefix_matrix;
    }
    // Results the engine wrote into o's tensors are final; the others are
    // copied out of the Buffer into tensors of their own (one launch).
    std::array<at::Tensor, 6> tensors;
    std::array<epkit_ep_tensor, 6> dst{};
    std::array<epkit_ep_tensor, 6> src{};
    int n = 0;
    {
      AllocationScope scope(alloc_on_comm, m_comm);
      for (std::size_t i = 0; i < views.size(); ++i) {
        if (!present(views[i])) continue;
        if ((out.written & (1u << i)) != 0) {
          tensors[i] = o.t[i];
          continue;
        }
        const std::vector<std::int64_t> shape = shape_of(views[i]);
        const at::ScalarType type = scalar_type(views[i].dtype);
        tensors[i] = o.t[i].defined() && o.t[i].sizes() == at::IntArrayRef(shape) &&
                             o.t[i].scalar_type() == type
                         ? o.t[i]
                         : empty(shape, type);
        dst[static_cast<std::size_t>(n)] = describe(tensors[i], "output");
        src[static_cast<std::size_t>(n)] = views[i];
        ++n;
      }
    }
    epkit_ep_order finish = order_of(0, async_finish, async_finish);
    void* event = nullptr;
    check(epkit_ep_copy(rt, n, dst.data(), src.data(), &finish, &event));
    record(async_finish, alloc_on_comm,
           {x, value(x_scales), value(topk_idx), value(topk_weights), value(num_tokens_per_rank),
            value(is_token_in_rank), value(num_tokens_per_expert)},
           {tensors[0], tensors[1], tensors[2], tensors[3], tensors[4], tensors[5]});

    py::list counts;
    for (std::int32_t e = 0; e < out.num_local_experts; ++e)
      counts.append(out.num_recv_tokens_per_expert[e]);
    const std::int64_t rows = out.num_recv_tokens >= 0 ? out.num_recv_tokens : num_worst_tokens;
    // A cached dispatch hands back a new reference to the caller's handle:
    // dropped here (HandleRef), the caller keeps its own.
    const std::int64_t new_handle = cached ? 0 : reinterpret_cast<std::int64_t>(ref.release());
    return py::make_tuple(tensors[0], optional(tensors[1]), optional(tensors[2]),
                          optional(tensors[3]), optional(tensors[4]), optional(tensors[5]), counts,
                          new_handle, rows, reinterpret_cast<std::int64_t>(event));
  }

  py::tuple combine(const at::Tensor& x, const OptTensor& topk_weights, std::int64_t handle,
                    const OptTensor& bias_0, const OptTensor& bias_1, std::int64_t num_sms,
                    std::int64_t num_warps, std::int64_t nvl_chunk, std::int64_t previous,
                    bool async_finish, bool alloc_on_comm) {
    epkit_ep_buffer* rt = live();
    if (handle == 0) value_error("combine needs the handle of a dispatch");
    if (x.dim() != 2) value_error("x must be a matrix [received, hidden]");
    epkit_ep_handle_info info{};
    check(epkit_ep_handle_info_get(reinterpret_cast<const epkit_ep_handle*>(handle), &info));
    epkit_ep_combine_args a{};
    a.x = describe(x, "x");
    if (topk_weights) {
      if (topk_weights->dim() != 2) value_error("topk_weights must be a matrix [received, topk]");
      a.topk_weights = describe(*topk_weights, "topk_weights");
    }
    a.handle = reinterpret_cast<const epkit_ep_handle*>(handle);
    if (bias_0) a.bias[0] = describe(*bias_0, "bias_0");
    if (bias_1) a.bias[1] = describe(*bias_1, "bias_1");
    a.config = config_of(num_sms, num_warps, nvl_chunk);
    a.order = order_of(previous, async_finish, async_finish);
    at::Tensor combined_x, combined_w;
    {
      AllocationScope scope(alloc_on_comm, m_comm);
      combined_x = empty({info.num_tokens, x.size(1)}, at::kBFloat16);
      if (topk_weights) combined_w = empty({info.num_tokens, topk_weights->size(1)}, at::kFloat);
    }
    a.out_x = describe(combined_x, "combined_x");
    if (combined_w.defined()) a.out_topk_weights = describe(combined_w, "combined_topk_weights");
    epkit_ep_combine_out out{};
    check(epkit_ep_combine(rt, &a, &out));
    record(async_finish, alloc_on_comm, {x, value(topk_weights), value(bias_0), value(bias_1)},
           {combined_x, combined_w});
    return py::make_tuple(combined_x, optional(combined_w),
                          reinterpret_cast<std::int64_t>(out.event));
  }

  /// DeepEP's low_latency_dispatch, its whole result: (recv_x or (recv_x,
  /// scales), recv_count, LowLatencyHandle, EventOverlap, hook or None).
  /// Built here rather than in Python: a low-latency call's host cost is a
  /// few microseconds, so every Python object and frame on the way shows.
  py::tuple low_latency_dispatch(const at::Tensor& x, const at::Tensor& topk_idx,
                                 std::int64_t max_tokens, std::int64_t num_experts,
                                 const OptTensor& cumulative_stats, const OptTensor& wait_stats,
                                 bool use_fp8, bool round_scale, bool use_ue8m0, bool async_finish,
                                 bool return_recv_hook, std::int64_t num_sms) {
    epkit_ep_buffer* rt = live();
    if (async_finish && return_recv_hook)
      value_error("async_finish and return_recv_hook exclude each other");
    epkit_ep_ll_dispatch_args a{};
    a.x = describe(x, "x");
    a.topk_idx = describe(topk_idx, "topk_idx");
    a.num_max_dispatch_tokens_per_rank = static_cast<std::int32_t>(max_tokens);
    a.num_experts = static_cast<std::int32_t>(num_experts);
    a.use_fp8 = use_fp8;
    a.round_scale = round_scale;
    a.use_ue8m0 = use_ue8m0;
    if (cumulative_stats)
      a.cumulative_local_expert_recv_stats =
          describe(*cumulative_stats, "cumulative_local_expert_recv_stats");
    if (wait_stats)
      a.dispatch_wait_recv_cost_stats = describe(*wait_stats, "dispatch_wait_recv_cost_stats");
    a.return_recv_hook = return_recv_hook;
    a.num_sms = static_cast<std::int32_t>(num_sms);
    a.order = order_of(0, async_finish, async_finish);
    epkit_ep_ll_dispatch_out out{};
    check(epkit_ep_ll_dispatch(rt, &a, &out));
    // Views into the Buffer's low-latency region, as DeepEP returns them:
    // valid until the low-latency call two calls later.
    py::object recv_x = py::cast(view(out.recv_x));
    if (use_fp8) recv_x = py::make_tuple(recv_x, optional(view(out.recv_x_scales)));
    py::tuple items = py::make_tuple(view(out.handle.src_info), view(out.handle.layout_range),
                                     max_tokens, x.dim() == 2 ? x.size(1) : 0, num_experts);
    py::object handle = python_types().low_latency_handle_of(items);
    handle.attr("native") =
        py::bytes(reinterpret_cast<const char*>(&out.handle), sizeof(out.handle));
    py::object hook = py::none();
    if (out.hook != nullptr)
      hook = make_hook(out.hook, {x, topk_idx, value(cumulative_stats), value(wait_stats)});
    return py::make_tuple(recv_x, view(out.recv_count), handle, event_overlap(out.event), hook);
  }

  /// DeepEP's low_latency_combine: (out, EventOverlap, hook or None).
  py::tuple low_latency_combine(const OptTensor& x, const at::Tensor& topk_idx,
                                const at::Tensor& topk_weights, const py::object& handle,
                                bool zero_copy, bool async_finish, bool return_recv_hook,
                                const OptTensor& out_given, const OptTensor& wait_stats,
                                std::int64_t num_sms) {
    epkit_ep_buffer* rt = live();
    if (async_finish && return_recv_hook)
      value_error("async_finish and return_recv_hook exclude each other");
    epkit_ep_ll_combine_args a{};
    // The engine's handle travels as bytes on DeepEP's tuple (`native`).
    PyObject* raw = PyObject_GetAttrString(handle.ptr(), "native");
    if (raw == nullptr) PyErr_Clear();
    py::object owned = py::reinterpret_steal<py::object>(raw);
    if (raw == nullptr || !PyBytes_Check(raw) ||
        PyBytes_GET_SIZE(raw) != static_cast<Py_ssize_t>(sizeof(a.handle)))
      throw py::type_error("the handle must come from epkit.deep_ep.Buffer.low_latency_dispatch");
    std::memcpy(&a.handle, PyBytes_AS_STRING(raw), sizeof(a.handle));
    if (x && !zero_copy) a.x = describe(*x, "x");
    a.topk_idx = describe(topk_idx, "topk_idx");
    a.topk_weights = describe(topk_weights, "topk_weights");
    at::Tensor out = out_given ? *out_given : at::Tensor();
    if (!out.defined()) {
      if (topk_idx.dim() != 2) value_error("topk_idx must be a matrix [tokens, topk]");
      out = empty({topk_idx.size(0), a.handle.hidden}, at::kBFloat16);
    }
    a.out = describe(out, "out");
    if (wait_stats)
      a.combine_wait_recv_cost_stats = describe(*wait_stats, "combine_wait_recv_cost_stats");
    a.zero_copy = zero_copy;
    a.return_recv_hook = return_recv_hook;
    a.num_sms = static_cast<std::int32_t>(num_sms);
    a.order = order_of(0, async_finish, async_finish);
    epkit_ep_ll_combine_out result{};
    check(epkit_ep_ll_combine(rt, &a, &result));
    py::object hook = py::none();
    if (result.hook != nullptr)
      hook = make_hook(result.hook, {value(x), topk_idx, topk_weights, out, value(wait_stats)});
    return py::make_tuple(out, event_overlap(result.event), hook);
  }

 private:
  Layout make_layout(const at::Tensor& topk_idx, std::int64_t num_experts, std::int64_t previous,
                     bool async_finish, bool alloc_on_comm, bool copy_topk) {
    epkit_ep_buffer* rt = live();
    epkit_ep_tensor idx = describe(topk_idx, "topk_idx");
    if (topk_idx.dim() != 2) value_error("topk_idx must be a matrix [tokens, topk]");
    if (num_experts < 1 || num_experts > (1 << 20))
      value_error("num_experts must be positive (got " + std::to_string(num_experts) + ")");
    const std::int64_t tokens = topk_idx.size(0);
    at::Tensor per_rank, per_expert, in_rank, per_node, copy;
    {
      AllocationScope scope(alloc_on_comm, m_comm);
      per_rank = empty({m_ranks}, at::kInt);
      per_expert = empty({num_experts}, at::kInt);
      in_rank = empty({tokens, m_ranks}, at::kBool);
      if (m_nodes > 1) per_node = empty({m_nodes}, at::kInt);
      if (copy_topk) copy = empty({tokens, topk_idx.size(1)}, topk_idx.scalar_type());
    }
    epkit_ep_layout_out into{};
    into.num_tokens_per_rank = describe(per_rank, "num_tokens_per_rank");
    into.num_tokens_per_expert = describe(per_expert, "num_tokens_per_expert");
    into.is_token_in_rank = describe(in_rank, "is_token_in_rank");
    if (per_node.defined())
      into.num_tokens_per_rdma_rank = describe(per_node, "num_tokens_per_rdma_rank");
    if (copy.defined()) into.topk_idx_copy = describe(copy, "topk_idx_copy");
    epkit_ep_order order = order_of(previous, async_finish, async_finish);
    epkit_ep_layout_out out{};
    check(epkit_ep_layout_into(rt, &idx, static_cast<std::int32_t>(num_experts), &order, &into,
                               &out));
    record(async_finish, alloc_on_comm, {topk_idx},
           {per_rank, per_expert, in_rank, per_node, copy});
    return Layout{per_rank, per_node, per_expert, in_rank, copy, out.event};
  }

  /// One dispatch's outputs, asked for by the engine once it knows the rows.
  struct Outputs {
    Engine* engine = nullptr;
    bool cached = false;
    bool alloc_on_comm = false;
    bool scales = false;
    bool topk = false;
    bool weights = false;
    at::ScalarType x_type = at::kBFloat16;
    at::ScalarType topk_type = at::kLong;
    std::int64_t hidden = 0;
    std::int64_t num_topk = 0;
    std::array<at::Tensor, 6> t;  // DeepEP's order; [5] the prefix matrix
  };

  // Called by the engine inside epkit_ep_dispatch (this thread, GIL held):
  // nothing may escape into C.
  static int into_callback(void* user, std::int64_t rows, epkit_ep_dispatch_into* into) {
    auto* o = static_cast<Outputs*>(user);
    try {
      o->engine->allocate(*o, rows, *into);
      return 0;
    } catch (...) {
      o->t = {};
      std::memset(into, 0, sizeof(*into));
      return 1;
    }
  }

  void allocate(Outputs& o, std::int64_t rows, epkit_ep_dispatch_into& into) {
    AllocationScope scope(o.alloc_on_comm, m_comm);
    auto make = [&] {
      o.t[0] = empty({rows, o.hidden}, o.x_type);
      if (o.scales) o.t[1] = empty({rows, o.hidden / 128}, at::kFloat);
      if (o.topk) {
        o.t[2] = empty({rows, o.num_topk}, o.topk_type);
        if (o.weights) o.t[3] = empty({rows, o.num_topk}, at::kFloat);
      }
      o.t[4] = empty({rows}, at::kInt);
    };
    bool pooled = false;
    if (m_arena && m_arena_pause == 0) {
      const cudaStream_t stream = at::cuda::getCurrentCUDAStream(m_device).stream();
      try {
        PoolScope pool(m_device, m_pool, stream, m_arena.get());
        make();
        pooled = true;
        m_arena_misses = 0;
      } catch (const c10::OutOfMemoryError&) {
        // The arena is full: the caller holds many outputs (training keeps
        // them for the backward pass). These outputs go elsewhere and are
        // copied; the pool is tried again after a pause that doubles while
        // it stays full (each miss costs the caching allocator a search).
        o.t = {};
        m_arena_pause = std::min(1 << std::min(m_arena_misses, 10), 1024);
        ++m_arena_misses;
      }
    } else if (m_arena_pause > 0) {
      --m_arena_pause;
    }
    if (!pooled) make();
    if (!o.cached && m_nodes == 1) o.t[5] = empty({m_ranks, m_ranks}, at::kInt);
    epkit_ep_tensor* slots[6] = {&into.recv_x,        &into.recv_x_scales,
                                 &into.recv_topk_idx, &into.recv_topk_weights,
                                 &into.recv_src_idx,  &into.rank_prefix_matrix};
    for (std::size_t i = 0; i < o.t.size(); ++i)
      if (o.t[i].defined()) *slots[i] = describe(o.t[i], "output");
  }

  void drop_arena() {
    if (!m_arena) return;
    std::lock_guard<std::mutex> lock(g_arenas_mutex);
    g_arenas.erase(std::remove(g_arenas.begin(), g_arenas.end(), m_arena), g_arenas.end());
    m_arena.reset();
  }

  epkit_ep_buffer* live() const {
    if (m_rt == nullptr) value_error("the Buffer was destroyed");
    return m_rt;
  }

  epkit_ep_tensor describe(const at::Tensor& t, const char* name) const {
    if (!t.defined()) value_error(std::string(name) + " is not a tensor");
    if (!t.is_cuda() || t.get_device() != m_device)
      value_error(std::string(name) +
                  " must be a tensor on the Buffer's GPU (cuda:" + std::to_string(m_device) + ")");
    const std::int32_t code = dtype_code(t.scalar_type());
    if (code < 0)
      value_error(std::string(name) + " has dtype " + std::string(c10::toString(t.scalar_type())) +
                  ", which epkit's engine does not take");
    const std::int64_t nd = t.dim();
    if (nd < 1 || nd > 3) value_error(std::string(name) + " must have 1 to 3 dimensions");
    epkit_ep_tensor d{};
    d.data = t.numel() > 0 ? t.data_ptr() : nullptr;
    d.dtype = code;
    d.ndim = static_cast<std::int32_t>(nd);
    for (std::int64_t i = 0; i < nd; ++i) {
      d.shape[i] = t.size(i);
      d.strides[i] = t.stride(i);
    }
    return d;
  }

  /// A tensor over one of the engine's views (no copy, no ownership). The
  /// low-latency region's views repeat (two buffers, a few shapes): the
  /// tensors are kept and handed out again, a lookup instead of a TensorImpl
  /// per output per call.
  at::Tensor view(const epkit_ep_tensor& v) {
    if (!present(v)) return at::Tensor();
    for (const auto& [key, tensor] : m_views)
      if (same_view(key, v)) return tensor;
    std::vector<std::int64_t> strides(v.strides, v.strides + v.ndim);
    at::Tensor t =
        at::from_blob(v.data, shape_of(v), strides,
                      at::TensorOptions().dtype(scalar_type(v.dtype)).device(at::kCUDA, m_device));
    if (m_views.size() >= k_max_views) m_views.erase(m_views.begin());
    m_views.emplace_back(v, t);
    return t;
  }

  static bool same_view(const epkit_ep_tensor& a, const epkit_ep_tensor& b) {
    return a.data == b.data && a.dtype == b.dtype && a.ndim == b.ndim &&
           std::memcmp(a.shape, b.shape, sizeof a.shape) == 0 &&
           std::memcmp(a.strides, b.strides, sizeof a.strides) == 0;
  }

  at::Tensor empty(at::IntArrayRef shape, at::ScalarType type) const {
    return at::empty(shape, at::TensorOptions().dtype(type).device(at::kCUDA, m_device));
  }

  epkit_ep_order order_of(std::int64_t previous, bool async_finish, bool want_event) const {
    epkit_ep_order o{};
    o.stream = at::cuda::getCurrentCUDAStream(m_device).stream();
    o.previous = reinterpret_cast<void*>(previous);
    o.async_finish = async_finish;
    o.want_event = want_event;
    return o;
  }

  static epkit_ep_config config_of(std::int64_t sms, std::int64_t warps, std::int64_t chunk) {
    epkit_ep_config c{};
    c.num_sms = static_cast<std::int32_t>(sms);
    c.num_warps = static_cast<std::int32_t>(warps);
    c.nvl_chunk = static_cast<std::int32_t>(chunk);
    return c;
  }

  /// DeepEP's record_stream rules: with async_finish the Buffer's stream
  /// uses every tensor past the call; outputs allocated on it are also used
  /// by the caller's stream.
  void record(bool async_finish, bool alloc_on_comm, std::initializer_list<at::Tensor> inputs,
              std::initializer_list<at::Tensor> outputs) const {
    if (!async_finish) return;
    const c10::Stream comm = m_comm.unwrap();
    for (const at::Tensor& t : inputs)
      if (t.defined()) t.record_stream(comm);
    const c10::Stream compute = at::cuda::getCurrentCUDAStream(m_device).unwrap();
    for (const at::Tensor& t : outputs) {
      if (!t.defined()) continue;
      t.record_stream(comm);
      if (alloc_on_comm) t.record_stream(compute);
    }
  }

  static at::Tensor value(const OptTensor& t) { return t ? *t : at::Tensor(); }
  static py::object optional(const at::Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

  static constexpr std::size_t k_max_views = 32;
  std::vector<std::pair<epkit_ep_tensor, at::Tensor>> m_views;
  std::shared_ptr<epkit_ext::OutputArena> m_arena;
  c10::cuda::MempoolId_t m_pool{0, 0};
  int m_arena_pause = 0;   // dispatches left before the pool is tried again
  int m_arena_misses = 0;  // misses in a row
  epkit_ep_buffer* m_rt;
  c10::DeviceIndex m_device;
  c10::cuda::CUDAStream m_comm;
  int m_ranks;
  int m_nodes;
};

}  // namespace

// The segment allocator of the MemPool over a Buffer's output arena, for
// torch.cuda.memory.CUDAPluggableAllocator (which looks these names up in
// this file). Segments are asked for only while a dispatch allocates its
// outputs (PoolScope sets the arena); they come back at any time.
extern "C" __attribute__((visibility("default"))) void* epkit_arena_alloc(ssize_t size, int device,
                                                                          cudaStream_t stream) {
  (void)device;
  (void)stream;
  epkit_ext::OutputArena* arena = t_arena;
  return arena != nullptr && size > 0 ? arena->allocate(static_cast<std::size_t>(size)) : nullptr;
}

extern "C" __attribute__((visibility("default"))) void epkit_arena_free(void* ptr, ssize_t size,
                                                                        int device,
                                                                        cudaStream_t stream) {
  (void)size;
  (void)device;
  (void)stream;
  std::lock_guard<std::mutex> lock(g_arenas_mutex);
  for (const auto& arena : g_arenas)
    if (arena->release(ptr)) return;
  // A segment of a Buffer destroyed since: its memory went with the Buffer.
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "epkit.deep_ep's per-call path over the engine's C ABI";
  py::object engine_error = py::module_::import("epkit._native").attr("EngineError");
  g_engine_error = engine_error.release().ptr();
  m.attr("ABI_VERSION") = EPKIT_EP_ABI_VERSION;
  py::class_<Engine>(m, "Engine")
      .def(py::init<std::int64_t, int, std::int64_t, int, int>())
      .def("close", &Engine::close)
      .def("use_arena", &Engine::use_arena)
      .def("arena_in_use", &Engine::arena_in_use)
      .def("layout", &Engine::layout)
      .def("layout_dispatch", &Engine::layout_dispatch)
      .def("dispatch", &Engine::dispatch)
      .def("combine", &Engine::combine)
      .def("low_latency_dispatch", &Engine::low_latency_dispatch)
      .def("low_latency_combine", &Engine::low_latency_combine);
  py::class_<Hook>(m, "Hook").def("__call__", &Hook::call);
  m.def("set_types", [](const py::object& low_latency_handle, const py::object& event_overlap,
                        const py::object& event_handle) {
    g_types.low_latency_handle = low_latency_handle.inc_ref().ptr();
    g_types.event_overlap = event_overlap.inc_ref().ptr();
    g_types.event_handle = event_handle.inc_ref().ptr();
    py::object object_new = py::module_::import("builtins").attr("object").attr("__new__");
    g_types.object_new = object_new.release().ptr();
  });
  m.def("event_destroy",
        [](std::int64_t event) { epkit_ep_event_destroy(reinterpret_cast<void*>(event)); });
}
