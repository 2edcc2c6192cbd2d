#include "runtime/spawner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include "runtime/socket.h"

namespace epkit::runtime {
namespace {

// A partial line longer than this is passed on without waiting for its end.
constexpr std::size_t k_max_line = 64 * 1024;
// How long a k_exit_peer_lost exit waits for the lost peer's own exit.
constexpr Millis k_blame_wait{300};

void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the sink is gone; nothing better to do
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

struct Stream {
  Fd fd;
  std::string pending;
  int sink = 1;
};

struct Running {
  ChildExit exit;
  bool reaped = false;
  Stream out;
  Stream err;
};

// Forwards complete lines with the prefix; at EOF, the rest too.
void forward(Stream& stream, const std::string& prefix, bool eof) {
  std::size_t start = 0;
  for (;;) {
    std::size_t nl = stream.pending.find('\n', start);
    if (nl == std::string::npos) break;
    write_all(stream.sink, prefix + stream.pending.substr(start, nl - start + 1));
    start = nl + 1;
  }
  stream.pending.erase(0, start);
  if (!stream.pending.empty() && (eof || stream.pending.size() > k_max_line)) {
    write_all(stream.sink, prefix + stream.pending + "\n");
    stream.pending.clear();
  }
}

// Reads what is there; returns false at EOF (and closes the stream).
void drain(Stream& stream, const std::string& prefix) {
  char buffer[16384];
  ssize_t n = ::read(stream.fd.get(), buffer, sizeof buffer);
  if (n > 0) {
    stream.pending.append(buffer, static_cast<std::size_t>(n));
    forward(stream, prefix, false);
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  forward(stream, prefix, true);
  stream.fd.reset();
}

// Everything a child needs, built before fork: after fork in a process that
// may have threads only async-signal-safe calls are allowed.
struct Prepared {
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  Pipe out;
  Pipe err;
  Pipe exec_error;
};

}  // namespace

int SpawnReport::exit_code() const {
  if (first_failed_rank) {
    for (const auto& child : children) {
      if (child.rank != *first_failed_rank) continue;
      return child.signal != 0 ? 128 + child.signal : child.exit_code;
    }
  }
  if (timed_out) return 124;
  for (const auto& child : children) {
    if (child.failed()) return child.signal != 0 ? 128 + child.signal : child.exit_code;
  }
  return 0;
}

std::string SpawnReport::summary(const std::string& host_label) const {
  std::vector<std::string> parts;
  std::vector<int> stopped;
  for (const auto& child : children) {
    if (child.stopped_by_us) {
      stopped.push_back(child.rank);
      continue;
    }
    if (!child.failed()) continue;
    std::string text =
        child.signal != 0
            ? fmt::format("rank {} ({}:{}) killed by signal {} ({})", child.rank, host_label,
                          child.rank, child.signal, strsignal(child.signal))
            : fmt::format("rank {} ({}:{}) exited with code {}", child.rank, host_label, child.rank,
                          child.exit_code);
    if (first_failed_rank == child.rank) {
      parts.insert(parts.begin(), std::move(text));
    } else {
      parts.push_back(std::move(text));
    }
  }
  if (first_failed_rank && parts.size() > 1) parts.front() = "first failure: " + parts.front();
  if (timed_out) parts.insert(parts.begin(), "time ran out");
  if (!stopped.empty()) parts.push_back(fmt::format("stopped ranks {}", fmt::join(stopped, ", ")));
  if (parts.empty()) return fmt::format("all {} ranks succeeded", children.size());
  return fmt::format("{}", fmt::join(parts, "; "));
}

Result<SpawnReport> spawn_local_ranks(const SpawnOptions& options, const host::Env& base_env,
                                      Deadline deadline) {
  const LaunchInfo& agent = options.agent;
  if (options.argv.empty()) return make_error(ErrorCode::invalid, "spawn: no program given");
  if (agent.local_world_size < 1 || agent.local_world_size > 1024) {
    return make_error(ErrorCode::invalid,
                      fmt::format("spawn: {} local ranks", agent.local_world_size));
  }
  auto lifeline = make_pipe();
  if (!lifeline) return lifeline.error();

  std::vector<char*> argv;
  for (const auto& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  pid_t parent = ::getpid();

  std::vector<Running> running(static_cast<std::size_t>(agent.local_world_size));
  auto stop_all = [&](int sig) {
    for (auto& r : running) {
      if (r.exit.pid > 0 && !r.reaped) ::kill(-r.exit.pid, sig);
    }
  };

  for (int local = 0; local < agent.local_world_size; ++local) {
    Prepared prep;
    auto env = base_env.all();
    std::map<std::string, std::string, std::less<>> merged(env.begin(), env.end());
    for (const auto& [k, v] : child_env(agent, local)) merged[k] = v;
    merged["EPKIT_LIFELINE_FD"] = std::to_string(lifeline->read.get());
    for (const auto& [k, v] : options.extra_env) merged[k] = v;
    for (const auto& [k, v] : merged) prep.env_storage.push_back(k + "=" + v);
    for (auto& entry : prep.env_storage) prep.envp.push_back(entry.data());
    prep.envp.push_back(nullptr);
    auto out = make_pipe();
    auto err = make_pipe();
    auto exec_error = make_pipe();
    if (!out || !err || !exec_error) {
      stop_all(SIGKILL);
      return make_error(ErrorCode::internal, "spawn: cannot create pipes");
    }

    pid_t pid = ::fork();
    if (pid < 0) {
      int saved = errno;
      stop_all(SIGKILL);
      for (auto& r : running) {
        if (r.exit.pid > 0) ::waitpid(r.exit.pid, nullptr, 0);
      }
      return make_error(ErrorCode::internal, fmt::format("spawn: fork: {}", std::strerror(saved)));
    }
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(125);  // the agent died before prctl
      ::setpgid(0, 0);  // own group, so the agent can stop the rank's children too
      if (dev_null.valid()) ::dup2(dev_null.get(), 0);
      ::dup2(out->write.get(), 1);
      ::dup2(err->write.get(), 2);
      ::fcntl(lifeline->read.get(), F_SETFD, 0);
      ::execvpe(argv[0], argv.data(), prep.envp.data());
      int code = errno;
      [[maybe_unused]] auto n = ::write(exec_error->write.get(), &code, sizeof code);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from here: whichever runs first
    auto& r = running[static_cast<std::size_t>(local)];
    r.exit.local_rank = local;
    r.exit.rank = agent.rank + local;
    r.exit.pid = pid;
    r.out.fd = std::move(out->read);
    r.out.sink = options.out_fd;
    r.err.fd = std::move(err->read);
    r.err.sink = options.err_fd;
    out->write.reset();
    err->write.reset();
    exec_error->write.reset();
    // EOF: exec succeeded (the write end was close-on-exec); data: errno.
    int code = 0;
    ssize_t got = ::read(exec_error->read.get(), &code, sizeof code);
    if (got == static_cast<ssize_t>(sizeof code)) {
      ::waitpid(pid, nullptr, 0);
      r.reaped = true;
      stop_all(SIGKILL);
      for (auto& other : running) {
        if (other.exit.pid > 0 && !other.reaped) ::waitpid(other.exit.pid, nullptr, 0);
      }
      return make_error(
          code == ENOENT ? ErrorCode::not_found : ErrorCode::permission,
          fmt::format("spawn: cannot run {}: {}", options.argv.front(), std::strerror(code)));
    }
  }
  lifeline->read.reset();  // only the children hold it now

  SpawnReport report;
  // After a failure the others get stop_delay to notice and report it
  // themselves (they learn it from the store), then SIGTERM, then SIGKILL.
  std::optional<Clock::time_point> stop_at;
  std::optional<Clock::time_point> stopping_since;
  auto request_stop = [&](Millis delay) {
    auto when = Clock::now() + delay;
    if (!stop_at || when < *stop_at) stop_at = when;
  };
  auto begin_stop = [&] {
    if (stopping_since) return;
    stopping_since = Clock::now();
    for (auto& r : running) {
      if (!r.reaped) r.exit.stopped_by_us = true;
    }
    stop_all(SIGTERM);
  };
  std::optional<Clock::time_point> all_reaped_at;
  std::vector<int> first_hand;  // failed on their own, in the order seen
  std::vector<int> peer_lost;   // exited with k_exit_peer_lost
  std::optional<Clock::time_point> peer_lost_since;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    std::vector<std::string> prefixes;
    for (auto& r : running) {
      for (Stream* s : {&r.out, &r.err}) {
        if (!s->fd.valid()) continue;
        fds.push_back({s->fd.get(), POLLIN, 0});
        streams.push_back(s);
        prefixes.push_back(fmt::format("[{}:{}] ", options.host_label, r.exit.rank));
      }
    }
    // Grandchildren may keep a pipe open after their parent rank exited:
    // once every rank is reaped, output gets a short while to drain.
    if (all_reaped_at && (fds.empty() || Clock::now() - *all_reaped_at > Millis(500))) break;
    if (!fds.empty()) {
      int rc = ::poll(fds.data(), fds.size(), 50);
      if (rc > 0) {
        for (std::size_t i = 0; i < fds.size(); ++i) {
          if (fds[i].revents != 0) drain(*streams[i], prefixes[i]);
        }
      }
    } else {
      std::this_thread::sleep_for(Millis(20));
    }

    bool all_reaped = true;
    for (auto& r : running) {
      if (r.reaped) continue;
      int status = 0;
      pid_t done = ::waitpid(r.exit.pid, &status, WNOHANG);
      if (done != r.exit.pid) {
        all_reaped = false;
        continue;
      }
      r.reaped = true;
      if (WIFEXITED(status)) r.exit.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) r.exit.signal = WTERMSIG(status);
      if (!r.exit.failed()) r.exit.stopped_by_us = false;  // finished on its own
      if (!r.exit.failed() || r.exit.stopped_by_us) continue;
      if (r.exit.signal == 0 && r.exit.exit_code == k_exit_peer_lost) {
        peer_lost.push_back(r.exit.rank);
      } else {
        first_hand.push_back(r.exit.rank);
      }
    }
    // A rank that only reports a lost peer may exit before the lost peer's
    // own exit is visible (its sockets close before it becomes a zombie):
    // wait a little for a first-hand failure before blaming the reporter.
    if (!report.first_failed_rank) {
      if (!first_hand.empty()) {
        report.first_failed_rank = first_hand.front();
      } else if (!peer_lost.empty()) {
        if (!peer_lost_since) peer_lost_since = Clock::now();
        if (all_reaped || Clock::now() - *peer_lost_since >= k_blame_wait) {
          report.first_failed_rank = peer_lost.front();
        }
      }
      if (report.first_failed_rank) request_stop(options.stop_delay);
    }
    if (all_reaped && !all_reaped_at) all_reaped_at = Clock::now();
    if (!all_reaped && deadline.expired() && !stopping_since) {
      report.timed_out = true;
      request_stop(Millis(0));
    }
    if (!all_reaped && stop_at && Clock::now() >= *stop_at) begin_stop();
    if (stopping_since && Clock::now() - *stopping_since > options.kill_grace) stop_all(SIGKILL);
  }
  for (auto& r : running) {
    for (Stream* s : {&r.out, &r.err}) {
      forward(*s, fmt::format("[{}:{}] ", options.host_label, r.exit.rank), true);
    }
    report.children.push_back(r.exit);
  }
  return report;
}

Result<bool> watch_lifeline(const host::Env& env) {
  auto text = env.get_nonempty("EPKIT_LIFELINE_FD");
  if (!text) return false;
  int fd = -1;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), fd);
  if (ec != std::errc() || end != text->data() + text->size() || fd < 3 ||
      ::fcntl(fd, F_GETFD) < 0) {
    return make_error(ErrorCode::invalid,
                      fmt::format("EPKIT_LIFELINE_FD='{}' is not an open descriptor", *text));
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not for the rank's own children
  std::thread([fd] {
    for (;;) {
      pollfd entry{fd, POLLIN, 0};
      int rc = ::poll(&entry, 1, -1);
      if (rc < 0 && errno == EINTR) continue;
      // Nobody writes to the lifeline: any event is the agent's end closing.
      ::_exit(143);
    }
  }).detach();
  return true;
}

}  // namespace epkit::runtime
