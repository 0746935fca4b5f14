// Read-only file view: mmap / MapViewOfFile, or ranged reads as a fallback (see mapped_file.hpp).
#include "gsurg/mapped_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace gsurg {

namespace {

bool seek(std::FILE* f, uint64_t offset) {
#ifdef _WIN32
  return _fseeki64(f, static_cast<__int64>(offset), SEEK_SET) == 0;
#else
  return fseeko(f, static_cast<off_t>(offset), SEEK_SET) == 0;
#endif
}

}  // namespace

MappedFile::MappedFile(const std::string& path, bool allow_map) : path_(path) {
#ifdef _WIN32
  if (allow_map) {
    HANDLE file = CreateFileW(widen(path).c_str(), GENERIC_READ, FILE_SHARE_READ, nullptr, OPEN_EXISTING,
                              FILE_ATTRIBUTE_NORMAL, nullptr);
    if (file != INVALID_HANDLE_VALUE) {
      LARGE_INTEGER size;
      if (GetFileSizeEx(file, &size) && size.QuadPart > 0) {
        HANDLE mapping = CreateFileMappingW(file, nullptr, PAGE_READONLY, 0, 0, nullptr);
        if (mapping != nullptr) {
          void* view = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
          if (view != nullptr) {
            base_ = static_cast<const unsigned char*>(view);
            size_ = static_cast<uint64_t>(size.QuadPart);
            file_handle_ = file;
            mapping_handle_ = mapping;
            return;
          }
          CloseHandle(mapping);
        }
      }
      CloseHandle(file);
    }
  }
#else
  if (allow_map && path.find('\0') == std::string::npos) {  // else fopen_utf8 below refuses it
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          base_ = static_cast<const unsigned char*>(p);
          size_ = static_cast<uint64_t>(st.st_size);
        }
      }
      ::close(fd);  // the mapping stays valid without the descriptor
      if (base_ != nullptr) return;
    }
  }
#endif
  std::FILE* f = fopen_utf8(path, "rb");
  if (f == nullptr) throw Error(path + ": cannot open: " + std::strerror(errno));
#ifdef _WIN32
  _fseeki64(f, 0, SEEK_END);
  size_ = static_cast<uint64_t>(_ftelli64(f));
#else
  fseeko(f, 0, SEEK_END);
  size_ = static_cast<uint64_t>(ftello(f));
#endif
  stream_ = f;
}

MappedFile::~MappedFile() {
#ifdef _WIN32
  if (base_ != nullptr) UnmapViewOfFile(base_);
  if (mapping_handle_ != nullptr) CloseHandle(static_cast<HANDLE>(mapping_handle_));
  if (file_handle_ != nullptr) CloseHandle(static_cast<HANDLE>(file_handle_));
#else
  if (base_ != nullptr) munmap(const_cast<unsigned char*>(base_), static_cast<size_t>(size_));
#endif
  if (stream_ != nullptr) std::fclose(static_cast<std::FILE*>(stream_));
}

void MappedFile::read(uint64_t offset, size_t n, void* out) const {
  if (offset > size_ || n > size_ - offset)
    throw Error(path_ + ": bytes " + std::to_string(offset) + ".." + std::to_string(offset + n) +
                " pass the end of the file (" + std::to_string(size_) + " bytes)");
  if (base_ != nullptr) {
    std::memcpy(out, base_ + offset, n);
    return;
  }
  std::FILE* f = static_cast<std::FILE*>(stream_);
  if (!seek(f, offset) || std::fread(out, 1, n, f) != n) throw Error(path_ + ": read failed at byte "
      + std::to_string(offset));
}

void MappedFile::release(uint64_t offset, uint64_t n) const {
#ifndef _WIN32
  if (base_ == nullptr || offset >= size_) return;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t end = std::min(size_, offset + n) / page * page;
  const uint64_t begin = (offset + page - 1) / page * page;
  if (end > begin)
    madvise(const_cast<unsigned char*>(base_) + begin, static_cast<size_t>(end - begin), MADV_DONTNEED);
#else
  (void)offset;
  (void)n;
#endif
}

}  // namespace gsurg
