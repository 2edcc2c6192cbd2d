#include "logs/findings.h"

#include <array>

namespace epkit::logs {
namespace {

// Keep ids stable: scripts and the doctor's cross-references match on them.
constexpr std::array k_rules = {
    RuleSpec{Rule::socket_fallback, "nccl.socket-fallback", Severity::warn,
             "NCCL uses the TCP socket transport between nodes",
             "NCCL found no usable RDMA device or network plugin (\"Using network Socket\"): ports "
             "down, "
             "/dev/infiniband missing in the container, NCCL_IB_HCA matching nothing, "
             "NCCL_IB_DISABLE=1, "
             "an unloadable libibverbs provider, or no libibverbs at all in the image (\"Failed to "
             "open libibverbs.so[.1]\"). Harmless only for single-node jobs.",
             "Run `epkit doctor` on an affected node; expose the RDMA devices, fix NCCL_IB_HCA or "
             "the plugin, "
             "and check the lines just before `Using network Socket`.",
             ""},
    RuleSpec{
        Rule::socket_single_host, "nccl.socket-fallback", Severity::info,
        "NCCL chose the socket transport, but all ranks are on one host",
        "No RDMA device or plugin was usable; with every rank on one host the network transport "
        "carries no traffic (P2P and SHM do), so this matters only when the job grows to more "
        "nodes.",
        "Nothing for this run; before going multi-node, see why RDMA was not found (lines before "
        "`Using network Socket`).",
        ""},
    RuleSpec{
        Rule::bad_interface, "nccl.bad-interface", Severity::warn,
        "NCCL uses a loopback, container or link-local interface",
        "NCCL's socket transport or bootstrap picked an interface other nodes cannot reach (lo, "
        "docker*, veth*, virbr*, or a 169.254/127 address): init hangs or connections abort.",
        "Set NCCL_SOCKET_IFNAME to the routable interface (e.g. NCCL_SOCKET_IFNAME==eth0, or "
        "^docker,lo).",
        "nccl.ifname"},
    RuleSpec{
        Rule::bond_in_hca, "nccl.bond-in-hca", Severity::warn,
        "A bonded (management) NIC is among NCCL's RDMA devices",
        "NET/IB lists a bond device next to the rail NICs; traffic striped over it runs at its "
        "speed.",
        "Exclude it: NCCL_IB_HCA=^mlx5_bond_0, or list the rails: NCCL_IB_HCA==mlx5_0,mlx5_1,...",
        "nccl.ifname"},
    RuleSpec{
        Rule::gdr_no_peer_memory, "nccl.gdr-disabled", Severity::warn,
        "GPU Direct RDMA disabled: no peer memory and no DMA-BUF",
        "NCCL found neither the nvidia_peermem module nor DMA-BUF support for this HCA, so every "
        "transfer is staged through host memory (often ~10x lower bandwidth).",
        "modprobe nvidia_peermem (GPU Operator: driver.rdma.enabled=true), or use DMA-BUF (kernel "
        ">= "
        "5.12, open GPU kernel module, rdma-core with ibv_reg_dmabuf_mr); NCCL <= 2.22.3 also "
        "needed a "
        "newer NCCL to see nvidia_peermem.",
        "rdma.gpudirect"},
    RuleSpec{Rule::gdr_distance, "nccl.gdr-disabled", Severity::info,
             "GPU Direct RDMA disabled by the distance policy",
             "Policy, not breakage: the PCI path between this GPU and NIC is longer than "
             "NCCL_NET_GDR_LEVEL "
             "allows (default PXB), so NCCL stages through the CPU for this pair.",
             "Usually nothing; if the GPU and NIC should be close, check the PCI topology. "
             "NCCL_NET_GDR_LEVEL=SYS forces GDR (may be slower).",
             ""},
    RuleSpec{
        Rule::acs, "nccl.acs", Severity::error,
        "RDMA completion error 4 (local protection): PCIe ACS breaks GPU Direct RDMA",
        "IBV_WC_LOC_PROT_ERR with vendor error 0x51 (81): PCIe Access Control Services redirect "
        "peer-to-peer traffic between the GPU and NIC through the root complex.",
        "Disable ACS on the PCIe bridges (BIOS, or setpci ECAP_ACS+0x6.w=0000); in VMs enable ATS. "
        "To confirm, NCCL_NET_GDR_LEVEL=0 makes the error go away.",
        ""},
    RuleSpec{
        Rule::roce_unreachable, "nccl.roce-unreachable", Severity::error,
        "RDMA completion error 12 (retry exceeded): the peer is unreachable",
        "IBV_WC_RETRY_EXC_ERR with vendor error 0x81 (129): packets never reach the peer. On RoCE "
        "this is usually a wrong GID index/type or NICs on different subnets; a lossy fabric or a "
        "too "
        "short NCCL_IB_TIMEOUT gives it intermittently.",
        "Let NCCL pick the GID (NCCL_IB_GID_INDEX=-1) or set the RoCE v2 IPv4 index on every node; "
        "check "
        "that rails share a subnet (ib_write_bw -x <gid> between the two hosts).",
        "rdma.gid-index"},
    RuleSpec{Rule::shm, "nccl.shm", Severity::error, "/dev/shm is too small or full",
             "NCCL could not create or extend its shared-memory segment in /dev/shm (containers "
             "default to "
             "64 MiB; stale /dev/shm/nccl-* files fill it).",
             "Run the container with --shm-size=1g or --ipc=host (k8s: a memory emptyDir on "
             "/dev/shm); remove "
             "stale /dev/shm/nccl-* files. NCCL_SHM_DISABLE=1 only as a last resort.",
             "container.limits"},
    RuleSpec{Rule::shm_attach, "nccl.shm-attach", Severity::error,
             "A rank could not open a peer's shared-memory segment",
             "The segment a peer created in /dev/shm is not there for this rank: the ranks of a "
             "node do not share /dev/shm (separate containers or pods without a shared IPC "
             "namespace or /dev/shm mount), or the segment was removed under the job (systemd "
             "RemoveIPC, a /dev/shm cleaner).",
             "Run a node's ranks with one /dev/shm (--ipc=host, or one pod with a shared memory "
             "emptyDir); keep /dev/shm/nccl-* in place while jobs run (RemoveIPC=no).",
             "container.limits"},
    RuleSpec{Rule::memlock, "nccl.memlock", Severity::error,
             "Memory registration failed: locked-memory limit too low",
             "ibv_reg_mr / ibv_create_cq failed with ENOMEM: RLIMIT_MEMLOCK of the launched "
             "process is too "
             "low (or CAP_IPC_LOCK is missing).",
             "Raise the limit where the ranks start: ulimit -l unlimited, docker --ulimit "
             "memlock=-1, k8s "
             "IPC_LOCK capability, Slurm PropagateResourceLimits.",
             "container.limits"},
    RuleSpec{Rule::net_plugin, "nccl.net-plugin", Severity::error,
             "No NCCL network plugin could start",
             "NCCL_NET names a transport that failed to load or initialise (IB with no usable "
             "device, gIB "
             "without its plugin), or the socket transport found no interface either.",
             "Check NCCL_NET, the plugin path (NCCL_NET_PLUGIN, LD_LIBRARY_PATH) and the lines "
             "before it; "
             "`epkit doctor` shows which provider or plugin does not load.",
             "nccl.net-plugin"},
    RuleSpec{
        Rule::version_mismatch, "nccl.version-mismatch", Severity::error,
        "Ranks run different NCCL versions",
        "Not every rank loaded the same libnccl (frameworks bundle their own; LD_LIBRARY_PATH "
        "differs); "
        "mixed versions hang or exchange wrongly sized messages.",
        "Pin one NCCL build on every node (check torch.cuda.nccl.version() and LD_LIBRARY_PATH).",
        ""},
    RuleSpec{Rule::net_mismatch, "nccl.net-mismatch", Severity::error,
             "Ranks use different networks or NET device counts",
             "Nodes differ in their NCCL network plugin or in the number of usable NICs; NCCL "
             "stops (or, "
             "with NCCL_IGNORE_NET_MISMATCH=1, runs unbalanced or hangs).",
             "Make the nodes alike: same plugin, same NCCL_IB_HCA, all rails up. Find the odd "
             "nodes in the "
             "per-rank table.",
             ""},
    RuleSpec{Rule::net_mismatch_ignored, "nccl.net-mismatch", Severity::warn,
             "NCCL_IGNORE_NET_MISMATCH hides a NET device mismatch",
             "NCCL saw different NET device counts across ranks and continued because "
             "NCCL_IGNORE_NET_MISMATCH=1; bandwidth follows the weakest node.",
             "Fix the nodes with fewer devices, then drop NCCL_IGNORE_NET_MISMATCH.", ""},
    RuleSpec{Rule::init_incomplete, "nccl.init-incomplete", Severity::error,
             "Communicators whose ranks did not all reach Init COMPLETE",
             "Some ranks of a communicator never finished ncclCommInit: they hung in bootstrap, "
             "crashed, "
             "or their logs are missing from the input.",
             "Look at the named ranks' hosts first (network, GPU, process state); make sure every "
             "rank's "
             "log file is in the input.",
             ""},
    RuleSpec{
        Rule::init_unseen, "nccl.init-incomplete", Severity::info,
        "Communicators with ranks absent from the input",
        "Every rank that logged its Init START also reached Init COMPLETE; the ranks without "
        "COMPLETE "
        "printed nothing at all, which usually means their log files are not in the input (or the "
        "processes never started).",
        "Add the other ranks' logs (NCCL_DEBUG_FILE=...%h.%p gives one per rank) to see the whole "
        "job.",
        ""},
    RuleSpec{Rule::gib_nonblocking, "nccl.gib-nonblocking", Severity::error,
             "The gIB network shim rejects TORCH_NCCL_USE_COMM_NONBLOCKING",
             "Google's gIB NCCL shim expects TORCH_NCCL_USE_COMM_NONBLOCKING to be unset; the "
             "image sets it.",
             "unset TORCH_NCCL_USE_COMM_NONBLOCKING in the job's entry point (and source "
             "/usr/local/gib/scripts/set_nccl_env.sh).",
             "nccl.net-plugin"},
    RuleSpec{
        Rule::provider_abi, "rdma.provider-abi", Severity::error,
        "libibverbs cannot load its device provider",
        "The provider (e.g. libmlx5-rdmav57.so) and libibverbs come from different rdma-core/MOFED "
        "releases (host libraries mounted into a container), or the provider is not installed: no "
        "RDMA device is usable and NCCL falls back or fails.",
        "Use one rdma-core userspace in the image (libibverbs1, ibverbs-providers, librdmacm1); do "
        "not "
        "mix host-mounted libibverbs with the image's providers.",
        "rdma.provider-abi"},
    RuleSpec{
        Rule::ibgda_mapping, "nvshmem.ibgda-mapping", Severity::error,
        "NVSHMEM IBGDA cannot map the NIC doorbell into the GPU",
        "cudaHostRegister with IoMemory failed: the NVIDIA driver refuses GPU mappings of NIC UARs "
        "without PeerMappingOverride, so IBGDA is skipped (CPU fallback or no transport).",
        "Load the driver with NVreg_RegistryDwords=\"PeerMappingOverride=1;\" (DeepEP also sets "
        "NVreg_EnableStreamMemOPs=1) and reload it; NVSHMEM >= 3.4 can fall back to CPU-assisted "
        "IBGDA.",
        "nvshmem.ibgda"},
    RuleSpec{
        Rule::deepep_timeout, "deepep.timeout", Severity::error, "DeepEP kernel or CPU timeout",
        "A DeepEP dispatch/combine or barrier waited past its timeout: a peer rank stopped sending "
        "(crash, hang, broken RDMA path) or the NVSHMEM transport is not working.",
        "Find the first rank that failed in the evidence and its host; run `epkit doctor` there "
        "and "
        "check the NVSHMEM/IBGDA lines above the timeout.",
        ""},
    RuleSpec{Rule::watchdog_timeout, "torch.watchdog-timeout", Severity::error,
             "PyTorch's NCCL watchdog timed out a collective",
             "A collective did not finish within the process group timeout: a rank is stuck or "
             "dead, the "
             "network is broken, or ranks issued collectives in different orders.",
             "Compare the SeqNum/OpType across ranks in the evidence; the rank with the lowest "
             "SeqNum or "
             "missing from the list is the one to look at. TORCH_NCCL_DUMP_ON_TIMEOUT=1 helps next "
             "time.",
             ""},
    RuleSpec{Rule::duplicate_gpu, "nccl.duplicate-gpu", Severity::error,
             "Two ranks of one communicator use the same GPU",
             "NCCL refuses a communicator whose ranks share a GPU (\"Duplicate GPU detected\"): "
             "every process saw the same CUDA device, usually because the script never called "
             "torch.cuda.set_device(local_rank), or CUDA_VISIBLE_DEVICES was set to one GPU for "
             "all processes of a node.",
             "Bind each process to its own GPU: set the device from LOCAL_RANK (torchrun) or "
             "OMPI_COMM_WORLD_LOCAL_RANK (mpirun) before creating the communicator. Ranks that "
             "share a GPU on purpose (tests) need a distinct NCCL_HOSTID each.",
             ""},
    RuleSpec{Rule::ib_open_failed, "nccl.ib-device-unopenable", Severity::warn,
             "An RDMA device is listed but cannot be opened",
             "libibverbs lists the device (its sysfs entry is visible) but ibv_open_device fails: "
             "the container exposes only some /dev/infiniband/uverbsN files (an RDMA device plugin "
             "that mounts a subset, a hand-written device list), or the device's provider does "
             "not load. NCCL skips the device and runs with fewer NICs.",
             "Expose every RDMA device the node lists (all uverbs files, or the device plugin's "
             "full resource count), or restrict NCCL_IB_HCA to the devices the container really "
             "has, the same on every node.",
             "rdma.devices"},
    RuleSpec{Rule::ib_open_failed_mismatch, "nccl.ib-device-unopenable", Severity::error,
             "An unopenable RDMA device makes ranks disagree on their NET device count",
             "libibverbs lists the device but ibv_open_device fails (a container that exposes only "
             "some /dev/infiniband/uverbsN files): the ranks that could not open it count fewer "
             "NET devices than the others, which is the NET device mismatch reported beside it.",
             "Expose every RDMA device in every container (all uverbs files, or the device "
             "plugin's full resource count), or set NCCL_IB_HCA to the same openable devices on "
             "every node.",
             "rdma.devices"},
    RuleSpec{Rule::nvshmem_transport_split, "nvshmem.transport-split", Severity::error,
             "Some PEs skipped an RDMA device or transport that other PEs use",
             "NVSHMEM on some ranks skipped a device or its RDMA transport (no peer memory, a "
             "device it cannot use, a port down) while the other ranks' NVSHMEM runs: the PEs "
             "then disagree on how to reach each other, and init fails (\"building transport "
             "map failed\") or traffic to those PEs hangs.",
             "Make the skipping nodes like the others: load nvidia_peermem, enable PCI atomics, "
             "bring the ports up, use the same NVSHMEM_HCA_* settings; `epkit doctor` on a "
             "skipping node names the cause.",
             "rdma.gpudirect"},
    RuleSpec{Rule::other_warn, "nccl.warn", Severity::info, "Other NCCL warnings",
             "NCCL printed WARN lines that no other rule explains.", "Read the evidence lines.",
             ""},
    RuleSpec{Rule::host_version, "nccl.host-mismatch", Severity::error,
             "Hosts run different NCCL versions",
             "The hosts named in the input load different NCCL libraries (another container "
             "image, a pip wheel beside the system NCCL, or LD_LIBRARY_PATH); mixed versions may "
             "refuse to connect or hang.",
             "Run the same image and NCCL on every host; `python -c 'import torch; "
             "print(torch.cuda.nccl.version())'` or the `NCCL version` line shows which one each "
             "loads.",
             ""},
    RuleSpec{Rule::host_plugin, "nccl.host-mismatch", Severity::error,
             "Hosts differ in loading the NCCL network plugin",
             "One set of hosts loaded an external NET plugin (or loaded it from another path) "
             "while the others used NCCL's internal network: the hosts then speak different "
             "transports and init fails or hangs.",
             "Give every host the same plugin: same image, same NCCL_NET_PLUGIN and "
             "LD_LIBRARY_PATH; check the library exists on the hosts that did not load it.",
             "nccl.net-plugin"},
    RuleSpec{Rule::host_net, "nccl.host-mismatch", Severity::error,
             "Hosts differ in their network or number of NET devices",
             "The hosts chose different networks (IB on some, Socket on others) or see different "
             "numbers of NICs: missing /dev/infiniband in some containers, a link down, or "
             "NCCL_IB_HCA matching differently.",
             "Make the hosts alike: expose the same RDMA devices, bring the links up, use one "
             "NCCL_IB_HCA; `epkit doctor` on the odd hosts names the cause.",
             ""},
};

}  // namespace

const char* to_string(Severity s) {
  switch (s) {
    case Severity::info:
      return "info";
    case Severity::warn:
      return "warn";
    case Severity::error:
      return "error";
  }
  return "?";
}

std::span<const RuleSpec> rule_table() {
  return k_rules;
}

const RuleSpec& spec_of(Rule rule) {
  return k_rules[static_cast<std::size_t>(rule)];
}

}  // namespace epkit::logs
