#include "integrations/cli/preload_check.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "sublinear/version.h"

namespace sublinear::cli {
namespace {

// A regular file mapped read-only (a device or a FIFO is refused, not read forever).
class mapped_file {
 public:
  explicit mapped_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error_ = std::strerror(errno);
      return;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      error_ = "it is not a regular file";
    } else if (st.st_size > 0) {
      void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        error_ = std::strerror(errno);
      } else {
        data_ = std::string_view(static_cast<const char*>(p), static_cast<std::size_t>(st.st_size));
      }
    }
    ::close(fd);
  }
  ~mapped_file() {
    if (!data_.empty()) ::munmap(const_cast<char*>(data_.data()), data_.size());
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  [[nodiscard]] std::string_view data() const { return data_; }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  std::string_view data_;
  std::string error_;
};

template <class T>
bool read_at(std::string_view file, std::size_t offset, T* out) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return false;
  std::memcpy(out, file.data() + offset, sizeof(T));
  return true;
}

// The NUL-terminated string at `offset`, at most `limit` bytes, within the file.
std::string_view string_at(std::string_view file, std::size_t offset, std::size_t limit) {
  if (offset >= file.size()) return {};
  const std::string_view rest = file.substr(offset, std::min(limit, file.size() - offset));
  return rest.substr(0, rest.find('\0'));
}

#if defined(__x86_64__)
constexpr Elf64_Half host_machine = EM_X86_64;
#elif defined(__aarch64__)
constexpr Elf64_Half host_machine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr Elf64_Half host_machine = EM_PPC64;
#else
#error "name this architecture's ELF machine here"
#endif

}  // namespace

std::string preload_library_problem(const std::string& path) {
  const std::string named = "'" + path + "'";
  const mapped_file mapped(path);
  if (!mapped.error().empty()) return named + " cannot be read: " + mapped.error();
  const std::string_view file = mapped.data();
  Elf64_Ehdr eh{};
  if (!read_at(file, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return named + " is not a shared library (it has no ELF header)";
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != host_machine) {
    return named + " is a library for another architecture than this program's";
  }
  if (eh.e_type != ET_DYN) return named + " is an ELF file but not a shared library";

  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !read_at(file, eh.e_shoff + i * sizeof(Elf64_Shdr), &sections[i])) {
      return named + " is a truncated or malformed ELF file (its section headers cannot be read)";
    }
  }
  const std::string not_ours = named + " is a shared library but not sublinear's preload library (it does not define " +
                               kPreloadMarker + ")";
  for (const Elf64_Shdr& symtab : sections) {
    if (symtab.sh_type != SHT_DYNSYM || symtab.sh_entsize != sizeof(Elf64_Sym) || symtab.sh_link >= sections.size()) {
      continue;
    }
    const Elf64_Shdr& strtab = sections[symtab.sh_link];
    for (std::size_t off = 0; off + sizeof(Elf64_Sym) <= symtab.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym{};
      if (!read_at(file, symtab.sh_offset + off, &sym) || sym.st_name >= strtab.sh_size) continue;
      if (string_at(file, strtab.sh_offset + sym.st_name, strtab.sh_size - sym.st_name) != kPreloadMarker) continue;
      if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= sections.size()) return not_ours;
      // The marker's bytes: its address within the section that holds it, at that section's offset.
      const Elf64_Shdr& holder = sections[sym.st_shndx];
      if (holder.sh_type != SHT_PROGBITS || sym.st_value < holder.sh_addr) return not_ours;
      const std::string_view version = string_at(file, holder.sh_offset + (sym.st_value - holder.sh_addr), sym.st_size);
      if (version != SUBLINEAR_VERSION_STRING) {
        return named + " is the preload library of sublinear " + std::string(version) + ", and this is sublinear " +
               SUBLINEAR_VERSION_STRING + ": use the library built with this program";
      }
      return "";
    }
  }
  return not_ours;
}

}  // namespace sublinear::cli
