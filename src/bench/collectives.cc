// The six collectives of `epkit bench nccl`, each a row of callbacks, with
// nccl-tests' buffer conventions (alltoall as grouped ncclSend/ncclRecv).
#include "bench/nccl_runner.h"

#ifdef EPKIT_WITH_CUDA

namespace epkit::bench {
namespace {

using kernels::CheckSpec;
using kernels::Expect;
using NcclApi = host::dl::NcclApi;

std::size_t whole(std::size_t count, int) { return count; }
std::size_t per_rank(std::size_t count, int n) { return count / static_cast<std::size_t>(n); }
std::ptrdiff_t same_buffer(std::size_t, int, int) { return 0; }
std::ptrdiff_t my_slice(std::size_t count, int me, int n) {
  return static_cast<std::ptrdiff_t>(per_rank(count, n) * static_cast<std::size_t>(me));
}
std::ptrdiff_t my_slice_of_send(std::size_t count, int me, int n) { return -my_slice(count, me, n); }

CheckSpec spec(Expect e, std::size_t per, int me, int n, int peer) {
  CheckSpec s;
  s.expect = e;
  s.me = me;
  s.nranks = n;
  s.per_rank = per;
  s.peer = peer;
  return s;
}

const CollectiveOps k_all_reduce{
    Collective::all_reduce, whole, whole, same_buffer,
    [](const NcclApi& a, const void* s, void* r, std::size_t count, ncclDataType_t t, int, int,
       int, ncclComm_t c, cudaStream_t st) { return a.all_reduce(s, r, count, t, ncclSum, c, st); },
    [](std::size_t, int me, int n, int) { return spec(Expect::sum_all, 0, me, n, 0); }};

const CollectiveOps k_all_gather{
    Collective::all_gather, per_rank, whole, my_slice,
    [](const NcclApi& a, const void* s, void* r, std::size_t count, ncclDataType_t t, int, int,
       int n, ncclComm_t c, cudaStream_t st) {
      return a.all_gather(s, r, per_rank(count, n), t, c, st);
    },
    [](std::size_t count, int me, int n, int) {
      return spec(Expect::gather, per_rank(count, n), me, n, 0);
    }};

const CollectiveOps k_reduce_scatter{
    Collective::reduce_scatter, whole, per_rank, my_slice_of_send,
    [](const NcclApi& a, const void* s, void* r, std::size_t count, ncclDataType_t t, int, int,
       int n, ncclComm_t c, cudaStream_t st) {
      return a.reduce_scatter(s, r, per_rank(count, n), t, ncclSum, c, st);
    },
    [](std::size_t count, int me, int n, int) {
      return spec(Expect::reduce_scatter, per_rank(count, n), me, n, 0);
    }};

const CollectiveOps k_alltoall{
    Collective::alltoall, whole, whole, same_buffer,
    [](const NcclApi& a, const void* s, void* r, std::size_t count, ncclDataType_t t, int, int,
       int n, ncclComm_t c, cudaStream_t st) {
      std::size_t per = per_rank(count, n);
      std::size_t bytes = per * (t == ncclFloat64 || t == ncclInt64 ? 8 : 4);
      ncclResult_t rc = a.group_start();
      if (rc != ncclSuccess) return rc;
      for (int p = 0; p < n; ++p) {
        auto off = bytes * static_cast<std::size_t>(p);
        ncclResult_t sr = a.send(static_cast<const char*>(s) + off, per, t, p, c, st);
        ncclResult_t rr = a.recv(static_cast<char*>(r) + off, per, t, p, c, st);
        if (sr != ncclSuccess && sr != ncclInProgress) rc = sr;
        if (rr != ncclSuccess && rr != ncclInProgress) rc = rr;
      }
      ncclResult_t end = a.group_end();
      return rc != ncclSuccess ? rc : end;
    },
    [](std::size_t count, int me, int n, int) {
      return spec(Expect::alltoall, per_rank(count, n), me, n, 0);
    }};

const CollectiveOps k_sendrecv{
    Collective::sendrecv, whole, whole, same_buffer,
    [](const NcclApi& a, const void* s, void* r, std::size_t count, ncclDataType_t t, int, int me,
       int n, ncclComm_t c, cudaStream_t st) {
      ncclResult_t rc = a.group_start();
      if (rc != ncclSuccess) return rc;
      ncclResult_t sr = a.send(s, count, t, (me + 1) % n, c, st);
      ncclResult_t rr = a.recv(r, count, t, (me + n - 1) % n, c, st);
      ncclResult_t end = a.group_end();
      if (sr != ncclSuccess && sr != ncclInProgress) return sr;
      if (rr != ncclSuccess && rr != ncclInProgress) return rr;
      return end;
    },
    [](std::size_t, int me, int n, int) {
      return spec(Expect::from_rank, 0, me, n, (me + n - 1) % n);
    }};

const CollectiveOps k_broadcast{
    Collective::broadcast, whole, whole, same_buffer,
    [](const NcclApi& a, const void* s, void* r, std::size_t count, ncclDataType_t t, int root,
       int, int, ncclComm_t c, cudaStream_t st) {
      return a.broadcast(s, r, count, t, root, c, st);
    },
    [](std::size_t, int me, int n, int root) { return spec(Expect::from_rank, 0, me, n, root); }};

}  // namespace

const CollectiveOps& collective_ops(Collective c) {
  switch (c) {
    case Collective::all_reduce: return k_all_reduce;
    case Collective::all_gather: return k_all_gather;
    case Collective::reduce_scatter: return k_reduce_scatter;
    case Collective::alltoall: return k_alltoall;
    case Collective::sendrecv: return k_sendrecv;
    case Collective::broadcast: return k_broadcast;
  }
  return k_all_reduce;
}

}  // namespace epkit::bench

#endif
