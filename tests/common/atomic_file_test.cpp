// write_file_atomically (Note [Atomic file writes]): a write that fails is an error naming
// the file, and never leaves a partial file in place of a good one.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/atomic_file.hpp"
#include "sublinear/error.hpp"

namespace sublinear {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh directory per test, removed after it.
class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("atomic_file_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The directory's entries: a failed or finished write leaves no temporary behind.
  std::size_t entries() const { return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  std::string error_of(const std::string& path, const std::string& contents) {
    try {
      write_file_atomically(path, contents);
    } catch (const error& e) {
      return e.what();
    }
    return "(written)";
  }
  fs::path dir_;
};

TEST_F(AtomicFile, WritesANewFileAndLeavesNoTemporary) {
  const fs::path p = dir_ / "out.json";
  write_file_atomically(p.string(), "{\"a\": 1}\n");
  EXPECT_EQ(slurp(p), "{\"a\": 1}\n");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFile, ReplacesAnExistingFileAndKeepsItsPermissions) {
  const fs::path p = dir_ / "out.csv";
  write_file_atomically(p.string(), "old contents, longer than the new ones\n");
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  write_file_atomically(p.string(), "new\n");
  EXPECT_EQ(slurp(p), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(entries(), 1u);
}

// The device files are reached through links in the test's directory: a write that
// renamed over its target (as root, a device can be) replaces the link, not the device.

// /dev/full takes no byte: the write fails, the error names the path and the reason, and
// the device is written in place (a device cannot be renamed over).
TEST_F(AtomicFile, AFullDeviceIsAnErrorNamingIt) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  const fs::path full = dir_ / "full";
  fs::create_symlink("/dev/full", full);
  const std::string e = error_of(full.string(), std::string(100000, 'x'));
  EXPECT_NE(e.find("cannot write " + full.string() + ": No space left on device"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_symlink(full)) << "renamed over";
  EXPECT_EQ(entries(), 1u) << "no temporary beside it";
}

TEST_F(AtomicFile, ASpecialFileIsWrittenInPlace) {
  const fs::path null = dir_ / "null";
  fs::create_symlink("/dev/null", null);
  write_file_atomically(null.string(), "discarded");
  EXPECT_TRUE(fs::is_symlink(null)) << "renamed over";
  EXPECT_TRUE(fs::is_character_file(null));
  EXPECT_EQ(entries(), 1u);
}

// /dev/stdout opened by name would write from offset 0 over what the program printed
// before (and O_TRUNC would empty a file the shell redirected there): it is written
// through the descriptor, after that output, also through a link to it.
TEST_F(AtomicFile, StandardOutputIsWrittenAfterWhatWasPrintedThere) {
  const fs::path p = dir_ / "stdout.txt";
  const fs::path link = dir_ / "out";
  fs::create_symlink("/dev/stdout", link);
  std::fflush(stdout);
  const int saved = ::dup(1);
  ASSERT_GE(saved, 0);
  FILE* f = std::fopen(p.c_str(), "w");
  ASSERT_NE(f, nullptr);
  ::dup2(::fileno(f), 1);
  std::printf("printed first\n");
  write_file_atomically(link.string(), "then the file\n");
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::fclose(f);
  EXPECT_EQ(slurp(p), "printed first\nthen the file\n");
  EXPECT_TRUE(fs::is_symlink(link));
}

TEST_F(AtomicFile, AMissingDirectoryIsAnErrorNamingThePath) {
  const fs::path p = dir_ / "missing" / "out.json";
  const std::string e = error_of(p.string(), "x");
  EXPECT_NE(e.find("cannot write " + p.string()), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "missing"));
}

TEST_F(AtomicFile, ADirectoryIsAnError) {
  const std::string e = error_of(dir_.string(), "x");
  EXPECT_NE(e.find("Is a directory"), std::string::npos) << e;
}

// A write that fails halfway (here the file-size limit, which holds for root as well)
// leaves the earlier file whole and no temporary.
TEST_F(AtomicFile, AFailedWriteLeavesTheEarlierFileWhole) {
  const fs::path p = dir_ / "report.json";
  write_file_atomically(p.string(), "good\n");
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous = ::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  struct rlimit small = old;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string e = error_of(p.string(), std::string(100000, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  EXPECT_NE(e.find("cannot write " + p.string()), std::string::npos) << e;
  EXPECT_NE(e.find("File too large"), std::string::npos) << e;
  EXPECT_EQ(slurp(p), "good\n");
  EXPECT_EQ(entries(), 1u) << "the temporary is removed";
}

TEST_F(AtomicFile, ASymlinkStaysALinkAndItsTargetIsReplaced) {
  const fs::path target = dir_ / "target.json";
  const fs::path link = dir_ / "link.json";
  write_file_atomically(target.string(), "old");
  fs::create_symlink(target, link);
  write_file_atomically(link.string(), "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(target), "new");
  EXPECT_EQ(entries(), 2u);
}

TEST_F(AtomicFile, CheckingWhetherAPathIsWritableChangesNothing) {
  const fs::path p = dir_ / "later.json";
  check_file_writable(p.string());
  EXPECT_EQ(entries(), 0u);
  check_file_writable("/dev/null");
  EXPECT_THROW(check_file_writable((dir_ / "missing" / "x.json").string()), error);
  EXPECT_THROW(check_file_writable(dir_.string()), error);
  EXPECT_EQ(entries(), 0u);
}

}  // namespace
}  // namespace sublinear
