#include "ep/network_leg/process_watch.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace epkit::ep::network_leg {
namespace {

int open_pidfd(std::uint32_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

ProcessId ProcessWatch::self() {
  ProcessId id;
  id.pid = static_cast<std::uint32_t>(::getpid());
  // The namespace's identity is the inode of its /proc link (device and
  // inode, as namespaces(7) says); without /proc nobody watches this rank.
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0)
    id.pid_namespace =
        static_cast<std::uint64_t>(st.st_ino) ^ (static_cast<std::uint64_t>(st.st_dev) << 32);
  return id;
}

ProcessWatch::ProcessWatch(const std::vector<ProcessId>& ranks, int self_rank) {
  const ProcessId me = self();
  m_fds.assign(ranks.size(), -1);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const ProcessId& p = ranks[r];
    if (static_cast<int>(r) == self_rank || p.pid == 0 || me.pid_namespace == 0 ||
        p.pid_namespace != me.pid_namespace)
      continue;
    const int fd = open_pidfd(p.pid);
    if (fd >= 0) {
      m_fds[r] = fd;
    } else if (errno == ESRCH && !m_exited) {
      m_exited = static_cast<int>(r);  // gone before the watch began
    }
  }
}

ProcessWatch::~ProcessWatch() {
  close_all();
}

ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : m_fds(std::exchange(other.m_fds, {})), m_exited(other.m_exited) {}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  if (this != &other) {
    close_all();
    m_fds = std::exchange(other.m_fds, {});
    m_exited = other.m_exited;
  }
  return *this;
}

void ProcessWatch::close_all() {
  for (int fd : m_fds)
    if (fd >= 0) ::close(fd);
  m_fds.clear();
}

std::optional<int> ProcessWatch::exited() {
  if (m_exited) return m_exited;
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (std::size_t r = 0; r < m_fds.size(); ++r) {
    if (m_fds[r] < 0) continue;
    fds.push_back({m_fds[r], POLLIN, 0});
    ranks.push_back(static_cast<int>(r));
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return std::nullopt;
  for (std::size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents != 0) return m_exited = ranks[i];
  return std::nullopt;
}

int ProcessWatch::watched() const {
  int n = 0;
  for (int fd : m_fds) n += fd >= 0;
  return n;
}

}  // namespace epkit::ep::network_leg
