// The catalogue's families: which sites each claims and what it means.
// Curated families (with keys) come first and claim the sites whose wording
// they know; the subsystem families (a file, no keys) after them name every
// other site by where NCCL, NVSHMEM or DeepEP raised it. The first family
// that claims a site owns it.
#include <array>

#include "logs/catalogue.h"

namespace epkit::logs {
namespace {

constexpr Severity E = Severity::error;
constexpr Severity W = Severity::warn;
constexpr Severity I = Severity::info;

constexpr std::array k_families = {
    // ---- NCCL: families older rules report (their text is the rule's) ----
    Family{"nccl.net-plugin", E, "", Source::nccl, "", "Failed to initialize any NET plugin", "",
           "", "", "", Rule::net_plugin},
    Family{"nccl.version-mismatch", E, "", Source::nccl, "",
           "Mismatched NCCL version|NCCL version mismatch with remote peer", "", "", "", "",
           Rule::version_mismatch},
    Family{"nccl.duplicate-gpu", E, "", Source::nccl, "", "Duplicate GPU detected", "", "", "", "",
           Rule::duplicate_gpu},
    Family{"nccl.shm", E, "", Source::nccl, "",
           "failed to extend|Error while %s shared memory segment|failed to create shared memory "
           "file|Could not map",
           "", "", "", "", Rule::shm},
    Family{"nccl.ib-device-unopenable", W, "", Source::nccl, "", "Unable to open device", "", "",
           "", "", Rule::ib_open_failed},

    // ---- NCCL: curated families ----
    Family{
        "nccl.ib-async-event",
        E,
        "IB async event on an HCA port (port error, fatal device "
        "or QP/CQ event)",
        Source::nccl,
        "",
        "async event|async fatal event|async error event|unknown event type|GID "
        "table changed",
        "The HCA raised an asynchronous event: IBV_EVENT_PORT_ERR (the link went down: a "
        "flapping cable, transceiver or switch port), IBV_EVENT_DEVICE_FATAL (the NIC needs a "
        "reset), QP/CQ fatal events (a queue pair broke, usually after the link dropped) or a "
        "changed GID table (an address was added or removed on a RoCE port).",
        "The device and port in the line (mlx5_3:1) and the event name; link_downed and "
        "symbol_error counters of that port; switch and kernel logs (dmesg mlx5_core) at the "
        "same time.",
        "Check the port: `ibstat mlx5_3`, its counters (`epkit doctor --only rdma.port-errors`), "
        "reseat or replace the cable/transceiver, check the switch port; drain the node if "
        "the link flaps.",
        "rdma.port-errors",
        {}},
    Family{"nccl.collective-mismatch",
           E,
           "Ranks posted mismatched sizes for one transfer",
           Source::nccl,
           "",
           "collective mismatch error|posted incorrect receive info|message "
           "truncated : receiving",
           "The sender and receiver of one network transfer disagree on its size: the ranks called "
           "different collectives, counts or data types (or in a different order), so their "
           "operations no longer pair up.",
           "Local and remote sizes and the peer in the line; the collective each rank was in "
           "(NCCL_DEBUG_SUBSYS=COLL, or the watchdog's SeqNum/OpType per rank).",
           "Make every rank issue the same collectives with the same counts and types in the same "
           "order (a rank-dependent branch, uneven last batch, or mismatched tensor shapes).",
           "",
           {}},
    Family{"nccl.ib-completion",
           E,
           "IB work completion error (a status other than 4 or 12)",
           Source::nccl,
           "",
           "Got completion",
           "A work request on an IB queue pair completed with "
           "an error status: 5 (flushed: follows an earlier error on the same QP), 10 or 11 "
           "(remote access/operation error: memory registration or a crashed peer), 13 (RNR "
           "retry exceeded: the receiver stalled).",
           "The status and vendor error in the line, the peer address, and the first completion "
           "error of the job (later ones are consequences).",
           "Find the first error and its peer; for 10/11 check that the peer process is alive and "
           "GPU Direct RDMA works there; for 13 check the receiver's host.",
           "",
           {}},
    Family{"nccl.ib-device-query",
           E,
           "An RDMA device or port cannot be queried",
           Source::nccl,
           "",
           "Unable to query device|Unable to query port",
           "ibv_query_device/ibv_query_port failed "
           "on a device libibverbs listed: the device is in a bad state or its provider library "
           "does not match the kernel driver.",
           "The device name in the line; `ibv_devinfo` on that node.",
           "Check the device with ibv_devinfo; reload the driver or use one rdma-core in the "
           "image.",
           "rdma.devices",
           {}},
    Family{"nccl.ib-link-layer-mismatch",
           E,
           "NICs of different link layers (IB and RoCE) or "
           "device counts are mixed",
           Source::nccl,
           "",
           "incompatible devices|different link_layer|is incompatible with the "
           "local|different number of devices|merge multiple devices together",
           "NCCL was asked to connect or merge NICs whose link layers differ (InfiniBand with "
           "Ethernet/RoCE) or whose merged device counts differ between the two sides.",
           "The device pairs and link layers in the line; `NET/IB : Using` lines of both hosts.",
           "Select NICs of one link type: NCCL_IB_HCA listing only the rail NICs, the same on "
           "every node.",
           "nccl.ifname",
           {}},
    Family{"nccl.ib-verbs-call",
           E,
           "An IB verbs call failed",
           Source::nccl,
           "src/misc/",
           "Call to %s failed|Call to ibv_|ibv_post_send() failed|ibv_post_recv() failed|NET/MLX5: "
           "Call to|dlvsym failed|lib wrapper not initialized",
           "A libibverbs call failed (create QP/CQ, register memory, modify QP): the error text "
           "says why: `Cannot allocate memory` is the locked-memory limit, `Invalid argument` on "
           "ibv_modify_qp often a wrong GID index, `No such device` a device that went away.",
           "The call and errno in the line, and the NET/IB lines before it.",
           "Follow the errno: raise memlock (ulimit -l unlimited), let NCCL pick the GID "
           "(NCCL_IB_GID_INDEX unset), check the device with ibv_devinfo.",
           "rdma.devices",
           {}},
    Family{"nccl.socket-connect",
           E,
           "A TCP connection to a peer failed or timed out",
           Source::nccl,
           "",
           "onnect to %s failed|connect returned|exceeded error retry|exceeded "
           "retries|exceeded timeouts|socketPollConnect|Accept failed",
           "NCCL could not open a socket connection to another rank (bootstrap or socket "
           "transport): the peer is down, a firewall drops the port, or NCCL picked an interface "
           "the peer cannot reach.",
           "The peer address in the line; the bootstrap/OOB interface of both ranks.",
           "Set NCCL_SOCKET_IFNAME to the routable interface on every node, open the ports "
           "between the nodes, and check that the peer process is alive.",
           "nccl.ifname",
           {}},
    Family{"nccl.socket-closed",
           E,
           "A peer closed its connection or sent a truncated message",
           Source::nccl,
           "",
           "Connection closed by remote peer|Call to recv from|socketProgressOpt: "
           "Call to|message truncated|Message truncated|socket progress error",
           "The other end of a socket went away mid-operation: that rank crashed or was killed, "
           "or two jobs' ranks talk to each other (a shared NCCL_COMM_ID port).",
           "The peer address; the first rank of the job that failed (its log is the one to "
           "read).",
           "Find the rank that died first and read its log; give concurrent jobs distinct master "
           "ports.",
           "",
           {}},
    Family{"nccl.socket-no-interface",
           E,
           "No network interface matches NCCL's socket settings",
           Source::nccl,
           "",
           "no socket interface found|No usable listening interface|no interface "
           "found|no device found matching|no device found after excluding|No interface found in "
           "the same subnet|No IP interface found",
           "NCCL_SOCKET_IFNAME / NCCL_OOB_NET_IFNAME match no interface on this node (or no "
           "interface shares a subnet with the root), so bootstrap cannot start.",
           "The variable's value in the line and the node's interfaces (ip -br addr).",
           "Set NCCL_SOCKET_IFNAME to an interface that exists and is up on every node (a prefix "
           "such as eth or ens, or ^lo,docker).",
           "nccl.ifname",
           {}},
    Family{"nccl.socket-address",
           E,
           "An address NCCL was given cannot be used",
           Source::nccl,
           "",
           "No valid <IPv4|No valid [IPv6]|nsupported address family|getting address info|"
           "unsupported IP family|Invalid NCCL_COMM_ID|string is null|is neither AF_INET",
           "NCCL_COMM_ID or a peer address is malformed or does not resolve.",
           "The address in the line; NCCL_COMM_ID.",
           "Give NCCL_COMM_ID as <ipv4>:<port>, [<ipv6>]:<port> or <resolvable host>:<port>.",
           "",
           {}},
    Family{"nccl.bootstrap-mismatch",
           E,
           "Bootstrap root saw ranks from another job or a rank twice",
           Source::nccl,
           "",
           "Bootstrap Root : mismatch|has already checked in|Unexpected "
           "connections",
           "The bootstrap root received ranks with different nranks or the same rank twice: two "
           "jobs share one NCCL_COMM_ID / master address and port, or a restarted rank rejoined.",
           "nranks and rank numbers in the line; the master address of each job.",
           "Use a distinct master port per job; restart all ranks together.",
           "",
           {}},
    Family{"nccl.shm-cleanup",
           W,
           "Removing a shared-memory segment failed",
           Source::nccl,
           "",
           "munmap of shared memory|unlink shared memory",
           "NCCL could not unmap or unlink a /dev/shm segment at teardown (another process "
           "removed it, or /dev/shm is not shared as expected); harmless for the run itself.",
           "The segment name; stale /dev/shm/nccl-* files.",
           "Remove stale /dev/shm/nccl-* files; nothing to change if the run finished.",
           "container.limits",
           {}},
    Family{"nccl.uds",
           E,
           "The proxy's Unix domain socket failed (cuMem handle exchange)",
           Source::nccl,
           "",
           "UDS:",
           "NCCL passes cuMem file descriptors between processes of a "
           "node over abstract Unix sockets; processes in different network namespaces (separate "
           "pods or containers per GPU) cannot reach each other's socket.",
           "The socket name and errno; how the ranks of a node are containerised.",
           "Run the ranks of a node in one pod/container (or with hostNetwork/hostIPC), or set "
           "NCCL_CUMEM_ENABLE=0.",
           "",
           {}},
    Family{"nccl.nvls",
           E,
           "NVLink SHARP (NVLS) multicast setup failed",
           Source::nccl,
           "",
           "NVLS|NVLink SHARP|Multicast support|multicast",
           "NCCL could not create or bind NVLink multicast memory: NVSwitch systems need the "
           "Fabric Manager running and the GPUs' fabric state completed; after a Fabric Manager "
           "restart or on a partition without NVLS the bind fails.",
           "The CUDA error in the line; `nvidia-smi -q | grep -A2 Fabric` (State Completed, "
           "Status Success).",
           "Start or restart nvidia-fabricmanager and wait for the fabric state to complete; "
           "NCCL_NVLS_ENABLE=0 as a workaround.",
           "gpu.fabric-manager",
           {}},
    Family{"nccl.mnnvl",
           E,
           "Multi-node NVLink (MNNVL) is available but not working",
           Source::nccl,
           "",
           "MNNVL",
           "The GPUs report a multi-node NVLink clique but the IMEX service or its "
           "channels are not set up for this job.",
           "The clique size in the line; nvidia-imex-ctl -N; /dev/nvidia-caps-imex-channels.",
           "Configure the IMEX daemon and expose an IMEX channel to the job, or set "
           "NCCL_MNNVL_ENABLE=0.",
           "",
           {}},
    Family{
        "nccl.cumem",
        E,
        "cuMem (CUDA virtual memory) buffers are not usable here",
        Source::nccl,
        "",
        "CUMEM|cuMem",
        "NCCL's cuMem path failed: the CUDA driver is older than cuMem (host) memory needs, or "
        "(NCCL 2.24 and later) the SHM transport's cuMem host buffers, which the peer GPU maps, "
        "meet GPUs without P2P between them: a CUDA failure in shm.cc with `peer access is not "
        "supported` (GeForce, L4/T4, some PCIe layouts), or ranks that disagree about cuMem host "
        "memory (NCCL 2.26 and later probe it per process; nodes with memoryless NUMA domains): "
        "one reads the other's cuMem descriptor as a /dev/shm name, `Error while attaching to "
        "shared memory segment /dev/shm/nccl-<garbage> (size 0)`.",
        "The CUDA version or error in the line, and the file that printed it (transport/shm.cc); "
        "nvidia-smi topo -p2p r.",
        "Upgrade the CUDA driver, or set NCCL_CUMEM_HOST_ENABLE=0 (SHM falls back to /dev/shm) / "
        "NCCL_CUMEM_ENABLE=0.",
        "gpu.p2p",
        {}},
    Family{"nccl.p2p",
           E,
           "GPU peer-to-peer (P2P/IPC) access between GPUs failed",
           Source::nccl,
           "",
           "failed to peer with device|cudaIpcGetMemHandle|P2P is disabled between|IPC "
           "register|Legacy IPC",
           "Two GPUs of a node could not map each other's memory: P2P is off (a VM or a PCIe "
           "switch without P2P, ACS), or the processes cannot share IPC handles (separate "
           "containers without hostIPC).",
           "The device numbers and CUDA error in the line; nvidia-smi topo -p2p r.",
           "Enable P2P (ACS off, ATS in VMs) or run the node's ranks with a shared IPC namespace; "
           "NCCL_P2P_DISABLE=1 works around it at a cost.",
           "gpu.p2p",
           {}},
    Family{"nccl.cuda-failure",
           E,
           "A CUDA call failed inside NCCL",
           Source::nccl,
           "",
           "Cuda failure|CUDA error",
           "A CUDA runtime or driver call NCCL made failed; the error "
           "string names it: `out of memory`, `operation not supported` (cuMem/multicast on a "
           "driver, GPU or container without it), `peer access is not supported` (no P2P), "
           "`an illegal memory access` (a kernel fault, often the application's).",
           "The CUDA error string and number in the line, and the NCCL call before it.",
           "Act on the error: free GPU memory, set NCCL_CUMEM_ENABLE=0 or NCCL_NVLS_ENABLE=0 "
           "where the feature is unsupported, check P2P with nvidia-smi topo -p2p r.",
           "",
           {}},
    Family{"nccl.alloc",
           E,
           "Memory allocation failed",
           Source::nccl,
           "",
           "Failed to CUDA calloc|Failed to CUDA malloc|Failed to CUDA host alloc|Failed to malloc|"
           "malloc(size=|Allocation failed|unable to allocate",
           "NCCL could not allocate host or GPU memory (the GPU is full, or a container memory "
           "limit).",
           "The size in the line; nvidia-smi memory use; the container's memory limit.",
           "Leave GPU memory for NCCL (lower the framework's reservation), raise the container's "
           "memory limit.",
           "",
           {}},
    Family{"nccl.gdrcopy",
           W,
           "GDRCopy failed",
           Source::nccl,
           "",
           "GDRCOPY|gdr_",
           "The gdrcopy library or its kernel module (gdrdrv) is missing or refused a mapping.",
           "The gdr_* call in the line; lsmod | grep gdrdrv.",
           "Load gdrdrv (and match libgdrapi to it), or unset NCCL_GDRCOPY_ENABLE.",
           "",
           {}},
    Family{"nccl.nvml",
           W,
           "NVML is not usable",
           Source::nccl,
           "",
           "nvml|NVML|libnvidia-ml",
           "libnvidia-ml.so.1 is missing or fails (a container without the driver's libraries); "
           "NCCL then guesses the topology.",
           "The NVML call and error in the line.",
           "Mount the driver's libraries into the container (NVIDIA container toolkit).",
           "",
           {}},
    Family{"nccl.cuda-driver",
           E,
           "The CUDA driver library is missing or too old",
           Source::nccl,
           "",
           "CUDA Driver version|CUDA library|missing symbol cu|PFN functions|"
           "cuDriverGetVersion|Retrieve %s",
           "libcuda.so is missing, older than NCCL needs, or lacks symbols.",
           "The versions in the line; nvidia-smi.",
           "Install a driver that supports the CUDA version NCCL was built with.",
           "",
           {}},
    Family{"nccl.gin",
           E,
           "GPU-initiated networking (GIN/GDAKI) is unavailable",
           Source::nccl,
           "",
           "GIN|GDAKI",
           "The job asked for NCCL's GPU-initiated networking but no NIC or "
           "driver supports it, or ranks' devices differ.",
           "The line; NCCL_GIN_* settings.",
           "Use NICs and drivers that support it, or disable "
           "GIN for the job.",
           "",
           {}},
    Family{"nccl.transport-missing",
           E,
           "No transport connects two ranks",
           Source::nccl,
           "",
           "No transport found for rank|has no transport for",
           "Between these ranks neither P2P, SHM nor a network transport is usable (network "
           "disabled, or NCCL_P2P/SHM disabled on one node).",
           "The rank pair in the line; NCCL_*_DISABLE settings; the network chosen.",
           "Re-enable a transport between the ranks (unset NCCL_P2P_DISABLE/NCCL_SHM_DISABLE, fix "
           "the network).",
           "",
           {}},
    Family{"nccl.collnet",
           W,
           "CollNet (SHARP) is unavailable or failed",
           Source::nccl,
           "",
           "CollNet|COLLNET|collnet",
           "The CollNet plugin (SHARP) did not initialise or refused a buffer; NCCL falls back to "
           "point-to-point networking.",
           "The line; the SHARP plugin and NCCL_COLLNET_ENABLE.",
           "Install the SHARP plugin and enable SHARP on the switch, or unset "
           "NCCL_COLLNET_ENABLE.",
           "",
           {}},
    Family{"nccl.registration",
           W,
           "User buffer registration failed",
           Source::nccl,
           "",
           "register userbuff|deregister|Deregister|register fails|symmetric registration",
           "NCCL could not register a user buffer (NVLS, IPC, network or CollNet registration); "
           "it falls back to copies or fails the call.",
           "The buffer and size in the line.",
           "Check alignment and that the buffer comes from "
           "ncclMemAlloc where the feature needs it; NCCL_LOCAL_REGISTER=0 disables it.",
           "",
           {}},
    Family{"nccl.cuda-graph",
           E,
           "CUDA graph capture of NCCL calls is invalid",
           Source::nccl,
           "",
           "captured|graph|Graph",
           "NCCL calls in a group were captured inconsistently, or the "
           "CUDA runtime/driver is too old for capture.",
           "The line and the capturing code.",
           "Capture all communicators of a group the same way; update the driver.",
           "",
           {}},
    Family{
        "nccl.config",
        W,
        "An NCCL setting or config value is invalid or ignored",
        Source::nccl,
        "",
        "Invalid config|is being ignored|is too small|is too big|User asked for|"
        "ncclConfig_t|ncclSimInfo_t|Invalid %s|Unrecognized|must have a prefix|has invalid value|"
        "is not supported prior|Ignoring|ignoring|setting it to|setting to|limiting to|Limiting|"
        "cap it to|set both to|set it to",
        "An NCCL_* variable or ncclConfig_t field has a value NCCL rejects or adjusts.",
        "The setting and value in the line; `epkit env --check`.",
        "Fix or remove the setting.",
        "env.unknown-vars",
        {}},
    Family{"nccl.api-misuse",
           E,
           "The application called NCCL wrongly",
           Source::nccl,
           "",
           "argument is NULL|invalid root|invalid type|invalid reduction|not a valid pointer|"
           "mismatchs with NCCL device|Invalid rank|Invalid device|invalid device|improper usage|"
           "was revoked|already been destroyed|before the previous operation|to self without|"
           "not in a group|in the same group|corrupted comm|Invalid arguments|Invalid argument|"
           "Invalid handle|ncclRedOp|Data type supplied|FP8|exceeds ndev|rank count",
           "An API call got an invalid argument or came in the wrong state (a buffer on another "
           "device, a destroyed or revoked communicator, unmatched send/recv).",
           "The call and argument in the line; the application's stack.",
           "Fix the call in the application or framework.",
           "",
           {}},
    Family{"nccl.topology",
           W,
           "Topology detection or the topology file failed",
           Source::nccl,
           "",
           "XML|Topo|TOPO|topology|Could not find|could not find|ring %d|tree already|no "
           "path|path for pattern|requires NIC|numa",
           "NCCL could not read the topology file (NCCL_TOPO_FILE) or could not place GPUs, "
           "NICs and CPUs in its graph (missing sysfs in a container, a VM topology).",
           "The node or file named in the line; NCCL_TOPO_FILE; /sys visibility in the "
           "container.",
           "Fix or remove NCCL_TOPO_FILE; give the container /sys; on VMs use the provider's "
           "topology file.",
           "",
           {}},

    // ---- NCCL: subsystem families (every other site, by file) ----
    Family{"nccl.ib",
           E,
           "NET/IB transport error",
           Source::nccl,
           "src/transport/net_ib",
           "",
           "An internal error of NCCL's InfiniBand/RoCE transport (request bookkeeping, "
           "registration cache, connection state).",
           "The line and the NET/IB lines before it; a completion error or async event "
           "nearby is usually the cause.",
           "Look for the first NET/IB error of the job; report persistent internal errors to "
           "NCCL with the log.",
           "",
           {}},
    Family{"nccl.net-socket",
           E,
           "NET/Socket transport error",
           Source::nccl,
           "src/transport/net_socket",
           "",
           "NCCL's TCP network transport failed.",
           "The line; the NET/Socket interface list.",
           "Check interfaces and peers as for a "
           "socket connection failure.",
           "nccl.ifname",
           {}},
    Family{"nccl.socket",
           E,
           "Socket layer error",
           Source::nccl,
           "src/misc/socket",
           "",
           "NCCL's socket layer hit an unexpected state (a bug or a peer speaking another "
           "protocol on the port).",
           "The line; other jobs on the same port.",
           "Use a free master port; report to NCCL.",
           "nccl.ifname",
           {}},
    Family{"nccl.proxy",
           E,
           "Proxy thread error",
           Source::nccl,
           "src/proxy",
           "",
           "NCCL's proxy thread (network progress, shared-resource service) failed; usually a "
           "consequence of an earlier error on this or a peer rank.",
           "The operation and rank in the line; the first error of the job.",
           "Fix the first error; if the proxy's CUDA context fails, check the GPU state.",
           "",
           {}},
    Family{"nccl.init",
           E,
           "Communicator init or teardown error",
           Source::nccl,
           "src/init",
           "",
           "ncclCommInit*/ncclCommDestroy failed at the named step.",
           "The line and the lines before it.",
           "Fix the first error before it.",
           "",
           {}},
    Family{"nccl.enqueue",
           E,
           "Collective launch or scheduling error",
           Source::nccl,
           "src/enqueue",
           "",
           "NCCL could not schedule or launch an operation (no algorithm for the type, "
           "shared-memory limits, internal pattern errors).",
           "The function, type and algorithm in the line.",
           "Check NCCL_ALGO/NCCL_PROTO restrictions and the data type; report internal errors.",
           "",
           {}},
    Family{"nccl.group",
           E,
           "Group call error",
           Source::nccl,
           "src/group",
           "",
           "An ncclGroupStart/End block failed (a job in the group failed, mixed communicator "
           "kinds).",
           "The line and the failed job's error.",
           "Fix the first error in the group.",
           "",
           {}},
    Family{"nccl.scheduler",
           E,
           "Symmetric kernel scheduling error",
           Source::nccl,
           "src/scheduler",
           "",
           "No symmetric-memory kernel fits the operation.",
           "The function in the line.",
           "Use a supported type/op or disable symmetric kernels.",
           "",
           {}},
    Family{"nccl.graph",
           W,
           "Topology graph error",
           Source::nccl,
           "src/graph",
           "",
           "NCCL's topology search hit an unexpected layout.",
           "The line; NCCL_TOPO_FILE.",
           "Check the topology file; report to NCCL with NCCL_TOPO_DUMP_FILE output.",
           "",
           {}},
    Family{"nccl.symmetric-memory",
           E,
           "Symmetric memory / window error",
           Source::nccl,
           "src/allocator",
           "",
           "Symmetric memory allocation or windows failed.",
           "The size and offset in the line.",
           "Check ncclMemAlloc sizes and alignment.",
           "",
           {}},
    Family{"nccl.device-runtime",
           E,
           "Device API / symmetric runtime error",
           Source::nccl,
           "src/dev_runtime",
           "",
           "The device-side API could not be set up.",
           "The line.",
           "Check symmetric memory and multicast support.",
           "",
           {}},
    Family{"nccl.ras",
           W,
           "RAS (reliability service) error",
           Source::nccl,
           "src/ras",
           "",
           "NCCL's RAS thread failed or received unexpected messages.",
           "The peer in the line.",
           "Usually harmless for the job; NCCL_RAS_ENABLE=0 silences it.",
           "",
           {}},
    Family{"nccl.plugin",
           W,
           "NET, tuner or profiler plugin error",
           Source::nccl,
           "src/plugin",
           "",
           "A plugin was incompatible or misbehaved.",
           "The plugin and version in the line.",
           "Use a plugin built for this NCCL version.",
           "nccl.net-plugin",
           {}},
    Family{"nccl.net",
           E,
           "Network layer error",
           Source::nccl,
           "src/net",
           "",
           "The network layer could not find or use the requested network or device code.",
           "The network name in the line; NCCL_NET.",
           "Check NCCL_NET and the plugin.",
           "nccl.net-plugin",
           {}},
    Family{"nccl.transport-net",
           E,
           "Network transport setup error",
           Source::nccl,
           "src/transport/net",
           "",
           "Setting up a network connection or registration failed.",
           "The device and error in the line.",
           "Fix the device or registration error named.",
           "",
           {}},
    Family{"nccl.runtime-check",
           E,
           "A system or CUDA call failed (NCCL check macro)",
           Source::nccl,
           "src/include",
           "",
           "A system call or CUDA call checked by NCCL's macros "
           "failed; the line names the call and the error.",
           "The call and error string in the line.",
           "Act on the named error.",
           "",
           {}},
    Family{"nccl.misc",
           W,
           "NCCL helper error",
           Source::nccl,
           "src/misc",
           "",
           "A helper (argument checks, strong streams, tuner, profiler) reported an error.",
           "The line.",
           "Act on the message.",
           "",
           {}},
    Family{"nccl.collnet-transport",
           E,
           "CollNet transport error",
           Source::nccl,
           "src/transport/coll_net",
           "",
           "NCCL's CollNet (SHARP) transport failed to connect.",
           "The sizes in the line; the SHARP plugin version.",
           "Use a SHARP plugin built for this NCCL, or unset NCCL_COLLNET_ENABLE.",
           "",
           {}},
    Family{"nccl.gdaki",
           E,
           "GDAKI (GPU-initiated IB) transport error",
           Source::nccl,
           "src/transport/gdaki",
           "",
           "NCCL's GPU-initiated IB transport found no usable device.",
           "The device in the line.",
           "Use GDAKI-capable NICs, or disable GIN.",
           "rdma.devices",
           {}},

    // ---- NVSHMEM: curated families ----
    Family{"nvshmem.ibgda-mapping", E, "", Source::nvshmem, "",
           "cudaHostRegister with IoMemory|GPU cannot map UAR", "", "", "", "",
           Rule::ibgda_mapping},
    Family{"nvshmem.peer-memory",
           E,
           "No GPU peer-memory support for the RDMA transport",
           Source::nvshmem,
           "",
           "nv_peer_mem|nvidia_peermem|peer mem|peermem|dmabuf|DMA-BUF|"
           "DMABUF",
           "NVSHMEM's RDMA transports need nvidia_peermem (or DMA-BUF) to register GPU memory "
           "with the NIC; without it the transport skips itself and remote PEs are unreachable.",
           "`neither nv_peer_mem, or nvidia_peermem detected`; lsmod | grep nvidia_peermem.",
           "modprobe nvidia_peermem (GPU Operator: driver.rdma.enabled=true), or use DMA-BUF "
           "(NVSHMEM_IB_ENABLE_DMABUF... with a kernel and driver that support it).",
           "rdma.gpudirect",
           {}},
    // "init failed for transport: IBGDA" / "init failed for remote transport:
    // ibrc": a transport's nvshmemt_init returned an error and NVSHMEM dropped
    // it (transport.cpp, every 3.x); not a transport map failure by itself.
    Family{"nvshmem.transport-init",
           W,
           "An NVSHMEM transport failed to initialise and was dropped",
           Source::nvshmem,
           "",
           "init failed for transport|init failed for remote transport",
           "NVSHMEM loaded a transport (the remote one, ibrc/ucx/libfabric, or IBGDA) and its "
           "init returned an error, so it runs without it; with no transport left init stops "
           "(\"Unable to initialize any transports\"). The transport printed why just before: no "
           "usable HCA (not mlx5, \"cannot allocate buffer on the specified memory type\"), no "
           "peer memory (nvidia_peermem / DMA-BUF), or for IBGDA a driver not configured for it "
           "(NVreg_EnableStreamMemOPs=1, NVreg_RegistryDwords=\"PeerMappingOverride=1;\").",
           "The lines of the same PE just before it (HCA skips, peer memory, IoMemory/UAR "
           "mapping); NVSHMEM_REMOTE_TRANSPORT, NVSHMEM_IB_ENABLE_IBGDA; whether the job needs "
           "the transport (one node runs on P2P without it).",
           "Fix the reason printed before it (see the findings beside this one): configure the "
           "driver for IBGDA and reload it, load nvidia_peermem, list usable HCAs with "
           "NVSHMEM_HCA_LIST; on one node without RDMA NICs the remote transport is not needed.",
           "nvshmem.ibgda",
           {}},
    Family{"nvshmem.transport-map",
           E,
           "NVSHMEM could not build its transport map (a PE is "
           "unreachable)",
           Source::nvshmem,
           "",
           "transport map|initialize any transports|Unable to open the %s "
           "transport|Unable to get info from %s transport|not reachable|unreachable|"
           "no transport|rma not supported on transport",
           "No enabled transport reaches some PE: the RDMA transport skipped itself (no peer "
           "memory, no usable HCA, IBGDA mapping refused) or P2P is off, so init stops.",
           "The transport lines before it: which transport each PE skipped and why (peer memory, "
           "HCA, IBGDA).",
           "Fix the skipped transport on the affected nodes (see the findings beside this one); "
           "NVSHMEM_REMOTE_TRANSPORT picks another.",
           "",
           {}},
    Family{"nvshmem.qp-create",
           E,
           "NVSHMEM could not create RDMA queue pairs",
           Source::nvshmem,
           "",
           "create qp|create_qp|qpair|create qps|create shared qp|QP creation|create "
           "dci|create DCI|create rc|create CQ|create cq|create_cq|qp_create",
           "Creating the transport's queue pairs or completion queues failed: too many QPs for "
           "the NIC (IBGDA: NVSHMEM_IBGDA_NUM_RC_PER_PE x PEs), locked-memory limits, or a NIC "
           "without DEVX/GPU-mapped queues.",
           "The errno before the line; ulimit -l; the QP counts set.",
           "Lower NVSHMEM_IBGDA_NUM_RC_PER_PE / DCI counts, raise memlock, or use the ibrc "
           "transport.",
           "container.limits",
           {}},
    Family{"nvshmem.hca-skipped",
           W,
           "NVSHMEM skipped an RDMA device or port",
           Source::nvshmem,
           "",
           "Skipping|skipping|is not enumerated as an mlx5|does not support all necessary atomic|"
           "inactive port|could not find user specified HCA|cound not find user specified HCA",
           "A device or port was unusable for the transport: not an mlx5 NIC (IBGDA/DEVX need "
           "one), PCIe atomics off in the NIC firmware, an inactive port, or an NVSHMEM_HCA_* "
           "name that matches nothing.",
           "The device name and reason in the line; compare with the other nodes.",
           "Enable PCI atomics in the NIC firmware (mlxconfig PCI_ATOMIC_MODE), fix "
           "NVSHMEM_HCA_LIST/NVSHMEM_ENABLE_NIC_PE_MAPPING, bring the port up.",
           "rdma.devices",
           {}},
    Family{"nvshmem.nvls",
           E,
           "NVSHMEM NVLink SHARP (multicast) setup failed",
           Source::nvshmem,
           "",
           "NVLS|multicast|Multicast|NVLINK SHARP|cuMulticast",
           "Multicast objects could not be created or bound: the Fabric Manager is not running "
           "or the fabric state is incomplete (after an FM restart), or the platform has no "
           "NVLS.",
           "The cuMulticast call in the line; nvidia-smi -q fabric state.",
           "Restart nvidia-fabricmanager and wait for State Completed; NVSHMEM_DISABLE_NVLS=1 "
           "as a workaround.",
           "gpu.fabric-manager",
           {}},
    Family{"nvshmem.p2p-access",
           E,
           "NVSHMEM peer GPU access failed or is disabled",
           Source::nvshmem,
           "",
           "CanAccessPeer|P2P access|P2PAttribute|not visible|peer GPU|not "
           "accessible|pcie_attrs|two PEs sharing a GPU|multiple PEs per GPU",
           "A peer GPU on the node is not accessible over P2P (hidden by CUDA_VISIBLE_DEVICES, "
           "P2P off, or two PEs share a GPU), so NVSHMEM uses a network transport or fails.",
           "The line; CUDA_VISIBLE_DEVICES of the PEs; nvidia-smi topo -p2p r.",
           "Give each PE its own GPU and make all GPUs of the node visible to every PE; enable "
           "P2P.",
           "gpu.p2p",
           {}},
    Family{"nvshmem.cuda-driver",
           E,
           "The CUDA driver is missing or too old for NVSHMEM",
           Source::nvshmem,
           "",
           "CUDA library|missing symbol cu|PFN functions|DriverGetVersion|"
           "Retrieve %s version",
           "libcuda.so is missing or lacks the entry points NVSHMEM needs.",
           "The versions in the line.",
           "Use a driver matching NVSHMEM's CUDA.",
           "",
           {}},
    Family{"nvshmem.heap",
           E,
           "NVSHMEM symmetric heap allocation failed",
           Source::nvshmem,
           "",
           "heap|Heap|symmetric size|SYMMETRIC_SIZE|out of memory|cuMemCreate|cuMemMap|"
           "cuMemAddressReserve",
           "The symmetric heap could not be reserved or grown: NVSHMEM_SYMMETRIC_SIZE larger "
           "than free GPU memory, or cuMem/VMM unavailable in this environment.",
           "The size in the line; free GPU memory; NVSHMEM_SYMMETRIC_SIZE.",
           "Lower NVSHMEM_SYMMETRIC_SIZE or free GPU memory before nvshmem_init.",
           "",
           {}},
    Family{"nvshmem.bootstrap-connect",
           E,
           "NVSHMEM bootstrap could not connect PEs",
           Source::nvshmem,
           "",
           "onnect to %s failed|connect returned|exceeded retries|exceeded "
           "timeouts|No interface found|No valid|getting address info|Connection closed|"
           "bootstrap init failed|bootstrap_init|Bootstrap|Message truncated",
           "PEs could not reach each other over the bootstrap (MPI, PMI or UID sockets): wrong "
           "interface, firewall, or mismatched launch. A truncated message (\"Message truncated "
           ": received N bytes instead of M\", NVSHMEM 3.0 and later) means the two ends of a "
           "bootstrap socket disagree: PEs of different NVSHMEM builds or of another launch on "
           "the same port, or a stream read out of order under heavy load.",
           "The address and interface in the line; NVSHMEM_BOOTSTRAP*; "
           "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME.",
           "Set NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME to the routable interface; check the launcher.",
           "nccl.ifname",
           {}},

    Family{"nvshmem.library-missing",
           E,
           "A library NVSHMEM's transport needs cannot be loaded",
           Source::nvshmem,
           "",
           "dlopen|dlsym|Unable to load|unable to load|could not find "
           "library|not found in the library",
           "The transport's library (libibverbs, libmlx5, libfabric, libucp, the bootstrap "
           "plugin) is missing from the image or not on LD_LIBRARY_PATH, so the transport skips "
           "itself.",
           "The library named in the line; ldconfig -p inside the container.",
           "Install the library in the image (rdma-core's libibverbs1 and ibverbs-providers, "
           "libfabric) or put it on LD_LIBRARY_PATH.",
           "rdma.verbs-lib",
           {}},
    Family{"nvshmem.gdrcopy",
           E,
           "NVSHMEM needs GDRCopy and it is missing or disabled",
           Source::nvshmem,
           "",
           "GDRCopy|gdrcopy|GDR copy|gdr_",
           "The chosen mode (IBGDA with the CPU NIC handler, the EFA provider, proxy signalling) "
           "needs GDRCopy: libgdrapi and the gdrdrv kernel module, or NVSHMEM was built "
           "without it.",
           "The line; lsmod | grep gdrdrv; NVSHMEM_USE_GDRCOPY.",
           "Load gdrdrv and install libgdrapi matching it, or pick a mode that does not need it "
           "(NVSHMEM_IBGDA_NIC_HANDLER=gpu).",
           "",
           {}},
    Family{"nvshmem.libfabric-provider",
           E,
           "No usable libfabric provider or fabric",
           Source::nvshmem,
           "",
           "fi_getinfo|No providers matched|Unable to find the selected "
           "fabric|Failed to allocate fabric|Failed to allocate domain|efa fabric",
           "libfabric found no provider matching NVSHMEM's request (EFA or CXI not installed in "
           "the image, the device not exposed to the container, an old libfabric).",
           "The provider in the line; fi_info -p efa (or cxi) in the container; "
           "NVSHMEM_LIBFABRIC_PROVIDER.",
           "Install the provider's libfabric and expose its devices (EFA: the aws-efa device "
           "plugin), set NVSHMEM_LIBFABRIC_PROVIDER to it.",
           "",
           {}},
    Family{
        "nvshmem.completion-error",
        E,
        "RDMA completion or progress errors at run time",
        Source::nvshmem,
        "",
        "reported error|Nonzero error count|error count progressing|Error "
        "progressing CQ|unexpected events|invalid src address|invalid header type|Error in quiet",
        "A completion queue reported errors while NVSHMEM moved data: a peer PE died or became "
        "unreachable, or the fabric dropped traffic.",
        "The provider error in the line; the first PE that failed; the NIC counters.",
        "Find the first failure across PEs; check the links (`epkit doctor --only "
        "rdma.port-errors`).",
        "rdma.port-errors",
        {}},
    Family{"nvshmem.qp-transition",
           E,
           "An RDMA queue pair could not be connected to its peer",
           Source::nvshmem,
           "",
           "syndrome|INIT2RTR|RTR2RTS|RST2INIT|modify_qp|modify qp|init2rtr|rtr2rts|create ah|"
           "create_ah|address handle",
           "Moving a queue pair to RTR/RTS or creating the address handle of its peer failed "
           "(the syndrome or errno names why): usually the address of the peer is wrong for this "
           "fabric (RoCE GID index/type, a different subnet) or the port is down.",
           "The transition and syndrome in the line; NVSHMEM_IB_GID_INDEX; the ports' GIDs.",
           "Set NVSHMEM_IB_GID_INDEX to the RoCE v2 IPv4 GID (`epkit doctor --only "
           "rdma.gid-index`), check the port state.",
           "rdma.gid-index",
           {}},
    Family{"nvshmem.settings",
           W,
           "An NVSHMEM setting has a value NVSHMEM rejects",
           Source::nvshmem,
           "",
           "must be a positive|must be at least|can be at most|must not be "
           "larger|is not valid|is not supported.|Unrecognized value|Invalid libfabric transport "
           "persona|NVSHMEM_",
           "An NVSHMEM_* variable is out of range or names something unsupported.",
           "The variable and value in the line; `epkit env --check`.",
           "Fix or remove the setting.",
           "env.unknown-vars",
           {}},

    Family{"nvshmem.cuda-call",
           E,
           "A CUDA call inside NVSHMEM failed",
           Source::nvshmem,
           "",
           "cudaMalloc|cudaMemcpy|cudaHostRegister|cudaStream|cudaEvent|cudaDevice|cudaGetDevice|"
           "cudaSetDevice|cudaIpc|cudaFree|cudaLaunch|cudaPointer|CUDA error|Cuda failure|cuMem|"
           "cuCtx|cuPointer|cuStream|cuDevice|cuLaunch|cuModule|cuInit|cuGetProcAddress|to GPU "
           "memory failed|CUDA API",
           "A CUDA driver or runtime call NVSHMEM made failed: the GPU is out of memory, in an "
           "error state after an earlier fault, or the driver lacks the feature (VMM, stream "
           "memory operations: NVreg_EnableStreamMemOPs=1).",
           "The call in the line and the CUDA error before it; nvidia-smi; dmesg Xid lines.",
           "Free GPU memory or lower NVSHMEM_SYMMETRIC_SIZE; load the driver with the options "
           "NVSHMEM/DeepEP need; reset a GPU that logged an Xid.",
           "",
           {}},
    // DEVX objects (UAR pages, umem registrations, QP/CQ objects) are made on
    // the mlx5 device directly (ibdevx, ibgda): an allocation failure there is
    // the NIC or the permissions, not host memory.
    Family{"nvshmem.devx",
           E,
           "The NIC's DEVX resources (UAR, umem, objects) could not be allocated",
           Source::nvshmem,
           "",
           "mlx5dv_devx_uar|devx object|devx_umem_reg|mlx5dv_devx_alloc|devx_obj_create|"
           "mlx5dv_devx_query_eqn",
           "NVSHMEM's IBGDA/ibdevx transport creates DEVX objects on the mlx5 device itself "
           "(doorbell UAR pages, umem registrations, queue objects). They fail where the process "
           "may not do that: a container without the RDMA privileges the transport needs (it "
           "works with --privileged), a device or VF without DEVX support, or the NIC's UAR "
           "limit reached by many QPs.",
           "Whether the same container works privileged; ibv_devinfo and /dev/infiniband inside "
           "it; the QP counts (NVSHMEM_IBGDA_NUM_RC_PER_PE).",
           "Give the container the RDMA access IBGDA needs (privileged, or the RDMA device plugin "
           "with IPC_LOCK and unlimited memlock), or use the ibrc transport "
           "(NVSHMEM_IB_ENABLE_IBGDA=0); lower the QP counts if the UAR limit is hit.",
           "nvshmem.ibgda",
           {}},
    Family{"nvshmem.host-alloc",
           E,
           "NVSHMEM could not allocate host memory for its state",
           Source::nvshmem,
           "",
           "Unable to allocate|unable to allocate|allocation of|allocation "
           "failed|cannot allocate|Cannot allocate|failed allocating|Failed to allocate|malloc|"
           "calloc|Out of memory|out of memory",
           "An allocation for NVSHMEM's bookkeeping failed: the process ran out of host memory "
           "(a container memory limit) or the requested sizes are huge (many PEs x QPs).",
           "The object in the line; the container's memory limit; the QP and PE counts.",
           "Raise the memory limit or lower NVSHMEM_IBGDA_NUM_RC_PER_PE / QP depths.",
           "",
           {}},

    // ---- NVSHMEM: subsystem families ----
    Family{"nvshmem.ibgda",
           E,
           "NVSHMEM IBGDA transport error",
           Source::nvshmem,
           "src/modules/transport/ibgda",
           "",
           "The GPU-initiated RDMA transport (IBGDA) failed to set up its NIC resources.",
           "The line; the HCA; NVSHMEM_IBGDA_* settings; PeerMappingOverride.",
           "See nvshmem.ibgda-mapping and nvshmem.qp-create; NVSHMEM_IB_ENABLE_IBGDA=0 falls "
           "back to ibrc.",
           "nvshmem.ibgda",
           {}},
    Family{"nvshmem.ibrc",
           E,
           "NVSHMEM ibrc transport error",
           Source::nvshmem,
           "src/modules/transport/ibrc",
           "",
           "The proxy-driven RDMA transport (ibrc) failed.",
           "The line; the HCA and peer-memory state.",
           "Check the HCA, peer memory and memlock.",
           "rdma.gpudirect",
           {}},
    Family{"nvshmem.ibdevx",
           E,
           "NVSHMEM ibdevx transport error",
           Source::nvshmem,
           "src/modules/transport/ibdevx",
           "",
           "The DEVX RDMA transport failed.",
           "The line.",
           "Check the HCA (mlx5, DEVX support) and peer memory.",
           "rdma.devices",
           {}},
    Family{"nvshmem.libfabric",
           E,
           "NVSHMEM libfabric transport error",
           Source::nvshmem,
           "src/modules/transport/libfabric",
           "",
           "The libfabric transport (EFA, Slingshot/CXI, verbs via OFI) failed.",
           "The fi_* call and error in the line; FI_PROVIDER.",
           "Check the libfabric provider and NVSHMEM_LIBFABRIC_PROVIDER.",
           "",
           {}},
    Family{"nvshmem.ucx",
           E,
           "NVSHMEM UCX transport error",
           Source::nvshmem,
           "src/modules/transport/ucx",
           "",
           "The UCX transport failed.",
           "The UCX error.",
           "Check UCX_TLS and the UCX installation.",
           "",
           {}},
    Family{"nvshmem.transport-common",
           E,
           "NVSHMEM RDMA transport helper error",
           Source::nvshmem,
           "src/modules/transport/common",
           "",
           "A helper shared by the RDMA transports (device and memory registration) failed.",
           "The line.",
           "Check the HCA, peer memory and memlock.",
           "rdma.devices",
           {}},
    Family{"nvshmem.bootstrap",
           E,
           "NVSHMEM bootstrap error",
           Source::nvshmem,
           "src/modules/bootstrap",
           "",
           "A bootstrap module (MPI, PMI, UID) failed.",
           "The line.",
           "Check the launcher and NVSHMEM_BOOTSTRAP.",
           "",
           {}},
    Family{"nvshmem.bootstrap-loader",
           E,
           "NVSHMEM bootstrap loading error",
           Source::nvshmem,
           "src/host/bootstrap",
           "",
           "The bootstrap plugin could not be loaded or initialised.",
           "The plugin name in the line; NVSHMEM_BOOTSTRAP_PLUGIN.",
           "Install the bootstrap plugin matching the launcher.",
           "",
           {}},
    Family{"nvshmem.init",
           E,
           "NVSHMEM init error",
           Source::nvshmem,
           "src/host/init",
           "",
           "nvshmem_init failed at the named step.",
           "The line and the lines before it.",
           "Fix the first error before it.",
           "",
           {}},
    Family{"nvshmem.topo",
           E,
           "NVSHMEM topology error",
           Source::nvshmem,
           "src/host/topo",
           "",
           "NVSHMEM could not map GPUs to NICs or PEs to devices.",
           "The line.",
           "Check NVSHMEM_HCA_PE_MAPPING and GPU visibility.",
           "",
           {}},
    Family{"nvshmem.memory",
           E,
           "NVSHMEM memory management error",
           Source::nvshmem,
           "src/host/mem",
           "",
           "Symmetric memory management failed.",
           "The line.",
           "Check NVSHMEM_SYMMETRIC_SIZE and free GPU memory.",
           "",
           {}},
    Family{"nvshmem.team",
           E,
           "NVSHMEM team error",
           Source::nvshmem,
           "src/host/team",
           "",
           "Creating or using a team failed.",
           "The line.",
           "Check team arguments.",
           "",
           {}},
    Family{"nvshmem.proxy",
           E,
           "NVSHMEM proxy thread error",
           Source::nvshmem,
           "src/host/proxy",
           "",
           "The CPU proxy thread failed.",
           "The line.",
           "Fix the first error before it.",
           "",
           {}},
    Family{"nvshmem.transport",
           E,
           "NVSHMEM transport layer error (P2P, connection setup)",
           Source::nvshmem,
           "src/host/transport",
           "",
           "Setting up or connecting NVSHMEM's transports failed (\"transport create connect "
           "failed\", \"connect EPS failed\"): a remote transport could not connect its queue "
           "pairs (a broken RDMA path, RoCE GID settings) or the P2P transport could not map a "
           "peer GPU.",
           "The transport module's lines around it (ibrc/ibgda: ibv_modify_qp, init2rtr, "
           "syndrome) and which PEs print them.",
           "Fix the transport error printed nearby (see nvshmem.qp-transition, "
           "nvshmem.peer-memory, nvshmem.p2p-access); check GPU visibility for P2P.",
           "gpu.p2p",
           {}},
    Family{"nvshmem.runtime",
           E,
           "NVSHMEM runtime error",
           Source::nvshmem,
           "src/",
           "",
           "An NVSHMEM operation (collective launch, communication, synchronisation) failed.",
           "The line.",
           "Fix the first error before it.",
           "",
           {}},

    // ---- DeepEP ----
    Family{"deepep.timeout", E, "", Source::deepep, "", "timeout", "", "", "", "",
           Rule::deepep_timeout},
    Family{"deepep.assert",
           E,
           "DeepEP assertion failed",
           Source::deepep,
           "",
           "Assertion|assert|EP_HOST_UNREACHABLE|Unreachable|unreachable",
           "A DeepEP host or device assertion failed: a configuration the kernels do not "
           "support (hidden size, number of experts or ranks, buffer too small) or a corrupted "
           "layout from a failed earlier step.",
           "The file, line and condition in the message.",
           "Compare the condition with the Buffer/Config arguments (num_nvl_bytes, "
           "num_rdma_bytes, num_experts); DeepEP's README lists the supported shapes.",
           "",
           {}},
    Family{"deepep.jit",
           E,
           "DeepEP kernel compilation failed",
           Source::deepep,
           "",
           "compilation failed|cuobjdump failed",
           "DeepEP V2 compiles kernels at run time: NVCC is missing, too old or not on PATH.",
           "The compiler output in the line.",
           "Install a CUDA toolkit with nvcc on PATH "
           "(CUDA_HOME).",
           "",
           {}},
    Family{"deepep.leak",
           W,
           "DeepEP buffer destroyed without destroy()",
           Source::deepep,
           "",
           "destroy()",
           "The Buffer was garbage-collected without destroy(): resources may "
           "leak; harmless at exit.",
           "The line.",
           "Call buffer.destroy() before exit.",
           "",
           {}},
    Family{"deepep.error",
           E,
           "DeepEP error",
           Source::deepep,
           "",
           "",
           "DeepEP reported an error.",
           "The line.",
           "Act on the message.",
           "",
           {}},
};

}  // namespace

std::span<const Family> catalogue_families() {
  return k_families;
}

}  // namespace epkit::logs
