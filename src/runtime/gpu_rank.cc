#include "runtime/gpu_rank.h"

#ifdef EPKIT_WITH_CUDA

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cctype>

#include "host/dl/nvml.h"
#include "runtime/auth.h"
#include "runtime/gpu_share.h"

namespace epkit::runtime {

std::string cuda_version_string(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

Result<int> cuda_device_count() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorNoDevice || (rc == cudaSuccess && count == 0)) {
    return make_error(ErrorCode::unavailable,
                      "no CUDA device is visible (check nvidia-smi and "
                      "CUDA_VISIBLE_DEVICES)");
  }
  if (rc == cudaErrorInsufficientDriver) {
    return make_error(ErrorCode::unavailable,
                      fmt::format("no usable NVIDIA driver (libcuda.so.1 missing or older than "
                                  "CUDA {} needs): {}",
                                  cuda_version_string(CUDART_VERSION), describe_cuda(rc)));
  }
  if (rc != cudaSuccess) {
    return make_error(ErrorCode::unavailable,
                      fmt::format("CUDA cannot start: {}", describe_cuda(rc)));
  }
  return count;
}

Result<GpuInfo> gpu_info(int device) {
  GpuInfo g;
  g.device = device;
  cudaDeviceProp prop{};
  if (cudaError_t rc = cudaGetDeviceProperties(&prop, device); rc != cudaSuccess) {
    return make_error(ErrorCode::cuda,
                      fmt::format("cudaGetDeviceProperties({}): {}", device, describe_cuda(rc)));
  }
  g.name = prop.name;
  g.cc_major = prop.major;
  g.cc_minor = prop.minor;
  g.uuid = "GPU-";
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  for (int i = 0; i < 16; ++i) {
    g.uuid += fmt::format("{:02x}", u[i]);
    if (i == 3 || i == 5 || i == 7 || i == 9) g.uuid += "-";
  }
  g.pci_bus_id = host::dl::normalize_bus_id(
      fmt::format("{:04x}:{:02x}:{:02x}.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID));
  cudaDriverGetVersion(&g.driver_version);
  cudaRuntimeGetVersion(&g.runtime_version);
  return g;
}

Result<std::unique_ptr<GpuRank>> join_gpu_job(const host::Host& host, const LaunchInfo& launch,
                                              Deadline deadline) {
  auto r = std::make_unique<GpuRank>();
  r->launch = launch;
  auto count = cuda_device_count();
  if (!count) return count.error();
  auto choice =
      choose_device(launch.local_rank, launch.local_world_size, *count, launch.share_gpus);
  if (!choice) return choice.error();
  r->shared_gpu = choice->shared;
  auto gpu = gpu_info(choice->device);
  if (!gpu) return gpu.error();
  r->gpu = *gpu;
  auto nccl = host::dl::load_nccl();
  if (!nccl) {
    return make_error(ErrorCode::unavailable,
                      fmt::format("NCCL cannot be loaded: {}", nccl.error().message));
  }
  r->nccl = *nccl;

  RankFacts mine = collect_host_facts(host, launch.rank, launch.local_rank);
  mine.shared_gpu = r->shared_gpu;
  if (r->shared_gpu) {
    if (auto claimed = claim_nccl_host_identity(host.env(), mine.host, launch.rank); !claimed)
      return claimed.error();
  }
  mine.gpu_uuid = r->gpu.uuid;
  mine.pci_bus_id = r->gpu.pci_bus_id;
  mine.cuda_version = cuda_version_string(r->gpu.runtime_version);
  mine.nccl_version = host::dl::nccl_version_string(r->nccl->version);
  mine.nccl_library = r->nccl->path;

  // The store's handshake tag is the NCCL version: ranks with another NCCL
  // are refused at the door, naming both versions.
  auto secret = load_secret(host.env());
  if (!secret) return secret.error();
  // Rank 0 listens on the address the others were told (MASTER_ADDR), not on
  // every interface; EPKIT_BIND_ADDR overrides where that name resolves to
  // another address on rank 0 itself (a hosts file mapping it to 127.0.1.1).
  auto bind = host.env().get_nonempty("EPKIT_BIND_ADDR").value_or(launch.master_addr);
  auto store = open_store(launch, mine.host, "nccl " + mine.nccl_version, *secret, bind, deadline);
  if (!store) return store.error();
  r->rendezvous.emplace(std::move(*store));
  auto facts = exchange_facts(r->store(), mine, launch.world_size, deadline);
  if (!facts) return facts.error();
  r->facts = std::move(*facts);
  for (const auto& f : r->facts) r->labels.push_back(fmt::format("{}:{}", f.host, f.rank));
  return r;
}

Result<void> start_nccl(GpuRank& rank, Deadline deadline) {
  NcclSessionOptions options;
  options.rank = rank.launch.rank;
  options.world_size = rank.launch.world_size;
  options.device = rank.gpu.device;
  options.labels = rank.labels;
  auto session = NcclSession::open(*rank.nccl, rank.store(), options, deadline);
  if (!session) return session.error();
  rank.session = std::move(*session);
  return {};
}

}  // namespace epkit::runtime

#endif
