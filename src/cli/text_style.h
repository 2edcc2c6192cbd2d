// ANSI styling for terminal output; plain text when colour is off.
#pragma once

#include <mutex>
#include <ostream>
#include <streambuf>
#include <string>

namespace epkit::cli {

enum class Style { plain, bold, dim, red, green, yellow, magenta, cyan };

std::string styled(bool color, Style style, const std::string& text);

/// A stream buffer in front of the CLI's stdout or stderr: each line goes
/// out through util::terminal_safe, so that NUL, escape and other control
/// bytes read from sysfs, an env file or a peer never reach the terminal raw
/// (colour sequences stay when `color`). Lines are passed on whole at '\n',
/// on flush and at a size cap.
class TerminalSafeBuf : public std::streambuf {
 public:
  TerminalSafeBuf(std::ostream& target, bool color) : m_target(target), m_color(color) {}
  ~TerminalSafeBuf() override {
    std::lock_guard lock(m_mutex);
    emit();
  }
  TerminalSafeBuf(const TerminalSafeBuf&) = delete;
  TerminalSafeBuf& operator=(const TerminalSafeBuf&) = delete;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  void emit();

  std::ostream& m_target;
  bool m_color;
  std::mutex m_mutex;  // a stray thread's line must not tear the buffer
  std::string m_pending;
};

}  // namespace epkit::cli
