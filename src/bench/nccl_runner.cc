#include "bench/nccl_runner.h"

#ifdef EPKIT_WITH_CUDA

#include <fmt/format.h>

#include <algorithm>

#include "base/cuda_error.h"

namespace epkit::bench {
namespace {

using runtime::Deadline;

// Device memory owned for the run.
struct DeviceMemory {
  void* ptr = nullptr;
  ~DeviceMemory() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

// A CUDA event owned for the run.
struct Event {
  cudaEvent_t ev = nullptr;
  ~Event() {
    if (ev != nullptr) cudaEventDestroy(ev);
  }
};

ncclDataType_t nccl_type(const DataType& t) {
  if (t.name == "double") return ncclFloat64;
  if (t.name == "int32") return ncclInt32;
  if (t.name == "int64") return ncclInt64;
  return ncclFloat32;
}

kernels::Elem elem_type(const DataType& t) {
  if (t.name == "double") return kernels::Elem::f64;
  if (t.name == "int32") return kernels::Elem::i32;
  if (t.name == "int64") return kernels::Elem::i64;
  return kernels::Elem::f32;
}

struct Buffers {
  void* send;
  void* recv;
  void* input;  // where this rank's input is filled
  std::size_t input_count;
  std::size_t input_offset;  // index of input[0] in f(seed, rank, index)
};

}  // namespace

Result<std::vector<Row>> run_sweep(runtime::NcclSession& s, runtime::Store& store,
                                   const RunOptions& o) {
  const CollectiveOps& ops = collective_ops(o.kind);
  const int me = s.rank();
  const int n = s.world_size();
  const std::size_t esize = o.type.size;
  const ncclDataType_t type = nccl_type(o.type);
  const kernels::Elem elem = elem_type(o.type);
  std::size_t max_count = 0;
  for (auto bytes : o.sizes) max_count = std::max(max_count, bytes / esize);
  DeviceMemory send;
  DeviceMemory recv;
  DeviceMemory wrong;
  // Both buffers hold the larger side: in-place runs put input and output
  // in the receive buffer.
  const std::size_t elems =
      std::max<std::size_t>({1, ops.send_count(max_count, n), ops.recv_count(max_count, n)});
  EPKIT_TRY(cuda_ok(cudaMalloc(&send.ptr, elems * esize), "cudaMalloc (send buffer)"));
  EPKIT_TRY(cuda_ok(cudaMalloc(&recv.ptr, elems * esize), "cudaMalloc (receive buffer)"));
  EPKIT_TRY(cuda_ok(cudaMalloc(&wrong.ptr, sizeof(unsigned long long)), "cudaMalloc"));
  Event start;
  Event stop;
  EPKIT_TRY(cuda_ok(cudaEventCreate(&start.ev), "cudaEventCreate"));
  EPKIT_TRY(cuda_ok(cudaEventCreate(&stop.ev), "cudaEventCreate"));
  auto step = [&] { return Deadline::after_seconds(o.timeout_s); };
  // Timed loops run on a blocking twin of the session's communicator (see
  // NcclSession::blocking_comm); the session's waits still bound them.
  auto twin = s.blocking_comm(step());
  if (!twin) return twin.error();
  const ncclComm_t comm = *twin;

  // Like nccl-tests, warm up once at the largest size before the sweep: the
  // first operations of a communicator pay for connections and buffer
  // registration, which per-size warm-ups alone left in the first row.
  if (o.warmup > 0 && max_count > 0) {
    std::size_t count = o.sizes.back() / esize;
    for (int i = 0; i < o.warmup; ++i) {
      EPKIT_TRY(s.check(
          ops.run(s.api(), send.ptr, recv.ptr, count, type, o.root, me, n, comm, s.stream()),
          to_string(o.kind)));
    }
    EPKIT_TRY(s.wait("bench/warmup", step()));
  }

  std::vector<Row> rows;
  for (std::size_t si = 0; si < o.sizes.size(); ++si) {
    const std::size_t bytes = o.sizes[si];
    const std::size_t count = bytes / esize;
    Row row;
    row.bytes = bytes;
    row.count = count;
    row.type = o.type.name;
    row.redop = uses_redop(o.kind) ? "sum" : "none";
    row.root = uses_root(o.kind) ? o.root : -1;
    for (int place = 0; place < (has_in_place(o.kind) ? 2 : 1); ++place) {
      const bool in_place = place == 1;
      Buffers b{send.ptr, recv.ptr, send.ptr, ops.send_count(count, n), 0};
      if (in_place) {
        std::ptrdiff_t off = ops.in_place_offset(count, me, n);
        if (off >= 0) {  // input inside the output (all_gather) or the same buffer
          b.send = static_cast<char*>(recv.ptr) + static_cast<std::size_t>(off) * esize;
          b.recv = recv.ptr;
        } else {  // output inside the input (reduce_scatter)
          b.send = recv.ptr;
          b.recv = static_cast<char*>(recv.ptr) + static_cast<std::size_t>(-off) * esize;
        }
        b.input = b.send;
      }
      const std::string tag = fmt::format("bench/{}/{}", si, in_place ? "ip" : "oop");
      auto enqueue = [&]() -> Result<void> {
        return s.check(
            ops.run(s.api(), b.send, b.recv, count, type, o.root, me, n, comm, s.stream()),
            to_string(o.kind));
      };
      EPKIT_TRY(
          cuda_ok(kernels::fill(b.input, elem, b.input_count, 0, me, b.input_offset, s.stream()),
                  "fill kernel"));
      for (int i = 0; i < o.warmup; ++i) EPKIT_TRY(enqueue());
      EPKIT_TRY(s.wait(tag + "/warmup", step()));
      EPKIT_TRY(cuda_ok(cudaEventRecord(start.ev, s.stream()), "cudaEventRecord"));
      for (int i = 0; i < o.iters; ++i) EPKIT_TRY(enqueue());
      EPKIT_TRY(cuda_ok(cudaEventRecord(stop.ev, s.stream()), "cudaEventRecord"));
      EPKIT_TRY(s.wait(tag + "/timed", step()));
      float ms = 0;
      EPKIT_TRY(cuda_ok(cudaEventElapsedTime(&ms, start.ev, stop.ev), "cudaEventElapsedTime"));
      double time_us = o.iters > 0 ? static_cast<double>(ms) * 1000.0 / o.iters : 0.0;

      std::optional<std::uint64_t> wrong_count;
      if (o.check) {
        // The timed loop changed in-place inputs: fill again, run once, check.
        EPKIT_TRY(
            cuda_ok(kernels::fill(b.input, elem, b.input_count, 0, me, b.input_offset, s.stream()),
                    "fill kernel"));
        EPKIT_TRY(enqueue());
        EPKIT_TRY(cuda_ok(cudaMemsetAsync(wrong.ptr, 0, sizeof(unsigned long long), s.stream()),
                          "cudaMemsetAsync"));
        kernels::CheckSpec spec = ops.expect(count, me, n, o.root);
        EPKIT_TRY(cuda_ok(kernels::check(b.recv, elem, ops.recv_count(count, n), spec,
                                         static_cast<unsigned long long*>(wrong.ptr), s.stream()),
                          "check kernel"));
        EPKIT_TRY(s.wait(tag + "/check", step()));
        unsigned long long host_wrong = 0;
        EPKIT_TRY(
            cuda_ok(cudaMemcpy(&host_wrong, wrong.ptr, sizeof host_wrong, cudaMemcpyDeviceToHost),
                    "cudaMemcpy"));
        auto total = store.add(tag + "/wrong", static_cast<std::int64_t>(host_wrong), step());
        if (!total) return total.error();
        wrong_count = host_wrong;
      }
      // Times are averaged over ranks (as nccl-tests does); microseconds
      // travel as integer nanoseconds through the store's counters.
      auto sum_ns = store.add(tag + "/ns", static_cast<std::int64_t>(time_us * 1000.0), step());
      if (!sum_ns) return sum_ns.error();
      EPKIT_TRY(store.barrier(tag, step()));
      if (me == 0) {
        auto all_ns = store.add(tag + "/ns", 0, step());
        if (!all_ns) return all_ns.error();
        time_us = static_cast<double>(*all_ns) / 1000.0 / n;
        if (o.check) {
          auto all_wrong = store.add(tag + "/wrong", 0, step());
          if (!all_wrong) return all_wrong.error();
          wrong_count = static_cast<std::uint64_t>(*all_wrong);
        }
      }
      Measure m = make_measure(o.kind, n, bytes, time_us);
      m.wrong = wrong_count;
      if (in_place) {
        row.in_place = m;
      } else {
        row.out_of_place = m;
      }
    }
    rows.push_back(row);
    if (o.progress) o.progress(si + 1, o.sizes.size());
  }
  return rows;
}

}  // namespace epkit::bench

#endif
