#include "cli/text_style.h"

#include "util/text.h"

namespace epkit::cli {

std::string styled(bool color, Style style, const std::string& text) {
  if (!color || style == Style::plain) return text;
  const char* code = "";
  switch (style) {
    case Style::plain:
      break;
    case Style::bold:
      code = "1";
      break;
    case Style::dim:
      code = "2";
      break;
    case Style::red:
      code = "1;31";
      break;
    case Style::green:
      code = "32";
      break;
    case Style::yellow:
      code = "1;33";
      break;
    case Style::magenta:
      code = "35";
      break;
    case Style::cyan:
      code = "36";
      break;
  }
  return "\x1b[" + std::string(code) + "m" + text + "\x1b[0m";
}

namespace {
constexpr std::size_t k_max_pending = 1 << 16;
}  // namespace

void TerminalSafeBuf::emit() {
  if (m_pending.empty()) return;
  m_target << util::terminal_safe(m_pending, m_color);
  m_pending.clear();
}

TerminalSafeBuf::int_type TerminalSafeBuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  std::lock_guard lock(m_mutex);
  char ch = traits_type::to_char_type(c);
  m_pending += ch;
  if (ch == '\n' || m_pending.size() >= k_max_pending) emit();
  return c;
}

std::streamsize TerminalSafeBuf::xsputn(const char* s, std::streamsize n) {
  std::lock_guard lock(m_mutex);
  std::string_view text(s, static_cast<std::size_t>(n));
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::size_t take = nl == std::string_view::npos ? text.size() : nl + 1;
    m_pending.append(text.substr(0, take));
    text.remove_prefix(take);
    if (nl != std::string_view::npos || m_pending.size() >= k_max_pending) emit();
  }
  return n;
}

int TerminalSafeBuf::sync() {
  std::lock_guard lock(m_mutex);
  emit();
  m_target.flush();
  return m_target ? 0 : -1;
}

}  // namespace epkit::cli
