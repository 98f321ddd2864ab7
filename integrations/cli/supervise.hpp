// `sublinear run`'s child: started, waited for, and checked for having loaded sublinear.
#pragma once

#include <string>
#include <vector>

namespace sublinear::cli {

// The variable naming the file descriptor the preload library writes one byte to when it
// loads (integrations/preload/preload.cpp). Not a setting: it does not start with
// SUBLINEAR_, and the library removes it from the environment once it has written.
inline constexpr const char* kRunFdVariable = "_SUBLINEAR_RUN_FD";

// Note [Run supervision]
// Rationale: ld.so runs a program even when it could not preload the library named in
//   LD_PRELOAD (a statically linked or setuid program, a dependency missing in the
//   child's environment), with one line the user may miss; the training then runs
//   without sublinear and nothing says so. `sublinear run` must know whether its command
//   loaded the library.
// Approach: the command is spawned as a child, not exec'd in place. The write end of a
//   pipe stays open in the child and kRunFdVariable names it; the preload library's
//   constructor writes one byte to it, closes it and removes the variable (the command's
//   own children do not write). When the child ends, a byte in the pipe means it loaded
//   the library; without one the run says that the command ran without sublinear, and
//   fails if the command did not. The exit status is the command's: its code, or its
//   signal raised again on this process. SIGINT and SIGQUIT from the terminal reach the
//   command directly (the whole foreground group gets them), so this process ignores
//   them; SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to this process are passed on, and
//   the command gets SIGKILL if this process dies (PR_SET_PDEATHSIG), so that a timeout
//   that kills `sublinear run` ends the command too.
// Limitations: the command is a child of `sublinear run`, not the same process (its pid
//   differs from the one the caller started).
//
// Runs `command` (found on PATH) with `environment` plus kRunFdVariable, waits for it and
// returns the status to exit with; when the command died of a signal, this process dies
// of the same signal. `library` names the preload library in the message.
int run_supervised(const std::vector<std::string>& command, std::vector<std::string> environment,
                   const std::string& library);

}  // namespace sublinear::cli
