#include "runtime/launch.h"

#include <gtest/gtest.h>

namespace epkit::runtime {
namespace {

host::Env env_of(std::map<std::string, std::string> vars) {
  return host::Env(std::move(vars));
}

bool has_source(const LaunchInfo& info, const std::string& entry) {
  return std::find(info.sources.begin(), info.sources.end(), entry) != info.sources.end();
}

void expect_error(const Result<LaunchInfo>& info, std::initializer_list<const char*> words) {
  ASSERT_FALSE(info.ok()) << info->describe();
  EXPECT_EQ(info.error().code, ErrorCode::invalid);
  for (const char* word : words) {
    EXPECT_NE(info.error().message.find(word), std::string::npos)
        << "'" << word << "' not in: " << info.error().message;
  }
}

TEST(Launch, NoLauncherIsOneProcessOrASpawningAgent) {
  auto single = discover(env_of({}));
  ASSERT_TRUE(single.ok()) << single.error().message;
  EXPECT_EQ(single->launcher, Launcher::none);
  EXPECT_EQ(single->world_size, 1);
  EXPECT_FALSE(single->spawn);

  LaunchOptions options;
  options.default_nproc = 4;
  auto agent = discover(env_of({{"MASTER_PORT", "31000"}}), options);
  ASSERT_TRUE(agent.ok()) << agent.error().message;
  EXPECT_TRUE(agent->spawn);
  EXPECT_EQ(agent->world_size, 4);
  EXPECT_EQ(agent->local_world_size, 4);
  EXPECT_EQ(agent->master_addr, "127.0.0.1");
  EXPECT_EQ(agent->master_port, 31000);
  expect_error(discover(env_of({{"MASTER_PORT", "99999"}}), options), {"MASTER_PORT", "99999"});
}

TEST(Launch, Torchrun) {
  auto info = discover(env_of({{"RANK", "5"},
                               {"LOCAL_RANK", "1"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"MASTER_ADDR", "n0"},
                               {"MASTER_PORT", "29400"},
                               {"GROUP_RANK", "1"}}));
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->launcher, Launcher::torchrun);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_world_size, 4);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->nnodes, 2);
  EXPECT_EQ(info->master_addr, "n0");
  EXPECT_EQ(info->master_port, 29400);
  EXPECT_TRUE(has_source(*info, "RANK=5"));
  EXPECT_NE(info->describe().find("torchrun: rank 5/8"), std::string::npos) << info->describe();
}

TEST(Launch, TorchrunMalformed) {
  std::map<std::string, std::string> good{
      {"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}};
  ASSERT_TRUE(discover(env_of(good)).ok());
  auto with = [&](const char* name, const char* value) {
    auto vars = good;
    if (value) {
      vars[name] = value;
    } else {
      vars.erase(name);
    }
    return discover(env_of(vars));
  };
  expect_error(with("RANK", "one"), {"torchrun", "RANK='one'", "not an integer"});
  expect_error(with("RANK", "1x"), {"RANK='1x'"});
  expect_error(with("RANK", "-1"), {"RANK=-1", "outside"});
  expect_error(with("RANK", "2"), {"rank 2 is not below world size 2", "RANK=2"});
  expect_error(with("RANK", "99999999999"), {"RANK"});
  expect_error(with("WORLD_SIZE", nullptr), {"WORLD_SIZE is not set"});
  expect_error(with("LOCAL_WORLD_SIZE", "0"), {"LOCAL_WORLD_SIZE=0"});
  expect_error(with("LOCAL_RANK", "3"), {"local rank 3"});
  expect_error(with("LOCAL_WORLD_SIZE", "1"), {"MASTER_ADDR is not set", "several nodes"});
  expect_error(with("MASTER_PORT", "0"), {"MASTER_PORT=0"});
}

TEST(Launch, OpenMpi) {
  host::Env env = env_of({{"OMPI_COMM_WORLD_RANK", "6"},
                          {"OMPI_COMM_WORLD_SIZE", "8"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                          {"MASTER_ADDR", "10.0.0.1"}});
  auto info = discover(env);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->launcher, Launcher::openmpi);
  EXPECT_EQ(info->rank, 6);
  EXPECT_EQ(info->local_rank, 2);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->nnodes, 2);
  EXPECT_EQ(info->master_addr, "10.0.0.1");

  env.unset("MASTER_ADDR");
  expect_error(discover(env), {"openmpi", "MASTER_ADDR is not set"});
  env.set("MASTER_ADDR", "10.0.0.1");
  env.unset("OMPI_COMM_WORLD_LOCAL_SIZE");
  expect_error(discover(env), {"OMPI_COMM_WORLD_LOCAL_SIZE is not set"});
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  env.set("OMPI_COMM_WORLD_SIZE", "");
  expect_error(discover(env), {"OMPI_COMM_WORLD_SIZE is not set"});
  env.set("OMPI_COMM_WORLD_SIZE", "8 ");
  expect_error(discover(env), {"OMPI_COMM_WORLD_SIZE='8 '"});
}

TEST(Launch, PmiAndPmix) {
  auto info = discover(env_of(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}}));
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->launcher, Launcher::pmi);
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->master_addr, "127.0.0.1");  // one node: loopback
  expect_error(discover(env_of({{"PMI_RANK", "3"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "h"}})),
               {"rank 3"});
  expect_error(discover(env_of({{"PMIX_RANK", "0"}})), {"PMIX_RANK", "world size"});
}

TEST(Launch, Slurm) {
  host::Env env = env_of({{"SLURM_PROCID", "9"},
                          {"SLURM_LOCALID", "1"},
                          {"SLURM_NTASKS", "16"},
                          {"SLURM_NODEID", "1"},
                          {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                          {"SLURM_TASKS_PER_NODE", "8(x2)"},
                          {"SLURM_JOB_ID", "12345"}});
  auto info = discover(env);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->launcher, Launcher::slurm);
  EXPECT_EQ(info->rank, 9);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->world_size, 16);
  EXPECT_EQ(info->local_world_size, 8);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->nnodes, 2);
  EXPECT_EQ(info->master_addr, "gpu07");  // first host of the list
  EXPECT_EQ(info->master_port, k_default_master_port + 345);
  EXPECT_TRUE(has_source(*info, "SLURM_JOB_NODELIST=gpu[07-08]"));

  env.set("MASTER_ADDR", "head");
  env.set("MASTER_PORT", "4000");
  info = discover(env);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->master_addr, "head");
  EXPECT_EQ(info->master_port, 4000);

  env.set("SLURM_JOB_NODELIST", "gpu[07-08");
  expect_error(discover(env), {"slurm", "unbalanced"});
  env.set("SLURM_JOB_NODELIST", "gpu[07-08]");
  env.set("SLURM_TASKS_PER_NODE", "8(x3)");
  expect_error(discover(env), {"lists 3 nodes", "has 2"});
  env.set("SLURM_TASKS_PER_NODE", "8(x2)");
  env.set("SLURM_NODEID", "2");
  expect_error(discover(env), {"SLURM_NODEID=2"});
  env.unset("SLURM_NODEID");
  expect_error(discover(env), {"SLURM_NODEID is not set"});
  env.set("SLURM_NODEID", "1");
  env.unset("SLURM_NTASKS");
  expect_error(discover(env), {"SLURM_NTASKS is not set"});
}

TEST(Launch, SlurmStepCountsWin) {
  auto info = discover(env_of({{"SLURM_PROCID", "0"},
                               {"SLURM_LOCALID", "0"},
                               {"SLURM_NTASKS", "64"},
                               {"SLURM_STEP_NUM_TASKS", "2"},
                               {"SLURM_NODELIST", "a,b"},
                               {"SLURM_STEP_NODELIST", "a"},
                               {"SLURM_NODEID", "0"}}));
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->world_size, 2);
  EXPECT_EQ(info->nnodes, 1);
  EXPECT_EQ(info->local_world_size, 2);
}

TEST(Launch, KubernetesIndexedJob) {
  host::Env env = env_of({{"JOB_COMPLETION_INDEX", "2"},
                          {"NNODES", "4"},
                          {"GPUS_PER_NODE", "8"},
                          {"MASTER_ADDR", "job-0.svc"}});
  auto info = discover(env);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->launcher, Launcher::kubernetes);
  EXPECT_TRUE(info->spawn);
  EXPECT_EQ(info->node_rank, 2);
  EXPECT_EQ(info->rank, 16);
  EXPECT_EQ(info->world_size, 32);
  EXPECT_EQ(info->master_addr, "job-0.svc");

  env.set("JOB_COMPLETION_INDEX", "4");
  expect_error(discover(env), {"JOB_COMPLETION_INDEX=4", "NNODES=4"});
  env.set("JOB_COMPLETION_INDEX", "1");
  env.unset("MASTER_ADDR");
  expect_error(discover(env), {"kubernetes", "MASTER_ADDR is not set"});
  env.set("MASTER_ADDR", "job-0.svc");
  env.unset("NNODES");
  expect_error(discover(env), {"NNODES is not set"});
  env.set("NNODES", "4");
  env.unset("GPUS_PER_NODE");
  expect_error(discover(env), {"GPUS_PER_NODE is not set"});
  LaunchOptions options;
  options.default_nproc = 2;
  info = discover(env, options);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->world_size, 8);
}

TEST(Launch, ExplicitNodesAndNprocPerNode) {
  LaunchOptions options;
  options.nnodes = 2;
  options.node_rank = 1;
  options.master = "10.1.1.1:7000";
  options.nproc_per_node = 4;
  // Launcher variables are ignored when the flags describe the nodes.
  auto info = discover(env_of({{"RANK", "garbage"}}), options);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->launcher, Launcher::explicit_nodes);
  EXPECT_TRUE(info->spawn);
  EXPECT_EQ(info->rank, 4);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->master_addr, "10.1.1.1");
  EXPECT_EQ(info->master_port, 7000);

  options.master = "[fe80::1]:7001";
  info = discover(env_of({}), options);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->master_addr, "fe80::1");
  EXPECT_EQ(info->master_port, 7001);

  for (const char* bad : {"fe80::1", "host:", "host:70000", "[::1", ":7000", "host:x"}) {
    options.master = bad;
    expect_error(discover(env_of({}), options), {"--master", bad});
  }
  // A control or shell character is refused without being echoed.
  for (const char* bad : {"a\x1b[2Jb", "$(id):29500", "node 0"}) {
    options.master = bad;
    auto refused = discover(env_of({}), options);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.error().message.find(bad), std::string::npos) << refused.error().message;
    EXPECT_NE(refused.error().message.find("--master"), std::string::npos);
  }
  auto env_bad = discover(env_of({{"RANK", "0"},
                                  {"WORLD_SIZE", "2"},
                                  {"LOCAL_RANK", "0"},
                                  {"LOCAL_WORLD_SIZE", "1"},
                                  {"MASTER_ADDR", "n\x1b]0;x\x07"}}));
  ASSERT_FALSE(env_bad.ok());
  EXPECT_NE(env_bad.error().message.find("MASTER_ADDR holds"), std::string::npos)
      << env_bad.error().message;
  options.master = "h";
  options.node_rank = 2;
  expect_error(discover(env_of({}), options), {"--node-rank 2"});
  options.node_rank = 0;
  options.master.reset();
  expect_error(discover(env_of({}), options), {"needs --master"});
  options.nnodes = 1;
  options.nproc_per_node = 0;
  expect_error(discover(env_of({}), options), {"--nproc-per-node 0"});
}

TEST(Launch, PerNodeLauncherWithNprocPerNode) {
  // srun --ntasks-per-node=1 epkit ... --nproc-per-node 4: task rank = node rank.
  LaunchOptions options;
  options.nproc_per_node = 4;
  auto info = discover(env_of({{"SLURM_PROCID", "1"},
                               {"SLURM_LOCALID", "0"},
                               {"SLURM_NTASKS", "2"},
                               {"SLURM_NODEID", "1"},
                               {"SLURM_NODELIST", "n[1-2]"}}),
                       options);
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_TRUE(info->spawn);
  EXPECT_EQ(info->node_rank, 1);
  EXPECT_EQ(info->nnodes, 2);
  EXPECT_EQ(info->rank, 4);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->master_addr, "n1");
}

TEST(Launch, SpawnedChildrenFindTheirRank) {
  LaunchOptions options;
  options.nnodes = 2;
  options.node_rank = 1;
  options.master = "head:6000";
  options.nproc_per_node = 2;
  auto agent = discover(env_of({}), options);
  ASSERT_TRUE(agent.ok());
  auto vars = child_env(*agent, 1);
  vars["OMPI_COMM_WORLD_RANK"] = "0";  // inherited from the parent's launcher: ignored
  auto child = discover(env_of(vars));
  ASSERT_TRUE(child.ok()) << child.error().message;
  EXPECT_EQ(child->launcher, Launcher::epkit_spawn);
  EXPECT_EQ(child->rank, 3);
  EXPECT_EQ(child->local_rank, 1);
  EXPECT_EQ(child->world_size, 4);
  EXPECT_EQ(child->node_rank, 1);
  EXPECT_EQ(child->nnodes, 2);
  EXPECT_EQ(child->master_addr, "head");
  EXPECT_EQ(child->master_port, 6000);
  EXPECT_FALSE(child->spawn);
  LaunchOptions nested;
  nested.nproc_per_node = 2;
  expect_error(discover(env_of(vars), nested), {"nested"});
}

}  // namespace
}  // namespace epkit::runtime
