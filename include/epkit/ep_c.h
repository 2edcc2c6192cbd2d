/* epkit's EP engine as a plain C ABI (libepkit_ep.so): what Python (ctypes),
 * Rust or a JAX FFI call. A thin layer over include/epkit/ep.h, which stays
 * the source of truth for semantics (docs/ep-engine.md).
 *
 * Conventions:
 * - Every function returns an epkit_ep_status; on failure the calling
 *   thread's epkit_ep_last_error() names the cause. Nothing throws.
 * - Objects are opaque handles freed by their *_destroy / *_release.
 * - Tensors are described, never owned: pointer, dtype, rank 1 or 2, shape,
 *   strides in elements. Output tensors are views into memory the Buffer
 *   owns, valid until the next operation of the same kind (layout,
 *   dispatch, combine) on that Buffer: copy them (epkit_ep_copy) to keep them,
 *   or give a layout, dispatch or combine memory of yours to write instead
 *   (epkit_ep_layout_into, epkit_ep_dispatch_args.into, combine out_x).
 * - CUDA streams and events are passed as void* (cudaStream_t, cudaEvent_t).
 */
#ifndef EPKIT_EP_C_H
#define EPKIT_EP_C_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define EPKIT_EP_API __attribute__((visibility("default")))
#else
#define EPKIT_EP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct or signature below changes incompatibly. */
#define EPKIT_EP_ABI_VERSION 5

typedef enum epkit_ep_status {
  EPKIT_EP_OK = 0,
  EPKIT_EP_ERR_INVALID = 1,     /* bad argument: null pointer, wrong dtype/shape, bad config */
  EPKIT_EP_ERR_UNAVAILABLE = 2, /* no GPU, no driver, or a feature not built */
  EPKIT_EP_ERR_CUDA = 3,
  EPKIT_EP_ERR_TIMEOUT = 4,   /* a rank did not reach a barrier in time */
  EPKIT_EP_ERR_BOOTSTRAP = 5, /* the caller's all_gather failed */
  EPKIT_EP_ERR_INTERNAL = 6
} epkit_ep_status;

typedef enum epkit_ep_dtype {
  EPKIT_EP_BF16 = 0,
  EPKIT_EP_FP8_E4M3 = 1,
  EPKIT_EP_FP32 = 2,
  EPKIT_EP_INT32 = 3,
  EPKIT_EP_INT64 = 4,
  EPKIT_EP_BOOL = 5
} epkit_ep_dtype;

/* A strided view of device memory. data == NULL: not given (optional inputs),
 * unless shape says it is an empty matrix. Rank 3 is for the low-latency
 * mode's expert-major [experts, rows, hidden] tensors. */
typedef struct epkit_ep_tensor {
  void* data;
  int32_t dtype; /* epkit_ep_dtype */
  int32_t ndim;  /* 1, 2 or 3 */
  int64_t shape[3];
  int64_t strides[3]; /* elements */
} epkit_ep_tensor;

typedef struct epkit_ep_options {
  int32_t max_tokens; /* largest token count any rank passes */
  int32_t max_hidden; /* multiple of 128 */
  int32_t max_topk;
  uint64_t num_bytes; /* heap budget per GPU; 0 = what the sizes need */
  double timeout_s;   /* bound on every wait for another rank */
  /* Internode: ranks per node (1..8; global rank = node * ranks_per_node +
   * local rank); 0 or the world size: one node (ep.h BufferOptions). */
  int32_t ranks_per_node;
  /* Bytes of the low-latency region (DeepEP's num_rdma_bytes with
   * low_latency_mode); 0: no low-latency calls. epkit_ep_ll_size_hint. */
  uint64_t low_latency_bytes;
  /* Bytes of the output arena on top of num_bytes (ep.h
   * BufferOptions::output_arena_bytes; epkit_ep_output_arena); 0: none. */
  uint64_t output_arena_bytes;
  /* Internode: 0 NCCL's host API (default), 1 the device-driven leg over an
   * emulated NIC (nodes faked on one host's GPUs; ep.h
   * BufferOptions::network_leg), with its cap per rank and latency. */
  int32_t network_leg;
  double emulated_nic_gbps;
  double emulated_nic_latency_us;
  /* Internode, on the device-driven leg: 1 ring mode (dispatch and combine
   * through fixed rings, memory independent of the node count; ep.h
   * BufferOptions::internode_rings), 0 not. */
  int32_t internode_rings;
} epkit_ep_options;

typedef struct epkit_ep_config {
  int32_t num_sms;
  int32_t num_warps;
  int32_t nvl_chunk; /* 1, 2, 4 or 8 */
} epkit_ep_config;

/* What an operation waits for and who waits for it (ep.h StreamOrder). */
typedef struct epkit_ep_order {
  void* stream;         /* the caller's stream (cudaStream_t; NULL = legacy default) */
  void* previous;       /* cudaEvent_t to wait for instead of `stream`, or NULL */
  int32_t async_finish; /* 1: `stream` does not wait; the caller uses the returned event */
  int32_t want_event;   /* 1: return the completion event (caller destroys it) */
} epkit_ep_order;

typedef struct epkit_ep_buffer epkit_ep_buffer;
typedef struct epkit_ep_handle epkit_ep_handle;
/* The receive half of a low-latency operation asked for with
 * return_recv_hook (epkit_ep_hook_call once, then epkit_ep_hook_release). */
typedef struct epkit_ep_hook epkit_ep_hook;

/* The bootstrap: every rank's `bytes` bytes (the same count on every rank),
 * by rank, into `out` (world_size * bytes). Return 0 on success. Called on the
 * creating thread, during epkit_ep_buffer_create only (an internode Buffer
 * also trades its network's ids through it). */
typedef int (*epkit_ep_all_gather_fn)(void* user, const void* mine, size_t bytes, void* out);

typedef struct epkit_ep_layout_out {
  epkit_ep_tensor num_tokens_per_rank;   /* int32 [ranks] */
  epkit_ep_tensor num_tokens_per_expert; /* int32 [experts] */
  epkit_ep_tensor is_token_in_rank;      /* bool [tokens, ranks] */
  /* int32 [nodes]: tokens with any destination on each node (internode
   * Buffers; absent otherwise) */
  epkit_ep_tensor num_tokens_per_rdma_rank;
  void* event; /* cudaEvent_t when order.want_event */
  /* topk_idx's dtype [tokens, topk]: a copy of topk_idx written by the layout
   * kernel; only through epkit_ep_layout_into's `into` (ep.h LayoutOutputs) */
  epkit_ep_tensor topk_idx_copy;
} epkit_ep_layout_out;

/* Caller memory for a dispatch's results (ep.h DispatchOutputs): each
 * optional (data NULL), contiguous, of the result's shape and dtype. */
typedef struct epkit_ep_dispatch_into {
  epkit_ep_tensor recv_x;
  epkit_ep_tensor recv_x_scales;
  epkit_ep_tensor recv_topk_idx;
  epkit_ep_tensor recv_topk_weights;
  epkit_ep_tensor recv_src_idx;
  epkit_ep_tensor rank_prefix_matrix; /* int32 [ranks, ranks], anywhere; not cached */
} epkit_ep_dispatch_into;

/* Called by a dispatch once the received row count is known, before any row
 * moves, on the calling thread: fill `into` (zeroed) with memory for the
 * results. Results whose memory lies inside the Buffer's output arena
 * (epkit_ep_output_arena) are written there by the senders directly, the
 * prefix matrix anywhere; the out struct's `written` bits say which. Return
 * 0; anything else leaves every result in the Buffer (not an error: the
 * peers are already waiting). */
typedef int (*epkit_ep_dispatch_into_fn)(void* user, int64_t rows, epkit_ep_dispatch_into* into);

/* Bits of epkit_ep_dispatch_out.written, in epkit_ep_dispatch_into's order. */
#define EPKIT_EP_OUT_RECV_X 1
#define EPKIT_EP_OUT_RECV_X_SCALES 2
#define EPKIT_EP_OUT_RECV_TOPK_IDX 4
#define EPKIT_EP_OUT_RECV_TOPK_WEIGHTS 8
#define EPKIT_EP_OUT_RECV_SRC_IDX 16
#define EPKIT_EP_OUT_RANK_PREFIX_MATRIX 32

typedef struct epkit_ep_dispatch_args {
  epkit_ep_tensor x;        /* bf16 or fp8_e4m3 [tokens, hidden] */
  epkit_ep_tensor x_scales; /* fp32 [tokens, hidden/128] (fp8 only), row- or column-major */
  epkit_ep_tensor topk_idx; /* int64/int32 [tokens, topk]; not for a cached dispatch */
  epkit_ep_tensor topk_weights;
  epkit_ep_tensor num_tokens_per_rank;
  epkit_ep_tensor is_token_in_rank;
  epkit_ep_tensor num_tokens_per_expert;
  const epkit_ep_handle* handle; /* non-NULL: cached dispatch */
  int32_t expert_alignment;
  int32_t num_worst_tokens;
  epkit_ep_config config;
  epkit_ep_order order;
  epkit_ep_dispatch_into_fn into; /* optional (intranode Buffers) */
  void* into_user;
} epkit_ep_dispatch_args;

typedef struct epkit_ep_dispatch_out {
  epkit_ep_tensor recv_x;
  epkit_ep_tensor recv_x_scales;          /* fp32 row-major (fp8 only) */
  epkit_ep_tensor recv_topk_idx;          /* local expert or -1 */
  epkit_ep_tensor recv_topk_weights;      /* fp32 */
  epkit_ep_tensor recv_src_idx;           /* int32 [received]; absent internode */
  epkit_ep_tensor recv_tokens_per_expert; /* int32 [local experts] on the device */
  /* Received rows per local expert (aligned); host memory owned by the
   * Buffer, valid until its next dispatch. Count 0 with num_worst_tokens or
   * for a cached dispatch. */
  const int32_t* num_recv_tokens_per_expert;
  int32_t num_local_experts;
  int32_t num_recv_tokens; /* -1 with num_worst_tokens */
  epkit_ep_handle* handle; /* new reference: epkit_ep_handle_release */
  void* event;
  uint32_t written; /* EPKIT_EP_OUT_* bits: results now in the `into` memory */
} epkit_ep_dispatch_out;

typedef struct epkit_ep_combine_args {
  epkit_ep_tensor x;            /* bf16 [received, hidden] in receive order */
  epkit_ep_tensor topk_weights; /* fp32 [received, topk], optional */
  const epkit_ep_handle* handle;
  /* bf16 [tokens, hidden], optional, at most two: the sum starts from them
   * (internode Buffers only) */
  epkit_ep_tensor bias[2];
  epkit_ep_config config;
  epkit_ep_order order;
  /* Optional caller-owned results: bf16 [tokens, hidden] and fp32 [tokens,
   * topk], contiguous. The combine writes them there (no copy); the out
   * struct then describes these. */
  epkit_ep_tensor out_x;
  epkit_ep_tensor out_topk_weights;
} epkit_ep_combine_args;

typedef struct epkit_ep_combine_out {
  epkit_ep_tensor combined_x;            /* bf16 [tokens, hidden] */
  epkit_ep_tensor combined_topk_weights; /* fp32 [tokens, topk] when weights were given */
  void* event;
} epkit_ep_combine_out;

typedef struct epkit_ep_handle_info {
  int32_t num_tokens;
  int32_t num_ranks;
  int32_t hidden;
  int32_t num_recv_tokens; /* -1 after a num_worst_tokens dispatch */
  int32_t num_worst_tokens;
  epkit_ep_tensor rank_prefix_matrix; /* int32 [ranks, ranks]; a node's ranks internode */
  epkit_ep_tensor send_row;           /* int32 [tokens, ranks]; [tokens, nodes] internode */
  int32_t num_nodes;                  /* 1 for an intranode Buffer */
  /* int32 [ranks], internode only: inclusive prefix over global source ranks
   * of the rows received (DeepEP's recv_gbl_rank_prefix_sum) */
  epkit_ep_tensor recv_gbl_rank_prefix_sum;
} epkit_ep_handle_info;

/* Low-latency mode (ep.h LowLatency*: DeepEP's low_latency_dispatch and
 * low_latency_combine). Outputs are views into the Buffer's low-latency
 * region, valid until the low-latency operation two calls later. */
typedef struct epkit_ep_ll_handle {
  epkit_ep_tensor src_info;     /* int32 [local experts, ranks * max tokens] */
  epkit_ep_tensor layout_range; /* int64 [local experts, ranks]: (first << 32) | rows */
  epkit_ep_tensor recv_count;   /* int32 [local experts] */
  int32_t num_max_dispatch_tokens_per_rank;
  int32_t hidden;
  int32_t num_experts;
  int32_t num_ranks;
  int32_t num_topk;
  int32_t buffer; /* which of the two buffers the dispatch used */
} epkit_ep_ll_handle;

typedef struct epkit_ep_ll_dispatch_args {
  epkit_ep_tensor x;        /* bf16 [tokens, hidden] */
  epkit_ep_tensor topk_idx; /* int64/int32 [tokens, topk]; -1 = no expert */
  int32_t num_max_dispatch_tokens_per_rank;
  int32_t num_experts;
  int32_t use_fp8;
  int32_t round_scale;
  int32_t use_ue8m0;
  epkit_ep_tensor cumulative_local_expert_recv_stats; /* int32 [local experts], optional */
  epkit_ep_tensor dispatch_wait_recv_cost_stats;      /* int64 [ranks], optional */
  int32_t return_recv_hook;
  int32_t num_sms;
  epkit_ep_order order;
} epkit_ep_ll_dispatch_args;

typedef struct epkit_ep_ll_dispatch_out {
  epkit_ep_tensor recv_x;        /* [local experts, ranks * max tokens, hidden] */
  epkit_ep_tensor recv_x_scales; /* fp32 or packed ue8m0 int32 (FP8 only) */
  epkit_ep_tensor recv_count;    /* int32 [local experts] */
  epkit_ep_ll_handle handle;
  epkit_ep_hook* hook; /* with return_recv_hook (caller releases) */
  void* event;
} epkit_ep_ll_dispatch_out;

typedef struct epkit_ep_ll_combine_args {
  epkit_ep_tensor x; /* bf16 [local experts, ranks * max tokens, hidden]; absent with zero_copy */
  epkit_ep_tensor topk_idx;
  epkit_ep_tensor topk_weights; /* fp32 [tokens, topk] */
  epkit_ep_ll_handle handle;
  int32_t zero_copy;
  int32_t use_logfmt;
  int32_t return_recv_hook;
  epkit_ep_tensor out;                          /* bf16 [tokens, hidden], optional */
  epkit_ep_tensor combine_wait_recv_cost_stats; /* int64 [ranks], optional */
  int32_t num_sms;
  epkit_ep_order order;
} epkit_ep_ll_combine_args;

typedef struct epkit_ep_ll_combine_out {
  epkit_ep_tensor combined_x;
  epkit_ep_hook* hook;
  void* event;
} epkit_ep_ll_combine_out;

EPKIT_EP_API int32_t epkit_ep_abi_version(void);
EPKIT_EP_API const char* epkit_ep_version(void);
/* The message of this thread's last failed call ("" if none). */
EPKIT_EP_API const char* epkit_ep_last_error(void);
EPKIT_EP_API const char* epkit_ep_status_name(int32_t status);
/* sizeof of a struct of this header by its name without the prefix
 * ("options", "tensor", "dispatch_args", ...): how a binding written in
 * another language checks its mirror of the layouts when it loads. 0 for an
 * unknown name. */
EPKIT_EP_API uint64_t epkit_ep_struct_size(const char* name);

/* Visible CUDA devices; EPKIT_EP_ERR_UNAVAILABLE naming the cause when none. */
EPKIT_EP_API epkit_ep_status epkit_ep_device_count(int32_t* count);
EPKIT_EP_API epkit_ep_status epkit_ep_default_options(epkit_ep_options* out);
EPKIT_EP_API epkit_ep_status epkit_ep_default_config(epkit_ep_config* out);
EPKIT_EP_API epkit_ep_status epkit_ep_bytes_needed(const epkit_ep_options* options,
                                                   int32_t num_ranks, uint64_t* out);

/* Makes `device` this thread's current CUDA device in the library's CUDA
 * runtime (the one a Buffer is created on). */
EPKIT_EP_API epkit_ep_status epkit_ep_set_device(int32_t device);

/* Collective over the ranks: allocates on the current CUDA device. Later
 * calls on the Buffer switch to that device first, from any thread. */
EPKIT_EP_API epkit_ep_status epkit_ep_buffer_create(int32_t rank, int32_t world_size,
                                                    epkit_ep_all_gather_fn all_gather, void* user,
                                                    const epkit_ep_options* options,
                                                    epkit_ep_buffer** out);
EPKIT_EP_API void epkit_ep_buffer_destroy(epkit_ep_buffer* buffer);
EPKIT_EP_API epkit_ep_status epkit_ep_buffer_info(const epkit_ep_buffer* buffer, int32_t* rank,
                                                  int32_t* num_ranks, void** comm_stream);
/* Nodes the Buffer spans (1 intranode) and its network leg in words ("" for
 * one node); the string lives as long as the Buffer. Either may be NULL. */
EPKIT_EP_API epkit_ep_status epkit_ep_buffer_nodes(const epkit_ep_buffer* buffer,
                                                   int32_t* num_nodes, const char** network);

EPKIT_EP_API epkit_ep_status epkit_ep_layout(epkit_ep_buffer* buffer,
                                             const epkit_ep_tensor* topk_idx, int32_t num_experts,
                                             const epkit_ep_order* order, epkit_ep_layout_out* out);
/* epkit_ep_layout writing its results into caller-owned memory: each tensor
 * of `into` that is given (contiguous, the shape and dtype of the result)
 * receives that result; `out` then describes them. `into` may be NULL. */
EPKIT_EP_API epkit_ep_status epkit_ep_layout_into(epkit_ep_buffer* buffer,
                                                  const epkit_ep_tensor* topk_idx,
                                                  int32_t num_experts, const epkit_ep_order* order,
                                                  const epkit_ep_layout_out* into,
                                                  epkit_ep_layout_out* out);
EPKIT_EP_API epkit_ep_status epkit_ep_dispatch(epkit_ep_buffer* buffer,
                                               const epkit_ep_dispatch_args* args,
                                               epkit_ep_dispatch_out* out);
EPKIT_EP_API epkit_ep_status epkit_ep_combine(epkit_ep_buffer* buffer,
                                              const epkit_ep_combine_args* args,
                                              epkit_ep_combine_out* out);
/* The output arena inside this rank's heap (ep.h Buffer::output_arena):
 * *data NULL and *bytes 0 when the Buffer has none. */
EPKIT_EP_API epkit_ep_status epkit_ep_output_arena(const epkit_ep_buffer* buffer, void** data,
                                                   uint64_t* bytes);
/* Where a combine reads its input in place (ep.h Buffer::combine_input). */
EPKIT_EP_API epkit_ep_status epkit_ep_combine_input(epkit_ep_buffer* buffer, int64_t rows,
                                                    int64_t hidden, epkit_ep_tensor* out);
EPKIT_EP_API epkit_ep_status epkit_ep_barrier(epkit_ep_buffer* buffer);
EPKIT_EP_API epkit_ep_status epkit_ep_synchronize(epkit_ep_buffer* buffer);

/* Copies n views (same dtype and shape, any row strides) on the Buffer's
 * stream, after what is queued there, with one kernel launch per 8 views:
 * how a caller takes ownership of outputs. Then, per `order`: returns an event and/or makes
 * order->stream wait (order->previous is ignored). */
EPKIT_EP_API epkit_ep_status epkit_ep_copy(epkit_ep_buffer* buffer, int32_t n,
                                           const epkit_ep_tensor* dst, const epkit_ep_tensor* src,
                                           const epkit_ep_order* order, void** event);

EPKIT_EP_API epkit_ep_status epkit_ep_handle_info_get(const epkit_ep_handle* handle,
                                                      epkit_ep_handle_info* out);
EPKIT_EP_API void epkit_ep_handle_release(epkit_ep_handle* handle);

/* Bytes of options.low_latency_bytes a shape needs (DeepEP's
 * get_low_latency_rdma_size_hint). */
EPKIT_EP_API epkit_ep_status epkit_ep_ll_size_hint(int32_t num_max_dispatch_tokens_per_rank,
                                                   int32_t hidden, int32_t num_ranks,
                                                   int32_t num_experts, uint64_t* out);
EPKIT_EP_API epkit_ep_status epkit_ep_ll_dispatch(epkit_ep_buffer* buffer,
                                                  const epkit_ep_ll_dispatch_args* args,
                                                  epkit_ep_ll_dispatch_out* out);
EPKIT_EP_API epkit_ep_status epkit_ep_ll_combine(epkit_ep_buffer* buffer,
                                                 const epkit_ep_ll_combine_args* args,
                                                 epkit_ep_ll_combine_out* out);
/* Where the next low-latency combine reads a zero-copy input. */
EPKIT_EP_API epkit_ep_status epkit_ep_ll_next_combine_buffer(epkit_ep_buffer* buffer,
                                                             const epkit_ep_ll_handle* handle,
                                                             epkit_ep_tensor* out);
/* Collective; waits on the host. */
EPKIT_EP_API epkit_ep_status epkit_ep_ll_clean(epkit_ep_buffer* buffer,
                                               int32_t num_max_dispatch_tokens_per_rank,
                                               int32_t hidden, int32_t num_experts);
/* Launches the receive half (once); the hook stays to be released. */
EPKIT_EP_API epkit_ep_status epkit_ep_hook_call(epkit_ep_hook* hook);
EPKIT_EP_API void epkit_ep_hook_release(epkit_ep_hook* hook);

/* A new event recorded on `stream` (DeepEP's Buffer.capture); the caller
 * destroys it. */
EPKIT_EP_API epkit_ep_status epkit_ep_event_record(void* stream, void** event);
EPKIT_EP_API epkit_ep_status epkit_ep_event_wait(void* event, void* stream);
EPKIT_EP_API epkit_ep_status epkit_ep_event_synchronize(void* event);
EPKIT_EP_API void epkit_ep_event_destroy(void* event);

#ifdef __cplusplus
}
#endif

#endif /* EPKIT_EP_C_H */
