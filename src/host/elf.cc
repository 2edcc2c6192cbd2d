#include "host/elf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace epkit::host {
namespace {

// ELF constants (System V gABI and the GNU symbol-versioning extension). The
// fields are decoded byte by byte, so the reader does not depend on <elf.h>
// struct layouts or on the host's byte order.
constexpr std::size_t k_ehdr_size = 64;
constexpr std::size_t k_phdr_size = 56;
constexpr std::size_t k_shdr_size = 64;
constexpr std::size_t k_dyn_size = 16;
constexpr std::uint16_t k_em_x86_64 = 62;
constexpr std::uint16_t k_em_aarch64 = 183;
constexpr std::uint32_t k_pt_load = 1;
constexpr std::uint32_t k_pt_dynamic = 2;
constexpr std::uint32_t k_pf_x = 1;
constexpr std::uint32_t k_pf_w = 2;
constexpr std::uint32_t k_sht_progbits = 1;
constexpr std::uint64_t k_shf_write = 1;
constexpr std::uint64_t k_shf_alloc = 2;
constexpr std::uint64_t k_shf_execinstr = 4;
constexpr std::int64_t k_dt_null = 0;
constexpr std::int64_t k_dt_needed = 1;
constexpr std::int64_t k_dt_strtab = 5;
constexpr std::int64_t k_dt_strsz = 10;
constexpr std::int64_t k_dt_soname = 14;
constexpr std::int64_t k_dt_verdef = 0x6ffffffc;
constexpr std::int64_t k_dt_verdefnum = 0x6ffffffd;
constexpr std::int64_t k_dt_verneed = 0x6ffffffe;
constexpr std::int64_t k_dt_verneednum = 0x6fffffff;
constexpr std::uint16_t k_ver_flg_base = 1;
// Caps on loops driven by file content: a corrupt count or a cycle in a
// vd_next/vn_next chain must end, not spin.
constexpr std::size_t k_max_entries = 1 << 16;

// The image as bytes with bounds-checked little-endian reads.
class Image {
 public:
  Image(std::string_view bytes, std::string_view name) : m_bytes(bytes), m_name(name) {}

  std::uint64_t size() const { return m_bytes.size(); }
  bool has(std::uint64_t offset, std::uint64_t length) const {
    return offset <= size() && length <= size() - offset;
  }
  template <typename T>
  std::optional<T> get(std::uint64_t offset) const {
    if (!has(offset, sizeof(T))) return std::nullopt;
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(m_bytes[offset + i])} << (8 * i);
    }
    return static_cast<T>(value);
  }
  std::string_view slice(std::uint64_t offset, std::uint64_t length) const {
    return m_bytes.substr(offset, length);
  }
  Error bad(std::string_view what) const {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: not a usable ELF file: {}", m_name, what));
  }

 private:
  std::string_view m_bytes;
  std::string_view m_name;
};

struct Segment {
  std::uint32_t type = 0;
  std::uint32_t flags = 0;
  std::uint64_t offset = 0;
  std::uint64_t vaddr = 0;
  std::uint64_t filesz = 0;
};

struct Header {
  std::string machine;
  std::vector<Segment> segments;
  std::uint64_t shoff = 0;
  std::uint16_t shnum = 0;
};

Result<Header> parse_header(const Image& img) {
  if (img.size() < k_ehdr_size) return img.bad("shorter than an ELF header");
  if (img.slice(0, 4) != std::string_view("\x7f"
                                          "ELF",
                                          4))
    return img.bad("no ELF magic");
  if (img.get<std::uint8_t>(4) != 2) return img.bad("not a 64-bit ELF file");
  if (img.get<std::uint8_t>(5) != 1) return img.bad("not little-endian");
  Header header;
  std::uint16_t machine = *img.get<std::uint16_t>(18);
  if (machine == k_em_x86_64) {
    header.machine = "x86-64";
  } else if (machine == k_em_aarch64) {
    header.machine = "aarch64";
  } else {
    return img.bad(fmt::format("machine {} is neither x86-64 nor aarch64", machine));
  }
  std::uint64_t phoff = *img.get<std::uint64_t>(32);
  header.shoff = *img.get<std::uint64_t>(40);
  std::uint16_t phentsize = *img.get<std::uint16_t>(54);
  std::uint16_t phnum = *img.get<std::uint16_t>(56);
  std::uint16_t shentsize = *img.get<std::uint16_t>(58);
  header.shnum = *img.get<std::uint16_t>(60);
  if (phnum > 0 && phentsize != k_phdr_size) return img.bad("unexpected program header size");
  if (header.shnum > 0 && header.shoff != 0 && shentsize != k_shdr_size) {
    return img.bad("unexpected section header size");
  }
  if (!img.has(phoff, std::uint64_t{phnum} * k_phdr_size)) {
    return img.bad("program headers run past the end of the file (truncated?)");
  }
  for (std::uint16_t i = 0; i < phnum; ++i) {
    std::uint64_t at = phoff + std::uint64_t{i} * k_phdr_size;
    Segment seg;
    seg.type = *img.get<std::uint32_t>(at);
    seg.flags = *img.get<std::uint32_t>(at + 4);
    seg.offset = *img.get<std::uint64_t>(at + 8);
    seg.vaddr = *img.get<std::uint64_t>(at + 16);
    seg.filesz = *img.get<std::uint64_t>(at + 32);
    header.segments.push_back(seg);
  }
  return header;
}

// File offset of a virtual address, through the PT_LOAD segment holding it.
std::optional<std::uint64_t> to_offset(const Header& header, std::uint64_t vaddr) {
  for (const auto& seg : header.segments) {
    if (seg.type != k_pt_load) continue;
    if (vaddr >= seg.vaddr && vaddr - seg.vaddr < seg.filesz) {
      return seg.offset + (vaddr - seg.vaddr);
    }
  }
  return std::nullopt;
}

// The dynamic string table, with NUL-terminated lookups inside it.
class StringTable {
 public:
  StringTable(std::string_view table, const Image& img) : m_table(table), m_img(img) {}
  Result<std::string> at(std::uint64_t index, std::string_view what) const {
    if (index >= m_table.size())
      return m_img.bad(fmt::format("{} name outside the string table", what));
    auto end = m_table.find('\0', index);
    if (end == std::string_view::npos)
      return m_img.bad(fmt::format("{} name not terminated", what));
    return std::string(m_table.substr(index, end - index));
  }

 private:
  std::string_view m_table;
  const Image& m_img;
};

struct DynamicTags {
  std::vector<std::uint64_t> needed;
  std::optional<std::uint64_t> soname, strtab, strsz, verdef, verneed;
  std::uint64_t verdefnum = k_max_entries;
  std::uint64_t verneednum = k_max_entries;
};

Result<DynamicTags> read_dynamic(const Image& img, const Header& header) {
  const Segment* dynamic = nullptr;
  for (const auto& seg : header.segments) {
    if (seg.type == k_pt_dynamic) dynamic = &seg;
  }
  if (dynamic == nullptr) return img.bad("no dynamic section (not a shared object?)");
  if (!img.has(dynamic->offset, dynamic->filesz)) {
    return img.bad("dynamic section runs past the end of the file (truncated?)");
  }
  DynamicTags tags;
  std::uint64_t count = std::min<std::uint64_t>(dynamic->filesz / k_dyn_size, k_max_entries);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint64_t at = dynamic->offset + i * k_dyn_size;
    auto tag = static_cast<std::int64_t>(*img.get<std::uint64_t>(at));
    std::uint64_t value = *img.get<std::uint64_t>(at + 8);
    if (tag == k_dt_null) break;
    switch (tag) {
      case k_dt_needed:
        tags.needed.push_back(value);
        break;
      case k_dt_soname:
        tags.soname = value;
        break;
      case k_dt_strtab:
        tags.strtab = value;
        break;
      case k_dt_strsz:
        tags.strsz = value;
        break;
      case k_dt_verdef:
        tags.verdef = value;
        break;
      case k_dt_verdefnum:
        tags.verdefnum = std::min<std::uint64_t>(value, k_max_entries);
        break;
      case k_dt_verneed:
        tags.verneed = value;
        break;
      case k_dt_verneednum:
        tags.verneednum = std::min<std::uint64_t>(value, k_max_entries);
        break;
      default:
        break;
    }
  }
  return tags;
}

Result<std::vector<std::string>> read_verdefs(const Image& img, const StringTable& strings,
                                              std::uint64_t offset, std::uint64_t count) {
  std::vector<std::string> names;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto flags = img.get<std::uint16_t>(offset + 2);
    auto aux = img.get<std::uint32_t>(offset + 12);
    auto next = img.get<std::uint32_t>(offset + 16);
    if (!flags || !aux || !next) return img.bad("version definition runs past the end of the file");
    auto name_index = img.get<std::uint32_t>(offset + *aux);
    if (!name_index) return img.bad("version definition name runs past the end of the file");
    auto name = strings.at(*name_index, "version definition");
    if (!name) return name.error();
    if ((*flags & k_ver_flg_base) == 0) names.push_back(std::move(*name));
    if (*next == 0) break;
    offset += *next;
  }
  return names;
}

Result<std::vector<ElfVersionNeed>> read_verneeds(const Image& img, const StringTable& strings,
                                                  std::uint64_t offset, std::uint64_t count) {
  std::vector<ElfVersionNeed> needs;
  for (std::uint64_t i = 0; i < count; ++i) {
    auto aux_count = img.get<std::uint16_t>(offset + 2);
    auto file = img.get<std::uint32_t>(offset + 4);
    auto aux = img.get<std::uint32_t>(offset + 8);
    auto next = img.get<std::uint32_t>(offset + 12);
    if (!aux_count || !file || !aux || !next)
      return img.bad("version need runs past the end of the file");
    ElfVersionNeed need;
    auto file_name = strings.at(*file, "version need file");
    if (!file_name) return file_name.error();
    need.file = std::move(*file_name);
    std::uint64_t at = offset + *aux;
    for (std::uint16_t j = 0; j < *aux_count; ++j) {
      auto name_index = img.get<std::uint32_t>(at + 8);
      auto aux_next = img.get<std::uint32_t>(at + 12);
      if (!name_index || !aux_next)
        return img.bad("version need entry runs past the end of the file");
      auto name = strings.at(*name_index, "version need");
      if (!name) return name.error();
      need.versions.push_back(std::move(*name));
      if (*aux_next == 0) break;
      at += *aux_next;
    }
    needs.push_back(std::move(need));
    if (*next == 0) break;
    offset += *next;
  }
  return needs;
}

bool printable(char c) {
  return (c >= 0x20 && c < 0x7f) || c == '\t';
}

void collect_strings(std::string_view data, std::string_view needle,
                     std::vector<std::string>& out) {
  constexpr std::size_t k_min_length = 4;
  std::size_t start = 0;
  for (std::size_t i = 0; i < data.size(); ++i) {
    if (printable(data[i])) continue;
    if (data[i] == '\0' && i - start >= k_min_length) {
      std::string_view candidate = data.substr(start, i - start);
      if (candidate.find(needle) != std::string_view::npos) out.emplace_back(candidate);
    }
    start = i + 1;
  }
}

}  // namespace

bool ElfInfo::defines(std::string_view version) const {
  return std::find(version_defs.begin(), version_defs.end(), version) != version_defs.end();
}

std::vector<std::string> ElfInfo::needs_from(std::string_view file) const {
  for (const auto& need : version_needs) {
    if (need.file == file) return need.versions;
  }
  return {};
}

Result<ElfInfo> parse_elf(std::string_view bytes, std::string_view name) {
  Image img(bytes, name);
  auto header = parse_header(img);
  if (!header) return header.error();
  auto tags = read_dynamic(img, *header);
  if (!tags) return tags.error();
  if (!tags->strtab || !tags->strsz) return img.bad("dynamic section has no string table");
  auto strtab_offset = to_offset(*header, *tags->strtab);
  if (!strtab_offset || !img.has(*strtab_offset, *tags->strsz)) {
    return img.bad("dynamic string table lies outside the file (truncated?)");
  }
  StringTable strings(img.slice(*strtab_offset, *tags->strsz), img);

  ElfInfo info;
  info.path = std::string(name);
  info.machine = header->machine;
  if (tags->soname) {
    auto soname = strings.at(*tags->soname, "SONAME");
    if (!soname) return soname.error();
    info.soname = std::move(*soname);
  }
  for (std::uint64_t index : tags->needed) {
    auto needed = strings.at(index, "NEEDED");
    if (!needed) return needed.error();
    info.needed.push_back(std::move(*needed));
  }
  if (tags->verdef) {
    auto offset = to_offset(*header, *tags->verdef);
    if (!offset) return img.bad("version definitions lie outside the file");
    auto defs = read_verdefs(img, strings, *offset, tags->verdefnum);
    if (!defs) return defs.error();
    info.version_defs = std::move(*defs);
  }
  if (tags->verneed) {
    auto offset = to_offset(*header, *tags->verneed);
    if (!offset) return img.bad("version needs lie outside the file");
    auto needs = read_verneeds(img, strings, *offset, tags->verneednum);
    if (!needs) return needs.error();
    info.version_needs = std::move(*needs);
  }
  return info;
}

Result<std::vector<std::string>> elf_rodata_strings(std::string_view bytes, std::string_view name,
                                                    std::string_view needle) {
  Image img(bytes, name);
  auto header = parse_header(img);
  if (!header) return header.error();
  std::vector<std::string> found;
  bool used_sections = false;
  if (header->shoff != 0 && header->shnum > 0) {
    if (!img.has(header->shoff, std::uint64_t{header->shnum} * k_shdr_size)) {
      return img.bad("section headers run past the end of the file (truncated?)");
    }
    for (std::uint16_t i = 0; i < header->shnum; ++i) {
      std::uint64_t at = header->shoff + std::uint64_t{i} * k_shdr_size;
      std::uint32_t type = *img.get<std::uint32_t>(at + 4);
      std::uint64_t flags = *img.get<std::uint64_t>(at + 8);
      std::uint64_t offset = *img.get<std::uint64_t>(at + 24);
      std::uint64_t size = *img.get<std::uint64_t>(at + 32);
      if (type != k_sht_progbits || (flags & k_shf_alloc) == 0 ||
          (flags & (k_shf_write | k_shf_execinstr)) != 0) {
        continue;
      }
      if (!img.has(offset, size))
        return img.bad("a read-only section runs past the end of the file");
      collect_strings(img.slice(offset, size), needle, found);
      used_sections = true;
    }
  }
  if (!used_sections) {
    for (const auto& seg : header->segments) {
      if (seg.type != k_pt_load || (seg.flags & (k_pf_w | k_pf_x)) != 0) continue;
      if (!img.has(seg.offset, seg.filesz))
        return img.bad("a segment runs past the end of the file");
      collect_strings(img.slice(seg.offset, seg.filesz), needle, found);
    }
  }
  return found;
}

Result<std::string> read_elf_bytes(const Sysroot& fs, std::string_view path) {
  auto resolved = fs.resolve(path);
  if (!resolved) return resolved.error();
  auto info = fs.stat(*resolved);
  if (!info) return info.error();
  if (info->type != FileType::regular) {
    return make_error(ErrorCode::invalid, fmt::format("{}: not a regular file", path));
  }
  if (info->size > k_max_elf_bytes) {
    return make_error(ErrorCode::invalid,
                      fmt::format("{}: {} bytes, larger than the {} MiB the ELF reader loads", path,
                                  info->size, k_max_elf_bytes >> 20));
  }
  return fs.read(*resolved, k_max_elf_bytes);
}

Result<ElfInfo> read_elf(const Sysroot& fs, std::string_view path) {
  auto resolved = fs.resolve(path);
  if (!resolved) return resolved.error();
  auto bytes = read_elf_bytes(fs, *resolved);
  if (!bytes) return bytes.error();
  return parse_elf(*bytes, *resolved);
}

}  // namespace epkit::host
