#include "ir/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "ir/error.h"

namespace dc {

namespace {

constexpr uint64_t kAlignment = 64;  // ir/tensor.h's buffer alignment

// An open file descriptor, closed on scope exit.
class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    DC_USER_CHECK(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void pread_all(int fd, const std::string& path, uint64_t offset, size_t n, std::byte* dst) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    DC_USER_CHECK(got > 0, "'", path, "' is shorter than expected (", n, " bytes missing at offset ",
                  offset, "; changed since import?)", got < 0 ? std::string(": ") + std::strerror(errno) : "");
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

}  // namespace

void read_file_range(const std::string& path, uint64_t offset, size_t n, void* dst) {
  if (n == 0) return;
  Fd fd(path);
  pread_all(fd.get(), path, offset, n, static_cast<std::byte*>(dst));
}

MappedFile::MappedFile(const std::string& path) {
  Fd fd(path);
  struct stat st {};
  DC_USER_CHECK(::fstat(fd.get(), &st) == 0, "cannot read '", path, "': ", std::strerror(errno));
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  DC_USER_CHECK(p != MAP_FAILED, "cannot read '", path, "': ", std::strerror(errno));
  data_ = static_cast<const char*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

FileBytes::FileBytes(std::string path, uint64_t offset, size_t size)
    : path_(std::move(path)), offset_(offset), size_(size) {}

std::byte* FileBytes::bytes() {
  if (std::byte* p = data_.load(std::memory_order_acquire)) return p;
  std::lock_guard<std::mutex> lock(mu_);
  if (std::byte* p = data_.load(std::memory_order_relaxed)) return p;
  Fd fd(path_);
  struct stat st {};
  DC_USER_CHECK(::fstat(fd.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) >= offset_ + size_, "'",
                path_, "' is shorter than expected (", size_, " bytes needed at offset ", offset_,
                "; changed since import?)");
  std::byte* p = nullptr;
  if (size_ > 0 && offset_ % kAlignment == 0) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset_ / page * page;
    const size_t length = static_cast<size_t>(offset_ - start) + size_;
    void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), static_cast<off_t>(start));
    if (base != MAP_FAILED) {
      p = static_cast<std::byte*>(base) + (offset_ - start);
      holder_ = std::shared_ptr<std::byte[]>(p, [base, length](std::byte*) { ::munmap(base, length); });
    }
  }
  if (!p) {  // unaligned (a .onnx file's raw_data) or mmap refused: read it
    const size_t n = size_ == 0 ? 1 : size_;
    p = static_cast<std::byte*>(::operator new[](n, std::align_val_t{kAlignment}));
    holder_ = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t{kAlignment}); });
    pread_all(fd.get(), path_, offset_, size_, p);
  }
  data_.store(p, std::memory_order_release);
  return p;
}

void FileBytes::copy_to(size_t from, size_t n, void* dst) const {
  DC_INTERNAL_CHECK(from <= size_ && n <= size_ - from, "FileBytes::copy_to: [", from, ", ", from + n,
                    ") outside ", size_, " bytes");
  if (const std::byte* p = data_.load(std::memory_order_acquire)) {
    std::memcpy(dst, p + from, n);
    return;
  }
  read_file_range(path_, offset_ + from, n, dst);
}

}  // namespace dc
