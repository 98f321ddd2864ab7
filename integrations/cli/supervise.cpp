#include "integrations/cli/supervise.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "integrations/cli/commands.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli {
namespace {

volatile sig_atomic_t g_child = 0;

void pass_on(int sig) {
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

constexpr int passed_on[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
constexpr int ignored[] = {SIGINT, SIGQUIT};

// Dies of `sig` as the command did, so that a shell sees the same status.
[[noreturn]] void die_of(int sig) {
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // the command dumped its core already, if any
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(sig, &dfl, nullptr);
  sigset_t only;
  ::sigemptyset(&only);
  ::sigaddset(&only, sig);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(sig);
  std::_Exit(128 + sig);  // a signal that does not terminate
}

}  // namespace

int run_supervised(const std::vector<std::string>& command, std::vector<std::string> environment,
                   const std::string& library) {
  int loaded_pipe[2];
  int exec_pipe[2];  // the child's errno when exec fails; closed by a successful exec
  if (::pipe2(loaded_pipe, O_CLOEXEC) != 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    throw error(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  ::fcntl(loaded_pipe[1], F_SETFD, 0);  // the write end goes to the command
  const std::string prefix = std::string(kRunFdVariable) + "=";
  std::erase_if(environment, [&](const std::string& kv) { return kv.rfind(prefix, 0) == 0; });  // a stale one
  environment.push_back(prefix + std::to_string(loaded_pipe[1]));

  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& kv : environment) envp.push_back(const_cast<char*>(kv.c_str()));
  envp.push_back(nullptr);

  // Blocked until the child's pid is known; the child gets the original mask back and keeps
  // the dispositions this process had (ignored stays ignored, as under nohup).
  sigset_t handled, original;
  ::sigemptyset(&handled);
  for (int s : passed_on) ::sigaddset(&handled, s);
  for (int s : ignored) ::sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
    throw error(std::string("cannot start a process: ") + std::strerror(err));
  }
  if (pid == 0) {
    // The command dies with this process, even of SIGKILL (a timeout that kills
    // `sublinear run` must not leave the training running, holding its output pipes).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kExitFailure);
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(exec_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(loaded_pipe[1]);
  ::close(exec_pipe[1]);
  g_child = pid;
  struct sigaction forward {};
  forward.sa_handler = pass_on;
  ::sigemptyset(&forward.sa_mask);
  for (int s : passed_on) ::sigaction(s, &forward, nullptr);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int s : ignored) ::sigaction(s, &ignore, nullptr);
  ::sigprocmask(SIG_SETMASK, &original, nullptr);  // signals that came meanwhile are passed on now

  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(exec_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    ::close(loaded_pipe[0]);
    std::fprintf(stderr, "sublinear run: cannot run '%s': %s\n", command.front().c_str(), std::strerror(exec_errno));
    return exec_errno == ENOENT ? 127 : 126;  // as shells report a command not found / not executable
  }
  // The byte stays in the pipe after the writer is gone; read without waiting for the
  // command's own children, which may still hold the write end.
  ::fcntl(loaded_pipe[0], F_SETFL, O_NONBLOCK);
  char byte = 0;
  const bool loaded = ::read(loaded_pipe[0], &byte, 1) == 1;
  ::close(loaded_pipe[0]);
  if (!loaded) {
    std::fprintf(stderr,
                 "sublinear run: '%s' ran without sublinear: it never loaded %s (ld.so does not preload into "
                 "statically linked or setuid programs; for any other reason it printed a line above). Nothing was "
                 "traced or evicted.\n",
                 command.front().c_str(), library.c_str());
  }
  if (WIFSIGNALED(status)) die_of(WTERMSIG(status));
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailure;
  return !loaded && code == 0 ? kExitFailure : code;
}

}  // namespace sublinear::cli
