// FileLock (kiln/ir/file_lock.h).
#include "kiln/ir/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kiln {

const char* file_kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

FileLock::FileLock(const std::string& path, const std::function<void()>& on_wait) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    error_ = std::string(file_kind_name(st.st_mode)) + ", not a regular file";
    return;
  }
  // O_NONBLOCK: should a FIFO appear between the lstat and the open, the open does not wait for
  // a writer; O_NOFOLLOW: nor does a link put there lead elsewhere.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
  if (fd < 0) {
    error_ = std::strerror(errno);
    return;
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error_ = std::string(file_kind_name(st.st_mode)) + ", not a regular file";
    ::close(fd);
    return;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      error_ = std::string("flock: ") + std::strerror(errno);
      ::close(fd);
      return;
    }
    if (on_wait) on_wait();
    int rc;
    while ((rc = ::flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      error_ = std::string("flock: ") + std::strerror(errno);
      ::close(fd);
      return;
    }
  }
  fd_ = fd;
}

FileLock::FileLock(FileLock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), error_(std::move(o.error_)) {}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    error_ = std::move(o.error_);
  }
  return *this;
}

void FileLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor drops the flock
  fd_ = -1;
}

}  // namespace kiln
