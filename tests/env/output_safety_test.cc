// Nothing read from a node may run when epkit's shell output is sourced, nor
// break an output format: a DMI string with a newline (it escaped the '#'
// comment and ran, reproduced), a NIC name with shell syntax, invalid UTF-8
// (nlohmann's dump aborted with type_error 316), control bytes (they reached
// the terminal raw).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_run.h"
#include "support/temp_tree.h"

namespace epkit::cli {
namespace {

const char* const k_formats[] = {"sh", "k8s", "mpirun", "dotenv"};

// A GKE A4 tree whose DMI strings and first rail NIC carry shell syntax: each
// injected command would create a file named "pwned*" in the working folder.
// Variant 0 has the hostile vendor, 1 the hostile product name (the other one
// stays Google's, so the node is still seen as Google Cloud and the strings
// reach the comments).
struct HostileNode {
  test::TempTree tree{"examples/gke-a4"};
  explicit HostileNode(int variant = 0) {
    if (variant == 0) {
      tree.write("/sys/class/dmi/id/sys_vendor",
                 "Google\nexport EPKIT_PWNED=1; touch pwned-dmi\n`touch pwned-tick`\n");
    } else {
      tree.write("/sys/class/dmi/id/product_name",
                 "Google Compute Engine\r\n$(touch pwned-product)\x1b]0;x\x07\xff\n");
    }
    tree.remove("/sys/class/infiniband/mlx5_0");
    tree.link("/sys/class/infiniband/mlx5_0$(touch pwned-nic)'x",
              "../../devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:02.0/0000:15:00.0/"
              "infiniband/mlx5_0");
    tree.write("/empty.env", "");
  }
  std::string root() const { return tree.root(); }
};

TEST(OutputSafety, SourcingEveryShellFormRunsNothingFromTheNode) {
  for (int variant : {0, 1}) {
    HostileNode node(variant);
    test::TempTree work;
    work.mkdir("/w");
    for (const char* format : k_formats) {
      for (std::vector<std::string> extra :
           {std::vector<std::string>{}, std::vector<std::string>{"--local-rank", "0"}}) {
        std::vector<std::string> args = {"env",
                                         "--sysroot",
                                         node.root(),
                                         "--format",
                                         format,
                                         "--env-file",
                                         node.tree.path("/empty.env")};
        args.insert(args.end(), extra.begin(), extra.end());
        auto run = test::run_epkit(args);
        ASSERT_EQ(run.code, 0) << format << ": " << run.err;
        EXPECT_EQ(run.out.find('\x1b'), std::string::npos) << format;
        EXPECT_EQ(run.out.find('\r'), std::string::npos) << format;
        // The injected text is there, escaped, inside one comment line.
        EXPECT_NE(run.out.find(variant == 0 ? "Google\\x0aexport EPKIT_PWNED=1"
                                            : "Engine\\x0d\\x0a$(touch pwned-product)\\x1b"),
                  std::string::npos)
            << format << "\n"
            << run.out;
        work.write("/w/out.txt", run.out);
        // sh exits non-zero on the YAML and mpirun lines (commands that do not
        // exist); what matters is that no injected command ran.
        (void)test::run_shell("cd " + work.path("/w") +
                              " && env -i LOCAL_RANK=0 sh -c '. ./out.txt' "
                              ">/dev/null 2>&1");
        auto pwned = test::run_shell("ls " + work.path("/w") + " | grep pwned");
        EXPECT_NE(pwned.code, 0) << format << ": an injected command ran: " << pwned.out << "\n"
                                 << run.out;
      }
    }
  }
}

TEST(OutputSafety, K8sOutputStaysOneYamlValuePerEntry) {
  HostileNode node;
  auto run = test::run_epkit({"env", "--sysroot", node.root(), "--format", "k8s", "--env-file",
                              node.tree.path("/empty.env")});
  ASSERT_EQ(run.code, 0) << run.err;
  // Read back as --check does: every entry still a name and a value.
  node.tree.write("/env.yaml", run.out);
  auto check = test::run_epkit({"env", "--check", "--json", "--sysroot", node.root(), "--env-file",
                                node.tree.path("/env.yaml")});
  auto doc = nlohmann::json::parse(check.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << check.out << check.err;
}

// Invalid UTF-8 from the node in every JSON and Prometheus output: these
// aborted with nlohmann's type_error 316 (exit 134).
TEST(OutputSafety, InvalidUtf8NeverAbortsAJsonOutput) {
  HostileNode node;
  // DEL and a C1 control are valid raw in JSON: the terminal filter must
  // keep them valid (it wrote \x7f, an invalid JSON escape).
  node.tree.write("/job.env",
                  "NCCL_SOCKET_IFNAME=eth\xff\xfe\nNCCL_DEBUG=\xc3\nNCCL_ALGO=a\x7f\xc2\x9b\n");
  node.tree.write("/sys/class/infiniband/mlx5_1/ports/1/rate", "400\x7f\xc2\x9b Gb/sec\n");
  std::string env = node.tree.path("/job.env");
  std::vector<std::vector<std::string>> commands = {
      {"doctor", "--json", "--sysroot", node.root(), "--env-file", env},
      {"doctor", "--format", "prometheus", "--sysroot", node.root(), "--env-file", env},
      {"topo", "--json", "--sysroot", node.root()},
      {"env", "--format", "json", "--sysroot", node.root(), "--env-file", env},
      {"env", "--check", "--json", "--sysroot", node.root(), "--env-file", env},
  };
  for (const auto& args : commands) {
    auto run = test::run_epkit(args);
    EXPECT_LT(run.code, 64) << args[0] << " " << args[1] << ": " << run.err;
    if (args[1] == "--format" && args[2] == "prometheus") continue;
    auto doc = nlohmann::json::parse(run.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << args[0] << " " << args[1] << "\n" << run.out;
  }
}

// NUL and escape bytes from sysfs reached the terminal raw.
TEST(OutputSafety, TextOutputShowsControlBytesEscaped) {
  HostileNode node(1);
  node.tree.write("/sys/class/infiniband/mlx5_1/ports/1/rate",
                  std::string("400 Gb/sec\x1b[2J\x1b]0;owned\x07") + '\0' + " (4X NDR)\n");
  node.tree.write("/job.env", "NCCL_DEBUG=\"INFO\x1b[31m\rX\"\n");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"topo", "--sysroot", node.root()},
        std::vector<std::string>{"doctor", "-v", "--sysroot", node.root(), "--env-file",
                                 node.tree.path("/job.env")},
        std::vector<std::string>{"env", "--check", "--sysroot", node.root(), "--env-file",
                                 node.tree.path("/job.env")}}) {
    auto run = test::run_epkit(args);
    for (char c : run.out + run.err) {
      auto u = static_cast<unsigned char>(c);
      EXPECT_FALSE(u < 0x20 && c != '\n' && c != '\t') << args[0] << ": byte " << int(u);
    }
    if (args[0] == "topo") {
      EXPECT_NE(run.out.find("400 Gb/sec\\x1b[2J\\x1b]0;owned\\x07\\x00"), std::string::npos)
          << run.out;
    }
  }
}

// A fifo in a node tree hung doctor, topo and env ("passive, about a second").
TEST(OutputSafety, AFifoInTheTreeDoesNotHangPassiveCommands) {
  test::TempTree tree("examples/gke-a4");
  tree.remove("/sys/class/dmi/id/product_name");
  ASSERT_EQ(::mkfifo(tree.path("/sys/class/dmi/id/product_name").c_str(), 0644), 0);
  tree.remove("/proc/driver/nvidia/version");
  ASSERT_EQ(::mkfifo(tree.path("/proc/driver/nvidia/version").c_str(), 0644), 0);
  tree.write("/empty.env", "");
  for (std::vector<std::string> args :
       {std::vector<std::string>{"doctor", "--sysroot", tree.root()},
        std::vector<std::string>{"topo", "--sysroot", tree.root()},
        std::vector<std::string>{"env", "--sysroot", tree.root()},
        std::vector<std::string>{"env", "--check", "--sysroot", tree.root(), "--env-file",
                                 tree.path("/empty.env")}}) {
    auto run = test::run_epkit(args);  // a hang never returns: the test's timeout catches it
    EXPECT_LT(run.code, 64) << args[0] << ": " << run.err;
  }
}

}  // namespace
}  // namespace epkit::cli
