// Spawner: `--nproc-per-node N` without an outside launcher. The node agent
// starts one process per local GPU (normally epkit itself again), gives each
// its rank through the environment (child_env), prefixes every output line
// with "[host:rank] ", stops the others when one fails, and reports the
// first failing rank.
//
// Children die with the agent: PR_SET_PDEATHSIG (checked against the race
// where the agent died before it was set), and a lifeline pipe whose EOF a
// child can watch (watch_lifeline) for the cases the signal misses.
#pragma once

#include <epkit/result.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/env.h"
#include "runtime/deadline.h"
#include "runtime/launch.h"

namespace epkit::runtime {

/// The exit code a rank should use when it stops because another rank was
/// lost (the store reported a disconnect): when several ranks exit at about
/// the same time, the spawner then blames the one that failed first-hand.
inline constexpr int k_exit_peer_lost = 75;

struct SpawnOptions {
  /// Program and arguments; a program without '/' is searched in PATH.
  std::vector<std::string> argv;
  /// The node agent's LaunchInfo (spawn = true): local_world_size children.
  LaunchInfo agent;
  /// Added to every child's environment (after the base and child_env()).
  std::map<std::string, std::string> extra_env;
  /// "host" in "[host:rank] ".
  std::string host_label;
  /// Where prefixed lines go.
  int out_fd = 1;
  int err_fd = 2;
  /// After a rank fails, the others get this long to notice and exit on
  /// their own (reporting what they saw) before they are stopped.
  Millis stop_delay{1000};
  /// Then SIGTERM, and SIGKILL after this.
  Millis kill_grace{2000};
};

struct ChildExit {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  int exit_code = 0;           // when exited normally
  int signal = 0;              // when killed by a signal
  bool stopped_by_us = false;  // terminated because another rank failed or time ran out
  bool failed() const { return signal != 0 || exit_code != 0; }
};

struct SpawnReport {
  std::vector<ChildExit> children;  // by local rank
  /// The first rank seen failing on its own (not stopped by the spawner).
  std::optional<int> first_failed_rank;
  bool timed_out = false;
  /// 0 when every rank succeeded; else the first failure's code (128 +
  /// signal when killed), or 124 on timeout.
  int exit_code() const;
  /// "rank 1 (host:1) exited with code 3; stopped ranks 0, 2".
  std::string summary(const std::string& host_label) const;
};

/// Starts the children and waits for all of them, bounded by the deadline.
/// Errors are about starting (no such program, fork failed); a child's
/// failure is in the report. Call it from the main thread: the children's
/// death signal follows the thread that forked them.
Result<SpawnReport> spawn_local_ranks(const SpawnOptions& options, const host::Env& base_env,
                                      Deadline deadline);

/// In a spawned child: when EPKIT_LIFELINE_FD names a pipe, watch it on a
/// background thread and exit (code 143) once the agent is gone. Returns
/// whether a watch was started; a malformed value is an invalid error.
Result<bool> watch_lifeline(const host::Env& env);

}  // namespace epkit::runtime
